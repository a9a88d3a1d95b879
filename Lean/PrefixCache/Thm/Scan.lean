import PrefixCache.Spec.Stride
import PrefixCache.Thm.Arith

/-!
# The inner scan

`scanRun cached j k` stops at the first miss in `[j, j + k)` (or at `j + k`):
everything it walked over is cached, and it only reads inside `[j, j + k)`.
-/

namespace PrefixCache

theorem scanRun_zero (c : Nat → Bool) (j : Nat) : scanRun c j 0 = j := rfl

theorem scanRun_succ (c : Nat → Bool) (j k : Nat) :
    scanRun c j (k + 1) = if c j = true then scanRun c (j + 1) k else j := rfl

theorem scanProbes_zero (c : Nat → Bool) (j : Nat) : scanProbes c j 0 = 0 := rfl

theorem scanProbes_succ (c : Nat → Bool) (j k : Nat) :
    scanProbes c j (k + 1) = if c j = true then scanProbes c (j + 1) k + 1 else 1 := rfl

/-- The scan ends inside `[j, j + k]`. -/
theorem scanRun_bounds (c : Nat → Bool) :
    ∀ (j k : Nat), j ≤ scanRun c j k ∧ scanRun c j k ≤ j + k
  | j, 0 => by
    have e := scanRun_zero c j
    omega
  | j, k + 1 => by
    have e := scanRun_succ c j k
    have ih := scanRun_bounds c (j + 1) k
    by_cases h : c j = true
    · rw [if_pos h] at e
      omega
    · rw [if_neg h] at e
      omega

/-- Every block the scan walked over is cached. -/
theorem scanRun_cached (c : Nat → Bool) :
    ∀ (j k i : Nat), j ≤ i → i < scanRun c j k → c i = true
  | j, 0, i, h1, h2 => by
    have e := scanRun_zero c j
    exfalso
    omega
  | j, k + 1, i, h1, h2 => by
    have e := scanRun_succ c j k
    by_cases h : c j = true
    · rw [if_pos h] at e
      by_cases hij : i = j
      · rw [hij]
        exact h
      · have h3 : j + 1 ≤ i := by omega
        have h4 : i < scanRun c (j + 1) k := by omega
        exact scanRun_cached c (j + 1) k i h3 h4
    · rw [if_neg h] at e
      exfalso
      omega

theorem scanRun_allCached (c : Nat → Bool) (j k : Nat) : AllCached c j (scanRun c j k) := by
  intro i h1 h2
  exact scanRun_cached c j k i h1 h2

/-- If the scan stops before `j + k`, it stopped on a miss. -/
theorem scanRun_miss (c : Nat → Bool) :
    ∀ (j k : Nat), scanRun c j k < j + k → ¬ c (scanRun c j k) = true
  | j, 0, h => by
    have e := scanRun_zero c j
    exfalso
    omega
  | j, k + 1, h => by
    have e := scanRun_succ c j k
    by_cases hc : c j = true
    · rw [if_pos hc] at e
      have h' : scanRun c (j + 1) k < j + 1 + k := by omega
      rw [e]
      exact scanRun_miss c (j + 1) k h'
    · rw [if_neg hc] at e
      rw [e]
      exact hc

/-- The scan makes at most `k` reads, and if it stops at `r` it made
`r - j + 1` reads or fewer (the blocks walked over and the miss). -/
theorem scanProbes_bound (c : Nat → Bool) :
    ∀ (j k : Nat), scanProbes c j k + j ≤ scanRun c j k + 1 ∧ scanProbes c j k ≤ k
  | j, 0 => by
    have e1 := scanRun_zero c j
    have e2 := scanProbes_zero c j
    omega
  | j, k + 1 => by
    have e1 := scanRun_succ c j k
    have e2 := scanProbes_succ c j k
    have ih := scanProbes_bound c (j + 1) k
    by_cases h : c j = true
    · rw [if_pos h] at e1
      rw [if_pos h] at e2
      omega
    · rw [if_neg h] at e1
      rw [if_neg h] at e2
      omega

/-- The scan only reads blocks in `[j, j + k)`. -/
theorem scanReads_range (c : Nat → Bool) :
    ∀ (j k i : Nat), scanReads c j k i → j ≤ i ∧ i < j + k
  | _, 0, _, h => False.elim h
  | j, k + 1, i, h => by
    have h' : i = j ∨ (c j = true ∧ scanReads c (j + 1) k i) := h
    rcases h' with h1 | ⟨_, h2⟩
    · omega
    · have ih := scanReads_range c (j + 1) k i h2
      omega

end PrefixCache
