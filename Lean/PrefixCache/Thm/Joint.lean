import PrefixCache.Spec.Joint
import PrefixCache.Thm.Arith

/-!
# The joint lookup: termination, monotone trace, acceptance, maximality

The loop-level facts are proved for every list of attention groups. What
they need of the groups' own lookups is stated as explicit *laws* of
`groupHit` (`BoundedHit`, `AlignedHit`, `MonotoneHit`, `DropThenPlain`),
each a hypothesis of the theorem that uses it. The laws are properties of
`fullAttentionHit` and `swaHit` alone; `tests/test_theorems.py` checks
each of them on pyspec's acceptors (exhaustively on small inputs), and
checks that `DropThenPlain` fails exactly where pyspec says maximality fails
(an EAGLE window of at most one token, `winBlocks = 0`). They are not yet
proved in Lean for the concrete acceptors.

Headline theorems: `jointLoop_fuel`, `jointLookup_total`,
`jointLookup_rounds_le_max`, `jointLookup_rounds_le`,
`jointLookup_trace_nonincreasing`, `jointLookup_accepted`,
`jointLookup_ge_accepted`, `jointLookup_maximal`.
-/

namespace PrefixCache

/-! ## Small helpers -/

theorem false_ne_true' : ¬ (false = true) := by
  intro h
  cases h

theorem bor_left {a b : Bool} (h : a = true) : (a || b) = true := by
  subst h
  rfl

theorem bor_right {a b : Bool} (h : b = true) : (a || b) = true := by
  subst h
  cases a <;> rfl

theorem bor_elim {a b : Bool} (h : (a || b) = true) : a = true ∨ b = true := by
  cases a
  · exact Or.inr h
  · exact Or.inl rfl

theorem band_left {a b : Bool} (h : (a && b) = true) : a = true := by
  cases a
  · cases b <;> exact absurd h (by decide)
  · rfl

theorem band_right {a b : Bool} (h : (a && b) = true) : b = true := by
  cases a
  · cases b <;> exact absurd h (by decide)
  · exact h

theorem band_intro {a b : Bool} (ha : a = true) (hb : b = true) : (a && b) = true := by
  subst ha
  subst hb
  rfl

theorem minN_mono_left {x y c : Nat} (h : x ≤ y) : minN x c ≤ minN y c := by
  have h1 := minN_spec x c
  have h2 := minN_spec y c
  omega

theorem mul_div_of_mod {a p : Nat} (h : a % p = 0) : p * (a / p) = a := by
  have e := Nat.mod_add_div a p
  omega

/-- Two multiples of `p`, `a < b`, have `a / p < b / p`. -/
theorem div_lt_div_of_mod {a b p : Nat} (ha : a % p = 0) (hb : b % p = 0) (hab : a < b) :
    a / p < b / p := by
  have e1 := mul_div_of_mod ha
  have e2 := mul_div_of_mod hb
  rcases Nat.lt_or_ge (a / p) (b / p) with h | h
  · exact h
  · have m := mul_mono p h
    omega

/-- A multiple `a` of `p` below `b` has `a / p ≤ b / p`. -/
theorem div_le_div_of_mod {a b p : Nat} (hp : 0 < p) (ha : a % p = 0) (hab : a ≤ b) :
    a / p ≤ b / p := by
  have e1 := mul_div_of_mod ha
  have e2 := Nat.mod_add_div b p
  have e3 := Nat.mod_lt b hp
  rcases Nat.lt_or_ge (b / p) (a / p) with h | h
  · have h1 : b / p + 1 ≤ a / p := h
    have m1 := mul_mono p h1
    have m2 := mul_succ' p (b / p)
    omega
  · exact h

/-! ## Predicates over the groups and the recorded answers -/

/-- `P` holds of every attention group of the list. -/
def AllG (P : AttnGroup → Prop) : List AttnGroup → Prop
  | [] => True
  | g :: rest => P g ∧ AllG P rest

theorem allG_and3 {P Q R : AttnGroup → Prop} :
    ∀ (gs : List AttnGroup), AllG P gs → AllG Q gs → AllG R gs →
      AllG (fun g => P g ∧ Q g ∧ R g) gs
  | [], _, _, _ => trivial
  | g :: rest, hp, hq, hr => by
    have hp' : P g ∧ AllG P rest := hp
    have hq' : Q g ∧ AllG Q rest := hq
    have hr' : R g ∧ AllG R rest := hr
    exact And.intro (And.intro hp'.1 (And.intro hq'.1 hr'.1)) (allG_and3 rest hp'.2 hq'.2 hr'.2)

/-- Every recorded answer satisfies `P`. -/
def AnsOK (P : Nat → Prop) (ans : Nat → Option Nat) : Prop :=
  ∀ j a, ans j = some a → P a

theorem ansOK_none (P : Nat → Prop) : AnsOK P (fun _ => none) := by
  intro j a h
  cases h

theorem eq_some_of_hasAns : ∀ (o : Option Nat), hasAns o = true → o = some (optGet o)
  | some _, _ => rfl
  | none, h => absurd h false_ne_true'

theorem ansOK_get {P : Nat → Prop} {ans : Nat → Option Nat} (h : AnsOK P ans) (j : Nat)
    (hj : hasAns (ans j) = true) : P (optGet (ans j)) :=
  h j (optGet (ans j)) (eq_some_of_hasAns (ans j) hj)

theorem ansOK_setAns {P : Nat → Prop} {ans : Nat → Option Nat} (h : AnsOK P ans) (idx t : Nat)
    (ht : P t) : AnsOK P (setAns ans idx t) := by
  intro j a hj
  have e : setAns ans idx t j = if j = idx then some t else ans j := rfl
  rw [e] at hj
  by_cases hji : j = idx
  · rw [if_pos hji] at hj
    have hta : t = a := Option.some.inj hj
    rw [← hta]
    exact ht
  · rw [if_neg hji] at hj
    exact h j a hj

/-! ## The laws of the groups' own lookups -/

/-- A lookup never answers more than the candidate it is called at: the
plain lookup at most its `max_length`, the dropping one (called one block
past `c`) at most `c`. -/
def BoundedHit (g : AttnGroup) (align cap : Nat) : Prop :=
  ∀ c, groupHit g align false c ≤ c ∧ groupHit g align true (callMax g cap true c) ≤ c

/-- Every answer is a multiple of `align` (both acceptors round down to it). -/
def AlignedHit (g : AttnGroup) (align : Nat) : Prop :=
  ∀ (d : Bool) (m : Nat), groupHit g align d m % align = 0

/-- The lookup is monotone in `max_length`, for either drop flag. -/
def MonotoneHit (g : AttnGroup) (align : Nat) : Prop :=
  ∀ (d : Bool) (m m' : Nat), m ≤ m' → groupHit g align d m ≤ groupHit g align d m'

/-- pyspec's maximality argument's extra step: at an EAGLE group, a length
accepted with the drop is also accepted plainly. False for an EAGLE window
of at most one token (`winBlocks = 0`: the one-block EAGLE run is the
one-block plain run shifted right), which is pyspec's counterexample. -/
def DropThenPlain (g : AttnGroup) (align cap L : Nat) : Prop :=
  g.eagle = true → Accepts g align cap L → PlainAccepts g align L

/-! ## Equations -/

theorem callMax_true (g : AttnGroup) (cap c : Nat) :
    callMax g cap true c = minN (c + g.blockSize) cap := by
  show (if true = true then minN (c + g.blockSize) cap else c) = minN (c + g.blockSize) cap
  exact if_pos rfl

theorem callMax_false (g : AttnGroup) (cap c : Nat) : callMax g cap false c = c := by
  show (if false = true then minN (c + g.blockSize) cap else c) = c
  exact if_neg false_ne_true'

theorem accepts_of_plain {g : AttnGroup} {align cap L : Nat} (he : g.eagle = false)
    (h : PlainAccepts g align L) : Accepts g align cap L := by
  have h' : groupHit g align false L = L := h
  show groupHit g align g.eagle (callMax g cap g.eagle L) = L
  rw [he, callMax_false]
  exact h'

theorem stepAnswer_eq (g : AttnGroup) (align cap idx : Nat) (s : JointState) :
    stepAnswer g align cap idx s =
      groupHit g align (dropFlag g s idx) (callMax g cap (dropFlag g s idx) s.curr) := rfl

theorem stepCurr_eq (g : AttnGroup) (align cap idx : Nat) (s : JointState) :
    stepCurr g align cap idx s =
      if skipFull g s idx then minN s.curr (optGet (s.answers idx))
      else stepAnswer g align cap idx s := rfl

theorem stepAnswers_eq (g : AttnGroup) (align cap idx : Nat) (s : JointState) :
    stepAnswers g align cap idx s =
      if skipFull g s idx then s.answers
      else setAns s.answers idx (stepAnswer g align cap idx s) := rfl

theorem jointStep_curr (g : AttnGroup) (align cap idx : Nat) (s : JointState) :
    (jointStep g align cap idx s).curr = stepCurr g align cap idx s := rfl

theorem jointStep_answers (g : AttnGroup) (align cap idx : Nat) (s : JointState) :
    (jointStep g align cap idx s).answers = stepAnswers g align cap idx s := rfl

theorem jointRound_cons (align cap : Nat) (g : AttnGroup) (rest : List AttnGroup) (idx : Nat)
    (s : JointState) :
    jointRound align cap (g :: rest) idx s =
      jointRound align cap rest (idx + 1) (jointStep g align cap idx s) := rfl

theorem jointLoop_zero (gs : List AttnGroup) (align cap hit : Nat) (v : Nat → Bool)
    (ans : Nat → Option Nat) : jointLoop gs align cap 0 hit v ans = ⟨hit, 0, [hit]⟩ := rfl

theorem jointLoop_succ (gs : List AttnGroup) (align cap fuel hit : Nat) (v : Nat → Bool)
    (ans : Nat → Option Nat) :
    jointLoop gs align cap (fuel + 1) hit v ans =
      if hit ≤ (roundOf gs align cap hit v ans).curr then ⟨hit, 1, [hit, hit]⟩
      else if isSimpleHybrid gs = true then
        ⟨(roundOf gs align cap hit v ans).curr, 1, [hit, (roundOf gs align cap hit v ans).curr]⟩
      else
        ⟨(jointLoop gs align cap fuel (roundOf gs align cap hit v ans).curr
            (roundOf gs align cap hit v ans).verified (roundOf gs align cap hit v ans).answers).hitLength,
          (jointLoop gs align cap fuel (roundOf gs align cap hit v ans).curr
            (roundOf gs align cap hit v ans).verified (roundOf gs align cap hit v ans).answers).rounds + 1,
          hit :: (jointLoop gs align cap fuel (roundOf gs align cap hit v ans).curr
            (roundOf gs align cap hit v ans).verified (roundOf gs align cap hit v ans).answers).trace⟩ :=
  rfl

/-- The recorded answers only ever gain the lookup's answer. -/
theorem jointStep_ansOK {P : Nat → Prop} (g : AttnGroup) (align cap idx : Nat) (s : JointState)
    (h : AnsOK P s.answers) (hA : P (stepAnswer g align cap idx s)) :
    AnsOK P (jointStep g align cap idx s).answers := by
  rw [jointStep_answers, stepAnswers_eq]
  by_cases hs : skipFull g s idx
  · rw [if_pos hs]
    exact h
  · rw [if_neg hs]
    exact ansOK_setAns h idx (stepAnswer g align cap idx s) hA

/-! ## Termination -/

/-- **Fuel.** The loop's answer does not depend on the fuel once the fuel
exceeds the candidate: every round that does not stop lowers the candidate
strictly, so fuel `hit + 1` is never what stops the loop. -/
theorem jointLoop_fuel (gs : List AttnGroup) (align cap : Nat) :
    ∀ (f g hit : Nat) (v : Nat → Bool) (ans : Nat → Option Nat), hit < f → hit < g →
      jointLoop gs align cap f hit v ans = jointLoop gs align cap g hit v ans
  | 0, _, hit, _, _, hf, _ => absurd hf (Nat.not_lt_zero hit)
  | _ + 1, 0, hit, _, _, _, hg => absurd hg (Nat.not_lt_zero hit)
  | f + 1, g + 1, hit, v, ans, hf, hg => by
    rw [jointLoop_succ, jointLoop_succ]
    by_cases h1 : hit ≤ (roundOf gs align cap hit v ans).curr
    · rw [if_pos h1, if_pos h1]
    · rw [if_neg h1, if_neg h1]
      by_cases h2 : isSimpleHybrid gs = true
      · rw [if_pos h2, if_pos h2]
      · rw [if_neg h2, if_neg h2]
        have hf' : (roundOf gs align cap hit v ans).curr < f := by omega
        have hg' : (roundOf gs align cap hit v ans).curr < g := by omega
        rw [jointLoop_fuel gs align cap f g (roundOf gs align cap hit v ans).curr
          (roundOf gs align cap hit v ans).verified (roundOf gs align cap hit v ans).answers hf' hg']

/-- **Totality.** `jointLookup` is a total function (structural recursion on
a fuel counter), and its fuel `maxLength + 1` never cuts the loop short:
any larger fuel gives the same result. -/
theorem jointLookup_total (gs : List AttnGroup) (maxLength align cap fuel : Nat)
    (h : maxLength < fuel) :
    jointLoop gs align cap fuel maxLength (fun _ => false) (fun _ => none) =
      jointLookup gs maxLength align cap :=
  jointLoop_fuel gs align cap fuel (maxLength + 1) maxLength (fun _ => false) (fun _ => none) h
    (Nat.lt_succ_self maxLength)

/-- Rounds from candidate `hit`: at most `hit + 1` (the candidate drops
strictly in every round but the last). -/
theorem jointLoop_rounds_le_hit (gs : List AttnGroup) (align cap : Nat) :
    ∀ (fuel hit : Nat) (v : Nat → Bool) (ans : Nat → Option Nat),
      (jointLoop gs align cap fuel hit v ans).rounds ≤ hit + 1
  | 0, hit, _, _ => by
    show 0 ≤ hit + 1
    omega
  | fuel + 1, hit, v, ans => by
    rw [jointLoop_succ]
    by_cases h1 : hit ≤ (roundOf gs align cap hit v ans).curr
    · rw [if_pos h1]
      show 1 ≤ hit + 1
      omega
    · rw [if_neg h1]
      by_cases h2 : isSimpleHybrid gs = true
      · rw [if_pos h2]
        show 1 ≤ hit + 1
        omega
      · rw [if_neg h2]
        have ih := jointLoop_rounds_le_hit gs align cap fuel (roundOf gs align cap hit v ans).curr
          (roundOf gs align cap hit v ans).verified (roundOf gs align cap hit v ans).answers
        show (jointLoop gs align cap fuel (roundOf gs align cap hit v ans).curr
          (roundOf gs align cap hit v ans).verified
          (roundOf gs align cap hit v ans).answers).rounds + 1 ≤ hit + 1
        omega

/-- **Round bound, unconditional.** At most `maxLength + 1` rounds. -/
theorem jointLookup_rounds_le_max (gs : List AttnGroup) (maxLength align cap : Nat) :
    (jointLookup gs maxLength align cap).rounds ≤ maxLength + 1 :=
  jointLoop_rounds_le_hit gs align cap (maxLength + 1) maxLength (fun _ => false) (fun _ => none)

/-- A round keeps `curr` a multiple of `align`, or leaves it at its start
value `H`, when every answer is a multiple of `align`. -/
theorem jointRound_aligned (align cap H : Nat) :
    ∀ (gs : List AttnGroup) (idx : Nat) (s : JointState),
      AllG (fun g => AlignedHit g align) gs →
      AnsOK (fun a => a % align = 0) s.answers →
      (s.curr % align = 0 ∨ s.curr = H) →
      ((jointRound align cap gs idx s).curr % align = 0 ∨
          (jointRound align cap gs idx s).curr = H) ∧
        AnsOK (fun a => a % align = 0) (jointRound align cap gs idx s).answers
  | [], _, _, _, ha, hc => ⟨hc, ha⟩
  | g :: rest, idx, s, hG, ha, hc => by
    have hG' : AlignedHit g align ∧ AllG (fun g => AlignedHit g align) rest := hG
    have hAl : ∀ (d : Bool) (m : Nat), groupHit g align d m % align = 0 := hG'.1
    rw [jointRound_cons]
    have hA : stepAnswer g align cap idx s % align = 0 := by
      rw [stepAnswer_eq]
      exact hAl (dropFlag g s idx) (callMax g cap (dropFlag g s idx) s.curr)
    have ha' : AnsOK (fun a => a % align = 0) (jointStep g align cap idx s).answers :=
      jointStep_ansOK g align cap idx s ha hA
    have hc' : (jointStep g align cap idx s).curr % align = 0 ∨
        (jointStep g align cap idx s).curr = H := by
      rw [jointStep_curr, stepCurr_eq]
      by_cases hs : skipFull g s idx
      · rw [if_pos hs]
        have hs' : g.full = true ∧ hasAns (s.answers idx) = true := hs
        have hg : optGet (s.answers idx) % align = 0 := ansOK_get ha idx hs'.2
        rcases minN_spec s.curr (optGet (s.answers idx)) with ⟨_, _, hm | hm⟩
        · rw [hm]
          exact hc
        · rw [hm]
          exact Or.inl hg
      · rw [if_neg hs]
        exact Or.inl hA
    exact jointRound_aligned align cap H rest (idx + 1) (jointStep g align cap idx s) hG'.2 ha' hc'

theorem jointLoop_rounds_aligned (gs : List AttnGroup) (align cap : Nat)
    (hG : AllG (fun g => AlignedHit g align) gs) :
    ∀ (fuel hit : Nat) (v : Nat → Bool) (ans : Nat → Option Nat),
      AnsOK (fun a => a % align = 0) ans → hit % align = 0 →
      (jointLoop gs align cap fuel hit v ans).rounds ≤ hit / align + 1
  | 0, hit, _, _, _, _ => by
    show 0 ≤ hit / align + 1
    omega
  | fuel + 1, hit, v, ans, hans, hhit => by
    rw [jointLoop_succ]
    by_cases h1 : hit ≤ (roundOf gs align cap hit v ans).curr
    · rw [if_pos h1]
      show 1 ≤ hit / align + 1
      omega
    · rw [if_neg h1]
      by_cases h2 : isSimpleHybrid gs = true
      · rw [if_pos h2]
        show 1 ≤ hit / align + 1
        omega
      · rw [if_neg h2]
        have hR : ((roundOf gs align cap hit v ans).curr % align = 0 ∨
              (roundOf gs align cap hit v ans).curr = hit) ∧
            AnsOK (fun a => a % align = 0) (roundOf gs align cap hit v ans).answers :=
          jointRound_aligned align cap hit gs 0 ⟨hit, v, ans⟩ hG hans (Or.inr rfl)
        have hc' : (roundOf gs align cap hit v ans).curr % align = 0 := by
          rcases hR.1 with hc | hc
          · exact hc
          · exfalso
            omega
        have hlt : (roundOf gs align cap hit v ans).curr / align < hit / align :=
          div_lt_div_of_mod hc' hhit (by omega)
        have ih := jointLoop_rounds_aligned gs align cap hG fuel
          (roundOf gs align cap hit v ans).curr (roundOf gs align cap hit v ans).verified
          (roundOf gs align cap hit v ans).answers hR.2 hc'
        show (jointLoop gs align cap fuel (roundOf gs align cap hit v ans).curr
          (roundOf gs align cap hit v ans).verified
          (roundOf gs align cap hit v ans).answers).rounds + 1 ≤ hit / align + 1
        omega

/-- **Round bound (pyspec `max_rounds_bound`).** When every answer of
every group is a multiple of `align` (`AlignedHit`), the loop takes at most
`2 + maxLength / align` rounds: after the first round the candidate is a
multiple of `align`, and every further round but the last lowers it by at
least `align`. -/
theorem jointLookup_rounds_le (gs : List AttnGroup) (maxLength align cap : Nat)
    (hA : 1 ≤ align) (hG : AllG (fun g => AlignedHit g align) gs) :
    (jointLookup gs maxLength align cap).rounds ≤ maxRoundsBound maxLength align := by
  show (jointLoop gs align cap (maxLength + 1) maxLength (fun _ => false)
    (fun _ => none)).rounds ≤ 2 + maxLength / align
  rw [jointLoop_succ]
  by_cases h1 : maxLength ≤ (roundOf gs align cap maxLength (fun _ => false) (fun _ => none)).curr
  · rw [if_pos h1]
    show 1 ≤ 2 + maxLength / align
    omega
  · rw [if_neg h1]
    by_cases h2 : isSimpleHybrid gs = true
    · rw [if_pos h2]
      show 1 ≤ 2 + maxLength / align
      omega
    · rw [if_neg h2]
      have hR : ((roundOf gs align cap maxLength (fun _ => false) (fun _ => none)).curr % align = 0 ∨
            (roundOf gs align cap maxLength (fun _ => false) (fun _ => none)).curr = maxLength) ∧
          AnsOK (fun a => a % align = 0)
            (roundOf gs align cap maxLength (fun _ => false) (fun _ => none)).answers :=
        jointRound_aligned align cap maxLength gs 0 ⟨maxLength, fun _ => false, fun _ => none⟩ hG
          (ansOK_none _) (Or.inr rfl)
      have hc' : (roundOf gs align cap maxLength (fun _ => false) (fun _ => none)).curr % align = 0 := by
        rcases hR.1 with hc | hc
        · exact hc
        · exfalso
          omega
      have hle : (roundOf gs align cap maxLength (fun _ => false) (fun _ => none)).curr / align ≤
          maxLength / align :=
        div_le_div_of_mod (by omega) hc' (by omega)
      have ih := jointLoop_rounds_aligned gs align cap hG maxLength
        (roundOf gs align cap maxLength (fun _ => false) (fun _ => none)).curr
        (roundOf gs align cap maxLength (fun _ => false) (fun _ => none)).verified
        (roundOf gs align cap maxLength (fun _ => false) (fun _ => none)).answers hR.2 hc'
      show (jointLoop gs align cap maxLength
        (roundOf gs align cap maxLength (fun _ => false) (fun _ => none)).curr
        (roundOf gs align cap maxLength (fun _ => false) (fun _ => none)).verified
        (roundOf gs align cap maxLength (fun _ => false) (fun _ => none)).answers).rounds + 1 ≤
          2 + maxLength / align
      omega

/-! ## The trace is non-increasing -/

/-- Every element is at most the one before it, the first at most `a`. -/
def NonIncrFrom : Nat → List Nat → Prop
  | _, [] => True
  | a, b :: rest => b ≤ a ∧ NonIncrFrom b rest

theorem nonIncrFrom_nil (a : Nat) : NonIncrFrom a [] := trivial

theorem nonIncrFrom_cons {a b : Nat} {rest : List Nat} (h1 : b ≤ a) (h2 : NonIncrFrom b rest) :
    NonIncrFrom a (b :: rest) :=
  And.intro h1 h2

theorem nonIncrFrom_weaken {a b : Nat} (hab : a ≤ b) :
    ∀ (l : List Nat), NonIncrFrom a l → NonIncrFrom b l
  | [], _ => nonIncrFrom_nil b
  | c :: rest, h => by
    have h' : c ≤ a ∧ NonIncrFrom c rest := h
    exact nonIncrFrom_cons (Nat.le_trans h'.1 hab) h'.2

theorem jointLoop_trace (gs : List AttnGroup) (align cap : Nat) :
    ∀ (fuel hit : Nat) (v : Nat → Bool) (ans : Nat → Option Nat),
      NonIncrFrom hit (jointLoop gs align cap fuel hit v ans).trace ∧
        (jointLoop gs align cap fuel hit v ans).hitLength ≤ hit
  | 0, hit, _, _ =>
    And.intro (nonIncrFrom_cons (Nat.le_refl hit) (nonIncrFrom_nil hit)) (Nat.le_refl hit)
  | fuel + 1, hit, v, ans => by
    rw [jointLoop_succ]
    by_cases h1 : hit ≤ (roundOf gs align cap hit v ans).curr
    · rw [if_pos h1]
      exact And.intro (nonIncrFrom_cons (Nat.le_refl hit)
        (nonIncrFrom_cons (Nat.le_refl hit) (nonIncrFrom_nil hit))) (Nat.le_refl hit)
    · rw [if_neg h1]
      have hlt : (roundOf gs align cap hit v ans).curr ≤ hit := by omega
      by_cases h2 : isSimpleHybrid gs = true
      · rw [if_pos h2]
        exact And.intro (nonIncrFrom_cons (Nat.le_refl hit)
          (nonIncrFrom_cons hlt (nonIncrFrom_nil (roundOf gs align cap hit v ans).curr))) hlt
      · rw [if_neg h2]
        have ih := jointLoop_trace gs align cap fuel (roundOf gs align cap hit v ans).curr
          (roundOf gs align cap hit v ans).verified (roundOf gs align cap hit v ans).answers
        refine And.intro (nonIncrFrom_cons (Nat.le_refl hit) ?_) ?_
        · exact nonIncrFrom_weaken hlt _ ih.1
        · have h3 := ih.2
          show (jointLoop gs align cap fuel (roundOf gs align cap hit v ans).curr
            (roundOf gs align cap hit v ans).verified
            (roundOf gs align cap hit v ans).answers).hitLength ≤ hit
          omega

/-- **Monotone.** The trace (pyspec `JointResult.trace`: `hit_length` at the
start of every round, then the answer) starts at `maxLength` and never
grows, and the answer is at most `maxLength`. No hypothesis: the loop
continues only when a round lowered the candidate. -/
theorem jointLookup_trace_nonincreasing (gs : List AttnGroup) (maxLength align cap : Nat) :
    NonIncrFrom maxLength (jointLookup gs maxLength align cap).trace ∧
      (jointLookup gs maxLength align cap).hitLength ≤ maxLength :=
  jointLoop_trace gs align cap (maxLength + 1) maxLength (fun _ => false) (fun _ => none)

/-! ## Accepted by every group -/

/-- A lookup answers at most the current candidate (under `BoundedHit`). -/
theorem stepAnswer_le (g : AttnGroup) (align cap idx : Nat) (s : JointState)
    (hb : BoundedHit g align cap) : stepAnswer g align cap idx s ≤ s.curr := by
  have hb' : groupHit g align false s.curr ≤ s.curr ∧
      groupHit g align true (callMax g cap true s.curr) ≤ s.curr := hb s.curr
  rw [stepAnswer_eq]
  cases dropFlag g s idx with
  | true => exact hb'.2
  | false =>
    rw [callMax_false]
    exact hb'.1

/-- What a round that does not lower the candidate `H` says of a group: it
is full attention (possibly not looked up again), or its lookup at `H`, with
the drop (`Accepts`) or plainly (`PlainAccepts`), returned `H`. -/
def StepFix (g : AttnGroup) (align cap H : Nat) : Prop :=
  g.full = true ∨ Accepts g align cap H ∨ PlainAccepts g align H

theorem jointRound_fix (align cap H : Nat) :
    ∀ (gs : List AttnGroup) (idx : Nat) (s : JointState),
      AllG (fun g => BoundedHit g align cap) gs → s.curr ≤ H →
      (jointRound align cap gs idx s).curr ≤ s.curr ∧
        (H ≤ (jointRound align cap gs idx s).curr → AllG (fun g => StepFix g align cap H) gs)
  | [], _, s, _, _ => And.intro (Nat.le_refl s.curr) (fun _ => trivial)
  | g :: rest, idx, s, hG, hH => by
    have hG' : BoundedHit g align cap ∧ AllG (fun g => BoundedHit g align cap) rest := hG
    rw [jointRound_cons]
    have hA := stepAnswer_le g align cap idx s hG'.1
    have hc1 : (jointStep g align cap idx s).curr ≤ s.curr := by
      rw [jointStep_curr, stepCurr_eq]
      by_cases hs : skipFull g s idx
      · rw [if_pos hs]
        exact (minN_spec s.curr (optGet (s.answers idx))).1
      · rw [if_neg hs]
        exact hA
    have ih := jointRound_fix align cap H rest (idx + 1) (jointStep g align cap idx s) hG'.2
      (Nat.le_trans hc1 hH)
    refine And.intro (Nat.le_trans ih.1 hc1) ?_
    intro hend
    have hsH : s.curr = H := by
      have := ih.1
      omega
    have h1H : (jointStep g align cap idx s).curr = H := by
      have := ih.1
      omega
    have hhead : StepFix g align cap H := by
      show g.full = true ∨ Accepts g align cap H ∨ PlainAccepts g align H
      by_cases hs : skipFull g s idx
      · have hs' : g.full = true ∧ hasAns (s.answers idx) = true := hs
        exact Or.inl hs'.1
      · have hstep : stepAnswer g align cap idx s = H := by
          have e : (jointStep g align cap idx s).curr = stepAnswer g align cap idx s := by
            rw [jointStep_curr, stepCurr_eq, if_neg hs]
          rw [← e]
          exact h1H
        rw [stepAnswer_eq, hsH] at hstep
        cases hd : dropFlag g s idx with
        | true =>
          rw [hd] at hstep
          have hd' : (g.eagle && !(s.verified idx)) = true := hd
          have he : g.eagle = true := band_left hd'
          refine Or.inr (Or.inl ?_)
          show groupHit g align g.eagle (callMax g cap g.eagle H) = H
          rw [he]
          exact hstep
        | false =>
          rw [hd, callMax_false] at hstep
          exact Or.inr (Or.inr hstep)
    exact And.intro hhead (ih.2 hend)

theorem jointLoop_accepted (gs : List AttnGroup) (align cap : Nat)
    (hb : AllG (fun g => BoundedHit g align cap) gs) (hs : isSimpleHybrid gs = false) :
    ∀ (fuel hit : Nat) (v : Nat → Bool) (ans : Nat → Option Nat), hit < fuel →
      AllG (fun g => StepFix g align cap (jointLoop gs align cap fuel hit v ans).hitLength) gs
  | 0, hit, _, _, hf => absurd hf (Nat.not_lt_zero hit)
  | fuel + 1, hit, v, ans, hf => by
    rw [jointLoop_succ]
    have hR := jointRound_fix align cap hit gs 0 ⟨hit, v, ans⟩ hb (Nat.le_refl hit)
    by_cases h1 : hit ≤ (roundOf gs align cap hit v ans).curr
    · rw [if_pos h1]
      exact hR.2 h1
    · rw [if_neg h1]
      have h2 : ¬ (isSimpleHybrid gs = true) := by
        rw [hs]
        exact false_ne_true'
      rw [if_neg h2]
      have hf' : (roundOf gs align cap hit v ans).curr < fuel := by omega
      exact jointLoop_accepted gs align cap hb hs fuel (roundOf gs align cap hit v ans).curr
        (roundOf gs align cap hit v ans).verified (roundOf gs align cap hit v ans).answers hf'

/-- **Accepted by every group.** When every lookup answers at most its
candidate (`BoundedHit`) and the coordinator is not a simple hybrid (whose
loop stops after one round, without the fixed-point test), every attention
group accepts the answer `R`: a sliding-window group accepts it as the loop
asks (`Accepts`) or plainly (`PlainAccepts`, an EAGLE group verified at a
higher candidate, #32802); a non-EAGLE group's plain acceptance is its
acceptance (`accepts_of_plain`). For full attention this theorem claims
nothing (`g.full = true` is a disjunct): its acceptance, which pyspec also
asserts, rests on its downward closure and is only tested
(`test_jointLookup_accepted`). -/
theorem jointLookup_accepted (gs : List AttnGroup) (maxLength align cap : Nat)
    (hb : AllG (fun g => BoundedHit g align cap) gs) (hs : isSimpleHybrid gs = false) :
    AllG (fun g => g.full = true ∨
      Accepts g align cap (jointLookup gs maxLength align cap).hitLength ∨
      PlainAccepts g align (jointLookup gs maxLength align cap).hitLength) gs :=
  jointLoop_accepted gs align cap hb hs (maxLength + 1) maxLength (fun _ => false) (fun _ => none)
    (Nat.lt_succ_self maxLength)

/-! ## Maximal -/

/-- A lookup at a candidate `≥ L` answers at least `L`, when the group
accepts `L` (and, for an EAGLE group, accepts it plainly too). -/
theorem stepAnswer_ge (g : AttnGroup) (align cap L idx : Nat) (s : JointState)
    (hmono : MonotoneHit g align) (hdp : DropThenPlain g align cap L)
    (hacc : Accepts g align cap L) (hL : L ≤ s.curr) : L ≤ stepAnswer g align cap idx s := by
  have hmono' : ∀ (d : Bool) (m m' : Nat), m ≤ m' → groupHit g align d m ≤ groupHit g align d m' :=
    hmono
  have hdp' : g.eagle = true → Accepts g align cap L → PlainAccepts g align L := hdp
  have hacc' : groupHit g align g.eagle (callMax g cap g.eagle L) = L := hacc
  rw [stepAnswer_eq]
  cases hd : dropFlag g s idx with
  | true =>
    have hd' : (g.eagle && !(s.verified idx)) = true := hd
    have he : g.eagle = true := band_left hd'
    rw [he, callMax_true] at hacc'
    rw [callMax_true]
    have hm := hmono' true (minN (L + g.blockSize) cap) (minN (s.curr + g.blockSize) cap)
      (minN_mono_left (by omega))
    omega
  | false =>
    rw [callMax_false]
    have hplain : groupHit g align false L = L := by
      cases he : g.eagle with
      | true => exact hdp' he hacc
      | false =>
        rw [he, callMax_false] at hacc'
        exact hacc'
    have hm := hmono' false L s.curr hL
    omega

theorem jointRound_maximal (align cap L : Nat) :
    ∀ (gs : List AttnGroup) (idx : Nat) (s : JointState),
      AllG (fun g => MonotoneHit g align ∧ DropThenPlain g align cap L ∧ Accepts g align cap L) gs →
      L ≤ s.curr → AnsOK (fun a => L ≤ a) s.answers →
      L ≤ (jointRound align cap gs idx s).curr ∧
        AnsOK (fun a => L ≤ a) (jointRound align cap gs idx s).answers
  | [], _, _, _, hc, ha => And.intro hc ha
  | g :: rest, idx, s, hG, hc, ha => by
    have hG' : (MonotoneHit g align ∧ DropThenPlain g align cap L ∧ Accepts g align cap L) ∧
        AllG (fun g => MonotoneHit g align ∧ DropThenPlain g align cap L ∧
          Accepts g align cap L) rest := hG
    rw [jointRound_cons]
    have hA : L ≤ stepAnswer g align cap idx s :=
      stepAnswer_ge g align cap L idx s hG'.1.1 hG'.1.2.1 hG'.1.2.2 hc
    have ha' : AnsOK (fun a => L ≤ a) (jointStep g align cap idx s).answers :=
      jointStep_ansOK g align cap idx s ha hA
    have hc' : L ≤ (jointStep g align cap idx s).curr := by
      rw [jointStep_curr, stepCurr_eq]
      by_cases hs : skipFull g s idx
      · rw [if_pos hs]
        have hs' : g.full = true ∧ hasAns (s.answers idx) = true := hs
        have hg : L ≤ optGet (s.answers idx) := ansOK_get ha idx hs'.2
        have hmin := minN_spec s.curr (optGet (s.answers idx))
        omega
      · rw [if_neg hs]
        exact hA
    exact jointRound_maximal align cap L rest (idx + 1) (jointStep g align cap idx s) hG'.2 hc' ha'

theorem jointLoop_maximal (gs : List AttnGroup) (align cap L : Nat)
    (hG : AllG (fun g => MonotoneHit g align ∧ DropThenPlain g align cap L ∧
      Accepts g align cap L) gs) :
    ∀ (fuel hit : Nat) (v : Nat → Bool) (ans : Nat → Option Nat),
      L ≤ hit → AnsOK (fun a => L ≤ a) ans → L ≤ (jointLoop gs align cap fuel hit v ans).hitLength
  | 0, _, _, _, hL, _ => hL
  | fuel + 1, hit, v, ans, hL, ha => by
    rw [jointLoop_succ]
    have hR : L ≤ (roundOf gs align cap hit v ans).curr ∧
        AnsOK (fun a => L ≤ a) (roundOf gs align cap hit v ans).answers :=
      jointRound_maximal align cap L gs 0 ⟨hit, v, ans⟩ hG hL ha
    by_cases h1 : hit ≤ (roundOf gs align cap hit v ans).curr
    · rw [if_pos h1]
      exact hL
    · rw [if_neg h1]
      by_cases h2 : isSimpleHybrid gs = true
      · rw [if_pos h2]
        exact hR.1
      · rw [if_neg h2]
        exact jointLoop_maximal gs align cap L hG fuel (roundOf gs align cap hit v ans).curr
          (roundOf gs align cap hit v ans).verified (roundOf gs align cap hit v ans).answers
          hR.1 hR.2

/-- The answer is at least every `L ≤ maxLength` that every group accepts,
when the lookups are monotone and every EAGLE group that accepts `L` with
its drop also accepts it plainly (`DropThenPlain`). -/
theorem jointLookup_ge_accepted (gs : List AttnGroup) (maxLength align cap L : Nat)
    (hmono : AllG (fun g => MonotoneHit g align) gs)
    (hdp : AllG (fun g => DropThenPlain g align cap L) gs)
    (hL : L ≤ maxLength) (hacc : AllG (fun g => Accepts g align cap L) gs) :
    L ≤ (jointLookup gs maxLength align cap).hitLength :=
  jointLoop_maximal gs align cap L (allG_and3 gs hmono hdp hacc) (maxLength + 1) maxLength
    (fun _ => false) (fun _ => none) hL (ansOK_none _)

/-- **Maximal (no EAGLE spiral).** Under `MonotoneHit` for every group and
`DropThenPlain` at `L` for every group (pyspec: every sliding window of at
least 2 tokens), no length `L` with `R < L ≤ maxLength` is accepted by
every group, where `R` is the answer. With an EAGLE window of one token
`DropThenPlain` fails and so does this conclusion (pyspec
`test_window_one_eagle_counterexample`). -/
theorem jointLookup_maximal (gs : List AttnGroup) (maxLength align cap L : Nat)
    (hmono : AllG (fun g => MonotoneHit g align) gs)
    (hdp : AllG (fun g => DropThenPlain g align cap L) gs)
    (hlt : (jointLookup gs maxLength align cap).hitLength < L) (hL : L ≤ maxLength) :
    ¬ AllG (fun g => Accepts g align cap L) gs := by
  intro hacc
  have h := jointLookup_ge_accepted gs maxLength align cap L hmono hdp hL hacc
  omega

end PrefixCache
