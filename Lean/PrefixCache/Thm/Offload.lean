import PrefixCache.Spec.Offload

/-!
# The KV-offload lookup: what is proved here

Proved below (core Lean, structural recursion on the chunks left or on fuel,
`omega` on linear facts; not machine-checked on this project's machines, where
no Lean toolchain can be installed: `make proofs` runs `lake build` where one
exists and otherwise only lints; every statement is also an executable property
in `tests/test_theorems_offload.py`):

* the scan's bounds, walk, stop, pending flag (`scanTri_pend`) and read count,
  the termination of phase 2 by fuel (`strideLoop2_fuel`), the searches of the
  declarative answer and their characterisations (`rightmostMiss_eq_some`,
  `leadingRun_eq`, `lastWindow_eq_some`, `lastWindow_eq_none`), soundness of
  the declarative answer (`offloadLookup_sound`);
* the declarative answer as a relation, `OffloadAnswer` (the C predicate
  `offload_answer`): clause 3 requires the **rightmost** window (no window of
  `w` non-miss chunks ends between it and the rightmost miss: optimality);
  `offloadAnswer_eq_offloadLookup` / `offloadAnswer_unique` (one solution),
  `offloadLookup_answer`;
* **vLLM's loop** and **the stride search** both meet it
  (`legacyOffloadScan_answer`, `offloadStrideSearch_answer`), hence
  `legacyOffloadScan_eq_offloadLookup`, `offloadStrideSearch_eq_offloadLookup`
  and `offloadStrideSearch_eq_legacyOffloadScan` (the two statements
  `OffloadLegacyEqLookup` and `OffloadStrideEqLegacy`, kept as `Prop`s, are
  proved by `offloadLegacyEqLookup_holds` and `offloadStrideEqLegacy_holds`);
* `offloadLookup_none_iff`: the answer is `none` exactly when the chosen
  window holds a pending chunk, and `some e` (its end) otherwise.

Not stated in Lean: the read bound of the whole search (at most `n` reads,
and at most vLLM's). The Lean spec counts the reads of `scanTri` only
(`scanTriProbes_le`); it has no read-counting twin of `offloadLegacyLoop` or
of the stride search. The bound is proved of the C twins by WP
(`probe_bound`, `fewer_reads`) and tested.
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

/-! ## Small equations and `Bool` helpers

Each is `rfl` or a case split on closed `Bool` values, so that the proofs
below can rewrite to syntactically equal sides (no reliance on what `rw`'s
closing `rfl` can unfold). -/

/-- `pendingIn`'s equation for no chunk. -/
theorem pendingIn_zero (c : Nat → Nat) (s : Nat) : pendingIn c s 0 = false := rfl

/-- `pendingIn`'s equation for one more chunk. -/
theorem pendingIn_succ (c : Nat → Nat) (s k : Nat) :
    pendingIn c s (k + 1) = (c s == 2 || pendingIn c (s + 1) k) := rfl

/-- `gate false e` is `some e`. -/
theorem gate_false (e : Nat) : gate false e = some e := rfl

/-- `false || b` is `b`. -/
theorem false_or_bool (b : Bool) : (false || b) = b := rfl

/-- `true && b` is `b`. -/
theorem true_and_bool (b : Bool) : (true && b) = b := rfl

/-- `||` commutes (a helper, core Lean only). -/
theorem or_comm_bool (a b : Bool) : (a || b) = (b || a) := by
  cases a <;> cases b <;> rfl

/-- `||` associates (a helper, core Lean only). -/
theorem or_assoc_bool (a b d : Bool) : ((a || b) || d) = (a || (b || d)) := by
  cases a <;> cases b <;> cases d <;> rfl

/-- A nonzero chunk answers `!= 0` with `true`. -/
theorem bne_zero_of_ne (x : Nat) (h : ¬ x = 0) : (x != 0) = true := by
  cases hq : (x == 0) with
  | true => exact absurd (eq_of_beq hq) h
  | false =>
    have h2 : (!(x == 0)) = (!false) := congrArg not hq
    exact h2

/-- `pendingIn` over `a + b` chunks is `pendingIn` over the first `a`, or over
the `b` after them. -/
theorem pendingIn_append (c : Nat → Nat) :
    ∀ (s a b : Nat), pendingIn c s (a + b) = (pendingIn c s a || pendingIn c (s + a) b)
  | s, 0, b => by
    show pendingIn c s (0 + b) = (false || pendingIn c (s + 0) b)
    rw [Nat.zero_add, Nat.add_zero, false_or_bool]
  | s, a + 1, b => by
    have e1 : a + 1 + b = a + b + 1 := by omega
    rw [e1]
    show (c s == 2 || pendingIn c (s + 1) (a + b)) =
      ((c s == 2 || pendingIn c (s + 1) a) || pendingIn c (s + (a + 1)) b)
    rw [pendingIn_append c (s + 1) a b]
    have e2 : s + 1 + a = s + (a + 1) := by omega
    rw [e2, or_assoc_bool]

/-- `pendingIn` over `[s, u)` splits at any `t` in between. -/
theorem pendingIn_split (c : Nat → Nat) (s t u : Nat) (h1 : s ≤ t) (h2 : t ≤ u) :
    pendingIn c s (u - s) = (pendingIn c s (t - s) || pendingIn c t (u - t)) := by
  have ap := pendingIn_append c s (t - s) (u - t)
  have a1 : t - s + (u - t) = u - s := by omega
  have a2 : s + (t - s) = t := by omega
  rw [a1, a2] at ap
  exact ap

/-- The scan's flag is `pendingIn` of the chunks it walked over. -/
theorem scanTri_pend (c : Nat → Nat) :
    ∀ (j k : Nat), (scanTri c j k).2 = pendingIn c j ((scanTri c j k).1 - j)
  | j, 0 => by
    show false = pendingIn c j (j - j)
    rw [Nat.sub_self, pendingIn_zero]
  | j, k + 1 => by
    by_cases hc : c j = 0
    · have e1 : (scanTri c j (k + 1)).1 = j := congrArg Prod.fst (scanTri_of_miss c j k hc)
      have e2 : (scanTri c j (k + 1)).2 = false := congrArg Prod.snd (scanTri_of_miss c j k hc)
      rw [e1, e2, Nat.sub_self, pendingIn_zero]
    · have e1 : (scanTri c j (k + 1)).1 = (scanTri c (j + 1) k).1 :=
        congrArg Prod.fst (scanTri_of_hit c j k hc)
      have e2 : (scanTri c j (k + 1)).2 = (c j == 2 || (scanTri c (j + 1) k).2) :=
        congrArg Prod.snd (scanTri_of_hit c j k hc)
      have ih := scanTri_pend c (j + 1) k
      obtain ⟨hb1, hb2⟩ := scanTri_bounds c (j + 1) k
      have hs : (scanTri c (j + 1) k).1 - j = (scanTri c (j + 1) k).1 - (j + 1) + 1 := by
        omega
      rw [e1, e2, ih, hs, pendingIn_succ]

/-- `nonMissB … = true` when `[s, s + k)` is all non-miss (the converse of
`nonMissB_true`). -/
theorem nonMissB_of (c : Nat → Nat) :
    ∀ (s k : Nat), NonMiss c s (s + k) → nonMissB c s k = true
  | _, 0, _ => rfl
  | s, k + 1, h => by
    have h1 : (c s != 0) = true := bne_zero_of_ne (c s) (h s (Nat.le_refl s) (by omega))
    have h2 : nonMissB c (s + 1) k = true := by
      apply nonMissB_of c (s + 1) k
      intro i a b
      exact h i (by omega) (by omega)
    show (c s != 0 && nonMissB c (s + 1) k) = true
    rw [h1, true_and_bool, h2]

/-! ## The searches of the declarative answer, characterised

Each search has exactly one answer satisfying its declarative description;
these lemmas compute it from that description. -/

/-- No window of `w` non-miss chunks ends in `(lo, hi]` (C: `no_window_after`;
with `lo = 0` and `w ≥ 1`: `!has_window`). -/
def NoWindowIn (c : Nat → Nat) (w lo hi : Nat) : Prop :=
  ∀ e, lo < e → e ≤ hi → w ≤ e → NonMiss c (e - w) e → False

/-- The rightmost miss (C: `rightmost_miss`) is what `rightmostMiss` finds. -/
theorem rightmostMiss_eq_some (c : Nat → Nat) :
    ∀ (k m : Nat), m < k → c m = 0 → NonMiss c (m + 1) k → rightmostMiss c k = some m
  | 0, m, h1, _, _ => absurd h1 (Nat.not_lt_zero m)
  | k + 1, m, h1, h2, h3 => by
    by_cases hc : c k = 0
    · have hmk : m = k := by
        by_cases hlt : m < k
        · exact absurd hc (h3 k (by omega) (by omega))
        · omega
      show (if c k = 0 then some k else rightmostMiss c k) = some m
      rw [if_pos hc, hmk]
    · have hmk : m < k := by
        by_cases heq : m = k
        · rw [heq] at h2
          exact absurd h2 hc
        · omega
      show (if c k = 0 then some k else rightmostMiss c k) = some m
      rw [if_neg hc]
      exact rightmostMiss_eq_some c k m hmk h2 (by intro i a b; exact h3 i a (by omega))

/-- No miss at all: `rightmostMiss` finds none. -/
theorem rightmostMiss_eq_none (c : Nat → Nat) :
    ∀ (k : Nat), NonMiss c 0 k → rightmostMiss c k = none
  | 0, _ => rfl
  | k + 1, h => by
    have hc : ¬ c k = 0 := h k (Nat.zero_le k) (by omega)
    show (if c k = 0 then some k else rightmostMiss c k) = none
    rw [if_neg hc]
    exact rightmostMiss_eq_none c k (by intro i a b; exact h i a (by omega))

/-- The leading run (C: `leading_run`) is what `leadingRun` finds: `p` with
`[j, p)` non-miss and `p` a miss or the end. -/
theorem leadingRun_eq (c : Nat → Nat) :
    ∀ (j k p : Nat), j ≤ p → p ≤ j + k → NonMiss c j p → (p = j + k ∨ c p = 0) →
      leadingRun c j k = p
  | j, 0, p, h1, h2, _, _ => by
    show j = p
    omega
  | j, k + 1, p, h1, h2, h3, h4 => by
    by_cases hc : c j = 0
    · show (if c j = 0 then j else leadingRun c (j + 1) k) = p
      rw [if_pos hc]
      by_cases hjp : j < p
      · exact absurd hc (h3 j (Nat.le_refl j) hjp)
      · omega
    · show (if c j = 0 then j else leadingRun c (j + 1) k) = p
      rw [if_neg hc]
      have hjp : j + 1 ≤ p := by
        by_cases hpj : p = j
        · rcases h4 with h | h
          · omega
          · rw [hpj] at h
            exact absurd h hc
        · omega
      have h3' : NonMiss c (j + 1) p := by
        intro i a b
        exact h3 i (by omega) b
      have h4' : p = j + 1 + k ∨ c p = 0 := by
        rcases h4 with h | h
        · left
          omega
        · right
          exact h
      exact leadingRun_eq c (j + 1) k p hjp (by omega) h3' h4'

/-- The rightmost window (C: `rightmost_window`) is what `lastWindow` finds:
`e ≤ e0` ends a window of `w` non-miss chunks and no window ends in
`(e, e0]`. -/
theorem lastWindow_eq_some (c : Nat → Nat) (w : Nat) :
    ∀ (e0 e : Nat), w ≤ e → e ≤ e0 → NonMiss c (e - w) e → NoWindowIn c w e e0 →
      lastWindow c w e0 = some e
  | 0, e, h1, h2, _, _ => by
    have he : e = 0 := by omega
    have hw : w = 0 := by omega
    show (if w = 0 then some 0 else none) = some e
    rw [if_pos hw, he]
  | e0 + 1, e, h1, h2, h3, h4 => by
    show (if w ≤ e0 + 1 ∧ nonMissB c (e0 + 1 - w) w = true then some (e0 + 1)
      else lastWindow c w e0) = some e
    by_cases he : e = e0 + 1
    · have hs : e0 + 1 - w + w = e0 + 1 := by omega
      have hnm : NonMiss c (e0 + 1 - w) (e0 + 1 - w + w) := by
        rw [hs]
        rw [he] at h3
        exact h3
      have hc : w ≤ e0 + 1 ∧ nonMissB c (e0 + 1 - w) w = true :=
        ⟨by omega, nonMissB_of c (e0 + 1 - w) w hnm⟩
      rw [if_pos hc, he]
    · have hc : ¬ (w ≤ e0 + 1 ∧ nonMissB c (e0 + 1 - w) w = true) := by
        intro hc
        have hw1 : w ≤ e0 + 1 := hc.1
        have hnm := nonMissB_true c (e0 + 1 - w) w hc.2
        have hs : e0 + 1 - w + w = e0 + 1 := by omega
        rw [hs] at hnm
        exact h4 (e0 + 1) (by omega) (Nat.le_refl (e0 + 1)) hw1 hnm
      rw [if_neg hc]
      have h4' : NoWindowIn c w e e0 := by
        intro e' a1 a2 a3 a4
        exact h4 e' a1 (by omega) a3 a4
      exact lastWindow_eq_some c w e0 e h1 (by omega) h3 h4'

/-- No window at all (`w ≥ 1`): `lastWindow` finds none. -/
theorem lastWindow_eq_none (c : Nat → Nat) (w : Nat) (hw : 1 ≤ w) :
    ∀ (e0 : Nat), NoWindowIn c w 0 e0 → lastWindow c w e0 = none
  | 0, _ => by
    have hw0 : ¬ w = 0 := by omega
    show (if w = 0 then some 0 else none) = none
    rw [if_neg hw0]
  | e0 + 1, h => by
    have hc : ¬ (w ≤ e0 + 1 ∧ nonMissB c (e0 + 1 - w) w = true) := by
      intro hc
      have hw1 : w ≤ e0 + 1 := hc.1
      have hnm := nonMissB_true c (e0 + 1 - w) w hc.2
      have hs : e0 + 1 - w + w = e0 + 1 := by omega
      rw [hs] at hnm
      exact h (e0 + 1) (by omega) (Nat.le_refl (e0 + 1)) hw1 hnm
    show (if w ≤ e0 + 1 ∧ nonMissB c (e0 + 1 - w) w = true then some (e0 + 1)
      else lastWindow c w e0) = none
    rw [if_neg hc]
    have h' : NoWindowIn c w 0 e0 := by
      intro e' a1 a2 a3 a4
      exact h e' a1 (by omega) a3 a4
    exact lastWindow_eq_none c w hw e0 h'

/-! ## The declarative answer, clause by clause

`offloadLookup`'s value from the declarative facts of each clause (C:
`initial_window_holds`, `rightmost_miss`, `rightmost_window`, `leading_run`). -/

/-- Clause 1: the required window touching the right end holds. -/
theorem offloadLookup_initial (c : Nat → Nat) (n w : Nat) (initial : Option Nat)
    (h1 : 1 ≤ requiredWindow w initial) (h2 : requiredWindow w initial ≤ n)
    (h3 : NonMiss c (n - requiredWindow w initial) n) :
    offloadLookup c n w initial =
      gate (pendingIn c (n - requiredWindow w initial) (requiredWindow w initial)) n := by
  have hs : n - requiredWindow w initial + requiredWindow w initial = n := by omega
  have hnm : NonMiss c (n - requiredWindow w initial)
      (n - requiredWindow w initial + requiredWindow w initial) := by
    rw [hs]
    exact h3
  have hc : 1 ≤ requiredWindow w initial ∧ requiredWindow w initial ≤ n ∧
      nonMissB c (n - requiredWindow w initial) (requiredWindow w initial) = true :=
    ⟨h1, h2, nonMissB_of c _ _ hnm⟩
  exact if_pos hc

/-- Clause 2: no miss at all, and the required window does not fit. -/
theorem offloadLookup_all (c : Nat → Nat) (n w : Nat) (initial : Option Nat)
    (h1 : 1 ≤ requiredWindow w initial → n < requiredWindow w initial)
    (h2 : NonMiss c 0 n) :
    offloadLookup c n w initial = gate (pendingIn c 0 n) n := by
  have hc : ¬ (1 ≤ requiredWindow w initial ∧ requiredWindow w initial ≤ n ∧
      nonMissB c (n - requiredWindow w initial) (requiredWindow w initial) = true) := by
    intro h
    have a1 : 1 ≤ requiredWindow w initial := h.1
    have a2 : requiredWindow w initial ≤ n := h.2.1
    have a3 := h1 a1
    omega
  have e1 : offloadLookup c n w initial = _ := if_neg hc
  rw [rightmostMiss_eq_none c n h2] at e1
  exact e1

/-- Clauses 3-4: `m` is the rightmost miss and lies in the required window
touching the right end (so that window fails). -/
theorem offloadLookup_afterMiss (c : Nat → Nat) (n w : Nat) (initial : Option Nat) (m : Nat)
    (hm1 : m < n) (hm2 : c m = 0) (hm3 : NonMiss c (m + 1) n)
    (hm4 : 1 ≤ requiredWindow w initial → n - requiredWindow w initial ≤ m) :
    offloadLookup c n w initial =
      (match lastWindow c w m with
        | some e => gate (pendingIn c (e - w) w) e
        | none => gate (pendingIn c 0 (leadingRun c 0 n)) (leadingRun c 0 n)) := by
  have hc : ¬ (1 ≤ requiredWindow w initial ∧ requiredWindow w initial ≤ n ∧
      nonMissB c (n - requiredWindow w initial) (requiredWindow w initial) = true) := by
    intro h
    have a1 : 1 ≤ requiredWindow w initial := h.1
    have a2 : requiredWindow w initial ≤ n := h.2.1
    have a3 : n - requiredWindow w initial ≤ m := hm4 a1
    have hnm := nonMissB_true c _ _ h.2.2
    exact hnm m (by omega) (by omega) hm2
  have e1 : offloadLookup c n w initial = _ := if_neg hc
  rw [rightmostMiss_eq_some c n m hm1 hm2 hm3] at e1
  exact e1

/-- Clause 3: the rightmost window `[e - w, e)` at or before the miss. -/
theorem offloadLookup_window (c : Nat → Nat) (n w : Nat) (initial : Option Nat) (m e : Nat)
    (hm1 : m < n) (hm2 : c m = 0) (hm3 : NonMiss c (m + 1) n)
    (hm4 : 1 ≤ requiredWindow w initial → n - requiredWindow w initial ≤ m)
    (he1 : w ≤ e) (he2 : e ≤ m) (he3 : NonMiss c (e - w) e) (he4 : NoWindowIn c w e m) :
    offloadLookup c n w initial = gate (pendingIn c (e - w) w) e := by
  have e1 := offloadLookup_afterMiss c n w initial m hm1 hm2 hm3 hm4
  rw [lastWindow_eq_some c w m e he1 he2 he3 he4] at e1
  exact e1

/-- Clause 4: no window at or before the miss; the leading run `[0, p)`. -/
theorem offloadLookup_lead (c : Nat → Nat) (n w : Nat) (initial : Option Nat) (m p : Nat)
    (hm1 : m < n) (hm2 : c m = 0) (hm3 : NonMiss c (m + 1) n)
    (hm4 : 1 ≤ requiredWindow w initial → n - requiredWindow w initial ≤ m)
    (hw : 1 ≤ w) (hnw : NoWindowIn c w 0 m)
    (hp1 : p ≤ m) (hp2 : NonMiss c 0 p) (hp3 : c p = 0) :
    offloadLookup c n w initial = gate (pendingIn c 0 p) p := by
  have e1 := offloadLookup_afterMiss c n w initial m hm1 hm2 hm3 hm4
  rw [lastWindow_eq_none c w hw m hnw] at e1
  have e2 : offloadLookup c n w initial =
      gate (pendingIn c 0 (leadingRun c 0 n)) (leadingRun c 0 n) := e1
  rw [leadingRun_eq c 0 n p (Nat.zero_le p) (by omega) hp2 (Or.inr hp3)] at e2
  exact e2

/-! ## The declarative answer as a relation (C: `offload_answer`) -/

/-- `a` is the answer of the lookup (C predicate `offload_answer`, pyspec
`offload_lookup` clauses 1-4), with `R = requiredWindow w initial`:

1. the `R` chunks touching the right end are non-miss: `a` is `n`, gated by
   their pending chunks;
2. no miss at all and the required window does not fit: `n`, gated by all
   chunks;
3. `m` is the rightmost miss (inside the required window, which therefore
   fails), and either `e` ends the **rightmost** window of `w` non-miss chunks
   at or before `m` (no window ends in `(e, m]`: optimality), gated by that
   window, or (`w ≥ 1`) there is no window at all and `[0, p)` is the leading
   run, gated by it. -/
def OffloadAnswer (c : Nat → Nat) (n w : Nat) (initial : Option Nat) (a : Option Nat) :
    Prop :=
  (1 ≤ requiredWindow w initial ∧ requiredWindow w initial ≤ n ∧
      NonMiss c (n - requiredWindow w initial) n ∧
      a = gate (pendingIn c (n - requiredWindow w initial) (requiredWindow w initial)) n) ∨
    ((1 ≤ requiredWindow w initial → n < requiredWindow w initial) ∧ NonMiss c 0 n ∧
      a = gate (pendingIn c 0 n) n) ∨
    (∃ m, m < n ∧ c m = 0 ∧ NonMiss c (m + 1) n ∧
      (1 ≤ requiredWindow w initial → n - requiredWindow w initial ≤ m) ∧
      ((∃ e, w ≤ e ∧ e ≤ m ∧ NonMiss c (e - w) e ∧ NoWindowIn c w e m ∧
          a = gate (pendingIn c (e - w) w) e) ∨
        (1 ≤ w ∧ NoWindowIn c w 0 m ∧
          ∃ p, p ≤ m ∧ NonMiss c 0 p ∧ c p = 0 ∧ a = gate (pendingIn c 0 p) p)))

/-- Every value satisfying `OffloadAnswer` is `offloadLookup`'s: the relation
has at most one solution (with `offloadLookup_answer`, exactly one; C lemma
`offload_answer_unique`). -/
theorem offloadAnswer_eq_offloadLookup (c : Nat → Nat) (n w : Nat) (initial : Option Nat)
    (a : Option Nat) (h : OffloadAnswer c n w initial a) : a = offloadLookup c n w initial := by
  unfold OffloadAnswer at h
  rcases h with ⟨h1, h2, h3, ha⟩ | ⟨h1, h2, ha⟩ | ⟨m, hm1, hm2, hm3, hm4, ⟨e, he1, he2, he3, he4, ha⟩ | ⟨hw, hnw, p, hp1, hp2, hp3, ha⟩⟩
  · exact ha.trans (offloadLookup_initial c n w initial h1 h2 h3).symm
  · exact ha.trans (offloadLookup_all c n w initial h1 h2).symm
  · exact ha.trans
      (offloadLookup_window c n w initial m e hm1 hm2 hm3 hm4 he1 he2 he3 he4).symm
  · exact ha.trans
      (offloadLookup_lead c n w initial m p hm1 hm2 hm3 hm4 hw hnw hp1 hp2 hp3).symm

/-! ## vLLM's loop meets the declarative answer

The loop invariant of the C twin `legacy_offload_scan`: before the first miss
the run touches the right end and is shorter than the required window; after
it, the run `[k, k + hits)` ends at a miss, is shorter than `w`, and no window
ends between that miss and the rightmost one. -/

/-- `offloadLegacyLoop`'s equation for no chunk left. -/
theorem offloadLegacyLoop_zero (c : Nat → Nat) (w hits : Nat) (pend : Bool) (req : Nat) :
    offloadLegacyLoop c w 0 hits pend req = gate pend hits := rfl

/-- `offloadLegacyLoop`'s equation for one more chunk (chunk `k` is read). -/
theorem offloadLegacyLoop_succ (c : Nat → Nat) (w k hits : Nat) (pend : Bool) (req : Nat) :
    offloadLegacyLoop c w (k + 1) hits pend req =
      if c k = 0 then
        (if 0 = w then gate false (k + w) else offloadLegacyLoop c w k 0 false w)
      else if hits + 1 = req then gate (pend || c k == 2) (k + req)
      else offloadLegacyLoop c w k (hits + 1) (pend || c k == 2) req := rfl

/-- Before the first miss (the run `[k, n)` touches the right end): the loop
answers clause 1 or 2, or reaches the rightmost miss `m` and goes on as from
a miss. -/
theorem offloadLegacyLoop_tail (c : Nat → Nat) (n w R : Nat) :
    ∀ (k hits : Nat) (pend : Bool), k + hits = n → NonMiss c k n → pend = pendingIn c k hits →
      (1 ≤ R → hits < R) →
      (1 ≤ R ∧ R ≤ n ∧ NonMiss c (n - R) n ∧
          offloadLegacyLoop c w k hits pend R = gate (pendingIn c (n - R) R) n) ∨
        ((1 ≤ R → n < R) ∧ NonMiss c 0 n ∧
          offloadLegacyLoop c w k hits pend R = gate (pendingIn c 0 n) n) ∨
        (∃ m, m < n ∧ c m = 0 ∧ NonMiss c (m + 1) n ∧ (1 ≤ R → n - R ≤ m) ∧
          offloadLegacyLoop c w k hits pend R =
            (if 0 = w then gate false (m + w) else offloadLegacyLoop c w m 0 false w))
  | 0, hits, pend, h1, h2, h3, h4 => by
    have hn : hits = n := by omega
    have hv : offloadLegacyLoop c w 0 hits pend R = gate (pendingIn c 0 n) n := by
      rw [offloadLegacyLoop_zero, h3, hn]
    have hR : 1 ≤ R → n < R := by
      intro h
      have a1 := h4 h
      omega
    exact Or.inr (Or.inl ⟨hR, h2, hv⟩)
  | k + 1, hits, pend, h1, h2, h3, h4 => by
    by_cases hc : c k = 0
    · have hv : offloadLegacyLoop c w (k + 1) hits pend R =
          (if 0 = w then gate false (k + w) else offloadLegacyLoop c w k 0 false w) := by
        rw [offloadLegacyLoop_succ, if_pos hc]
      have hm4 : 1 ≤ R → n - R ≤ k := by
        intro h
        have a1 := h4 h
        omega
      exact Or.inr (Or.inr ⟨k, by omega, hc, h2, hm4, hv⟩)
    · by_cases hh : hits + 1 = R
      · have hnR : n - R = k := by omega
        have hkR : k + R = n := by omega
        have hv : offloadLegacyLoop c w (k + 1) hits pend R =
            gate (pendingIn c (n - R) R) n := by
          rw [offloadLegacyLoop_succ, if_neg hc, if_pos hh, hnR, hkR, ← hh, pendingIn_succ, h3,
            or_comm_bool (pendingIn c (k + 1) hits) (c k == 2)]
        have hnm : NonMiss c (n - R) n := by
          rw [hnR]
          intro i a b
          by_cases hik : i = k
          · rw [hik]
            exact hc
          · exact h2 i (by omega) b
        exact Or.inl ⟨by omega, by omega, hnm, hv⟩
      · have hv : offloadLegacyLoop c w (k + 1) hits pend R =
            offloadLegacyLoop c w k (hits + 1) (pend || c k == 2) R := by
          rw [offloadLegacyLoop_succ, if_neg hc, if_neg hh]
        have g2 : NonMiss c k n := by
          intro i a b
          by_cases hik : i = k
          · rw [hik]
            exact hc
          · exact h2 i (by omega) b
        have g3 : (pend || c k == 2) = pendingIn c k (hits + 1) := by
          rw [pendingIn_succ, h3, or_comm_bool (pendingIn c (k + 1) hits) (c k == 2)]
        have g4 : 1 ≤ R → hits + 1 < R := by
          intro h
          have a1 := h4 h
          omega
        rw [hv]
        exact offloadLegacyLoop_tail c n w R k (hits + 1) (pend || c k == 2) (by omega) g2 g3 g4

/-- After the rightmost miss `m` (`w ≥ 1`): the run `[k, k + hits)` ends at a
miss, is shorter than `w`, and no window ends in `(k + hits, m]`. The loop
answers the rightmost window at or before `m` (clause 3), or, when there is
none, the leading run (clause 4). -/
theorem offloadLegacyLoop_afterMiss (c : Nat → Nat) (w m : Nat) (hw : 1 ≤ w) :
    ∀ (k hits : Nat) (pend : Bool), k + hits ≤ m → c (k + hits) = 0 → hits < w →
      NonMiss c k (k + hits) → pend = pendingIn c k hits → NoWindowIn c w (k + hits) m →
      (∃ e, w ≤ e ∧ e ≤ m ∧ NonMiss c (e - w) e ∧ NoWindowIn c w e m ∧
          offloadLegacyLoop c w k hits pend w = gate (pendingIn c (e - w) w) e) ∨
        (NoWindowIn c w 0 m ∧ ∃ p, p ≤ m ∧ NonMiss c 0 p ∧ c p = 0 ∧
          offloadLegacyLoop c w k hits pend w = gate (pendingIn c 0 p) p)
  | 0, hits, pend, h1, h2, h3, h4, h5, h6 => by
    have hv : offloadLegacyLoop c w 0 hits pend w = gate (pendingIn c 0 hits) hits := by
      rw [offloadLegacyLoop_zero, h5]
    have hnw : NoWindowIn c w 0 m := by
      intro e a1 a2 a3 a4
      by_cases hbig : 0 + hits < e
      · exact h6 e hbig a2 a3 a4
      · omega
    have hp2 : NonMiss c 0 hits := by
      intro i a b
      exact h4 i a (by omega)
    have hp3 : c hits = 0 := by
      rw [Nat.zero_add] at h2
      exact h2
    exact Or.inr ⟨hnw, hits, by omega, hp2, hp3, hv⟩
  | k + 1, hits, pend, h1, h2, h3, h4, h5, h6 => by
    by_cases hc : c k = 0
    · have hw0 : ¬ 0 = w := by omega
      have hv : offloadLegacyLoop c w (k + 1) hits pend w = offloadLegacyLoop c w k 0 false w := by
        rw [offloadLegacyLoop_succ, if_pos hc, if_neg hw0]
      have g1 : k + 0 ≤ m := by omega
      have g2 : c (k + 0) = 0 := by
        rw [Nat.add_zero]
        exact hc
      have g3 : 0 < w := by omega
      have g4 : NonMiss c k (k + 0) := by
        intro i a b
        exact absurd b (by omega)
      have g5 : false = pendingIn c k 0 := rfl
      have g6 : NoWindowIn c w (k + 0) m := by
        intro e a1 a2 a3 a4
        by_cases hbig : k + 1 + hits < e
        · exact h6 e hbig a2 a3 a4
        · exact a4 k (by omega) (by omega) hc
      rw [hv]
      exact offloadLegacyLoop_afterMiss c w m hw k 0 false g1 g2 g3 g4 g5 g6
    · by_cases hh : hits + 1 = w
      · have hkw : k + w - w = k := by omega
        have hv : offloadLegacyLoop c w (k + 1) hits pend w =
            gate (pendingIn c (k + w - w) w) (k + w) := by
          rw [offloadLegacyLoop_succ, if_neg hc, if_pos hh, hkw, ← hh, pendingIn_succ, h5,
            or_comm_bool (pendingIn c (k + 1) hits) (c k == 2)]
        have hnm : NonMiss c (k + w - w) (k + w) := by
          rw [hkw]
          intro i a b
          by_cases hik : i = k
          · rw [hik]
            exact hc
          · exact h4 i (by omega) (by omega)
        have hnw : NoWindowIn c w (k + w) m := by
          intro e a1 a2 a3 a4
          exact h6 e (by omega) a2 a3 a4
        exact Or.inl ⟨k + w, by omega, by omega, hnm, hnw, hv⟩
      · have hv : offloadLegacyLoop c w (k + 1) hits pend w =
            offloadLegacyLoop c w k (hits + 1) (pend || c k == 2) w := by
          rw [offloadLegacyLoop_succ, if_neg hc, if_neg hh]
        have g1 : k + (hits + 1) ≤ m := by omega
        have g2 : c (k + (hits + 1)) = 0 := by
          have ee : k + (hits + 1) = k + 1 + hits := by omega
          rw [ee]
          exact h2
        have g3 : hits + 1 < w := by omega
        have g4 : NonMiss c k (k + (hits + 1)) := by
          intro i a b
          by_cases hik : i = k
          · rw [hik]
            exact hc
          · exact h4 i (by omega) (by omega)
        have g5 : (pend || c k == 2) = pendingIn c k (hits + 1) := by
          rw [pendingIn_succ, h5, or_comm_bool (pendingIn c (k + 1) hits) (c k == 2)]
        have g6 : NoWindowIn c w (k + (hits + 1)) m := by
          intro e a1 a2 a3 a4
          exact h6 e (by omega) a2 a3 a4
        rw [hv]
        exact offloadLegacyLoop_afterMiss c w m hw k (hits + 1) (pend || c k == 2)
          g1 g2 g3 g4 g5 g6

/-- **vLLM's loop meets the declarative answer** (C: `legacy_offload_scan`
ensures `offload_answer`). -/
theorem legacyOffloadScan_answer (c : Nat → Nat) (n w : Nat) (initial : Option Nat) :
    OffloadAnswer c n w initial (legacyOffloadScan c n w initial) := by
  have hnn : NonMiss c n n := by
    intro i a b
    exact absurd b (by omega)
  have h0 : 1 ≤ requiredWindow w initial → 0 < requiredWindow w initial := by
    intro h
    omega
  have t := offloadLegacyLoop_tail c n w (requiredWindow w initial) n 0 false (Nat.add_zero n)
    hnn rfl h0
  show OffloadAnswer c n w initial
    (offloadLegacyLoop c w n 0 false (requiredWindow w initial))
  rcases t with ⟨h1, h2, h3, hv⟩ | ⟨h1, h2, hv⟩ | ⟨m, hm1, hm2, hm3, hm4, hv⟩
  · unfold OffloadAnswer
    exact Or.inl ⟨h1, h2, h3, hv⟩
  · unfold OffloadAnswer
    exact Or.inr (Or.inl ⟨h1, h2, hv⟩)
  · rw [hv]
    by_cases hw : 0 = w
    · rw [if_pos hw]
      have g1 : NonMiss c (m - w) m := by
        intro i a b
        exact absurd b (by omega)
      have g2 : NoWindowIn c w m m := by
        intro e a1 a2 _ _
        omega
      have g3 : gate false (m + w) = gate (pendingIn c (m - w) w) m := by
        rw [← hw, Nat.add_zero, pendingIn_zero]
      unfold OffloadAnswer
      exact Or.inr (Or.inr ⟨m, hm1, hm2, hm3, hm4,
        Or.inl ⟨m, by omega, Nat.le_refl m, g1, g2, g3⟩⟩)
    · rw [if_neg hw]
      have hw1 : 1 ≤ w := by omega
      have g1 : m + 0 ≤ m := by omega
      have g2 : c (m + 0) = 0 := by
        rw [Nat.add_zero]
        exact hm2
      have g3 : 0 < w := by omega
      have g4 : NonMiss c m (m + 0) := by
        intro i a b
        exact absurd b (by omega)
      have g5 : false = pendingIn c m 0 := rfl
      have g6 : NoWindowIn c w (m + 0) m := by
        intro e a1 a2 _ _
        omega
      have b := offloadLegacyLoop_afterMiss c w m hw1 m 0 false g1 g2 g3 g4 g5 g6
      unfold OffloadAnswer
      rcases b with ⟨e, he1, he2, he3, he4, hv2⟩ | ⟨hnw, p, hp1, hp2, hp3, hv2⟩
      · exact Or.inr (Or.inr ⟨m, hm1, hm2, hm3, hm4, Or.inl ⟨e, he1, he2, he3, he4, hv2⟩⟩)
      · exact Or.inr (Or.inr ⟨m, hm1, hm2, hm3, hm4, Or.inr ⟨hw1, hnw, p, hp1, hp2, hp3, hv2⟩⟩)

/-! ## The stride search meets the declarative answer

Phase 1 is vLLM's loop before the first miss. Phase 2's invariant (the C
twin's `ranges`, `next_start_below`, `bound_miss`, `known_non_miss`,
`known_pending`, `none_after`): `kl ≤ bound ≤ m`, `bound < kl + w`, chunk
`bound` is a miss, `[kl, bound)` is non-miss with pending flag `kp`, and no
window ends in `(bound, m]`. -/

/-- `phase1`'s equation for no chunk left. -/
theorem phase1_zero (c : Nat → Nat) (n r count : Nat) (pend : Bool) :
    phase1 c n r 0 count pend = Sum.inl (gate pend n) := rfl

/-- `phase1`'s equation for one more chunk (chunk `k` is read). -/
theorem phase1_succ (c : Nat → Nat) (n r k count : Nat) (pend : Bool) :
    phase1 c n r (k + 1) count pend =
      if c k = 0 then Sum.inr k
      else if count + 1 = r then Sum.inl (gate (pend || c k == 2) n)
      else phase1 c n r k (count + 1) (pend || c k == 2) := rfl

/-- Phase 1 answers clause 1 or 2, or stops at the rightmost miss `m`. -/
theorem phase1_spec (c : Nat → Nat) (n R : Nat) :
    ∀ (k count : Nat) (pend : Bool), k + count = n → NonMiss c k n →
      pend = pendingIn c k count → (1 ≤ R → count < R) →
      (1 ≤ R ∧ R ≤ n ∧ NonMiss c (n - R) n ∧
          phase1 c n R k count pend = Sum.inl (gate (pendingIn c (n - R) R) n)) ∨
        ((1 ≤ R → n < R) ∧ NonMiss c 0 n ∧
          phase1 c n R k count pend = Sum.inl (gate (pendingIn c 0 n) n)) ∨
        (∃ m, m < n ∧ c m = 0 ∧ NonMiss c (m + 1) n ∧ (1 ≤ R → n - R ≤ m) ∧
          phase1 c n R k count pend = Sum.inr m)
  | 0, count, pend, h1, h2, h3, h4 => by
    have hn : count = n := by omega
    have hv : phase1 c n R 0 count pend = Sum.inl (gate (pendingIn c 0 n) n) := by
      rw [phase1_zero, h3, hn]
    have hR : 1 ≤ R → n < R := by
      intro h
      have a1 := h4 h
      omega
    exact Or.inr (Or.inl ⟨hR, h2, hv⟩)
  | k + 1, count, pend, h1, h2, h3, h4 => by
    by_cases hc : c k = 0
    · have hv : phase1 c n R (k + 1) count pend = Sum.inr k := by
        rw [phase1_succ, if_pos hc]
      have hm4 : 1 ≤ R → n - R ≤ k := by
        intro h
        have a1 := h4 h
        omega
      exact Or.inr (Or.inr ⟨k, by omega, hc, h2, hm4, hv⟩)
    · by_cases hh : count + 1 = R
      · have hnR : n - R = k := by omega
        have hv : phase1 c n R (k + 1) count pend =
            Sum.inl (gate (pendingIn c (n - R) R) n) := by
          rw [phase1_succ, if_neg hc, if_pos hh, hnR, ← hh, pendingIn_succ, h3,
            or_comm_bool (pendingIn c (k + 1) count) (c k == 2)]
        have hnm : NonMiss c (n - R) n := by
          rw [hnR]
          intro i a b
          by_cases hik : i = k
          · rw [hik]
            exact hc
          · exact h2 i (by omega) b
        exact Or.inl ⟨by omega, by omega, hnm, hv⟩
      · have hv : phase1 c n R (k + 1) count pend =
            phase1 c n R k (count + 1) (pend || c k == 2) := by
          rw [phase1_succ, if_neg hc, if_neg hh]
        have g2 : NonMiss c k n := by
          intro i a b
          by_cases hik : i = k
          · rw [hik]
            exact hc
          · exact h2 i (by omega) b
        have g3 : (pend || c k == 2) = pendingIn c k (count + 1) := by
          rw [pendingIn_succ, h3, or_comm_bool (pendingIn c (k + 1) count) (c k == 2)]
        have g4 : 1 ≤ R → count + 1 < R := by
          intro h
          have a1 := h4 h
          omega
        rw [hv]
        exact phase1_spec c n R k (count + 1) (pend || c k == 2) (by omega) g2 g3 g4

/-- Phase 2 (`w ≥ 1`, enough fuel): it finds the rightmost window at or before
`m` (clause 3), or hands phase 3 a miss `b < w` with `[kl, b)` non-miss and
its pending flag, after ruling out every window. -/
theorem strideLoop2_spec (c : Nat → Nat) (w m : Nat) (hw : 1 ≤ w) :
    ∀ (fuel bound kl : Nat) (kp : Bool), bound < fuel → kl ≤ bound → bound ≤ m →
      bound < kl + w → c bound = 0 → NonMiss c kl bound → kp = pendingIn c kl (bound - kl) →
      NoWindowIn c w bound m →
      (∃ e, w ≤ e ∧ e ≤ m ∧ NonMiss c (e - w) e ∧ NoWindowIn c w e m ∧
          strideLoop2 c w fuel bound kl kp = Sum.inl (gate (pendingIn c (e - w) w) e)) ∨
        (NoWindowIn c w 0 m ∧ ∃ b kl' kp', strideLoop2 c w fuel bound kl kp = Sum.inr (b, kl', kp') ∧
          b < w ∧ kl' ≤ b ∧ b ≤ m ∧ c b = 0 ∧ NonMiss c kl' b ∧ kp' = pendingIn c kl' (b - kl'))
  | 0, bound, _, _, h1, _, _, _, _, _, _, _ => absurd h1 (Nat.not_lt_zero bound)
  | fuel + 1, bound, kl, kp, h1, h2, h3, h4, h5, h6, h7, h8 => by
    by_cases hb : bound < w
    · have hv : strideLoop2 c w (fuel + 1) bound kl kp = Sum.inr (bound, kl, kp) := by
        rw [strideLoop2_succ, if_pos hb]
      have hnw : NoWindowIn c w 0 m := by
        intro e a1 a2 a3 a4
        by_cases hbe : bound < e
        · exact h8 e hbe a2 a3 a4
        · omega
      exact Or.inr ⟨hnw, bound, kl, kp, hv, hb, h2, h3, h5, h6, h7⟩
    · obtain ⟨sb1, sb2⟩ := scanTri_bounds c (bound - w) (kl - (bound - w))
      have snm := scanTri_nonMiss c (bound - w) (kl - (bound - w))
      have spd := scanTri_pend c (bound - w) (kl - (bound - w))
      by_cases hf : (scanTri c (bound - w) (kl - (bound - w))).1 = kl
      · have hv : strideLoop2 c w (fuel + 1) bound kl kp =
            Sum.inl (gate ((scanTri c (bound - w) (kl - (bound - w))).2 || kp) bound) := by
          rw [strideLoop2_succ, if_neg hb, if_pos hf]
        have hsplit := pendingIn_split c (bound - w) kl bound (by omega) h2
        have hbw : bound - (bound - w) = w := by omega
        rw [hbw] at hsplit
        have hfl : (scanTri c (bound - w) (kl - (bound - w))).2 =
            pendingIn c (bound - w) (kl - (bound - w)) := by
          rw [spd, hf]
        have hval : ((scanTri c (bound - w) (kl - (bound - w))).2 || kp) =
            pendingIn c (bound - w) w := by
          rw [hfl, h7, hsplit]
        have hnm : NonMiss c (bound - w) bound := by
          intro i a b
          by_cases hik : i < kl
          · exact snm i a (by omega)
          · exact h6 i (by omega) b
        have hv2 : strideLoop2 c w (fuel + 1) bound kl kp =
            Sum.inl (gate (pendingIn c (bound - w) w) bound) := by
          rw [hv, hval]
        exact Or.inl ⟨bound, by omega, h3, hnm, h8, hv2⟩
      · have hlt : (scanTri c (bound - w) (kl - (bound - w))).1 < kl := by omega
        have hcS : c (scanTri c (bound - w) (kl - (bound - w))).1 = 0 :=
          scanTri_miss c (bound - w) (kl - (bound - w)) (by omega)
        have hv : strideLoop2 c w (fuel + 1) bound kl kp =
            strideLoop2 c w fuel (scanTri c (bound - w) (kl - (bound - w))).1 (bound - w)
              (scanTri c (bound - w) (kl - (bound - w))).2 := by
          rw [strideLoop2_succ, if_neg hb, if_neg hf]
        have g8 : NoWindowIn c w (scanTri c (bound - w) (kl - (bound - w))).1 m := by
          intro e a1 a2 a3 a4
          by_cases hbe : bound < e
          · exact h8 e hbe a2 a3 a4
          · exact a4 (scanTri c (bound - w) (kl - (bound - w))).1 (by omega) a1 hcS
        rw [hv]
        exact strideLoop2_spec c w m hw fuel (scanTri c (bound - w) (kl - (bound - w))).1
          (bound - w) (scanTri c (bound - w) (kl - (bound - w))).2 (by omega) sb1 (by omega)
          (by omega) hcS snm spd g8

/-- Phase 3: the leading run `[0, p)`, reusing `[kl, b)`; `p ≤ b` and chunk
`p` is a miss. -/
theorem phase3_spec (c : Nat → Nat) (b kl : Nat) (kp : Bool) (h1 : kl ≤ b) (h2 : c b = 0)
    (h3 : NonMiss c kl b) (h4 : kp = pendingIn c kl (b - kl)) :
    ∃ p, p ≤ b ∧ NonMiss c 0 p ∧ c p = 0 ∧ phase3 c b kl kp = gate (pendingIn c 0 p) p := by
  have e0 : phase3 c b kl kp =
      (if (scanTri c 0 kl).1 = kl then gate ((scanTri c 0 kl).2 || kp) b
      else gate (scanTri c 0 kl).2 (scanTri c 0 kl).1) := rfl
  obtain ⟨sb1, sb2⟩ := scanTri_bounds c 0 kl
  have snm := scanTri_nonMiss c 0 kl
  have spd := scanTri_pend c 0 kl
  by_cases hf : (scanTri c 0 kl).1 = kl
  · have hsplit := pendingIn_split c 0 kl b (Nat.zero_le kl) h1
    have a1 : b - 0 = b := Nat.sub_zero b
    have a2 : kl - 0 = kl := Nat.sub_zero kl
    rw [a1, a2] at hsplit
    have hfl : (scanTri c 0 kl).2 = pendingIn c 0 kl := by
      rw [spd, hf, a2]
    have hnm : NonMiss c 0 b := by
      intro i a c1
      by_cases hik : i < kl
      · exact snm i a (by omega)
      · exact h3 i (by omega) c1
    have hv : phase3 c b kl kp = gate (pendingIn c 0 b) b := by
      rw [e0, if_pos hf, hfl, h4, ← hsplit]
    exact ⟨b, Nat.le_refl b, hnm, h2, hv⟩
  · have hlt : (scanTri c 0 kl).1 < kl := by omega
    have hcS : c (scanTri c 0 kl).1 = 0 := scanTri_miss c 0 kl (by omega)
    have hv : phase3 c b kl kp =
        gate (pendingIn c 0 (scanTri c 0 kl).1) (scanTri c 0 kl).1 := by
      rw [e0, if_neg hf, spd, Nat.sub_zero]
    exact ⟨(scanTri c 0 kl).1, by omega, snm, hcS, hv⟩

/-- The stride search when phase 1 decides. -/
theorem offloadStrideSearch_inl (c : Nat → Nat) (n w : Nat) (initial : Option Nat)
    (a : Option Nat) (h : phase1 c n (requiredWindow w initial) n 0 false = Sum.inl a) :
    offloadStrideSearch c n w initial = a := by
  have e0 : offloadStrideSearch c n w initial =
      (match phase1 c n (requiredWindow w initial) n 0 false with
        | .inl a' => a'
        | .inr m' =>
          if w = 0 then some m'
          else
            match strideLoop2 c w (m' + 1) m' m' false with
            | .inl a' => a'
            | .inr (b, kl, kp) => phase3 c b kl kp) := rfl
  rw [h] at e0
  exact e0

/-- The stride search when phase 1 stops at the miss `m`. -/
theorem offloadStrideSearch_inr (c : Nat → Nat) (n w : Nat) (initial : Option Nat)
    (m : Nat) (h : phase1 c n (requiredWindow w initial) n 0 false = Sum.inr m) :
    offloadStrideSearch c n w initial =
      (if w = 0 then some m
      else
        match strideLoop2 c w (m + 1) m m false with
        | .inl a' => a'
        | .inr (b, kl, kp) => phase3 c b kl kp) := by
  have e0 : offloadStrideSearch c n w initial =
      (match phase1 c n (requiredWindow w initial) n 0 false with
        | .inl a' => a'
        | .inr m' =>
          if w = 0 then some m'
          else
            match strideLoop2 c w (m' + 1) m' m' false with
            | .inl a' => a'
            | .inr (b, kl, kp) => phase3 c b kl kp) := rfl
  rw [h] at e0
  exact e0

/-- **The stride search meets the declarative answer** (C:
`offload_stride_search` ensures `offload_answer`). -/
theorem offloadStrideSearch_answer (c : Nat → Nat) (n w : Nat) (initial : Option Nat) :
    OffloadAnswer c n w initial (offloadStrideSearch c n w initial) := by
  have hnn : NonMiss c n n := by
    intro i a b
    exact absurd b (by omega)
  have h0 : 1 ≤ requiredWindow w initial → 0 < requiredWindow w initial := by
    intro h
    omega
  have t := phase1_spec c n (requiredWindow w initial) n 0 false (Nat.add_zero n) hnn rfl h0
  rcases t with ⟨h1, h2, h3, hv⟩ | ⟨h1, h2, hv⟩ | ⟨m, hm1, hm2, hm3, hm4, hv⟩
  · rw [offloadStrideSearch_inl c n w initial _ hv]
    unfold OffloadAnswer
    exact Or.inl ⟨h1, h2, h3, rfl⟩
  · rw [offloadStrideSearch_inl c n w initial _ hv]
    unfold OffloadAnswer
    exact Or.inr (Or.inl ⟨h1, h2, rfl⟩)
  · have e1 := offloadStrideSearch_inr c n w initial m hv
    by_cases hw : w = 0
    · rw [if_pos hw] at e1
      rw [e1]
      have g1 : NonMiss c (m - w) m := by
        intro i a b
        exact absurd b (by omega)
      have g2 : NoWindowIn c w m m := by
        intro e a1 a2 _ _
        omega
      have g3 : some m = gate (pendingIn c (m - w) w) m := by
        rw [hw, pendingIn_zero, gate_false]
      unfold OffloadAnswer
      exact Or.inr (Or.inr ⟨m, hm1, hm2, hm3, hm4,
        Or.inl ⟨m, by omega, Nat.le_refl m, g1, g2, g3⟩⟩)
    · rw [if_neg hw] at e1
      have hw1 : 1 ≤ w := by omega
      have g6 : NonMiss c m m := by
        intro i a b
        exact absurd b (by omega)
      have g7 : false = pendingIn c m (m - m) := by
        rw [Nat.sub_self, pendingIn_zero]
      have g8 : NoWindowIn c w m m := by
        intro e a1 a2 _ _
        omega
      have s2 := strideLoop2_spec c w m hw1 (m + 1) m m false (by omega) (Nat.le_refl m)
        (Nat.le_refl m) (by omega) hm2 g6 g7 g8
      rcases s2 with ⟨e, he1, he2, he3, he4, hv2⟩ | ⟨hnw, b, kl, kp, hv2, hb1, hb2, hb3, hb4, hb5, hb6⟩
      · rw [hv2] at e1
        have e2 : offloadStrideSearch c n w initial = gate (pendingIn c (e - w) w) e := e1
        rw [e2]
        unfold OffloadAnswer
        exact Or.inr (Or.inr ⟨m, hm1, hm2, hm3, hm4, Or.inl ⟨e, he1, he2, he3, he4, rfl⟩⟩)
      · rw [hv2] at e1
        have e2 : offloadStrideSearch c n w initial = phase3 c b kl kp := e1
        obtain ⟨p, hp1, hp2, hp3, hp4⟩ := phase3_spec c b kl kp hb2 hb4 hb5 hb6
        rw [e2, hp4]
        unfold OffloadAnswer
        exact Or.inr (Or.inr ⟨m, hm1, hm2, hm3, hm4,
          Or.inr ⟨hw1, hnw, p, by omega, hp2, hp3, rfl⟩⟩)

/-! ## The equalities: both loops return the one declarative answer -/

/-- **vLLM's loop returns the declarative answer** on every input. -/
theorem legacyOffloadScan_eq_offloadLookup (c : Nat → Nat) (n w : Nat) (initial : Option Nat) :
    legacyOffloadScan c n w initial = offloadLookup c n w initial :=
  offloadAnswer_eq_offloadLookup c n w initial _ (legacyOffloadScan_answer c n w initial)

/-- The stride search returns the declarative answer on every input. -/
theorem offloadStrideSearch_eq_offloadLookup (c : Nat → Nat) (n w : Nat)
    (initial : Option Nat) :
    offloadStrideSearch c n w initial = offloadLookup c n w initial :=
  offloadAnswer_eq_offloadLookup c n w initial _ (offloadStrideSearch_answer c n w initial)

/-- **The stride search returns vLLM's answer** on every input (both equal
`offloadLookup`; C: both ensure `offload_answer`, lemma
`offload_answer_unique`). -/
theorem offloadStrideSearch_eq_legacyOffloadScan (c : Nat → Nat) (n w : Nat)
    (initial : Option Nat) :
    offloadStrideSearch c n w initial = legacyOffloadScan c n w initial :=
  (offloadStrideSearch_eq_offloadLookup c n w initial).trans
    (legacyOffloadScan_eq_offloadLookup c n w initial).symm

/-- The declarative answer meets its relation: in particular its window is the
**rightmost** one (clause 3's `NoWindowIn c w e m`: no later window of `w`
non-miss chunks ends at or before the rightmost miss), and every answer is
`gate` of its window (C: `offload_answer`). -/
theorem offloadLookup_answer (c : Nat → Nat) (n w : Nat) (initial : Option Nat) :
    OffloadAnswer c n w initial (offloadLookup c n w initial) := by
  rw [← legacyOffloadScan_eq_offloadLookup c n w initial]
  exact legacyOffloadScan_answer c n w initial

/-- `OffloadAnswer` has exactly one solution (C lemma `offload_answer_unique`). -/
theorem offloadAnswer_unique (c : Nat → Nat) (n w : Nat) (initial : Option Nat)
    (a1 a2 : Option Nat) (h1 : OffloadAnswer c n w initial a1)
    (h2 : OffloadAnswer c n w initial a2) : a1 = a2 :=
  (offloadAnswer_eq_offloadLookup c n w initial a1 h1).trans
    (offloadAnswer_eq_offloadLookup c n w initial a2 h2).symm

/-- The stride search returns vLLM's answer on every input (the statement,
kept as a `Prop`; proved by `offloadStrideEqLegacy_holds`). -/
def OffloadStrideEqLegacy : Prop :=
  ∀ (c : Nat → Nat) (n w : Nat) (initial : Option Nat),
    offloadStrideSearch c n w initial = legacyOffloadScan c n w initial

/-- vLLM's loop returns the declarative answer (the statement,
kept as a `Prop`; proved by `offloadLegacyEqLookup_holds`). -/
def OffloadLegacyEqLookup : Prop :=
  ∀ (c : Nat → Nat) (n w : Nat) (initial : Option Nat),
    legacyOffloadScan c n w initial = offloadLookup c n w initial

/-- `OffloadStrideEqLegacy` holds. -/
theorem offloadStrideEqLegacy_holds : OffloadStrideEqLegacy := by
  intro c n w initial
  exact offloadStrideSearch_eq_legacyOffloadScan c n w initial

/-- `OffloadLegacyEqLookup` holds. -/
theorem offloadLegacyEqLookup_holds : OffloadLegacyEqLookup := by
  intro c n w initial
  exact legacyOffloadScan_eq_offloadLookup c n w initial

/-! ## `none` exactly when the chosen window holds a pending chunk -/

/-- `pendingIn … = true` means a pending chunk in `[s, s + k)`. -/
theorem pendingIn_true (c : Nat → Nat) :
    ∀ (s k : Nat), pendingIn c s k = true → ∃ i, s ≤ i ∧ i < s + k ∧ c i = 2
  | s, 0, h => by
    rw [pendingIn_zero] at h
    exact absurd h (by decide)
  | s, k + 1, h => by
    have hor : (c s == 2 || pendingIn c (s + 1) k) = true := h
    cases hb : (c s == 2) with
    | true => exact ⟨s, Nat.le_refl s, by omega, eq_of_beq hb⟩
    | false =>
      rw [hb, false_or_bool] at hor
      obtain ⟨i, a1, a2, a3⟩ := pendingIn_true c (s + 1) k hor
      exact ⟨i, by omega, by omega, a3⟩

/-- A pending chunk in `[s, s + k)` makes `pendingIn … = true`. -/
theorem pendingIn_of_pending (c : Nat → Nat) (s k i : Nat) (h1 : s ≤ i) (h2 : i < s + k)
    (h3 : c i = 2) : pendingIn c s k = true := by
  cases hp : pendingIn c s k with
  | true => rfl
  | false => exact absurd h3 (pendingIn_false c s k hp i h1 h2)

/-- A gated window answers `none` exactly when it holds a pending chunk. -/
theorem gate_pendingIn_none_iff (c : Nat → Nat) (s k e : Nat) :
    gate (pendingIn c s k) e = none ↔ ∃ i, s ≤ i ∧ i < s + k ∧ c i = 2 := by
  constructor
  · intro h
    exact pendingIn_true c s k ((gate_none_iff _ _).1 h)
  · intro h
    obtain ⟨i, a1, a2, a3⟩ := h
    exact (gate_none_iff _ _).2 (pendingIn_of_pending c s k i a1 a2 a3)

/-- A gate answers `none` or its own end. -/
theorem gate_eq_none_or_some (p : Bool) (e : Nat) : gate p e = none ∨ gate p e = some e := by
  cases p with
  | true => exact Or.inl rfl
  | false => exact Or.inr rfl

/-- The two facts above for an answer `a` gated by the window `[s, e)`. -/
theorem window_gate_facts (c : Nat → Nat) (a : Option Nat) (s k e : Nat) (hk : s + k = e)
    (ha : a = gate (pendingIn c s k) e) :
    (a = none ↔ ∃ i, s ≤ i ∧ i < e ∧ c i = 2) ∧ (a = none ∨ a = some e) := by
  rw [ha, ← hk]
  exact ⟨gate_pendingIn_none_iff c s k (s + k), gate_eq_none_or_some _ _⟩

/-- **`none` exactly when the chosen window holds a pending chunk**: the
answer is `gate` of one non-miss window `[s, e)` (the one `OffloadAnswer`
names: the required one, the rightmost `w`-sized one, or a run from chunk 0),
`none` if and only if a chunk of it is pending, and `some e` otherwise. -/
theorem offloadLookup_none_iff (c : Nat → Nat) (n w : Nat) (initial : Option Nat) :
    ∃ s e, s ≤ e ∧ e ≤ n ∧ NonMiss c s e ∧
      (e - s = requiredWindow w initial ∨ e - s = w ∨ s = 0) ∧
      (offloadLookup c n w initial = none ↔ ∃ i, s ≤ i ∧ i < e ∧ c i = 2) ∧
      (offloadLookup c n w initial = none ∨ offloadLookup c n w initial = some e) := by
  have h := offloadLookup_answer c n w initial
  unfold OffloadAnswer at h
  rcases h with ⟨h1, h2, h3, ha⟩ | ⟨h1, h2, ha⟩ | ⟨m, hm1, hm2, hm3, hm4, ⟨e, he1, he2, he3, he4, ha⟩ | ⟨hw, hnw, p, hp1, hp2, hp3, ha⟩⟩
  · exact ⟨n - requiredWindow w initial, n, Nat.sub_le n _, Nat.le_refl n, h3,
      Or.inl (by omega), window_gate_facts c _ _ _ n (by omega) ha⟩
  · exact ⟨0, n, Nat.zero_le n, Nat.le_refl n, h2, Or.inr (Or.inr rfl),
      window_gate_facts c _ 0 n n (Nat.zero_add n) ha⟩
  · exact ⟨e - w, e, Nat.sub_le e w, by omega, he3, Or.inr (Or.inl (by omega)),
      window_gate_facts c _ (e - w) w e (by omega) ha⟩
  · exact ⟨0, p, Nat.zero_le p, by omega, hp2, Or.inr (Or.inr rfl),
      window_gate_facts c _ 0 p p (Nat.zero_add p) ha⟩

end PrefixCache
