import PrefixCache.Spec.Window
import PrefixCache.Spec.Stride
import PrefixCache.Spec.Legacy
import PrefixCache.Spec.Answer
import PrefixCache.Thm.Arith
import PrefixCache.Thm.Scan
import PrefixCache.Thm.Stride
import PrefixCache.Thm.Fallback
import PrefixCache.Thm.Legacy
import PrefixCache.Thm.FindHit
import PrefixCache.Export

/-!
# PrefixCache

Lean 4 model and proofs of the sliding-window prefix-cache lookup
(`pyspec/` is the executable reference; `extracted_c/` the verified C).

* `Spec/`: the definitions (windows and alignment, the stride search, the
  prefix fallback, `findHit`, vLLM's legacy scan, the declarative answer).
* `Thm/`: the theorems. The headline ones are
  `strideSearch_sound`, `strideSearch_optimal`,
  `strideSearch_boundary_safety`, `strideSearch_total`,
  `strideSearch_probe_bound`, `prefixFallback_correct`, `findHit_spec`,
  `legacyScan_spec`, `findHit_eq_legacyScan`, `findHit_need_zero`,
  `legacyScan_need_zero` and `findHit_bounds`.
* `Export`: C entry points over a byte mask.

Core Lean 4 only (no Mathlib, no Std/Batteries).
-/
