import PrefixCache.Spec.Offload

/-!
# The KV-offload lookup: what is proved here, what is only stated

Proved below (core Lean, structural recursion, `omega` on linear facts):
the scan's bounds, that it walks over non-miss chunks only and stops on a
miss, its pending flag, its read count, the termination of phase 2 by fuel
(`strideLoop2_fuel`), the search helpers of the declarative answer, and the
soundness of the declarative answer (`offloadLookup_sound`).

Stated but **not proved in Lean** (no Lean toolchain here; the C twins are
proved by Frama-C/WP, and every statement is checked executably by
`tests/test_theorems_offload.py`): `OffloadStrideEqLegacy` (the stride search
equals vLLM's loop), `OffloadLegacyEqLookup` (vLLM's loop equals the
declarative answer). They are `Prop` definitions, not theorems, so nothing
here claims them; optimality, "`none` exactly when the chosen window holds a
pending chunk" and the read bound are likewise proved only of the C.
-/

namespace PrefixCache

/-- `scanTri`'s equation for no chunk left. -/
theorem scanTri_zero (c : Nat → Nat) (j : Nat) : scanTri c j 0 = (j, false) := rfl

/-- `scanTri`'s equation for one more chunk. -/
theorem scanTri_succ (c : Nat → Nat) (j k : Nat) :
    scanTri c j (k + 1) =
      if c j = 0 then (j, false)
      else ((scanTri c (j + 1) k).1, c j == 2 || (scanTri c (j + 1) k).2) := rfl

/-- `strideLoop2`'s equation for one more round of fuel. -/
theorem strideLoop2_succ (c : Nat → Nat) (w fuel bound kl : Nat) (kp : Bool) :
    strideLoop2 c w (fuel + 1) bound kl kp =
      if bound < w then .inr (bound, kl, kp)
      else if (scanTri c (bound - w) (kl - (bound - w))).1 = kl then
        .inl (gate ((scanTri c (bound - w) (kl - (bound - w))).2 || kp) bound)
      else
        strideLoop2 c w fuel (scanTri c (bound - w) (kl - (bound - w))).1 (bound - w)
          (scanTri c (bound - w) (kl - (bound - w))).2 := rfl

/-- The scan stops at once on a miss. -/
theorem scanTri_of_miss (c : Nat → Nat) (j k : Nat) (h : c j = 0) :
    scanTri c j (k + 1) = (j, false) := by
  rw [scanTri_succ, if_pos h]

/-- On a non-miss the scan goes on, noting whether the chunk is pending. -/
theorem scanTri_of_hit (c : Nat → Nat) (j k : Nat) (h : ¬ c j = 0) :
    scanTri c j (k + 1) =
      ((scanTri c (j + 1) k).1, c j == 2 || (scanTri c (j + 1) k).2) := by
  rw [scanTri_succ, if_neg h]

/-- `(a && b) = true` splits (a helper, core Lean only). -/
theorem and_true_split (a b : Bool) (h : (a && b) = true) : a = true ∧ b = true := by
  revert h
  cases a <;> cases b <;> decide

/-- `(a || b) = false` splits (a helper, core Lean only). -/
theorem or_false_split (a b : Bool) (h : (a || b) = false) : a = false ∧ b = false := by
  revert h
  cases a <;> cases b <;> decide

/-- The scan stops inside `[j, j + k]`. -/
theorem scanTri_bounds (c : Nat → Nat) :
    ∀ (j k : Nat), j ≤ (scanTri c j k).1 ∧ (scanTri c j k).1 ≤ j + k
  | j, 0 => by
    have e : (scanTri c j 0).1 = j := congrArg Prod.fst (scanTri_zero c j)
    rw [e]
    omega
  | j, k + 1 => by
    have ih := scanTri_bounds c (j + 1) k
    by_cases h : c j = 0
    · have e : (scanTri c j (k + 1)).1 = j := congrArg Prod.fst (scanTri_of_miss c j k h)
      rw [e]
      omega
    · have e : (scanTri c j (k + 1)).1 = (scanTri c (j + 1) k).1 :=
        congrArg Prod.fst (scanTri_of_hit c j k h)
      rw [e]
      omega

/-- Every chunk the scan walked over is non-miss. -/
theorem scanTri_nonMiss (c : Nat → Nat) :
    ∀ (j k : Nat), NonMiss c j (scanTri c j k).1
  | j, 0 => by
    intro i h1 h2
    have e : (scanTri c j 0).1 = j := congrArg Prod.fst (scanTri_zero c j)
    rw [e] at h2
    exact absurd h2 (by omega)
  | j, k + 1 => by
    intro i h1 h2
    by_cases h : c j = 0
    · have e : (scanTri c j (k + 1)).1 = j := congrArg Prod.fst (scanTri_of_miss c j k h)
      rw [e] at h2
      exact absurd h2 (by omega)
    · have e : (scanTri c j (k + 1)).1 = (scanTri c (j + 1) k).1 :=
        congrArg Prod.fst (scanTri_of_hit c j k h)
      rw [e] at h2
      by_cases hij : i = j
      · rw [hij]
        exact h
      · exact scanTri_nonMiss c (j + 1) k i (by omega) h2

/-- A scan that stops before `j + k` stops on a miss. -/
theorem scanTri_miss (c : Nat → Nat) :
    ∀ (j k : Nat), (scanTri c j k).1 < j + k → c (scanTri c j k).1 = 0
  | j, 0, h => by
    have e : (scanTri c j 0).1 = j := congrArg Prod.fst (scanTri_zero c j)
    rw [e] at h
    exact absurd h (by omega)
  | j, k + 1, h => by
    by_cases hc : c j = 0
    · have e : (scanTri c j (k + 1)).1 = j := congrArg Prod.fst (scanTri_of_miss c j k hc)
      rw [e]
      exact hc
    · have e : (scanTri c j (k + 1)).1 = (scanTri c (j + 1) k).1 :=
        congrArg Prod.fst (scanTri_of_hit c j k hc)
      rw [e] at h
      rw [e]
      exact scanTri_miss c (j + 1) k (by omega)

/-- A scan whose flag is `false` walked over no pending chunk. -/
theorem scanTri_noPending (c : Nat → Nat) :
    ∀ (j k : Nat), (scanTri c j k).2 = false → NoPending c j (scanTri c j k).1
  | j, 0, _ => by
    intro i h1 h2
    have e : (scanTri c j 0).1 = j := congrArg Prod.fst (scanTri_zero c j)
    rw [e] at h2
    exact absurd h2 (by omega)
  | j, k + 1, hp => by
    intro i h1 h2
    by_cases hc : c j = 0
    · have e : (scanTri c j (k + 1)).1 = j := congrArg Prod.fst (scanTri_of_miss c j k hc)
      rw [e] at h2
      exact absurd h2 (by omega)
    · have e1 : (scanTri c j (k + 1)).1 = (scanTri c (j + 1) k).1 :=
        congrArg Prod.fst (scanTri_of_hit c j k hc)
      have e2 : (scanTri c j (k + 1)).2 = (c j == 2 || (scanTri c (j + 1) k).2) :=
        congrArg Prod.snd (scanTri_of_hit c j k hc)
      rw [e2] at hp
      rw [e1] at h2
      have hs := or_false_split _ _ hp
      by_cases hij : i = j
      · rw [hij]
        intro h2eq
        have hj := hs.1
        rw [h2eq] at hj
        exact absurd hj (by decide)
      · exact scanTri_noPending c (j + 1) k hs.2 i (by omega) h2

/-- The scan reads at most `k` chunks. -/
theorem scanTriProbes_le (c : Nat → Nat) :
    ∀ (j k : Nat), scanTriProbes c j k ≤ k
  | _, 0 => Nat.le_refl 0
  | j, k + 1 => by
    have ih := scanTriProbes_le c (j + 1) k
    show (if c j = 0 then 1 else scanTriProbes c (j + 1) k + 1) ≤ k + 1
    by_cases h : c j = 0
    · rw [if_pos h]
      omega
    · rw [if_neg h]
      omega

/-- Termination of phase 2 by fuel: with the loop's invariant
(`knownLo ≤ bound < knownLo + window`), once the fuel exceeds `bound`, more
fuel changes nothing, so `offloadStrideSearch`'s fuel `m + 1` never cuts the
loop short (each round lowers `bound`). -/
theorem strideLoop2_fuel (c : Nat → Nat) (w : Nat) :
    ∀ (fuel bound kl : Nat) (kp : Bool), bound < fuel → kl ≤ bound → bound < kl + w →
      strideLoop2 c w (fuel + 1) bound kl kp = strideLoop2 c w fuel bound kl kp
  | 0, bound, _, _, h1, _, _ => absurd h1 (Nat.not_lt_zero bound)
  | fuel + 1, bound, kl, kp, h1, h2, h3 => by
    rw [strideLoop2_succ c w fuel bound kl kp]
    rw [strideLoop2_succ c w (fuel + 1) bound kl kp]
    by_cases hb : bound < w
    · rw [if_pos hb, if_pos hb]
    · rw [if_neg hb, if_neg hb]
      by_cases hf : (scanTri c (bound - w) (kl - (bound - w))).1 = kl
      · rw [if_pos hf, if_pos hf]
      · rw [if_neg hf, if_neg hf]
        have sb := scanTri_bounds c (bound - w) (kl - (bound - w))
        have hlt : (scanTri c (bound - w) (kl - (bound - w))).1 < kl := by omega
        exact strideLoop2_fuel c w fuel _ (bound - w) _ (by omega) sb.1 (by omega)

/-- `gate` answers `none` exactly on a pending window. -/
theorem gate_none_iff (p : Bool) (e : Nat) : gate p e = none ↔ p = true := by
  by_cases h : p = true
  · have g : gate p e = none := by
      show (if p = true then none else some e) = none
      rw [if_pos h]
    exact ⟨fun _ => h, fun _ => g⟩
  · have g : gate p e = some e := by
      show (if p = true then none else some e) = some e
      rw [if_neg h]
    rw [g]
    exact ⟨fun hn => Option.noConfusion hn, fun hp => absurd hp h⟩

/-- `gate` answers `some e` only with its own `e`, and only when not pending. -/
theorem gate_some (p : Bool) (e x : Nat) (h : gate p e = some x) : p = false ∧ x = e := by
  by_cases hp : p = true
  · have g : gate p e = none := by
      show (if p = true then none else some e) = none
      rw [if_pos hp]
    rw [g] at h
    exact Option.noConfusion h
  · have g : gate p e = some e := by
      show (if p = true then none else some e) = some e
      rw [if_neg hp]
    rw [g] at h
    have hpf : p = false := by
      cases p
      · rfl
      · exact absurd rfl hp
    exact ⟨hpf, (Option.some.inj h).symm⟩

/-- `pendingIn … = false` means no pending chunk in `[s, s + k)`. -/
theorem pendingIn_false (c : Nat → Nat) :
    ∀ (s k : Nat), pendingIn c s k = false → NoPending c s (s + k)
  | s, 0, _ => by
    intro i h1 h2
    exact absurd h2 (by show ¬ i < s + 0; omega)
  | s, k + 1, h => by
    intro i h1 h2
    have hor : (c s == 2 || pendingIn c (s + 1) k) = false := h
    have hs : (c s == 2) = false := (or_false_split _ _ hor).1
    have hr : pendingIn c (s + 1) k = false := (or_false_split _ _ hor).2
    by_cases his : i = s
    · rw [his]
      intro heq
      rw [heq] at hs
      exact absurd hs (by decide)
    · exact pendingIn_false c (s + 1) k hr i (by omega) (by omega)

/-- `nonMissB … = true` means `[s, s + k)` is all non-miss. -/
theorem nonMissB_true (c : Nat → Nat) :
    ∀ (s k : Nat), nonMissB c s k = true → NonMiss c s (s + k)
  | s, 0, _ => by
    intro i h1 h2
    exact absurd h2 (by show ¬ i < s + 0; omega)
  | s, k + 1, h => by
    intro i h1 h2
    have hand : (c s != 0 && nonMissB c (s + 1) k) = true := h
    have hs : (c s != 0) = true := (and_true_split _ _ hand).1
    have hr : nonMissB c (s + 1) k = true := (and_true_split _ _ hand).2
    by_cases his : i = s
    · rw [his]
      intro heq
      rw [heq] at hs
      exact absurd hs (by decide)
    · exact nonMissB_true c (s + 1) k hr i (by omega) (by omega)

/-- The window `lastWindow` finds lies in `[0, e0]` and is all non-miss. -/
theorem lastWindow_sound (c : Nat → Nat) (w : Nat) :
    ∀ (e0 e : Nat), lastWindow c w e0 = some e →
      w ≤ e ∧ e ≤ e0 ∧ nonMissB c (e - w) w = true
  | 0, e, h => by
    by_cases hw : w = 0
    · have g : lastWindow c w 0 = some 0 := by
        show (if w = 0 then some 0 else none) = some 0
        rw [if_pos hw]
      rw [g] at h
      have he : e = 0 := (Option.some.inj h).symm
      rw [he, hw]
      exact ⟨Nat.le_refl 0, Nat.le_refl 0, rfl⟩
    · have g : lastWindow c w 0 = none := by
        show (if w = 0 then some 0 else none) = none
        rw [if_neg hw]
      rw [g] at h
      exact Option.noConfusion h
  | e0 + 1, e, h => by
    by_cases hc : w ≤ e0 + 1 ∧ nonMissB c (e0 + 1 - w) w = true
    · have g : lastWindow c w (e0 + 1) = some (e0 + 1) := by
        show (if w ≤ e0 + 1 ∧ nonMissB c (e0 + 1 - w) w = true then some (e0 + 1)
          else lastWindow c w e0) = some (e0 + 1)
        rw [if_pos hc]
      rw [g] at h
      have he : e = e0 + 1 := (Option.some.inj h).symm
      rw [he]
      exact ⟨hc.1, Nat.le_refl (e0 + 1), hc.2⟩
    · have g : lastWindow c w (e0 + 1) = lastWindow c w e0 := by
        show (if w ≤ e0 + 1 ∧ nonMissB c (e0 + 1 - w) w = true then some (e0 + 1)
          else lastWindow c w e0) = lastWindow c w e0
        rw [if_neg hc]
      rw [g] at h
      have ih := lastWindow_sound c w e0 e h
      exact ⟨ih.1, Nat.le_succ_of_le ih.2.1, ih.2.2⟩

/-- The run `leadingRun` walks over is all non-miss and within `[j, j + k]`. -/
theorem leadingRun_sound (c : Nat → Nat) :
    ∀ (j k : Nat), j ≤ leadingRun c j k ∧ leadingRun c j k ≤ j + k ∧
      NonMiss c j (leadingRun c j k)
  | j, 0 => by
    refine ⟨Nat.le_refl j, Nat.le_add_right j 0, ?_⟩
    intro i h1 h2
    exact absurd h2 (by show ¬ i < j; omega)
  | j, k + 1 => by
    by_cases hc : c j = 0
    · have g : leadingRun c j (k + 1) = j := by
        show (if c j = 0 then j else leadingRun c (j + 1) k) = j
        rw [if_pos hc]
      rw [g]
      refine ⟨Nat.le_refl j, Nat.le_add_right j (k + 1), ?_⟩
      intro i h1 h2
      exact absurd h2 (by show ¬ i < j; omega)
    · have g : leadingRun c j (k + 1) = leadingRun c (j + 1) k := by
        show (if c j = 0 then j else leadingRun c (j + 1) k) = leadingRun c (j + 1) k
        rw [if_neg hc]
      rw [g]
      have ih := leadingRun_sound c (j + 1) k
      refine ⟨by omega, by omega, ?_⟩
      intro i h1 h2
      by_cases hij : i = j
      · rw [hij]
        exact hc
      · exact ih.2.2 i (by omega) h2

/-- No miss found by `rightmostMiss` means `[0, k)` is all non-miss. -/
theorem rightmostMiss_none (c : Nat → Nat) :
    ∀ (k : Nat), rightmostMiss c k = none → NonMiss c 0 k
  | 0, _ => by
    intro i _ h2
    exact absurd h2 (by show ¬ i < 0; omega)
  | k + 1, h => by
    by_cases hc : c k = 0
    · have g : rightmostMiss c (k + 1) = some k := by
        show (if c k = 0 then some k else rightmostMiss c k) = some k
        rw [if_pos hc]
      rw [g] at h
      exact Option.noConfusion h
    · have g : rightmostMiss c (k + 1) = rightmostMiss c k := by
        show (if c k = 0 then some k else rightmostMiss c k) = rightmostMiss c k
        rw [if_neg hc]
      rw [g] at h
      intro i h1 h2
      by_cases hik : i = k
      · rw [hik]
        exact hc
      · exact rightmostMiss_none c k h i h1 (by omega)

/-- Soundness of the declarative answer: a returned `some e` ends a window
`[s, e)` that is all non-miss and holds no pending chunk, and that window is
the required one touching the right end (`e - s = requiredWindow`), a window
of `w` chunks, or a run from chunk 0. -/
theorem offloadLookup_sound (c : Nat → Nat) (n w : Nat) (initial : Option Nat) (e : Nat)
    (h : offloadLookup c n w initial = some e) :
    ∃ s, s ≤ e ∧ NonMiss c s e ∧ NoPending c s e ∧
      (e - s = requiredWindow w initial ∨ e - s = w ∨ s = 0) := by
  unfold offloadLookup at h
  by_cases h1 : 1 ≤ requiredWindow w initial ∧ requiredWindow w initial ≤ n ∧
      nonMissB c (n - requiredWindow w initial) (requiredWindow w initial) = true
  · rw [if_pos h1] at h
    have g := gate_some _ _ _ h
    have hnm := nonMissB_true c _ _ h1.2.2
    have hnp := pendingIn_false c _ _ g.1
    have hr := h1.2.1
    have hsum : n - requiredWindow w initial + requiredWindow w initial = n := by omega
    rw [hsum] at hnm
    rw [hsum] at hnp
    rw [g.2]
    exact ⟨n - requiredWindow w initial, Nat.sub_le n _, hnm, hnp, Or.inl (by omega)⟩
  · rw [if_neg h1] at h
    cases hm : rightmostMiss c n with
    | none =>
      rw [hm] at h
      have h' : gate (pendingIn c 0 n) n = some e := h
      have g := gate_some _ _ _ h'
      have hnp := pendingIn_false c 0 n g.1
      rw [Nat.zero_add] at hnp
      rw [g.2]
      exact ⟨0, Nat.zero_le n, rightmostMiss_none c n hm, hnp, Or.inr (Or.inr rfl)⟩
    | some m =>
      rw [hm] at h
      have h2 : (match lastWindow c w m with
          | some e' => gate (pendingIn c (e' - w) w) e'
          | none => gate (pendingIn c 0 (leadingRun c 0 n)) (leadingRun c 0 n)) = some e := h
      cases hw : lastWindow c w m with
      | some e' =>
        rw [hw] at h2
        have h3 : gate (pendingIn c (e' - w) w) e' = some e := h2
        have g := gate_some _ _ _ h3
        have lw := lastWindow_sound c w m e' hw
        have hnm := nonMissB_true c _ _ lw.2.2
        have hnp := pendingIn_false c _ _ g.1
        have hwle := lw.1
        have hsum : e' - w + w = e' := by omega
        rw [hsum] at hnm
        rw [hsum] at hnp
        rw [g.2]
        exact ⟨e' - w, Nat.sub_le e' w, hnm, hnp, Or.inr (Or.inl (by omega))⟩
      | none =>
        rw [hw] at h2
        have h3 : gate (pendingIn c 0 (leadingRun c 0 n)) (leadingRun c 0 n) = some e := h2
        have g := gate_some _ _ _ h3
        have lr := leadingRun_sound c 0 n
        have hnp := pendingIn_false c 0 (leadingRun c 0 n) g.1
        rw [Nat.zero_add] at hnp
        rw [g.2]
        exact ⟨0, Nat.zero_le _, lr.2.2, hnp, Or.inr (Or.inr rfl)⟩

/-! ## Stated, not proved in Lean (see the module docstring) -/

/-- The stride search returns vLLM's answer on every input (proved of the C
twins by WP: both ensure `offload_answer`, lemma `offload_answer_unique`;
checked by `test_OffloadStrideEqLegacy`). -/
def OffloadStrideEqLegacy : Prop :=
  ∀ (c : Nat → Nat) (n w : Nat) (initial : Option Nat),
    offloadStrideSearch c n w initial = legacyOffloadScan c n w initial

/-- vLLM's loop returns the declarative answer (proved of the C twin by WP:
`legacy_offload_scan` ensures `offload_answer`; checked by
`test_OffloadLegacyEqLookup`). -/
def OffloadLegacyEqLookup : Prop :=
  ∀ (c : Nat → Nat) (n w : Nat) (initial : Option Nat),
    legacyOffloadScan c n w initial = offloadLookup c n w initial

end PrefixCache
