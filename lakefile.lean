import Lake
open Lake DSL

package prefix_cache

-- The model, the proofs and the C entry points. `lake build` checks every
-- proof and links `.lake/build/lib/libprefix_cache_lean.so` (the `@[export]`
-- symbols of `Lean/PrefixCache/Export.lean`).
@[default_target]
lean_lib PrefixCache where
  srcDir := "Lean"
  libName := "prefix_cache_lean"
  defaultFacets := #[LeanLib.sharedFacet]
