import PrefixCache.Spec.Stride
import PrefixCache.Spec.Legacy
import PrefixCache.Spec.Answer
import PrefixCache.Thm.Arith
import PrefixCache.Thm.Stride
import PrefixCache.Thm.Fallback
import PrefixCache.Thm.Legacy

/-!
# `findHit` equals vLLM's scan

Both compute the declarative answer `SwaHit`, and `SwaHit` determines the
result, so they are equal on every input.
-/

namespace PrefixCache

theorem hitOf_some (cached : Nat → Bool) (n need period eg e : Nat) :
    hitOf cached n need period eg (some e) = ⟨e - eg, e - need⟩ := rfl

theorem hitOf_none (cached : Nat → Bool) (n need period eg : Nat) :
    hitOf cached n need period eg none = ⟨prefixFallback cached n need period eg, 0⟩ := rfl

theorem hitResult_ext : ∀ (a b : HitResult),
    a.length = b.length → a.firstReal = b.firstReal → a = b
  | ⟨l1, f1⟩, ⟨l2, f2⟩, h1, h2 => by
    have e1 : l1 = l2 := h1
    have e2 : f1 = f2 := h2
    subst e1
    subst e2
    rfl

theorem swaHit_elim {cached : Nat → Bool} {n need period eg : Nat} {h : HitResult}
    (hs : SwaHit cached n need period eg h) :
    (∃ e, IsRightmost cached n need period eg e ∧ h.length = e - eg ∧ h.firstReal = e - need) ∨
    (NoValidWindow cached n need period eg ∧ h.firstReal = 0 ∧
      ∀ p, MaxCachedPrefix cached (prefixLimit n need) p → h.length = fallbackLength period eg p) :=
  hs

/-- The declarative answer determines the hit: two results that both satisfy
`SwaHit` are equal. -/
theorem swaHit_unique {cached : Nat → Bool} {n need period eg : Nat} {a b : HitResult}
    (ha : SwaHit cached n need period eg a) (hb : SwaHit cached n need period eg b) : a = b := by
  rcases swaHit_elim ha with ⟨e1, hR1, hl1, hf1⟩ | ⟨hN1, hf1, hl1⟩
  · rcases swaHit_elim hb with ⟨e2, hR2, hl2, hf2⟩ | ⟨hN2, _, _⟩
    · have he := isRightmost_unique hR1 hR2
      have hl : a.length = b.length := by omega
      have hf : a.firstReal = b.firstReal := by omega
      exact hitResult_ext a b hl hf
    · obtain ⟨hA, hV, _⟩ := isRightmost_elim hR1
      exact False.elim (hN2 e1 hA hV)
  · rcases swaHit_elim hb with ⟨e2, hR2, _, _⟩ | ⟨_, hf2, hl2⟩
    · obtain ⟨hA, hV, _⟩ := isRightmost_elim hR2
      exact False.elim (hN1 e2 hA hV)
    · have hmax := prefixRun_max cached n need
      have hla := hl1 (prefixRun cached n need) hmax
      have hlb := hl2 (prefixRun cached n need) hmax
      have hl : a.length = b.length := by omega
      have hf : a.firstReal = b.firstReal := by omega
      exact hitResult_ext a b hl hf

/-- `findHitCore` (effective `need ≥ 1`) computes the declarative answer. -/
theorem findHitCore_spec (cached : Nat → Bool) (n need period eg : Nat)
    (hneed : 1 ≤ need) (hp : 1 ≤ period) :
    SwaHit cached n need period eg (findHitCore cached n need period eg) := by
  obtain ⟨hs, hn⟩ := strideSearch_correct cached n need period eg hneed hp
  have key : ∀ x, strideSearch cached n need period eg = x →
      SwaHit cached n need period eg (hitOf cached n need period eg x) := by
    intro x hx
    cases x with
    | none =>
      rw [hitOf_none]
      have hlen : ∀ p, MaxCachedPrefix cached (prefixLimit n need) p →
          prefixFallback cached n need period eg = fallbackLength period eg p := by
        intro p hp'
        have hpe := maxCachedPrefix_unique (prefixRun_max cached n need) hp'
        subst hpe
        rfl
      exact Or.inr ⟨hn hx, rfl, hlen⟩
    | some e =>
      rw [hitOf_some]
      exact Or.inl ⟨e, hs e hx, rfl, rfl⟩
  exact key (strideSearch cached n need period eg) rfl

/-- **`findHit` is specified.** For every `need` (clamped to at least 1),
`findHit` returns the rightmost valid aligned window (length `e - eg`,
first real block `e - need`) if one exists, and otherwise the prefix
fallback formula on the maximal cached prefix with first real block 0. -/
theorem findHit_spec (cached : Nat → Bool) (n need period eg : Nat) (hp : 1 ≤ period) :
    SwaHit cached n (effNeed need) period eg (findHit cached n need period eg) :=
  findHitCore_spec cached n (effNeed need) period eg (effNeed_pos need) hp

/-- **Equivalence with vLLM.** On every cache, every block count and every
`need`, `period ≥ 1` and EAGLE flag, the stride search with fallback returns
exactly what vLLM's O(N) scan returns: the same hit length and the same
first real block. -/
theorem findHit_eq_legacyScan (cached : Nat → Bool) (n need period eg : Nat)
    (hp : 1 ≤ period) (heg : eg ≤ 1) :
    findHit cached n need period eg = legacyScan cached n need period eg :=
  swaHit_unique (findHit_spec cached n need period eg hp)
    (legacyScan_spec cached n need period eg hp heg)

/-- **The stride search alone agrees with vLLM's scan.** Whenever the
stride search (on the clamped `need`) finds a window ending at `e`, vLLM's
right-to-left scan returns exactly the hit it names (length `e - eg`, first
real block `e - need`); when it finds none, vLLM's scan returns the prefix
fallback from block 0. This is `findHit_eq_legacyScan` read through the
definition of `findHit`. -/
theorem strideSearch_eq_legacyScan (cached : Nat → Bool) (n need period eg : Nat)
    (hp : 1 ≤ period) (heg : eg ≤ 1) :
    legacyScan cached n need period eg =
      hitOf cached n (effNeed need) period eg
        (strideSearch cached n (effNeed need) period eg) :=
  (findHit_eq_legacyScan cached n need period eg hp heg).symm

/-- **`need = 0` is handled.** `findHit` clamps `need` to at least 1, so
`need = 0` gives exactly the answer for `need = 1` (vLLM's loop behaves the
same way: `legacyScan_need_zero`). -/
theorem findHit_need_zero (cached : Nat → Bool) (n period eg : Nat) :
    findHit cached n 0 period eg = findHit cached n 1 period eg := by
  show findHitCore cached n (effNeed 0) period eg = findHitCore cached n (effNeed 1) period eg
  rw [effNeed_zero, effNeed_one]

/-- **Output shape.** The first real block is at most the hit length, the
hit fits in the request, and the hit length passes vLLM's re-alignment
(a multiple of `period`). -/
theorem findHit_bounds (cached : Nat → Bool) (n need period eg : Nat)
    (hp : 1 ≤ period) (heg : eg ≤ 1) :
    (findHit cached n need period eg).firstReal ≤ (findHit cached n need period eg).length ∧
    (findHit cached n need period eg).length ≤ n ∧
    (findHit cached n need period eg).length % period = 0 := by
  have hne := effNeed_pos need
  rcases swaHit_elim (findHit_spec cached n need period eg hp) with
    ⟨e, hR, hl, hf⟩ | ⟨_, hf, hl⟩
  · obtain ⟨hA, hV, _⟩ := isRightmost_elim hR
    obtain ⟨h1, h2, _⟩ := validWindow_end hV
    have hmod := alignedEnd_mod hA
    have hge := alignedEnd_le hA
    refine ⟨by omega, by omega, ?_⟩
    rw [hl]
    exact hmod
  · have hmax := prefixRun_max cached n (effNeed need)
    have hla := hl (prefixRun cached n (effNeed need)) hmax
    obtain ⟨hm1, _, _⟩ := maxCachedPrefix_elim hmax
    have hle := fallbackLength_le period eg (prefixRun cached n (effNeed need))
    have hlim := prefixLimit_spec n (effNeed need)
    have hp0 : 0 < period := by omega
    have hmod := fallbackLength_mod period eg (prefixRun cached n (effNeed need)) hp0
    refine ⟨by omega, by omega, ?_⟩
    rw [hla]
    exact hmod

end PrefixCache
