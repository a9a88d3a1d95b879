import PrefixCache.Spec.Stride
import PrefixCache.Thm.Arith
import PrefixCache.Thm.Scan

/-!
# The stride search is sound, optimal, safe, total and reads each block once

The loop invariant (the same one the C proof uses): before a round with
state `(bound, knownLo)`,

* `bound ≤ n`,
* blocks `[knownLo, bound)` are all cached,
* no valid window has an aligned end in `(bound, n]`.
-/

namespace PrefixCache

theorem strideLoop_succ (cached : Nat → Bool) (need period eg fuel bound knownLo : Nat) :
    strideLoop cached need period eg (fuel + 1) bound knownLo =
      if bound < eg then none
      else if alignDown bound period eg < need then none
      else if missAt cached need period eg bound knownLo < scanLimit period eg bound knownLo then
        strideLoop cached need period eg fuel
          (missAt cached need period eg bound knownLo) (winStart need period eg bound)
      else some (alignDown bound period eg) := rfl

theorem strideProbesLoop_succ (cached : Nat → Bool) (need period eg fuel bound knownLo : Nat) :
    strideProbesLoop cached need period eg (fuel + 1) bound knownLo =
      if bound < eg then 0
      else if alignDown bound period eg < need then 0
      else if missAt cached need period eg bound knownLo < scanLimit period eg bound knownLo then
        scanProbes cached (winStart need period eg bound)
            (scanLimit period eg bound knownLo - winStart need period eg bound) +
          strideProbesLoop cached need period eg fuel
            (missAt cached need period eg bound knownLo) (winStart need period eg bound)
      else
        scanProbes cached (winStart need period eg bound)
          (scanLimit period eg bound knownLo - winStart need period eg bound) := rfl

theorem strideReadsLoop_succ (cached : Nat → Bool) (need period eg fuel bound knownLo i : Nat) :
    strideReadsLoop cached need period eg (fuel + 1) bound knownLo i =
      if bound < eg then False
      else if alignDown bound period eg < need then False
      else if missAt cached need period eg bound knownLo < scanLimit period eg bound knownLo then
        scanReads cached (winStart need period eg bound)
            (scanLimit period eg bound knownLo - winStart need period eg bound) i ∨
          strideReadsLoop cached need period eg fuel
            (missAt cached need period eg bound knownLo) (winStart need period eg bound) i
      else
        scanReads cached (winStart need period eg bound)
          (scanLimit period eg bound knownLo - winStart need period eg bound) i := rfl

/-! ## Facts about one round -/

theorem winStart_eq (need period eg bound : Nat) :
    winStart need period eg bound = alignDown bound period eg - need := rfl

theorem scanLimit_spec (period eg bound knownLo : Nat) :
    scanLimit period eg bound knownLo ≤ alignDown bound period eg ∧
    scanLimit period eg bound knownLo ≤ knownLo ∧
    (scanLimit period eg bound knownLo = alignDown bound period eg ∨
      scanLimit period eg bound knownLo = knownLo) :=
  minN_spec (alignDown bound period eg) knownLo

theorem missAt_spec (cached : Nat → Bool) (need period eg bound knownLo : Nat) :
    winStart need period eg bound ≤ missAt cached need period eg bound knownLo ∧
    missAt cached need period eg bound knownLo ≤
      winStart need period eg bound +
        (scanLimit period eg bound knownLo - winStart need period eg bound) ∧
    AllCached cached (winStart need period eg bound) (missAt cached need period eg bound knownLo) ∧
    (missAt cached need period eg bound knownLo <
        winStart need period eg bound +
          (scanLimit period eg bound knownLo - winStart need period eg bound) →
      ¬ cached (missAt cached need period eg bound knownLo) = true) := by
  have hb := scanRun_bounds cached (winStart need period eg bound)
    (scanLimit period eg bound knownLo - winStart need period eg bound)
  exact ⟨hb.1, hb.2,
    scanRun_allCached cached (winStart need period eg bound)
      (scanLimit period eg bound knownLo - winStart need period eg bound),
    scanRun_miss cached (winStart need period eg bound)
      (scanLimit period eg bound knownLo - winStart need period eg bound)⟩

theorem noValid_of_lt_eg {cached : Nat → Bool} {n need period eg bound : Nat}
    (hI : NoValidAfter cached n need period eg bound) (h : bound < eg) :
    NoValidWindow cached n need period eg := by
  intro e ha hv
  by_cases hbe : bound < e
  · exact hI e hbe ha hv
  · have h1 := alignedEnd_le ha
    omega

/-! ## Correctness of the loop -/

/-- The loop invariant is preserved, and at exit the answer is the rightmost
valid aligned window (`some`) or there is no valid aligned window (`none`). -/
theorem strideLoop_correct (cached : Nat → Bool) (n need period eg : Nat)
    (hneed : 1 ≤ need) (hp : 1 ≤ period) :
    ∀ (fuel bound knownLo : Nat), bound < fuel → bound ≤ n →
      AllCached cached knownLo bound → NoValidAfter cached n need period eg bound →
      (∀ (e : Nat), strideLoop cached need period eg fuel bound knownLo = some e →
          IsRightmost cached n need period eg e) ∧
      (strideLoop cached need period eg fuel bound knownLo = none →
          NoValidWindow cached n need period eg)
  | 0, bound, _, hf, _, _, _ => absurd hf (Nat.not_lt_zero bound)
  | fuel + 1, bound, knownLo, hf, hb, hk, hI => by
    rw [strideLoop_succ]
    by_cases h1 : bound < eg
    · rw [if_pos h1]
      refine ⟨fun e he => ?_, fun _ => ?_⟩
      · cases he
      · exact noValid_of_lt_eg hI h1
    · rw [if_neg h1]
      have heg : eg ≤ bound := by omega
      have hA1 := alignDown_le bound period eg
      have hA2 : eg ≤ alignDown bound period eg := le_alignDown heg
      by_cases h2 : alignDown bound period eg < need
      · rw [if_pos h2]
        refine ⟨fun e he => ?_, fun _ => ?_⟩
        · cases he
        · intro e ha hv
          by_cases hbe : bound < e
          · exact hI e hbe ha hv
          · have hp0 : 0 < period := by omega
            have heb : e ≤ bound := by omega
            have hle := le_alignDown_of_aligned hp0 ha heb
            obtain ⟨hv1, _, _⟩ := validWindow_end hv
            omega
      · rw [if_neg h2]
        obtain ⟨hM1, hM2, hMc, hMm⟩ := missAt_spec cached need period eg bound knownLo
        obtain ⟨hL1, hL2, hL3⟩ := scanLimit_spec period eg bound knownLo
        have eW := winStart_eq need period eg bound
        by_cases h3 : missAt cached need period eg bound knownLo < scanLimit period eg bound knownLo
        · rw [if_pos h3]
          have hf' : missAt cached need period eg bound knownLo < fuel := by omega
          have hb' : missAt cached need period eg bound knownLo ≤ n := by omega
          have hI' : NoValidAfter cached n need period eg
              (missAt cached need period eg bound knownLo) := by
            intro e he ha hv
            by_cases hbe : bound < e
            · exact hI e hbe ha hv
            · have hp0 : 0 < period := by omega
              have heb : e ≤ bound := by omega
              have hle := le_alignDown_of_aligned hp0 ha heb
              obtain ⟨_, _, hv3⟩ := validWindow_end hv
              have hlo : e - need ≤ missAt cached need period eg bound knownLo := by omega
              have hcM := hv3 (missAt cached need period eg bound knownLo) hlo he
              have hlt : missAt cached need period eg bound knownLo <
                  winStart need period eg bound +
                    (scanLimit period eg bound knownLo - winStart need period eg bound) := by
                omega
              exact hMm hlt hcM
          exact strideLoop_correct cached n need period eg hneed hp fuel
            (missAt cached need period eg bound knownLo) (winStart need period eg bound)
            hf' hb' hMc hI'
        · rw [if_neg h3]
          refine ⟨fun e he => ?_, fun he => ?_⟩
          · have hee : alignDown bound period eg = e := by
              cases he
              rfl
            rw [← hee]
            have hp0 : 0 < period := by omega
            have hAl : AlignedEnd period eg (alignDown bound period eg) := alignDown_aligned hp0 heg
            have hneedA : need ≤ alignDown bound period eg := by omega
            have hAn : alignDown bound period eg ≤ n := by omega
            have hcache : AllCached cached (alignDown bound period eg - need)
                (alignDown bound period eg) := by
              intro i hi1 hi2
              by_cases hiM : i < missAt cached need period eg bound knownLo
              · have hWi : winStart need period eg bound ≤ i := by omega
                exact hMc i hWi hiM
              · rcases hL3 with hL | hL
                · exfalso
                  omega
                · have hki : knownLo ≤ i := by omega
                  have hib : i < bound := by omega
                  exact hk i hki hib
            have hnext : NoValidAfter cached n need period eg (alignDown bound period eg) := by
              intro e' he' ha' hv'
              by_cases hbe : bound < e'
              · exact hI e' hbe ha' hv'
              · have heb : e' ≤ bound := by omega
                have hle := le_alignDown_of_aligned hp0 ha' heb
                omega
            exact isRightmost_intro hAl (validWindow_of_end hneedA hAn hcache) hnext
          · cases he

/-- The loop started as `strideSearch` starts it. -/
theorem strideSearch_correct (cached : Nat → Bool) (n need period eg : Nat)
    (hneed : 1 ≤ need) (hp : 1 ≤ period) :
    (∀ e, strideSearch cached n need period eg = some e → IsRightmost cached n need period eg e) ∧
    (strideSearch cached n need period eg = none → NoValidWindow cached n need period eg) := by
  have hk : AllCached cached n n := by
    intro i h1 h2
    exfalso
    omega
  have hI : NoValidAfter cached n need period eg n := by
    intro e he _ hv
    obtain ⟨_, h2, _⟩ := validWindow_end hv
    omega
  exact strideLoop_correct cached n need period eg hneed hp (n + 1) n n
    (Nat.lt_succ_self n) (Nat.le_refl n) hk hI

/-! ## The public theorems -/

/-- **Soundness.** When the stride search returns `e`, the window
`[e - need, e)` is valid (inside the request and all cached) and `e` passes
the alignment gate. -/
theorem strideSearch_sound (cached : Nat → Bool) (n need period eg e : Nat)
    (hneed : 1 ≤ need) (hp : 1 ≤ period)
    (h : strideSearch cached n need period eg = some e) :
    ValidWindow cached n need (e - need) e ∧ AlignedEnd period eg e := by
  obtain ⟨ha, hv, _⟩ := isRightmost_elim ((strideSearch_correct cached n need period eg hneed hp).1 e h)
  exact ⟨hv, ha⟩

/-- **Optimality ("rightmost").** When the search returns `e`, no valid
window with an aligned end lies after it; when it returns `none`, there is
no valid window with an aligned end at all. -/
theorem strideSearch_optimal (cached : Nat → Bool) (n need period eg : Nat)
    (hneed : 1 ≤ need) (hp : 1 ≤ period) :
    (∀ e, strideSearch cached n need period eg = some e →
      ∀ e', AlignedEnd period eg e' → ValidWindow cached n need (e' - need) e' → e' ≤ e) ∧
    (strideSearch cached n need period eg = none →
      ∀ e', AlignedEnd period eg e' → ¬ ValidWindow cached n need (e' - need) e') := by
  obtain ⟨hs, hn⟩ := strideSearch_correct cached n need period eg hneed hp
  refine ⟨?_, ?_⟩
  · intro e h e' ha hv
    obtain ⟨_, _, hnext⟩ := isRightmost_elim (hs e h)
    by_cases hlt : e < e'
    · exact False.elim (hnext e' hlt ha hv)
    · omega
  · intro h e' ha hv
    exact hn h e' ha hv

/-- Every block the loop reads is below its current `bound`. -/
theorem strideReadsLoop_lt (cached : Nat → Bool) (need period eg : Nat) :
    ∀ (fuel bound knownLo i : Nat),
      strideReadsLoop cached need period eg fuel bound knownLo i → i < bound
  | 0, _, _, _, h => False.elim h
  | fuel + 1, bound, knownLo, i, h => by
    rw [strideReadsLoop_succ] at h
    by_cases h1 : bound < eg
    · rw [if_pos h1] at h
      exact False.elim h
    · rw [if_neg h1] at h
      by_cases h2 : alignDown bound period eg < need
      · rw [if_pos h2] at h
        exact False.elim h
      · rw [if_neg h2] at h
        obtain ⟨hM1, hM2, _, _⟩ := missAt_spec cached need period eg bound knownLo
        obtain ⟨hL1, hL2, _⟩ := scanLimit_spec period eg bound knownLo
        have eW := winStart_eq need period eg bound
        have hA1 := alignDown_le bound period eg
        by_cases h3 : missAt cached need period eg bound knownLo < scanLimit period eg bound knownLo
        · rw [if_pos h3] at h
          rcases h with h | h
          · have hr := scanReads_range cached (winStart need period eg bound)
              (scanLimit period eg bound knownLo - winStart need period eg bound) i h
            omega
          · have hr := strideReadsLoop_lt cached need period eg fuel
              (missAt cached need period eg bound knownLo) (winStart need period eg bound) i h
            omega
        · rw [if_neg h3] at h
          have hr := scanReads_range cached (winStart need period eg bound)
            (scanLimit period eg bound knownLo - winStart need period eg bound) i h
          omega

/-- **Boundary safety.** The search never reads outside the request: every
block it reads is `< n`; and a returned window `[e - need, e)` lies inside
`[0, n)`. So no index past the mask is ever touched. -/
theorem strideSearch_boundary_safety (cached : Nat → Bool) (n need period eg : Nat)
    (hneed : 1 ≤ need) (hp : 1 ≤ period) :
    (∀ i, strideReads cached n need period eg i → i < n) ∧
    (∀ e, strideSearch cached n need period eg = some e →
      need ≤ e ∧ e ≤ n ∧ ∀ i, e - need ≤ i → i < e → i < n) := by
  refine ⟨fun i h => strideReadsLoop_lt cached need period eg (n + 1) n n i h, ?_⟩
  intro e h
  obtain ⟨hv, _⟩ := strideSearch_sound cached n need period eg e hneed hp h
  obtain ⟨h1, h2, _⟩ := validWindow_end hv
  refine ⟨h1, h2, ?_⟩
  intro i _ hi
  omega

/-- The loop's answer does not depend on the fuel, as long as the fuel
exceeds `bound`. -/
theorem strideLoop_fuel (cached : Nat → Bool) (need period eg : Nat) :
    ∀ (f g bound knownLo : Nat), bound < f → bound < g →
      strideLoop cached need period eg f bound knownLo =
        strideLoop cached need period eg g bound knownLo
  | 0, _, bound, _, hf, _ => absurd hf (Nat.not_lt_zero bound)
  | _ + 1, 0, bound, _, _, hg => absurd hg (Nat.not_lt_zero bound)
  | f + 1, g + 1, bound, knownLo, hf, hg => by
    rw [strideLoop_succ, strideLoop_succ]
    by_cases h1 : bound < eg
    · rw [if_pos h1, if_pos h1]
    · rw [if_neg h1, if_neg h1]
      by_cases h2 : alignDown bound period eg < need
      · rw [if_pos h2, if_pos h2]
      · rw [if_neg h2, if_neg h2]
        obtain ⟨hL1, _, _⟩ := scanLimit_spec period eg bound knownLo
        have hA1 := alignDown_le bound period eg
        by_cases h3 : missAt cached need period eg bound knownLo < scanLimit period eg bound knownLo
        · rw [if_pos h3, if_pos h3]
          have hf' : missAt cached need period eg bound knownLo < f := by omega
          have hg' : missAt cached need period eg bound knownLo < g := by omega
          exact strideLoop_fuel cached need period eg f g
            (missAt cached need period eg bound knownLo) (winStart need period eg bound) hf' hg'
        · rw [if_neg h3, if_neg h3]

/-- **Totality.** `strideSearch` is a total function (structural recursion
on a fuel counter), and the fuel `n + 1` it starts with is never what stops
it: running the loop with any larger fuel gives the same answer. -/
theorem strideSearch_total (cached : Nat → Bool) (n need period eg fuel : Nat)
    (h : n < fuel) :
    strideLoop cached need period eg fuel n n = strideSearch cached n need period eg :=
  strideLoop_fuel cached need period eg fuel (n + 1) n n h (Nat.lt_succ_self n)

/-- Reads made by the loop from state `(bound, knownLo)` are at most `bound`
and at most `knownLo`: each round reads only inside
`[start, min end knownLo)`, and the next round only below `start`. -/
theorem strideProbesLoop_le (cached : Nat → Bool) (need period eg : Nat) :
    ∀ (fuel bound knownLo : Nat),
      strideProbesLoop cached need period eg fuel bound knownLo ≤ bound ∧
      strideProbesLoop cached need period eg fuel bound knownLo ≤ knownLo
  | 0, bound, knownLo => by
    have e : strideProbesLoop cached need period eg 0 bound knownLo = 0 := rfl
    omega
  | fuel + 1, bound, knownLo => by
    have e := strideProbesLoop_succ cached need period eg fuel bound knownLo
    by_cases h1 : bound < eg
    · rw [if_pos h1] at e
      omega
    · rw [if_neg h1] at e
      by_cases h2 : alignDown bound period eg < need
      · rw [if_pos h2] at e
        omega
      · rw [if_neg h2] at e
        obtain ⟨hM1, hM2, _, _⟩ := missAt_spec cached need period eg bound knownLo
        obtain ⟨hL1, hL2, _⟩ := scanLimit_spec period eg bound knownLo
        have hA1 := alignDown_le bound period eg
        have hs := scanProbes_bound cached (winStart need period eg bound)
          (scanLimit period eg bound knownLo - winStart need period eg bound)
        have eM : missAt cached need period eg bound knownLo =
            scanRun cached (winStart need period eg bound)
              (scanLimit period eg bound knownLo - winStart need period eg bound) := rfl
        by_cases h3 : missAt cached need period eg bound knownLo < scanLimit period eg bound knownLo
        · rw [if_pos h3] at e
          have ih := strideProbesLoop_le cached need period eg fuel
            (missAt cached need period eg bound knownLo) (winStart need period eg bound)
          omega
        · rw [if_neg h3] at e
          omega

/-- **Probe bound.** The stride search reads at most `n` blocks in total:
the ranges it scans are disjoint and lie in `[0, n)`, so no block is read
twice. -/
theorem strideSearch_probe_bound (cached : Nat → Bool) (n need period eg : Nat) :
    strideProbes cached n need period eg ≤ n :=
  (strideProbesLoop_le cached need period eg (n + 1) n n).1

end PrefixCache
