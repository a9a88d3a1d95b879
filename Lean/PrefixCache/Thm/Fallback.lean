import PrefixCache.Spec.Stride
import PrefixCache.Thm.Arith
import PrefixCache.Thm.Scan

/-!
# The prefix fallback

`prefixFallback` keeps the cached run from block 0 (capped at `need - 1`
blocks), cuts it back to the last aligned end, re-aligns, and applies the
EAGLE pop.
-/

namespace PrefixCache

theorem effNeed_pos (need : Nat) : 1 ≤ effNeed need := by
  show 1 ≤ (if need = 0 then 1 else need)
  by_cases h : need = 0
  · rw [if_pos h] <;> exact Nat.le_refl 1
  · rw [if_neg h] <;> omega

theorem effNeed_of_ne {need : Nat} (h : ¬ need = 0) : effNeed need = need := by
  show (if need = 0 then 1 else need) = need
  rw [if_neg h]

theorem effNeed_zero : effNeed 0 = 1 := by
  show (if (0 : Nat) = 0 then 1 else 0) = 1
  exact if_pos rfl

theorem effNeed_one : effNeed 1 = 1 := effNeed_of_ne (by omega)

theorem lastAlignedClamp_le (period eg p : Nat) : lastAlignedClamp period eg p ≤ p := by
  have h1 := alignDown_le p period eg
  show (if p < eg then 0 else alignDown p period eg) ≤ p
  by_cases h : p < eg
  · rw [if_pos h] <;> exact Nat.zero_le p
  · rw [if_neg h] <;> exact h1

theorem eaglePop_le (period eg l : Nat) : eaglePop period eg l ≤ l := by
  have h1 := realign_le (l - 1) period
  show (if 0 < eg ∧ 0 < l then realign (l - 1) period else l) ≤ l
  by_cases h : 0 < eg ∧ 0 < l
  · rw [if_pos h] <;> omega
  · rw [if_neg h] <;> exact Nat.le_refl l

theorem eaglePop_mod {period eg l : Nat} (hp : 0 < period) (hl : l % period = 0) :
    eaglePop period eg l % period = 0 := by
  have h1 := realign_mod (l - 1) period hp
  show (if 0 < eg ∧ 0 < l then realign (l - 1) period else l) % period = 0
  by_cases h : 0 < eg ∧ 0 < l
  · rw [if_pos h] <;> exact h1
  · rw [if_neg h] <;> exact hl

/-- On an aligned window end `e ≥ 1`, the EAGLE pop gives `e - eg`
(the re-align after the pop changes nothing). -/
theorem eaglePop_aligned {period eg e : Nat} (heg : eg ≤ 1) (ha : AlignedEnd period eg e)
    (he : 1 ≤ e) : eaglePop period eg e = e - eg := by
  have hm := alignedEnd_mod ha
  show (if 0 < eg ∧ 0 < e then realign (e - 1) period else e) = e - eg
  by_cases h : 0 < eg ∧ 0 < e
  · rw [if_pos h]
    have heg1 : eg = 1 := by omega
    have hm1 : (e - 1) % period = 0 := by
      rw [heg1] at hm
      exact hm
    rw [realign_of_mod (e - 1) period hm1] <;> omega
  · rw [if_neg h] <;> omega

theorem fallbackLength_le (period eg p : Nat) : fallbackLength period eg p ≤ p := by
  have h1 := eaglePop_le period eg (realign (lastAlignedClamp period eg p) period)
  have h2 := realign_le (lastAlignedClamp period eg p) period
  have h3 := lastAlignedClamp_le period eg p
  show eaglePop period eg (realign (lastAlignedClamp period eg p) period) ≤ p
  omega

theorem fallbackLength_mod (period eg p : Nat) (hp : 0 < period) :
    fallbackLength period eg p % period = 0 :=
  eaglePop_mod hp (realign_mod (lastAlignedClamp period eg p) period hp)

theorem prefixLimit_spec (n need : Nat) :
    prefixLimit n need ≤ need - 1 ∧ prefixLimit n need ≤ n ∧
      (prefixLimit n need = need - 1 ∨ prefixLimit n need = n) :=
  minN_spec (need - 1) n

/-- The scan from block 0 finds the maximal cached prefix. -/
theorem prefixRun_max (cached : Nat → Bool) (n need : Nat) :
    MaxCachedPrefix cached (prefixLimit n need) (prefixRun cached n need) := by
  have hb := scanRun_bounds cached 0 (prefixLimit n need)
  have hc := scanRun_allCached cached 0 (prefixLimit n need)
  have hm := scanRun_miss cached 0 (prefixLimit n need)
  have h1 : scanRun cached 0 (prefixLimit n need) ≤ prefixLimit n need := by omega
  have h3 : scanRun cached 0 (prefixLimit n need) < prefixLimit n need →
      ¬ cached (scanRun cached 0 (prefixLimit n need)) = true := by
    intro h
    have h' : scanRun cached 0 (prefixLimit n need) < 0 + prefixLimit n need := by omega
    exact hm h'
  exact maxCachedPrefix_intro h1 hc h3

/-- **Prefix fallback.** The fallback length `r` is a cached prefix
(`[0, r)` all cached), is at most `need - 1` and at most `n`, is a multiple
of `period` (it passed the re-alignment after the EAGLE drop), and equals
the formula (clamp to the last aligned end, re-align, EAGLE pop and
re-align) applied to the maximal cached prefix, whichever way that prefix
is found. -/
theorem prefixFallback_correct (cached : Nat → Bool) (n need period eg : Nat)
    (hp : 1 ≤ period) :
    AllCached cached 0 (prefixFallback cached n need period eg) ∧
    prefixFallback cached n need period eg ≤ need - 1 ∧
    prefixFallback cached n need period eg ≤ n ∧
    prefixFallback cached n need period eg % period = 0 ∧
    MaxCachedPrefix cached (prefixLimit n need) (prefixRun cached n need) ∧
    (∀ p, MaxCachedPrefix cached (prefixLimit n need) p →
      prefixFallback cached n need period eg = fallbackLength period eg p) := by
  have hmax := prefixRun_max cached n need
  obtain ⟨hm1, hm2, _⟩ := maxCachedPrefix_elim hmax
  have hle : prefixFallback cached n need period eg ≤ prefixRun cached n need :=
    fallbackLength_le period eg (prefixRun cached n need)
  have hlim := prefixLimit_spec n need
  have hp0 : 0 < period := by omega
  have hmod : prefixFallback cached n need period eg % period = 0 :=
    fallbackLength_mod period eg (prefixRun cached n need) hp0
  have hall : AllCached cached 0 (prefixFallback cached n need period eg) := by
    intro i h1 h2
    have h3 : i < prefixRun cached n need := by omega
    exact hm2 i h1 h3
  have hformula : ∀ p, MaxCachedPrefix cached (prefixLimit n need) p →
      prefixFallback cached n need period eg = fallbackLength period eg p := by
    intro p hp'
    have hpe := maxCachedPrefix_unique hmax hp'
    subst hpe
    rfl
  have hneed1 : prefixFallback cached n need period eg ≤ need - 1 := by omega
  have hn : prefixFallback cached n need period eg ≤ n := by omega
  exact ⟨hall, hneed1, hn, hmod, hmax, hformula⟩

end PrefixCache
