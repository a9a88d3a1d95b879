import PrefixCache.Spec.Joint

/-!
# The store-side mask

Transcribed from `swa_prefix_cache/pyspec/reachable.py` (`tail`, `reachable_mask`): vLLM
0.33.0's `SlidingWindowManager.reachable_block_mask`, which blocks of a
sliding-window group the store keeps.

Simplifications against pyspec (checked by
`tests/test_theorems.py::test_reachable_transcription_matches_pyspec`):

* the mask is returned as a keep predicate `Nat → Bool` (`none`: keep
  everything) instead of a list over `[start_block, end_block)`: entry
  `i - start_block` of pyspec's list is `keep i`. pyspec's loop over
  segment boundaries `first ..= last` only visits the boundaries whose tails
  meet `[start_block, end_block)`; here the segment boundaries `k * per`
  with `1 ≤ k ≤ i + need` are tried for block `i`, which selects the same
  tails for every `i` in that range (a tail holding `i` has
  `k ≤ k * per ≤ i + need`);
* the window is `winBlocks = cdiv(W - 1, block_size)` for `W ≥ 1` tokens,
  so `need = winBlocks + eagle` is pyspec's `contiguous_blocks_for_hit`;
* `alignment_tokens` is a number (pyspec's `None`, "no alignment, keep
  everything", is not modelled), and at least 1.
-/

namespace PrefixCache

/-- Block `i` lies in pyspec's `tail(b, need, eagle)`: the `need` blocks
ending at block `b + eg` (the EAGLE peek), clipped at block 0. -/
def InTail (b need eg i : Nat) : Prop := b + eg - need ≤ i ∧ i < b + eg

/-- `InTail` as a `Bool`. -/
def inTail (b need eg i : Nat) : Bool := decide (b + eg - need ≤ i ∧ i < b + eg)

/-- Some segment boundary `k * per`, `1 ≤ k ≤ K`, has `i` in its tail. -/
def segKeep (per need eg i : Nat) : Nat → Bool
  | 0 => false
  | k + 1 => inTail ((k + 1) * per) need eg i || segKeep per need eg i k

/-- The final partial segment (pyspec: without EAGLE, when
`final_end % per != 0`): the non-EAGLE tail of `final_end`, cut to
`[final_end - final_end % per, final_end)`. -/
def finalKeep (per need finalEnd i : Nat) : Bool :=
  decide (finalEnd % per ≠ 0 ∧ finalEnd - finalEnd % per ≤ i ∧ finalEnd - need ≤ i ∧ i < finalEnd)

/-- Some reachable boundary `p` (tokens) has `i` in the tail of
`p // align * align // bs` blocks. -/
def boundaryKeep (align bs need eg i : Nat) : List Nat → Bool
  | [] => false
  | p :: ps => inTail (p / align * align / bs) need eg i || boundaryKeep align bs need eg i ps

/-- The segment in tokens: `alignment_tokens` when dense (`retention`
`none`), else the retention interval (`some 0`: no segments). -/
def segTokens (align : Nat) : Option Nat → Nat
  | none => align
  | some r => r

/-- The final segment applies when `final_segment_end_block` is given and
EAGLE is off. -/
def finalFlag (eagle : Bool) : Option Nat → Bool
  | some _ => !eagle
  | none => false

/-- The keep predicate: segment tails, the final segment, reachable
boundaries. -/
def keepBlock (hasSeg : Bool) (per need eg : Nat) (hasFinal : Bool) (finalEnd : Nat)
    (useBoundaries : Bool) (align bs : Nat) (boundaries : List Nat) (i : Nat) : Bool :=
  (hasSeg && segKeep per need eg i (i + need)) ||
    ((hasFinal && finalKeep per need finalEnd i) ||
      (useBoundaries && boundaryKeep align bs need eg i boundaries))

/-- pyspec `reachable_mask` (`none` keeps every block): `none` when the
alignment is not a multiple of the block size, or when with segments a tail
is at least a segment long; with `retention = some 0` only the reachable
boundaries; otherwise the segment tails, the final segment and (with a
retention interval) the reachable boundaries. -/
def reachableMask (align bs winBlocks : Nat) (eagle : Bool) (retention : Option Nat)
    (boundaries : List Nat) (finalEnd : Option Nat) : Option (Nat → Bool) :=
  if align % bs = 0 then
    (if retention = some 0 then
      some (keepBlock false 0 (winBlocks + egOf eagle) (egOf eagle) false 0 true align bs boundaries)
    else if segTokens align retention / bs ≤ winBlocks + egOf eagle then none
    else some (keepBlock true (segTokens align retention / bs) (winBlocks + egOf eagle) (egOf eagle)
      (finalFlag eagle finalEnd) (finalEnd.getD 0) retention.isSome align bs boundaries))
  else none

end PrefixCache
