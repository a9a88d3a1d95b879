import PrefixCache.Spec.Legacy
import PrefixCache.Spec.Answer
import PrefixCache.Thm.Arith
import PrefixCache.Thm.Scan
import PrefixCache.Thm.Fallback

/-!
# vLLM's scan computes the declarative answer

The loop invariant (the one proved in C by Frama-C): with `k` blocks left to
process and run counter `run`,

* (a) blocks `[k, k + run)` are cached and `k + run ≤ n`;
* (b) `run < need`, and `run > 0` implies `AlignedEnd (k + run)` (the run
  started at an aligned end);
* (c) no valid window has an aligned end in `(k + run, n]`;
* (d) no aligned end `e` in `(k + run, n]` has `[k, e)` all cached (the run
  started at the highest aligned end reachable without a miss).

(c) makes the first completed run the rightmost window; (d) makes the final
run of a loop without a match the last aligned end of the cached prefix.
-/

namespace PrefixCache

theorem legacyLoop_zero (cached : Nat → Bool) (need period eg run : Nat) :
    legacyLoop cached need period eg 0 run = (none, run) := rfl

theorem legacyLoop_succ (cached : Nat → Bool) (need period eg k run : Nat) :
    legacyLoop cached need period eg (k + 1) run =
      if cached k = true then
        (if run = 0 ∧ ¬ AlignedEnd period eg (k + 1) then
          legacyLoop cached need period eg k run
        else if need ≤ run + 1 then (some k, run + 1)
        else legacyLoop cached need period eg k (run + 1))
      else legacyLoop cached need period eg k 0 := rfl

theorem legacyOut_some (period eg i run : Nat) :
    legacyOut period eg (some i, run) =
      ⟨eaglePop period eg (i + run), minN i (eaglePop period eg (i + run))⟩ := rfl

theorem legacyOut_none (period eg run : Nat) :
    legacyOut period eg (none, run) = ⟨eaglePop period eg (realign run period), 0⟩ := rfl

/-- What is known about the run counter when the loop ends without a match. -/
def FinalRun (cached : Nat → Bool) (n need period eg r : Nat) : Prop :=
  r ≤ n ∧ r < need ∧ AllCached cached 0 r ∧ (0 < r → AlignedEnd period eg r) ∧
    ∀ e, r < e → e ≤ n → AlignedEnd period eg e → AllCached cached 0 e → False

theorem finalRun_intro {cached : Nat → Bool} {n need period eg r : Nat}
    (h1 : r ≤ n) (h2 : r < need) (h3 : AllCached cached 0 r)
    (h4 : 0 < r → AlignedEnd period eg r)
    (h5 : ∀ e, r < e → e ≤ n → AlignedEnd period eg e → AllCached cached 0 e → False) :
    FinalRun cached n need period eg r :=
  And.intro h1 (And.intro h2 (And.intro h3 (And.intro h4 h5)))

theorem finalRun_elim {cached : Nat → Bool} {n need period eg r : Nat}
    (h : FinalRun cached n need period eg r) :
    r ≤ n ∧ r < need ∧ AllCached cached 0 r ∧ (0 < r → AlignedEnd period eg r) ∧
      ∀ e, r < e → e ≤ n → AlignedEnd period eg e → AllCached cached 0 e → False :=
  h

/-- The loop invariant (a)–(d) is preserved; a match returns the rightmost
valid aligned window, and no match means there is none and the final run
satisfies `FinalRun`. -/
theorem legacyLoop_spec (cached : Nat → Bool) (n need period eg : Nat) (hneed : 1 ≤ need) :
    ∀ (k run : Nat), k + run ≤ n → AllCached cached k (k + run) → run < need →
      (0 < run → AlignedEnd period eg (k + run)) →
      NoValidAfter cached n need period eg (k + run) →
      (∀ e, k + run < e → e ≤ n → AlignedEnd period eg e → AllCached cached k e → False) →
      (∀ (i r : Nat), legacyLoop cached need period eg k run = (some i, r) →
          r = need ∧ IsRightmost cached n need period eg (i + need)) ∧
      (∀ (r : Nat), legacyLoop cached need period eg k run = (none, r) →
          NoValidWindow cached n need period eg ∧ FinalRun cached n need period eg r)
  | 0, run, h0, ha, hr, hal, hI, hE => by
    rw [legacyLoop_zero]
    refine ⟨fun i r he => ?_, fun r he => ?_⟩
    · cases he
    · have hrr : r = run := by
        cases he
        rfl
      rw [hrr]
      have hnv : NoValidWindow cached n need period eg := by
        intro e hae hv
        by_cases hbig : 0 + run < e
        · exact hI e hbig hae hv
        · obtain ⟨hv1, _, _⟩ := validWindow_end hv
          omega
      have f1 : run ≤ n := by omega
      have f3 : AllCached cached 0 run := by
        intro i h1 h2
        have h2' : i < 0 + run := by omega
        exact ha i h1 h2'
      have f4 : 0 < run → AlignedEnd period eg run := by
        intro hpos
        exact alignedEnd_congr (Nat.zero_add run) (hal hpos)
      have f5 : ∀ e, run < e → e ≤ n → AlignedEnd period eg e → AllCached cached 0 e → False := by
        intro e he hen hae hc
        have he' : 0 + run < e := by omega
        exact hE e he' hen hae hc
      exact ⟨hnv, finalRun_intro f1 hr f3 f4 f5⟩
  | k + 1, run, h0, ha, hr, hal, hI, hE => by
    rw [legacyLoop_succ]
    by_cases hc : cached k = true
    · rw [if_pos hc]
      by_cases hg : run = 0 ∧ ¬ AlignedEnd period eg (k + 1)
      · rw [if_pos hg]
        obtain ⟨hg1, hg2⟩ := hg
        have g0 : k + run ≤ n := by omega
        have g1 : AllCached cached k (k + run) := by
          intro i h1 h2
          exfalso
          omega
        have g2 : 0 < run → AlignedEnd period eg (k + run) := by
          intro hpos
          exfalso
          omega
        have g3 : NoValidAfter cached n need period eg (k + run) := by
          intro e he hae hv
          by_cases hek : e = k + 1
          · rw [hek] at hae
            exact hg2 hae
          · have he' : k + 1 + run < e := by omega
            exact hI e he' hae hv
        have g4 : ∀ e, k + run < e → e ≤ n → AlignedEnd period eg e →
            AllCached cached k e → False := by
          intro e he hen hae hce
          by_cases hek : e = k + 1
          · rw [hek] at hae
            exact hg2 hae
          · have he' : k + 1 + run < e := by omega
            have hce' : AllCached cached (k + 1) e := by
              intro i h1 h2
              have h1' : k ≤ i := by omega
              exact hce i h1' h2
            exact hE e he' hen hae hce'
        exact legacyLoop_spec cached n need period eg hneed k run g0 g1 hr g2 g3 g4
      · rw [if_neg hg]
        have hA : AlignedEnd period eg (k + 1 + run) := by
          by_cases hr0 : run = 0
          · have h' : AlignedEnd period eg (k + 1) := by
              by_cases h'' : AlignedEnd period eg (k + 1)
              · exact h''
              · exact absurd (And.intro hr0 h'') hg
            have hk1 : k + 1 + run = k + 1 := by omega
            rw [hk1]
            exact h'
          · have hpos : 0 < run := by omega
            exact hal hpos
        by_cases hn : need ≤ run + 1
        · rw [if_pos hn]
          refine ⟨fun i r he => ?_, fun r he => ?_⟩
          · have hi : i = k := by
              cases he
              rfl
            have hrr : r = run + 1 := by
              cases he
              rfl
            rw [hi, hrr]
            have hrn : run + 1 = need := by omega
            have hkn : k + need = k + 1 + run := by omega
            have hcache : AllCached cached (k + 1 + run - need) (k + 1 + run) := by
              intro i' h1 h2
              by_cases hik : i' = k
              · rw [hik]
                exact hc
              · have h1' : k + 1 ≤ i' := by omega
                exact ha i' h1' h2
            have hneedle : need ≤ k + 1 + run := by omega
            have hwin := validWindow_of_end (n := n) hneedle h0 hcache
            refine ⟨hrn, ?_⟩
            rw [hkn]
            exact isRightmost_intro hA hwin hI
          · cases he
        · rw [if_neg hn]
          have g0 : k + (run + 1) ≤ n := by omega
          have g1 : AllCached cached k (k + (run + 1)) := by
            intro i' h1 h2
            by_cases hik : i' = k
            · rw [hik]
              exact hc
            · have h1' : k + 1 ≤ i' := by omega
              have h2' : i' < k + 1 + run := by omega
              exact ha i' h1' h2'
          have g1' : run + 1 < need := by omega
          have g2 : 0 < run + 1 → AlignedEnd period eg (k + (run + 1)) := by
            intro _
            have hkk : k + (run + 1) = k + 1 + run := by omega
            rw [hkk]
            exact hA
          have g3 : NoValidAfter cached n need period eg (k + (run + 1)) := by
            intro e he hae hv
            have he' : k + 1 + run < e := by omega
            exact hI e he' hae hv
          have g4 : ∀ e, k + (run + 1) < e → e ≤ n → AlignedEnd period eg e →
              AllCached cached k e → False := by
            intro e he hen hae hce
            have he' : k + 1 + run < e := by omega
            have hce' : AllCached cached (k + 1) e := by
              intro i h1 h2
              have h1' : k ≤ i := by omega
              exact hce i h1' h2
            exact hE e he' hen hae hce'
          exact legacyLoop_spec cached n need period eg hneed k (run + 1) g0 g1 g1' g2 g3 g4
    · rw [if_neg hc]
      have g0 : k + 0 ≤ n := by omega
      have g1 : AllCached cached k (k + 0) := by
        intro i h1 h2
        exfalso
        omega
      have g1' : 0 < need := by omega
      have g2 : 0 < 0 → AlignedEnd period eg (k + 0) := by
        intro hpos
        exfalso
        omega
      have g3 : NoValidAfter cached n need period eg (k + 0) := by
        intro e he hae hv
        by_cases hbig : k + 1 + run < e
        · exact hI e hbig hae hv
        · obtain ⟨_, _, hv3⟩ := validWindow_end hv
          have hlo : e - need ≤ k := by omega
          have hhi : k < e := by omega
          exact hc (hv3 k hlo hhi)
      have g4 : ∀ e, k + 0 < e → e ≤ n → AlignedEnd period eg e →
          AllCached cached k e → False := by
        intro e he _ _ hce
        have hhi : k < e := by omega
        exact hc (hce k (Nat.le_refl k) hhi)
      exact legacyLoop_spec cached n need period eg hneed k 0 g0 g1 g1' g2 g3 g4

/-- The final run of a loop without a match is the prefix fallback's clamped
last aligned end of the maximal cached prefix. -/
theorem finalRun_eq_clamp {cached : Nat → Bool} {n need period eg r : Nat} (hp : 1 ≤ period)
    (hF : FinalRun cached n need period eg r) :
    r = lastAlignedClamp period eg (prefixRun cached n need) := by
  obtain ⟨f1, f2, f3, f4, f5⟩ := finalRun_elim hF
  obtain ⟨m1, m2, m3⟩ := maxCachedPrefix_elim (prefixRun_max cached n need)
  have hlim := prefixLimit_spec n need
  have hp0 : 0 < period := by omega
  have hrP : r ≤ prefixRun cached n need := by
    rcases Nat.lt_or_ge (prefixRun cached n need) r with h | h
    · exfalso
      have hlt : prefixRun cached n need < prefixLimit n need := by omega
      exact m3 hlt (f3 (prefixRun cached n need) (Nat.zero_le _) h)
    · exact h
  show r = (if prefixRun cached n need < eg then 0 else alignDown (prefixRun cached n need) period eg)
  by_cases hP : prefixRun cached n need < eg
  · rw [if_pos hP]
    by_cases hr0 : r = 0
    · exact hr0
    · have hpos : 0 < r := by omega
      have hgr := alignedEnd_le (f4 hpos)
      omega
  · rw [if_neg hP]
    have heg : eg ≤ prefixRun cached n need := by omega
    have hA1 := alignDown_le (prefixRun cached n need) period eg
    have hle : r ≤ alignDown (prefixRun cached n need) period eg := by
      by_cases hr0 : r = 0
      · omega
      · have hpos : 0 < r := by omega
        exact le_alignDown_of_aligned hp0 (f4 hpos) hrP
    have hge : alignDown (prefixRun cached n need) period eg ≤ r := by
      rcases Nat.lt_or_ge r (alignDown (prefixRun cached n need) period eg) with h | h
      · exfalso
        have hAn : alignDown (prefixRun cached n need) period eg ≤ n := by omega
        have hAl := alignDown_aligned (b := prefixRun cached n need) hp0 heg
        have hAc : AllCached cached 0 (alignDown (prefixRun cached n need) period eg) := by
          intro i h1 h2
          have h2' : i < prefixRun cached n need := by omega
          exact m2 i h1 h2'
        exact f5 (alignDown (prefixRun cached n need) period eg) h hAn hAl hAc
      · exact h
    omega

/-- vLLM's loop treats `need = 0` exactly like `need = 1`. -/
theorem legacyLoop_need_zero (cached : Nat → Bool) (period eg : Nat) :
    ∀ (k run : Nat), legacyLoop cached 0 period eg k run = legacyLoop cached 1 period eg k run
  | 0, _ => rfl
  | k + 1, run => by
    rw [legacyLoop_succ, legacyLoop_succ]
    by_cases hc : cached k = true
    · rw [if_pos hc, if_pos hc]
      by_cases hg : run = 0 ∧ ¬ AlignedEnd period eg (k + 1)
      · rw [if_pos hg, if_pos hg]
        exact legacyLoop_need_zero cached period eg k run
      · rw [if_neg hg, if_neg hg]
        have h0 : 0 ≤ run + 1 := Nat.zero_le (run + 1)
        have h1 : 1 ≤ run + 1 := by omega
        rw [if_pos h0, if_pos h1]
    · rw [if_neg hc, if_neg hc]
      exact legacyLoop_need_zero cached period eg k 0

/-- `legacyScan` with `need = 0` is `legacyScan` with `need = 1`. -/
theorem legacyScan_need_zero (cached : Nat → Bool) (n period eg : Nat) :
    legacyScan cached n 0 period eg = legacyScan cached n 1 period eg := by
  show legacyOut period eg (legacyLoop cached 0 period eg n 0) =
    legacyOut period eg (legacyLoop cached 1 period eg n 0)
  rw [legacyLoop_need_zero]

/-- `legacyScan` computes the declarative answer, for `need ≥ 1`. -/
theorem legacyScan_spec_pos (cached : Nat → Bool) (n need period eg : Nat)
    (hneed : 1 ≤ need) (hp : 1 ≤ period) (heg : eg ≤ 1) :
    SwaHit cached n need period eg (legacyScan cached n need period eg) := by
  have g0 : n + 0 ≤ n := by omega
  have g1 : AllCached cached n (n + 0) := by
    intro i h1 h2
    exfalso
    omega
  have g1' : 0 < need := by omega
  have g2 : 0 < 0 → AlignedEnd period eg (n + 0) := by
    intro hpos
    exfalso
    omega
  have g3 : NoValidAfter cached n need period eg (n + 0) := by
    intro e he _ hv
    obtain ⟨_, h2, _⟩ := validWindow_end hv
    omega
  have g4 : ∀ e, n + 0 < e → e ≤ n → AlignedEnd period eg e → AllCached cached n e → False := by
    intro e he hen _ _
    omega
  obtain ⟨hs, hn⟩ := legacyLoop_spec cached n need period eg hneed n 0 g0 g1 g1' g2 g3 g4
  have key : ∀ x, legacyLoop cached need period eg n 0 = x →
      SwaHit cached n need period eg (legacyOut period eg x) := by
    intro x hx
    obtain ⟨o, r⟩ := x
    cases o with
    | none =>
      obtain ⟨hnv, hF⟩ := hn r hx
      rw [legacyOut_none]
      have hrc := finalRun_eq_clamp hp hF
      have hlen : ∀ p, MaxCachedPrefix cached (prefixLimit n need) p →
          eaglePop period eg (realign r period) = fallbackLength period eg p := by
        intro p hp'
        have hpe := maxCachedPrefix_unique (prefixRun_max cached n need) hp'
        subst hpe
        rw [hrc] <;> rfl
      exact Or.inr ⟨hnv, rfl, hlen⟩
    | some i =>
      obtain ⟨hr, hR⟩ := hs i r hx
      rw [legacyOut_some]
      obtain ⟨hAl, hv, _⟩ := isRightmost_elim hR
      have hge1 : 1 ≤ i + need := by omega
      have hpop : eaglePop period eg (i + r) = i + need - eg := by
        rw [hr] <;> exact eaglePop_aligned heg hAl hge1
      have hmin := minN_spec i (eaglePop period eg (i + r))
      have hfirst : minN i (eaglePop period eg (i + r)) = i + need - need := by omega
      exact Or.inl ⟨i + need, hR, hpop, hfirst⟩
  exact key (legacyLoop cached need period eg n 0) rfl

/-- **vLLM's scan is specified.** For every `need` (clamped to at least 1,
as vLLM's loop does), `legacyScan` returns the rightmost valid aligned
window (length `e - eg`, first real block `e - need`) if one exists, and
otherwise the prefix fallback formula on the maximal cached prefix with
first real block 0. -/
theorem legacyScan_spec (cached : Nat → Bool) (n need period eg : Nat)
    (hp : 1 ≤ period) (heg : eg ≤ 1) :
    SwaHit cached n (effNeed need) period eg (legacyScan cached n need period eg) := by
  by_cases h0 : need = 0
  · rw [h0, effNeed_zero, legacyScan_need_zero]
    exact legacyScan_spec_pos cached n 1 period eg (Nat.le_refl 1) hp heg
  · rw [effNeed_of_ne h0]
    have hneed : 1 ≤ need := by omega
    exact legacyScan_spec_pos cached n need period eg hneed hp heg

end PrefixCache
