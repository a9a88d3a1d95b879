import PrefixCache.Spec.Stride

/-!
# The declarative answer

What both `findHit` and `legacyScan` compute, stated without any loop:
the rightmost valid aligned window if there is one (hit length `e - eg`,
first real block `e - need`), else the prefix fallback formula applied to
the maximal cached prefix (first real block `0`). Same as the C contract
`swa_hit` in `swa_prefix_cache/core/proved/prefix_cache.h`.
-/

namespace PrefixCache

/-- `h` is the SWA cache hit for this cache and these parameters
(`need` is the effective need, at least 1). -/
def SwaHit (cached : Nat → Bool) (n need period eg : Nat) (h : HitResult) : Prop :=
  (∃ e, IsRightmost cached n need period eg e ∧ h.length = e - eg ∧ h.firstReal = e - need) ∨
  (NoValidWindow cached n need period eg ∧ h.firstReal = 0 ∧
    ∀ p, MaxCachedPrefix cached (prefixLimit n need) p → h.length = fallbackLength period eg p)

end PrefixCache
