import PrefixCache.Spec.Params

/-!
# vLLM's lookup parameters: small facts

The same facts `swa_prefix_cache/core/proved/params.h` states as contracts (proved there by
Frama-C/WP): the positive branch of `cdivInt` is the ceiling
(`cdivNat_ceiling`, contract `ceiling`), EAGLE adds exactly one block
(`contiguousBlocksForHit_eagle`, contract `exact`), the search's run length
is at least 1 (`searchNeed_pos`, contract `clamped`), and with an alignment
that is a multiple of the block size the period is their quotient
(`alignmentPeriod_coarse`, behavior `coarse`). Each is also an executable
property in `tests/test_params.py`.
-/

namespace PrefixCache

/-- `(n + bs - 1) / bs` blocks of `bs` tokens cover `n` tokens, and one block
fewer would not: it is the ceiling of `n / bs`. -/
theorem cdivNat_ceiling (n bs : Nat) (hb : 0 < bs) :
    n ≤ bs * ((n + bs - 1) / bs) ∧ bs * ((n + bs - 1) / bs) < n + bs := by
  have h1 := Nat.div_add_mod (n + bs - 1) bs
  have h2 := Nat.mod_lt (n + bs - 1) hb
  omega

/-- With EAGLE the run is exactly one block longer (vLLM's `blocks += 1`). -/
theorem contiguousBlocksForHit_eagle (w : Int) (bs : Nat) :
    contiguousBlocksForHit w bs true = contiguousBlocksForHit w bs false + 1 := by
  show cdivInt (w - 1) bs + 1 = cdivInt (w - 1) bs + 0 + 1
  omega

/-- The search's run length is at least one block, whatever the window. -/
theorem searchNeed_pos (w : Int) (bs : Nat) (eagle : Bool) : 1 ≤ searchNeed w bs eagle := by
  unfold searchNeed effNeed
  split <;> omega

/-- An alignment that is a multiple of the block size (vLLM's hybrid
models): the period is `alignmentTokens / blockSize`. -/
theorem alignmentPeriod_coarse (bs align : Nat) (h : align % bs = 0) :
    alignmentPeriod bs align = align / bs := by
  unfold alignmentPeriod
  rw [Nat.gcd_eq_right (Nat.dvd_of_mod_eq_zero h)]

end PrefixCache
