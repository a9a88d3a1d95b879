import PrefixCache.Spec.Stride

/-!
# vLLM's O(N) right-to-left scan

Transcribed from `swa_prefix_cache/pyspec/legacy.py` (itself a line-for-line copy of vLLM
0.33.0's `SlidingWindowManager.find_longest_cache_hit`), with two
abstractions:

* the alignment gate `(post_pop_blocks * block_size) % alignment_tokens != 0`
  is `¬ AlignedEnd period eg (i + 1)`, where `period` is
  `alignment_tokens / gcd(alignment_tokens, block_size)`
  (pyspec `alignment_period`; `tests/test_spec.py` checks the equivalence,
  and `tests/test_theorems.py` checks this transcription against
  `swa_prefix_cache.pyspec.legacy_scan` on vLLM arguments). When `block_size ==
  alignment_tokens` vLLM skips the gate; then `period = 1` and
  `AlignedEnd 1 eg (i + 1)` always holds, so skipping it changes nothing;
* the list `computed` is represented by its length and the index of its
  first real block: vLLM's list is `firstReal` null blocks followed by real
  ones (pyspec asserts this), and every list operation in the loop and after
  it (`del computed[k:]`, `pop`) only shortens it from the end.

`need` is vLLM's `sliding_window_contiguous_blocks` (any value `≤ 0` behaves
like `0` in vLLM's comparisons, and `legacyScan_need_zero` shows `0`
behaves like `1`).
-/

namespace PrefixCache

/-- The loop `for i in range(n - 1, -1, -1)`: `legacyLoop … k run` processes
blocks `k - 1, k - 2, …, 0` with run counter `run`. Returns
`(some i, run)` when a run of `need` cached blocks was completed at block `i`
(`match_found`, then `del computed[i + run:]`), else `(none, run)` with the
final run counter. -/
def legacyLoop (cached : Nat → Bool) (need period eg : Nat) : Nat → Nat → Option Nat × Nat
  | 0, run => (none, run)
  | i + 1, run =>
    if cached i = true then
      if run = 0 ∧ ¬ AlignedEnd period eg (i + 1) then
        legacyLoop cached need period eg i run
      else if need ≤ run + 1 then (some i, run + 1)
      else legacyLoop cached need period eg i (run + 1)
    else legacyLoop cached need period eg i 0

/-- What vLLM does after the loop, on the (length, first real) abstraction:
on a match the list is `[null] * i + blocks[i, i + run)`; otherwise it is
cut to the final run and re-aligned. Then the EAGLE pop and re-align. The
first real block is `min i length` (pyspec: the first non-null entry, or
`len(computed)` when there is none). -/
def legacyOut (period eg : Nat) : Option Nat × Nat → HitResult
  | (some i, run) => ⟨eaglePop period eg (i + run), minN i (eaglePop period eg (i + run))⟩
  | (none, run) => ⟨eaglePop period eg (realign run period), 0⟩

/-- vLLM's scan (pyspec `legacy_scan`) on `(n, need, period, eagle)`. -/
def legacyScan (cached : Nat → Bool) (n need period eg : Nat) : HitResult :=
  legacyOut period eg (legacyLoop cached need period eg n 0)

end PrefixCache
