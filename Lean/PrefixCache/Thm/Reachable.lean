import PrefixCache.Spec.Reachable
import PrefixCache.Thm.Arith
import PrefixCache.Thm.Stride
import PrefixCache.Thm.Fallback
import PrefixCache.Thm.Joint

/-!
# The store-side mask keeps what the lookup reads

`reachableMask` keeps exactly the tails of the hit lengths it promises
(`reachableMask_keeps_tails`, `reachableMask_only_tails`), and a lookup hit
served by a window whose length is promised reads only kept blocks
(`reachableMask_complete`; contrapositive `reachableMask_dropped_unread`:
a dropped block is never read by such a hit).

What is *not* claimed, because vLLM's mask disagrees with vLLM's lookup
there (docs/store-lookup-agreement.md, each a strict xfail or a
counterexample test):

* windows of at most one token without EAGLE (`winBlocks + eagle = 0`,
  finding L1): the mask keeps empty tails, the lookup reads one block; hence
  the hypothesis `1 ≤ winBlocks + egOf eagle`;
* hits served by the prefix fallback (finding L2: with EAGLE and a period
  above 1 the fallback needs `period` more blocks than the tail); hence the
  hypothesis that the hit comes from a window (`strideSearch … = some e`);
* "every kept block is read by some hit" (no waste) is false (finding W);
  `reachableMask_only_tails` is what holds: every kept block is in a
  promised tail.
-/

namespace PrefixCache

/-- `p` occurs in the list. -/
def MemNat (p : Nat) : List Nat → Prop
  | [] => False
  | q :: qs => p = q ∨ MemNat p qs

/-- The hit lengths (in blocks) the mask promises to keep servable: every
segment boundary `k * per`, `k ≥ 1` (when there are segments), and, with a
retention interval, every reachable boundary rounded down to the alignment. -/
def Promised (align bs : Nat) (retention : Option Nat) (boundaries : List Nat) (b : Nat) : Prop :=
  (retention ≠ some 0 ∧ 0 < segTokens align retention ∧
      ∃ k, 1 ≤ k ∧ b = k * (segTokens align retention / bs)) ∨
    (retention.isSome = true ∧ ∃ p, MemNat p boundaries ∧ b = p / align * align / bs)

theorem inTail_of {b need eg i : Nat} (h : InTail b need eg i) : inTail b need eg i = true :=
  @decide_eq_true (b + eg - need ≤ i ∧ i < b + eg) _ h

theorem of_inTail {b need eg i : Nat} (h : inTail b need eg i = true) : InTail b need eg i :=
  @of_decide_eq_true (b + eg - need ≤ i ∧ i < b + eg) _ h

theorem le_mul_of_one_le' (k per : Nat) (h : 1 ≤ per) : k ≤ k * per := by
  have m := mul_mono k h
  have e : k * 1 = k := Nat.mul_one k
  omega

theorem segKeep_of (per need eg i k : Nat) (hk : 1 ≤ k) (ht : inTail (k * per) need eg i = true) :
    ∀ (K : Nat), k ≤ K → segKeep per need eg i K = true
  | 0, hK => absurd hK (by omega)
  | K + 1, hK => by
    by_cases e : k = K + 1
    · subst e
      exact bor_left ht
    · exact bor_right (segKeep_of per need eg i k hk ht K (by omega))

theorem segKeep_elim (per need eg i : Nat) :
    ∀ (K : Nat), segKeep per need eg i K = true → ∃ k, 1 ≤ k ∧ k ≤ K ∧ InTail (k * per) need eg i
  | 0, h => absurd h false_ne_true'
  | K + 1, h => by
    have h' : (inTail ((K + 1) * per) need eg i || segKeep per need eg i K) = true := h
    rcases bor_elim h' with h1 | h1
    · exact ⟨K + 1, by omega, Nat.le_refl (K + 1), of_inTail h1⟩
    · obtain ⟨k, hk1, hk2, hk3⟩ := segKeep_elim per need eg i K h1
      exact ⟨k, hk1, by omega, hk3⟩

theorem boundaryKeep_of (align bs need eg i p : Nat)
    (ht : inTail (p / align * align / bs) need eg i = true) :
    ∀ (l : List Nat), MemNat p l → boundaryKeep align bs need eg i l = true
  | [], h => False.elim h
  | q :: qs, h => by
    have h' : p = q ∨ MemNat p qs := h
    rcases h' with e | e
    · subst e
      exact bor_left ht
    · exact bor_right (boundaryKeep_of align bs need eg i p ht qs e)

theorem boundaryKeep_elim (align bs need eg i : Nat) :
    ∀ (l : List Nat), boundaryKeep align bs need eg i l = true →
      ∃ p, MemNat p l ∧ InTail (p / align * align / bs) need eg i
  | [], h => absurd h false_ne_true'
  | q :: qs, h => by
    have h' : (inTail (q / align * align / bs) need eg i ||
        boundaryKeep align bs need eg i qs) = true := h
    rcases bor_elim h' with h1 | h1
    · have hm : MemNat q (q :: qs) := Or.inl rfl
      exact ⟨q, hm, of_inTail h1⟩
    · obtain ⟨p, hp, ht⟩ := boundaryKeep_elim align bs need eg i qs h1
      have hm : MemNat p (q :: qs) := Or.inr hp
      exact ⟨p, hm, ht⟩

theorem keepBlock_elim {hasSeg : Bool} {per need eg : Nat} {hasFinal : Bool} {fe : Nat}
    {useB : Bool} {align bs : Nat} {bnd : List Nat} {i : Nat}
    (h : keepBlock hasSeg per need eg hasFinal fe useB align bs bnd i = true) :
    (hasSeg = true ∧ segKeep per need eg i (i + need) = true) ∨
      (hasFinal = true ∧ finalKeep per need fe i = true) ∨
      (useB = true ∧ boundaryKeep align bs need eg i bnd = true) := by
  have h' : ((hasSeg && segKeep per need eg i (i + need)) ||
      ((hasFinal && finalKeep per need fe i) ||
        (useB && boundaryKeep align bs need eg i bnd))) = true := h
  rcases bor_elim h' with h1 | h1
  · exact Or.inl ⟨band_left h1, band_right h1⟩
  · rcases bor_elim h1 with h2 | h2
    · exact Or.inr (Or.inl ⟨band_left h2, band_right h2⟩)
    · exact Or.inr (Or.inr ⟨band_left h2, band_right h2⟩)

theorem reachableMask_eq (align bs winBlocks : Nat) (eagle : Bool) (retention : Option Nat)
    (boundaries : List Nat) (finalEnd : Option Nat) :
    reachableMask align bs winBlocks eagle retention boundaries finalEnd =
      if align % bs = 0 then
        (if retention = some 0 then
          some (keepBlock false 0 (winBlocks + egOf eagle) (egOf eagle) false 0 true align bs
            boundaries)
        else if segTokens align retention / bs ≤ winBlocks + egOf eagle then none
        else some (keepBlock true (segTokens align retention / bs) (winBlocks + egOf eagle)
          (egOf eagle) (finalFlag eagle finalEnd) (finalEnd.getD 0) retention.isSome align bs
          boundaries))
      else none := rfl

/-- The two shapes of a mask that is not "keep everything". -/
theorem reachableMask_some {align bs winBlocks : Nat} {eagle : Bool} {retention : Option Nat}
    {boundaries : List Nat} {finalEnd : Option Nat} {keep : Nat → Bool}
    (h : reachableMask align bs winBlocks eagle retention boundaries finalEnd = some keep) :
    (retention = some 0 ∧
      keep = keepBlock false 0 (winBlocks + egOf eagle) (egOf eagle) false 0 true align bs
        boundaries) ∨
    (retention ≠ some 0 ∧ 0 < segTokens align retention ∧
      winBlocks + egOf eagle < segTokens align retention / bs ∧
      keep = keepBlock true (segTokens align retention / bs) (winBlocks + egOf eagle)
        (egOf eagle) (finalFlag eagle finalEnd) (finalEnd.getD 0) retention.isSome align bs
        boundaries) := by
  rw [reachableMask_eq] at h
  by_cases h1 : align % bs = 0
  · rw [if_pos h1] at h
    by_cases h2 : retention = some 0
    · rw [if_pos h2] at h
      exact Or.inl ⟨h2, (Option.some.inj h).symm⟩
    · rw [if_neg h2] at h
      by_cases h3 : segTokens align retention / bs ≤ winBlocks + egOf eagle
      · rw [if_pos h3] at h
        cases h
      · rw [if_neg h3] at h
        have h4 : winBlocks + egOf eagle < segTokens align retention / bs := by omega
        have hpos : 0 < segTokens align retention := by
          rcases Nat.eq_zero_or_pos (segTokens align retention) with h0 | h0
          · rw [h0, Nat.zero_div] at h4
            omega
          · exact h0
        exact Or.inr ⟨h2, hpos, h4, (Option.some.inj h).symm⟩
  · rw [if_neg h1] at h
    cases h

/-- **The mask keeps every promised tail.** When `reachableMask` returns a
mask, every block of the tail of every promised hit length `b` (a segment
boundary, or with a retention interval a reachable boundary; EAGLE: the
tail ends one block later, at the peek) is kept. -/
theorem reachableMask_keeps_tails {align bs winBlocks : Nat} {eagle : Bool}
    {retention : Option Nat} {boundaries : List Nat} {finalEnd : Option Nat}
    {keep : Nat → Bool}
    (h : reachableMask align bs winBlocks eagle retention boundaries finalEnd = some keep)
    (b i : Nat) (hb : Promised align bs retention boundaries b)
    (hi : InTail b (winBlocks + egOf eagle) (egOf eagle) i) : keep i = true := by
  rcases reachableMask_some h with ⟨hs, hk⟩ | ⟨hs, hpos, hn, hk⟩
  · rw [hk]
    rcases hb with ⟨hseg, _, _⟩ | ⟨_, p, hp, hbp⟩
    · exact absurd hs hseg
    · subst hbp
      exact bor_right (bor_right (band_intro rfl
        (boundaryKeep_of align bs _ _ i p (inTail_of hi) boundaries hp)))
  · rw [hk]
    rcases hb with ⟨_, _, k, hk1, hbk⟩ | ⟨hret, p, hp, hbp⟩
    · subst hbk
      have hper : 1 ≤ segTokens align retention / bs := by omega
      have hm := le_mul_of_one_le' k (segTokens align retention / bs) hper
      have hi' : k * (segTokens align retention / bs) + egOf eagle - (winBlocks + egOf eagle) ≤ i ∧
          i < k * (segTokens align retention / bs) + egOf eagle := hi
      have hkle : k ≤ i + (winBlocks + egOf eagle) := by omega
      exact bor_left (band_intro rfl
        (segKeep_of (segTokens align retention / bs) (winBlocks + egOf eagle) (egOf eagle) i k hk1
          (inTail_of hi) (i + (winBlocks + egOf eagle)) hkle))
    · subst hbp
      exact bor_right (bor_right (band_intro hret
        (boundaryKeep_of align bs _ _ i p (inTail_of hi) boundaries hp)))

/-- **Completeness against the lookup.** For windows of at least 2 tokens
or with EAGLE (`1 ≤ winBlocks + eagle`; finding L1 is the failure without
it): when the group's lookup (`findHit`'s stride search, run
`effNeed (winBlocks + eagle)`, any period `≥ 1`) answers with the window
ending at `e` (hit length `e - eagle`) and that length is promised, every
block the hit reads, `[e - need, e)` with the EAGLE peek, is kept. -/
theorem reachableMask_complete {align bs winBlocks : Nat} {eagle : Bool}
    {retention : Option Nat} {boundaries : List Nat} {finalEnd : Option Nat}
    {keep : Nat → Bool}
    (h : reachableMask align bs winBlocks eagle retention boundaries finalEnd = some keep)
    (hneed : 1 ≤ winBlocks + egOf eagle)
    (cached : Nat → Bool) (n period e : Nat) (hp : 1 ≤ period)
    (hs : strideSearch cached n (effNeed (winBlocks + egOf eagle)) period (egOf eagle) = some e)
    (hb : Promised align bs retention boundaries (e - egOf eagle)) :
    ∀ i, e - effNeed (winBlocks + egOf eagle) ≤ i → i < e → keep i = true := by
  intro i h1 h2
  have hne : effNeed (winBlocks + egOf eagle) = winBlocks + egOf eagle :=
    effNeed_of_ne (by omega)
  have hsound := strideSearch_sound cached n (effNeed (winBlocks + egOf eagle)) period
    (egOf eagle) e (effNeed_pos _) hp hs
  have heg := alignedEnd_le hsound.2
  rw [hne] at h1
  apply reachableMask_keeps_tails h (e - egOf eagle) i hb
  show e - egOf eagle + egOf eagle - (winBlocks + egOf eagle) ≤ i ∧
    i < e - egOf eagle + egOf eagle
  omega

/-- **What the mask drops is never read** by a window hit of a promised
length (the contrapositive of `reachableMask_complete`, same hypotheses). -/
theorem reachableMask_dropped_unread {align bs winBlocks : Nat} {eagle : Bool}
    {retention : Option Nat} {boundaries : List Nat} {finalEnd : Option Nat}
    {keep : Nat → Bool}
    (h : reachableMask align bs winBlocks eagle retention boundaries finalEnd = some keep)
    (hneed : 1 ≤ winBlocks + egOf eagle)
    (cached : Nat → Bool) (n period e : Nat) (hp : 1 ≤ period)
    (hs : strideSearch cached n (effNeed (winBlocks + egOf eagle)) period (egOf eagle) = some e)
    (hb : Promised align bs retention boundaries (e - egOf eagle))
    (i : Nat) (hi : keep i = false) :
    ¬ (e - effNeed (winBlocks + egOf eagle) ≤ i ∧ i < e) := by
  intro hr
  have hk := reachableMask_complete h hneed cached n period e hp hs hb i hr.1 hr.2
  rw [hi] at hk
  exact false_ne_true' hk

/-- **The mask keeps nothing but tails.** Every kept block lies in the tail
of a promised hit length, or in the final partial segment (non-EAGLE tail
of `finalEnd`). This is all that holds in this direction: a kept block is
not always read by a hit (finding W, the EAGLE peek of an empty hit). -/
theorem reachableMask_only_tails {align bs winBlocks : Nat} {eagle : Bool}
    {retention : Option Nat} {boundaries : List Nat} {finalEnd : Option Nat}
    {keep : Nat → Bool}
    (h : reachableMask align bs winBlocks eagle retention boundaries finalEnd = some keep)
    (i : Nat) (hi : keep i = true) :
    (∃ b, Promised align bs retention boundaries b ∧
        InTail b (winBlocks + egOf eagle) (egOf eagle) i) ∨
      (finalFlag eagle finalEnd = true ∧ InTail (finalEnd.getD 0) (winBlocks + egOf eagle) 0 i) := by
  rcases reachableMask_some h with ⟨hs, hk⟩ | ⟨hs, hpos, hn, hk⟩
  · rw [hk] at hi
    have hsome : retention.isSome = true := by
      subst hs
      rfl
    rcases keepBlock_elim hi with ⟨h1, _⟩ | ⟨h1, _⟩ | ⟨_, h1⟩
    · exact absurd h1 false_ne_true'
    · exact absurd h1 false_ne_true'
    · obtain ⟨p, hp, ht⟩ := boundaryKeep_elim align bs _ _ i boundaries h1
      exact Or.inl ⟨p / align * align / bs, Or.inr ⟨hsome, p, hp, rfl⟩, ht⟩
  · rw [hk] at hi
    rcases keepBlock_elim hi with ⟨_, h1⟩ | ⟨hf, h1⟩ | ⟨hu, h1⟩
    · obtain ⟨k, hk1, _, ht⟩ := segKeep_elim _ _ _ i _ h1
      exact Or.inl ⟨k * (segTokens align retention / bs), Or.inl ⟨hs, hpos, k, hk1, rfl⟩, ht⟩
    · have hd := @of_decide_eq_true
        (finalEnd.getD 0 % (segTokens align retention / bs) ≠ 0 ∧
          finalEnd.getD 0 - finalEnd.getD 0 % (segTokens align retention / bs) ≤ i ∧
          finalEnd.getD 0 - (winBlocks + egOf eagle) ≤ i ∧ i < finalEnd.getD 0) _ h1
      refine Or.inr ⟨hf, ?_⟩
      show finalEnd.getD 0 + 0 - (winBlocks + egOf eagle) ≤ i ∧ i < finalEnd.getD 0 + 0
      omega
    · obtain ⟨p, hp, ht⟩ := boundaryKeep_elim align bs _ _ i boundaries h1
      exact Or.inl ⟨p / align * align / bs, Or.inr ⟨hu, p, hp, rfl⟩, ht⟩

end PrefixCache
