import PrefixCache.Spec.Full
import PrefixCache.Thm.Arith
import PrefixCache.Thm.Scan

/-!
# The full-attention lookup

What `fullHit` returns (`Spec/Full.lean`) and that vLLM's loop
`legacyFullScan` returns the same:

* `fullHit_prefix_cached`, `fullHit_prefix_maximal`: phase 1's `p` is the
  longest cached run of full blocks from block 0 within `phase1Limit`;
* `fullHit_tail_highest`, `fullHit_tail_none`, `fullHit_tail_not_fine`:
  phase 2's tail is the highest cached fine index in `[fineLo, fineHi)`
  (fine-grained mode only);
* `fullHit_aligned`, `fullHit_hit_le_raw`, `fullHit_trim`,
  `fullHit_blocks_exist`: the hit is a multiple of `align`, at most the raw
  hit, `numBlocks = cdivN hit bs`, and no more blocks than the lookup holds;
* `fullFinish_prefix`, `fullFinish_tail`, `fullFinish_probes`,
  `fullFinish_numBlocks`, `fullHit_fine`, `fullHit_not_fine`: unfolding;
* `fullHit_probes_phase1`: phase 1 reads `p` blocks plus the miss that
  stopped it; `fineDownProbes_some` / `fineDownProbes_none`: phase 2 reads
  from the top of its range down to the hit (or the whole range);
* `legacyFullScan_eq_fullHit`: vLLM's loop returns `fullHit`.

Same style as the other files: structural recursion on fuel, `omega` only on
linear facts (products and quotients are opaque terms whose needed facts are
passed in).
-/

namespace PrefixCache

/-! ## Phase 1 -/

/-- `scanRun c 0 limit` is the longest cached run from block 0 within `limit`. -/
theorem scanRun_zero_maxCachedPrefix (c : Nat → Bool) (limit : Nat) :
    MaxCachedPrefix c limit (scanRun c 0 limit) := by
  have b := scanRun_bounds c 0 limit
  apply maxCachedPrefix_intro
  · omega
  · exact scanRun_allCached c 0 limit
  · intro h
    exact scanRun_miss c 0 limit (by omega)

/-- The scan's reads exactly: the blocks it walked over, plus the miss when it
stopped before `j + k`. -/
theorem scanProbes_exact (c : Nat → Bool) :
    ∀ (j k : Nat), (scanRun c j k < j + k → scanProbes c j k + j = scanRun c j k + 1) ∧
      (scanRun c j k = j + k → scanProbes c j k = k)
  | j, 0 => by
    have e1 := scanRun_zero c j
    have e2 := scanProbes_zero c j
    constructor
    · intro h
      omega
    · intro _
      omega
  | j, k + 1 => by
    have e1 := scanRun_succ c j k
    have e2 := scanProbes_succ c j k
    have ih := scanProbes_exact c (j + 1) k
    have hb := scanRun_bounds c (j + 1) k
    by_cases h : c j = true
    · rw [if_pos h] at e1
      rw [if_pos h] at e2
      constructor
      · intro h1
        have h2 := ih.1 (by omega)
        omega
      · intro h1
        have h2 := ih.2 (by omega)
        omega
    · rw [if_neg h] at e1
      rw [if_neg h] at e2
      constructor
      · intro _
        omega
      · intro h1
        omega

/-- vLLM's phase-1 loop is `scanRun` with `scanProbes` reads. -/
theorem legacyPhase1_eq (c : Nat → Bool) :
    ∀ (i q k : Nat), legacyPhase1 c i q k = (scanRun c i k, q + scanProbes c i k)
  | i, q, 0 => rfl
  | i, q, k + 1 => by
    have e1 : legacyPhase1 c i q (k + 1) =
        (if c i = true then legacyPhase1 c (i + 1) (q + 1) k else (i, q + 1)) := rfl
    have e2 := scanRun_succ c i k
    have e3 := scanProbes_succ c i k
    by_cases h : c i = true
    · rw [if_pos h] at e1
      rw [if_pos h] at e2
      rw [if_pos h] at e3
      rw [e1, e2, e3, legacyPhase1_eq c (i + 1) (q + 1) k]
      have hq : q + 1 + scanProbes c (i + 1) k = q + (scanProbes c (i + 1) k + 1) := by omega
      rw [hq]
    · rw [if_neg h] at e1
      rw [if_neg h] at e2
      rw [if_neg h] at e3
      rw [e1, e2, e3]

/-! ## Phase 2 -/

/-- A phase-2 hit `j` is the highest cached fine index in `[lo, lo + k)`. -/
theorem fineDown_some (f : Nat → Bool) (lo : Nat) :
    ∀ (k j : Nat), fineDown f lo k = some j →
      lo ≤ j ∧ j < lo + k ∧ f j = true ∧ (∀ i, j < i → i < lo + k → ¬ f i = true)
  | 0, j, h => by
    have e : fineDown f lo 0 = none := rfl
    rw [e] at h
    exact Option.noConfusion h
  | k + 1, j, h => by
    have e : fineDown f lo (k + 1) =
        (if f (lo + k) = true then some (lo + k) else fineDown f lo k) := rfl
    by_cases hf : f (lo + k) = true
    · rw [e, if_pos hf] at h
      have hj : lo + k = j := Option.some.inj h
      have hfj : f j = true := by
        rw [← hj]
        exact hf
      refine ⟨by omega, by omega, hfj, ?_⟩
      intro i h1 h2
      exfalso
      omega
    · rw [e, if_neg hf] at h
      obtain ⟨a, b, c, d⟩ := fineDown_some f lo k j h
      refine ⟨a, by omega, c, ?_⟩
      intro i h1 h2
      by_cases hi : i = lo + k
      · rw [hi]
        exact hf
      · exact d i h1 (by omega)

/-- No phase-2 hit: no fine index in `[lo, lo + k)` is cached. -/
theorem fineDown_none (f : Nat → Bool) (lo : Nat) :
    ∀ (k : Nat), fineDown f lo k = none → ∀ i, lo ≤ i → i < lo + k → ¬ f i = true
  | 0, _, i, h1, h2 => by
    exfalso
    omega
  | k + 1, h, i, h1, h2 => by
    have e : fineDown f lo (k + 1) =
        (if f (lo + k) = true then some (lo + k) else fineDown f lo k) := rfl
    by_cases hf : f (lo + k) = true
    · rw [e, if_pos hf] at h
      exact Option.noConfusion h
    · rw [e, if_neg hf] at h
      by_cases hi : i = lo + k
      · rw [hi]
        exact hf
      · exact fineDown_none f lo k h i h1 (by omega)

/-- Phase 2 with a hit at `j` reads `lo + k - j` fine indices (from the top
down to `j`). -/
theorem fineDownProbes_some (f : Nat → Bool) (lo : Nat) :
    ∀ (k j : Nat), fineDown f lo k = some j → fineDownProbes f lo k + j = lo + k
  | 0, j, h => by
    have e : fineDown f lo 0 = none := rfl
    rw [e] at h
    exact Option.noConfusion h
  | k + 1, j, h => by
    have e1 : fineDown f lo (k + 1) =
        (if f (lo + k) = true then some (lo + k) else fineDown f lo k) := rfl
    have e2 : fineDownProbes f lo (k + 1) =
        (if f (lo + k) = true then 1 else fineDownProbes f lo k + 1) := rfl
    by_cases hf : f (lo + k) = true
    · rw [e1, if_pos hf] at h
      have hj : lo + k = j := Option.some.inj h
      rw [e2, if_pos hf]
      omega
    · rw [e1, if_neg hf] at h
      have ih := fineDownProbes_some f lo k j h
      rw [e2, if_neg hf]
      omega

/-- Phase 2 without a hit reads its whole range. -/
theorem fineDownProbes_none (f : Nat → Bool) (lo : Nat) :
    ∀ (k : Nat), fineDown f lo k = none → fineDownProbes f lo k = k
  | 0, _ => rfl
  | k + 1, h => by
    have e1 : fineDown f lo (k + 1) =
        (if f (lo + k) = true then some (lo + k) else fineDown f lo k) := rfl
    have e2 : fineDownProbes f lo (k + 1) =
        (if f (lo + k) = true then 1 else fineDownProbes f lo k + 1) := rfl
    by_cases hf : f (lo + k) = true
    · rw [e1, if_pos hf] at h
      exact Option.noConfusion h
    · rw [e1, if_neg hf] at h
      have ih := fineDownProbes_none f lo k h
      rw [e2, if_neg hf]
      omega

/-- vLLM's phase-2 loop is `fineDown` with `fineDownProbes` reads. -/
theorem legacyPhase2_eq (f : Nat → Bool) (lo : Nat) :
    ∀ (q k : Nat), legacyPhase2 f lo q k = (fineDown f lo k, q + fineDownProbes f lo k)
  | q, 0 => rfl
  | q, k + 1 => by
    have e1 : legacyPhase2 f lo q (k + 1) =
        (if f (lo + k) = true then (some (lo + k), q + 1) else legacyPhase2 f lo (q + 1) k) :=
      rfl
    have e2 : fineDown f lo (k + 1) =
        (if f (lo + k) = true then some (lo + k) else fineDown f lo k) := rfl
    have e3 : fineDownProbes f lo (k + 1) =
        (if f (lo + k) = true then 1 else fineDownProbes f lo k + 1) := rfl
    by_cases h : f (lo + k) = true
    · rw [if_pos h] at e1
      rw [if_pos h] at e2
      rw [if_pos h] at e3
      rw [e1, e2, e3]
    · rw [if_neg h] at e1
      rw [if_neg h] at e2
      rw [if_neg h] at e3
      rw [e1, e2, e3, legacyPhase2_eq f lo (q + 1) k]
      have hq : q + 1 + fineDownProbes f lo k = q + (fineDownProbes f lo k + 1) := by omega
      rw [hq]

/-! ## Arithmetic of the last three steps -/

/-- EAGLE drop and round-down never grow the hit. -/
theorem finishHit_le (raw bs align : Nat) (eagle : Bool) :
    finishHit raw bs align eagle ≤ raw := by
  have h1 := realign_le (eagleDrop raw bs align eagle) align
  have h2 : eagleDrop raw bs align eagle ≤ raw := by
    show (if eagle = true ∧ 0 < raw then raw - minN align bs else raw) ≤ raw
    by_cases h : eagle = true ∧ 0 < raw
    · rw [if_pos h]
      exact Nat.sub_le raw (minN align bs)
    · rw [if_neg h]
      exact Nat.le_refl raw
  show realign (eagleDrop raw bs align eagle) align ≤ raw
  omega

/-- `cdivN h bs ≤ q` when `h ≤ q * bs`. -/
theorem cdivN_le {h q bs : Nat} (hbs : 0 < bs) (hh : h ≤ q * bs) : cdivN h bs ≤ q := by
  show (h + bs - 1) / bs ≤ q
  have e := Nat.mod_add_div (h + bs - 1) bs
  have hc : q * bs = bs * q := Nat.mul_comm q bs
  rcases Nat.lt_or_ge q ((h + bs - 1) / bs) with hlt | hge
  · have m1 := mul_mono bs (show q + 1 ≤ (h + bs - 1) / bs from hlt)
    have m2 := mul_succ' bs q
    exfalso
    omega
  · exact hge

/-- A fine-grained tail hit stays inside block `p`: `(j + 1) * align ≤
(p + 1) * bs` for every `j < fineHi`. -/
theorem tailTokens_le {p j bs align maxLength nFine : Nat} (hm : fineMode bs align)
    (hj : j < fineHi p bs align maxLength nFine) : (j + 1) * align ≤ (p + 1) * bs := by
  have s1 := minN_spec (minN (p * (bs / align) + bs / align - 1) (maxLength / align)) nFine
  have s2 := minN_spec (p * (bs / align) + bs / align - 1) (maxLength / align)
  have hhi : fineHi p bs align maxLength nFine =
      minN (minN (p * (bs / align) + bs / align - 1) (maxLength / align)) nFine := rfl
  have hj2 : j + 1 ≤ p * (bs / align) + bs / align := by omega
  have e := Nat.mod_add_div bs align
  have hm2 : align < bs ∧ bs % align = 0 := hm
  have hmod : bs % align = 0 := hm2.2
  have hsplit : align * (bs / align) = bs := by omega
  have m1 := mul_mono align hj2
  have d1 : align * (p * (bs / align) + bs / align) =
      align * (p * (bs / align)) + align * (bs / align) := Nat.mul_add align _ _
  have d2 : align * (p * (bs / align)) = p * (align * (bs / align)) :=
    Nat.mul_left_comm align p (bs / align)
  rw [hsplit] at d2
  have d3 : (p + 1) * bs = p * bs + bs := Nat.succ_mul p bs
  have d4 : (j + 1) * align = align * (j + 1) := Nat.mul_comm (j + 1) align
  omega

/-! ## What `fullHit` returns -/

/-- Unfolding `fullHit` in fine-grained mode. -/
theorem fullHit_fine {c f : Nat → Bool} {nCached nFine maxLength bs align : Nat} {eagle : Bool}
    (hm : fineMode bs align) :
    fullHit c f nCached nFine maxLength bs align eagle =
      fullFinish (scanRun c 0 (phase1Limit maxLength bs nCached))
        (fineDown f (fineLo (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align)
          (fineHi (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align maxLength nFine -
            fineLo (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align))
        (scanProbes c 0 (phase1Limit maxLength bs nCached) +
          fineDownProbes f (fineLo (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align)
            (fineHi (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align maxLength nFine -
              fineLo (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align))
        bs align eagle :=
  if_pos hm

/-- Unfolding `fullHit` outside fine-grained mode. -/
theorem fullHit_not_fine {c f : Nat → Bool} {nCached nFine maxLength bs align : Nat}
    {eagle : Bool} (hm : ¬ fineMode bs align) :
    fullHit c f nCached nFine maxLength bs align eagle =
      fullFinish (scanRun c 0 (phase1Limit maxLength bs nCached)) none
        (scanProbes c 0 (phase1Limit maxLength bs nCached)) bs align eagle :=
  if_neg hm

/-- `fullFinish` keeps the prefix it was given. -/
theorem fullFinish_prefix (p : Nat) (t : Option Nat) (q bs align : Nat) (eagle : Bool) :
    (fullFinish p t q bs align eagle).prefix = p := rfl

/-- `fullFinish` keeps the tail it was given. -/
theorem fullFinish_tail (p : Nat) (t : Option Nat) (q bs align : Nat) (eagle : Bool) :
    (fullFinish p t q bs align eagle).tail = t := rfl

/-- `fullFinish` keeps the read count it was given. -/
theorem fullFinish_probes (p : Nat) (t : Option Nat) (q bs align : Nat) (eagle : Bool) :
    (fullFinish p t q bs align eagle).probes = q := rfl

/-- `fullFinish` trims to `cdivN` of the finished hit. -/
theorem fullFinish_numBlocks (p : Nat) (t : Option Nat) (q bs align : Nat)
    (eagle : Bool) :
    (fullFinish p t q bs align eagle).numBlocks =
      cdivN (finishHit (rawHit p t bs align) bs align eagle) bs := rfl

/-- The prefix is cached: every full block before `prefix` is. -/
theorem fullHit_prefix_cached (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat)
    (eagle : Bool) :
    AllCached c 0 (fullHit c f nCached nFine maxLength bs align eagle).prefix := by
  have h := scanRun_allCached c 0 (phase1Limit maxLength bs nCached)
  by_cases hm : fineMode bs align
  · rw [fullHit_fine hm, fullFinish_prefix]
    exact h
  · rw [fullHit_not_fine hm, fullFinish_prefix]
    exact h

/-- The prefix is the longest: it is `phase1Limit` or block `prefix` is a miss
(`MaxCachedPrefix`, which has one solution: `maxCachedPrefix_unique`). -/
theorem fullHit_prefix_maximal (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat)
    (eagle : Bool) :
    MaxCachedPrefix c (phase1Limit maxLength bs nCached)
      (fullHit c f nCached nFine maxLength bs align eagle).prefix := by
  have h := scanRun_zero_maxCachedPrefix c (phase1Limit maxLength bs nCached)
  by_cases hm : fineMode bs align
  · rw [fullHit_fine hm, fullFinish_prefix]
    exact h
  · rw [fullHit_not_fine hm, fullFinish_prefix]
    exact h

/-- Outside fine-grained mode there is no tail. -/
theorem fullHit_tail_not_fine (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat)
    (eagle : Bool) (hm : ¬ fineMode bs align) :
    (fullHit c f nCached nFine maxLength bs align eagle).tail = none := by
  rw [fullHit_not_fine hm, fullFinish_tail]

/-- A tail `j` is the highest cached fine index in `[fineLo p, fineHi p)` of
the prefix `p`: vLLM's high-to-low probe, first hit wins. -/
theorem fullHit_tail_highest (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat)
    (eagle : Bool) (j : Nat) (ht : (fullHit c f nCached nFine maxLength bs align eagle).tail = some j) :
    fineMode bs align ∧ fineLo (fullHit c f nCached nFine maxLength bs align eagle).prefix bs align ≤ j ∧
      j < fineHi (fullHit c f nCached nFine maxLength bs align eagle).prefix bs align maxLength nFine ∧ f j = true ∧
      (∀ i, j < i → i < fineHi (fullHit c f nCached nFine maxLength bs align eagle).prefix bs align maxLength nFine → ¬ f i = true) := by
  by_cases hm : fineMode bs align
  · rw [fullHit_fine hm, fullFinish_tail] at ht
    rw [fullHit_fine hm, fullFinish_prefix]
    obtain ⟨a, b, c1, d⟩ := fineDown_some f _ _ j ht
    refine ⟨hm, a, by omega, c1, ?_⟩
    intro i h1 h2
    exact d i h1 (by omega)
  · rw [fullHit_not_fine hm, fullFinish_tail] at ht
    exact Option.noConfusion ht

/-- No tail in fine-grained mode: no fine index in `[fineLo p, fineHi p)` is
cached. -/
theorem fullHit_tail_none (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat)
    (eagle : Bool) (hm : fineMode bs align) (ht : (fullHit c f nCached nFine maxLength bs align eagle).tail = none) :
    ∀ i, fineLo (fullHit c f nCached nFine maxLength bs align eagle).prefix bs align ≤ i → i < fineHi (fullHit c f nCached nFine maxLength bs align eagle).prefix bs align maxLength nFine →
      ¬ f i = true := by
  rw [fullHit_fine hm, fullFinish_tail] at ht
  rw [fullHit_fine hm, fullFinish_prefix]
  intro i h1 h2
  exact fineDown_none f _ _ ht i h1 (by omega)

/-- The hit is the raw hit of `(prefix, tail)` after the EAGLE drop and the
round-down; in particular at most the raw hit. -/
theorem fullHit_hit_le_raw (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat)
    (eagle : Bool) :
    (fullHit c f nCached nFine maxLength bs align eagle).hitTokens = finishHit (rawHit (fullHit c f nCached nFine maxLength bs align eagle).prefix (fullHit c f nCached nFine maxLength bs align eagle).tail bs align) bs align eagle ∧
      (fullHit c f nCached nFine maxLength bs align eagle).hitTokens ≤ rawHit (fullHit c f nCached nFine maxLength bs align eagle).prefix (fullHit c f nCached nFine maxLength bs align eagle).tail bs align := by
  by_cases hm : fineMode bs align
  · rw [fullHit_fine hm]
    exact ⟨rfl, finishHit_le _ bs align eagle⟩
  · rw [fullHit_not_fine hm]
    exact ⟨rfl, finishHit_le _ bs align eagle⟩

/-- The hit is a multiple of `alignment_tokens`. -/
theorem fullHit_aligned (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat)
    (eagle : Bool) (hal : 0 < align) :
    (fullHit c f nCached nFine maxLength bs align eagle).hitTokens % align = 0 := by
  by_cases hm : fineMode bs align
  · rw [fullHit_fine hm]
    exact realign_mod _ align hal
  · rw [fullHit_not_fine hm]
    exact realign_mod _ align hal

/-- The trim: `cdiv(hit_length, block_size)` blocks are kept. -/
theorem fullHit_trim (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat)
    (eagle : Bool) :
    (fullHit c f nCached nFine maxLength bs align eagle).numBlocks = cdivN (fullHit c f nCached nFine maxLength bs align eagle).hitTokens bs := by
  by_cases hm : fineMode bs align
  · rw [fullHit_fine hm]
    rfl
  · rw [fullHit_not_fine hm]
    rfl

/-- The kept blocks exist: at most the prefix's, plus the tail's when there
is a tail (so vLLM's `del computed[num_blocks:]` only ever shortens). -/
theorem fullHit_blocks_exist (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat)
    (eagle : Bool) (hbs : 0 < bs) :
    ((fullHit c f nCached nFine maxLength bs align eagle).tail = none → (fullHit c f nCached nFine maxLength bs align eagle).numBlocks ≤ (fullHit c f nCached nFine maxLength bs align eagle).prefix) ∧
      (∀ j, (fullHit c f nCached nFine maxLength bs align eagle).tail = some j → (fullHit c f nCached nFine maxLength bs align eagle).numBlocks ≤ (fullHit c f nCached nFine maxLength bs align eagle).prefix + 1) := by
  by_cases hm : fineMode bs align
  · rw [fullHit_fine hm, fullFinish_tail, fullFinish_numBlocks, fullFinish_prefix]
    constructor
    · intro ht
      rw [ht]
      exact cdivN_le hbs (finishHit_le _ bs align eagle)
    · intro j ht
      rw [ht]
      obtain ⟨a, b, _, _⟩ := fineDown_some f _ _ j ht
      have hj : j < fineHi (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align
          maxLength nFine := by omega
      have hraw := tailTokens_le hm hj
      have hfin := finishHit_le ((j + 1) * align) bs align eagle
      exact cdivN_le hbs (Nat.le_trans hfin hraw)
  · rw [fullHit_not_fine hm, fullFinish_tail, fullFinish_numBlocks, fullFinish_prefix]
    constructor
    · intro _
      exact cdivN_le hbs (finishHit_le _ bs align eagle)
    · intro j ht
      exact Option.noConfusion ht

/-- Phase 1's reads (outside fine-grained mode, all of them): the prefix, plus
the miss that stopped it when it stopped before `phase1Limit`. -/
theorem fullHit_probes_phase1 (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat)
    (eagle : Bool) (hm : ¬ fineMode bs align) :
    ((fullHit c f nCached nFine maxLength bs align eagle).prefix < phase1Limit maxLength bs nCached → (fullHit c f nCached nFine maxLength bs align eagle).probes = (fullHit c f nCached nFine maxLength bs align eagle).prefix + 1) ∧
      ((fullHit c f nCached nFine maxLength bs align eagle).prefix = phase1Limit maxLength bs nCached → (fullHit c f nCached nFine maxLength bs align eagle).probes = (fullHit c f nCached nFine maxLength bs align eagle).prefix) := by
  rw [fullHit_not_fine hm, fullFinish_probes, fullFinish_prefix]
  have h := scanProbes_exact c 0 (phase1Limit maxLength bs nCached)
  constructor
  · intro h1
    have h2 := h.1 (by omega)
    omega
  · intro h1
    have h2 := h.2 (by omega)
    omega

/-! ## vLLM's loop returns `fullHit` -/

/-- Field-wise equality of results. -/
theorem fullResult_ext :
    ∀ (a b : FullResult), a.hitTokens = b.hitTokens → a.numBlocks = b.numBlocks →
      a.prefix = b.prefix → a.tail = b.tail → a.probes = b.probes → a = b
  | ⟨a1, a2, a3, a4, a5⟩, ⟨b1, b2, b3, b4, b5⟩, h1, h2, h3, h4, h5 => by
    have e1 : a1 = b1 := h1
    have e2 : a2 = b2 := h2
    have e3 : a3 = b3 := h3
    have e4 : a4 = b4 := h4
    have e5 : a5 = b5 := h5
    subst e1 e2 e3 e4 e5
    rfl

/-- vLLM's end (`legacyFinish`) is `fullFinish` when the raw hit is
`rawHit p t` and the list it trims holds at least `cdiv` blocks. -/
theorem legacyFinish_eq {h cl p : Nat} {t : Option Nat} {q bs align : Nat} {eagle : Bool}
    (hraw : h = rawHit p t bs align)
    (hcl : cdivN (finishHit h bs align eagle) bs ≤ cl) :
    legacyFinish h cl p t q bs align eagle = fullFinish p t q bs align eagle := by
  have hfin : finishHit h bs align eagle = finishHit (rawHit p t bs align) bs align eagle := by
    rw [hraw]
  apply fullResult_ext
  · show finishHit h bs align eagle = finishHit (rawHit p t bs align) bs align eagle
    exact hfin
  · show minN cl (cdivN (finishHit h bs align eagle) bs) =
      cdivN (finishHit (rawHit p t bs align) bs align eagle) bs
    rw [← hfin]
    show (if cl ≤ cdivN (finishHit h bs align eagle) bs then cl
      else cdivN (finishHit h bs align eagle) bs) = cdivN (finishHit h bs align eagle) bs
    by_cases hc : cl ≤ cdivN (finishHit h bs align eagle) bs
    · rw [if_pos hc]
      omega
    · rw [if_neg hc]
  · rfl
  · rfl
  · rfl

/-- **vLLM's loop returns the declarative answer**: `legacyFullScan` (vLLM
0.33.0's `FullAttentionManager.find_longest_cache_hit`, line for line) and
`fullHit` agree on every input with `block_size ≥ 1`: same hit, blocks,
prefix, tail and number of reads. -/
theorem legacyFullScan_eq_fullHit (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat)
    (eagle : Bool) (hbs : 0 < bs) :
    legacyFullScan c f nCached nFine maxLength bs align eagle =
      fullHit c f nCached nFine maxLength bs align eagle := by
  have e1 := legacyPhase1_eq c 0 0 (minN (maxLength / bs) nCached)
  have hz : 0 + scanProbes c 0 (minN (maxLength / bs) nCached) =
      scanProbes c 0 (minN (maxLength / bs) nCached) := Nat.zero_add _
  show legacyAfterPhase1 f (legacyPhase1 c 0 0 (minN (maxLength / bs) nCached)) nFine
      maxLength bs align eagle = fullHit c f nCached nFine maxLength bs align eagle
  rw [e1, hz]
  have hn : ∀ p : Nat, cdivN (finishHit (p * bs) bs align eagle) bs ≤ p := by
    intro p
    exact cdivN_le hbs (finishHit_le (p * bs) bs align eagle)
  by_cases hm : fineMode bs align
  · rw [fullHit_fine hm]
    have hm' : align < bs ∧ bs % align = 0 := hm
    have ea : legacyAfterPhase1 f (scanRun c 0 (minN (maxLength / bs) nCached),
          scanProbes c 0 (minN (maxLength / bs) nCached)) nFine maxLength bs align eagle =
        legacyAfterPhase2
          (legacyPhase2 f (fineLo (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align)
            (scanProbes c 0 (phase1Limit maxLength bs nCached))
            (fineHi (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align maxLength nFine -
              fineLo (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align))
          (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align eagle :=
      if_pos hm'
    rw [ea, legacyPhase2_eq]
    cases ht : fineDown f (fineLo (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align)
        (fineHi (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align maxLength nFine -
          fineLo (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align) with
    | none =>
      exact legacyFinish_eq rfl (hn _)
    | some j =>
      obtain ⟨a, b, _, _⟩ := fineDown_some f _ _ j ht
      have hj : j < fineHi (scanRun c 0 (phase1Limit maxLength bs nCached)) bs align
          maxLength nFine := by omega
      have hraw := tailTokens_le hm hj
      have hfin := finishHit_le ((j + 1) * align) bs align eagle
      exact legacyFinish_eq rfl (cdivN_le hbs (Nat.le_trans hfin hraw))
  · rw [fullHit_not_fine hm]
    have hm' : ¬ (align < bs ∧ bs % align = 0) := hm
    have ea : legacyAfterPhase1 f (scanRun c 0 (minN (maxLength / bs) nCached),
          scanProbes c 0 (minN (maxLength / bs) nCached)) nFine maxLength bs align eagle =
        legacyFinish (scanRun c 0 (phase1Limit maxLength bs nCached) * bs)
          (scanRun c 0 (phase1Limit maxLength bs nCached))
          (scanRun c 0 (phase1Limit maxLength bs nCached)) none
          (scanProbes c 0 (phase1Limit maxLength bs nCached)) bs align eagle :=
      if_neg hm'
    rw [ea]
    exact legacyFinish_eq rfl (hn _)

end PrefixCache
