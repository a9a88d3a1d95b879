import PrefixCache.Spec.Stride

/-!
# vLLM's lookup parameters

Transcribed from `swa_prefix_cache/pyspec/params.py` (`cdiv`, `contiguous_blocks_for_hit`,
`search_need`, `alignment_period`), the Python twin of the proved
`swa_prefix_cache/core/proved/params.c` (same names). The window is an `Int`: vLLM accepts a
window of 0 tokens, for which `sliding_window - 1` is negative.
`tests/test_params.py::test_params_transcription_matches_pyspec` checks
these definitions against pyspec's.
-/

namespace PrefixCache

/-- vLLM's `cdiv(a, b) = -(a // -b)` for a block size `b ≥ 1`: the ceiling
of `a / b`. Written with `Nat` division only: `(a + b - 1) / b` for `a > 0`,
`-((-a) / b)` for `a ≤ 0` (floor of `-a / b`, negated). -/
def cdivInt (a : Int) (b : Nat) : Int :=
  if 0 < a then (((a.toNat + b - 1) / b : Nat) : Int) else -(((-a).toNat / b : Nat) : Int)

/-- `SlidingWindowManager._contiguous_blocks_for_hit`: the window of the last
token reaches `slidingWindow - 1` tokens back; EAGLE needs one block more.
May be 0 or negative for a window of 0 or 1 token. -/
def contiguousBlocksForHit (slidingWindow : Int) (blockSize : Nat) (eagle : Bool) : Int :=
  cdivInt (slidingWindow - 1) blockSize + (if eagle then 1 else 0)

/-- The run length the search uses: `contiguousBlocksForHit`, at least 1. -/
def searchNeed (slidingWindow : Int) (blockSize : Nat) (eagle : Bool) : Nat :=
  effNeed (contiguousBlocksForHit slidingWindow blockSize eagle).toNat

/-- The alignment gate in blocks: vLLM accepts `k` blocks when
`k * blockSize` is a multiple of `alignmentTokens`, i.e. when `k` is a
multiple of `alignmentTokens / gcd(alignmentTokens, blockSize)`. -/
def alignmentPeriod (blockSize alignmentTokens : Nat) : Nat :=
  alignmentTokens / Nat.gcd alignmentTokens blockSize

end PrefixCache
