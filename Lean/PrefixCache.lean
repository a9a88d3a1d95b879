import PrefixCache.Spec.Window
import PrefixCache.Spec.Stride
import PrefixCache.Spec.Legacy
import PrefixCache.Spec.Answer
import PrefixCache.Spec.Joint
import PrefixCache.Spec.Reachable
import PrefixCache.Spec.Full
import PrefixCache.Spec.Offload
import PrefixCache.Spec.Memo
import PrefixCache.Spec.Params
import PrefixCache.Thm.Arith
import PrefixCache.Thm.Scan
import PrefixCache.Thm.Stride
import PrefixCache.Thm.Fallback
import PrefixCache.Thm.Legacy
import PrefixCache.Thm.FindHit
import PrefixCache.Thm.Joint
import PrefixCache.Thm.Reachable
import PrefixCache.Thm.Full
import PrefixCache.Thm.Offload
import PrefixCache.Thm.Memo
import PrefixCache.Thm.Params
import PrefixCache.Export

/-!
# PrefixCache

Lean 4 model and proofs of the sliding-window prefix-cache lookup
(`swa_prefix_cache/pyspec/` is the executable reference; `swa_prefix_cache/core/proved/` the verified C).

* `Spec/`: the definitions (windows and alignment, the stride search, the
  prefix fallback, `findHit`, vLLM's legacy scan, the declarative answer).
* `Thm/`: the theorems. The headline ones are
  `strideSearch_sound`, `strideSearch_optimal`,
  `strideSearch_boundary_safety`, `strideSearch_total`,
  `strideSearch_probe_bound`, `prefixFallback_correct`, `findHit_spec`,
  `legacyScan_spec`, `findHit_eq_legacyScan`, `findHit_need_zero`,
  `legacyScan_need_zero` and `findHit_bounds`; for the multi-group lookup
  (`Spec/Joint.lean`) `jointLoop_fuel`, `jointLookup_total`,
  `jointLookup_rounds_le_max`, `jointLookup_rounds_le`,
  `jointLookup_trace_nonincreasing`, `jointLookup_accepted`,
  `jointLookup_ge_accepted`, `jointLookup_maximal`; for the store mask
  (`Spec/Reachable.lean`) `reachableMask_keeps_tails`,
  `reachableMask_complete`, `reachableMask_dropped_unread`,
  `reachableMask_only_tails`; for vLLM's full-attention lookup
  (`Spec/Full.lean`) `fullHit_prefix_cached`, `fullHit_prefix_maximal`,
  `fullHit_tail_highest`, `fullHit_tail_none`, `fullHit_aligned`,
  `fullHit_trim`, `fullHit_blocks_exist`, `legacyFullScan_eq_fullHit`;
  for vLLM's KV-offload sliding-window lookup (`Spec/Offload.lean`)
  `scanTri_bounds`, `scanTri_nonMiss`, `scanTri_miss`, `scanTri_noPending`,
  `scanTriProbes_le`, `strideLoop2_fuel`, `offloadLookup_sound`,
  `offloadLookup_answer` (optimality: the rightmost window),
  `offloadAnswer_unique`, `legacyOffloadScan_eq_offloadLookup`,
  `offloadStrideSearch_eq_legacyOffloadScan` (the two statements
  `OffloadLegacyEqLookup` / `OffloadStrideEqLegacy`, proved by
  `offloadLegacyEqLookup_holds` / `offloadStrideEqLegacy_holds`),
  `offloadLookup_none_iff`; for vLLM's lookup parameters
  (`Spec/Params.lean`) `cdivNat_ceiling`, `contiguousBlocksForHit_eagle`,
  `searchNeed_pos`, `alignmentPeriod_coarse`.
* `Export`: C entry points over a byte mask, and scalar-only ones over a
  64-bit mask (for ctypes, `tests/test_lean_ffi.py`).

Core Lean 4 only (no Mathlib, no Std/Batteries).
-/
