import PrefixCache.Spec.Window
import PrefixCache.Spec.Stride

/-!
# vLLM's full-attention lookup

`FullAttentionManager.find_longest_cache_hit` of vLLM 0.33.0, on two masks
(same names as `swa_prefix_cache/pyspec/full.py` and `swa_prefix_cache/core/proved/full_attention.h`):
`c i` says full block `i` is cached (`i < nCached`), `f j` that the prefix
of `(j + 1) * align` tokens is cached (a partial-tail entry, `j < nFine`).

* phase 1: the cached run `p` of full blocks from block 0, at most
  `maxLength / bs` (`scanRun` of `Spec/Stride.lean`);
* phase 2, in fine-grained mode (`align < bs`, `bs % align = 0`): the
  highest cached fine index in `[fineLo, fineHi)` (vLLM's
  `first_partial_idx`, `max_partial_idx`), probed high to low;
* EAGLE drops `min align bs` tokens of a non-empty hit; the hit is rounded
  down to `align`; `cdivN hit bs` blocks are kept.

`fullHit` composes the named pieces; `legacyFullScan` is vLLM's loop with its
accumulators (`computed`, `probes`, `hit_length`) and its final
`del computed[num_blocks:]`. `Thm/Full.lean` proves they agree and what the
answer means. DCP > 1 is out of scope.
-/

namespace PrefixCache

/-- vLLM's `fine_grained`. -/
def fineMode (bs align : Nat) : Prop := align < bs ∧ bs % align = 0

instance instDecidableFineMode (bs align : Nat) : Decidable (fineMode bs align) :=
  inferInstanceAs (Decidable (align < bs ∧ bs % align = 0))

/-- Phase 1 looks at full blocks `[0, phase1Limit)`. -/
def phase1Limit (maxLength bs nCached : Nat) : Nat := minN (maxLength / bs) nCached

/-- vLLM's `first_partial_idx`. -/
def fineLo (p bs align : Nat) : Nat := p * (bs / align)

/-- vLLM's `max_partial_idx`. -/
def fineHi (p bs align maxLength nFine : Nat) : Nat :=
  minN (minN (p * (bs / align) + bs / align - 1) (maxLength / align)) nFine

/-- `fineDown f lo k`: the highest `j` in `[lo, lo + k)` with `f j`,
reading from `lo + k - 1` down (fuel `k`). -/
def fineDown (f : Nat → Bool) (lo : Nat) : Nat → Option Nat
  | 0 => none
  | k + 1 => if f (lo + k) = true then some (lo + k) else fineDown f lo k

/-- Reads `fineDown f lo k` makes. -/
def fineDownProbes (f : Nat → Bool) (lo : Nat) : Nat → Nat
  | 0 => 0
  | k + 1 => if f (lo + k) = true then 1 else fineDownProbes f lo k + 1

/-- The hit before EAGLE and alignment, in tokens. -/
def rawHit (p : Nat) (t : Option Nat) (bs align : Nat) : Nat :=
  match t with
  | none => p * bs
  | some j => (j + 1) * align

/-- EAGLE drops one hash unit (fine-grained) or one block of a non-empty hit. -/
def eagleDrop (h bs align : Nat) (eagle : Bool) : Nat :=
  if eagle = true ∧ 0 < h then h - minN align bs else h

/-- vLLM's `cdiv` on naturals. -/
def cdivN (h bs : Nat) : Nat := (h + bs - 1) / bs

/-- EAGLE drop, then the round-down to `align` (`realign`). -/
def finishHit (raw bs align : Nat) (eagle : Bool) : Nat :=
  realign (eagleDrop raw bs align eagle) align

/-- What vLLM's output depends on: `numBlocks` blocks per group, the first of
`p = prefix` full blocks then the block of `tail`; `probes` reads. -/
structure FullResult where
  hitTokens : Nat
  numBlocks : Nat
  prefix : Nat
  tail : Option Nat
  probes : Nat

/-- The answer once phase 1 found `p` with `q` reads and phase 2 `t`:
EAGLE drop, round-down, trim to `cdivN h bs` blocks. -/
def fullFinish (p : Nat) (t : Option Nat) (q bs align : Nat) (eagle : Bool) : FullResult :=
  { hitTokens := finishHit (rawHit p t bs align) bs align eagle
    numBlocks := cdivN (finishHit (rawHit p t bs align) bs align eagle) bs
    prefix := p
    tail := t
    probes := q }

/-- After phase 1 (`p` blocks, `q` reads): in fine-grained mode the highest
cached fine boundary in `[fineLo, fineHi)`, then `fullFinish`. -/
def fullAfterPhase1 (f : Nat → Bool) (p q nFine maxLength bs align : Nat) (eagle : Bool) :
    FullResult :=
  if fineMode bs align then
    fullFinish p
      (fineDown f (fineLo p bs align) (fineHi p bs align maxLength nFine - fineLo p bs align))
      (q + fineDownProbes f (fineLo p bs align)
        (fineHi p bs align maxLength nFine - fineLo p bs align))
      bs align eagle
  else fullFinish p none q bs align eagle

/-- The answer from its named pieces (`swa_prefix_cache.pyspec.full.full_hit`): the longest
cached prefix, the highest cached fine boundary of the next block
(fine-grained mode), then EAGLE, round-down and trim. -/
def fullHit (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat) (eagle : Bool) :
    FullResult :=
  fullAfterPhase1 f (scanRun c 0 (phase1Limit maxLength bs nCached))
    (scanProbes c 0 (phase1Limit maxLength bs nCached)) nFine maxLength bs align eagle

/-- vLLM's phase-1 loop from block `i` with `k` iterations left:
`probes += 1; if not c[i]: break; computed.append(...)`; returns
`(len(computed), probes)`. -/
def legacyPhase1 (c : Nat → Bool) (i probes : Nat) : Nat → Nat × Nat
  | 0 => (i, probes)
  | k + 1 => if c i = true then legacyPhase1 c (i + 1) (probes + 1) k else (i, probes + 1)

/-- vLLM's phase-2 loop `for fine_idx in range(lo + k - 1, lo - 1, -1)`:
`probes += 1; if not f[fine_idx]: continue; ...; break`; returns
`(the index it broke on, probes)`. -/
def legacyPhase2 (f : Nat → Bool) (lo probes : Nat) : Nat → Option Nat × Nat
  | 0 => (none, probes)
  | k + 1 =>
    if f (lo + k) = true then (some (lo + k), probes + 1)
    else legacyPhase2 f lo (probes + 1) k

/-- The end of vLLM's method: EAGLE drop of `min(alignment_tokens,
block_size)`, round-down, `num_blocks = cdiv(...)`,
`del computed[num_blocks:]` on a list of `computedLen` blocks. -/
def legacyFinish (hitLength computedLen p : Nat) (tail : Option Nat) (probes bs align : Nat)
    (eagle : Bool) : FullResult :=
  { hitTokens :=
      (if eagle = true ∧ 0 < hitLength then hitLength - minN align bs else hitLength) -
        (if eagle = true ∧ 0 < hitLength then hitLength - minN align bs else hitLength) % align
    numBlocks := minN computedLen (cdivN
      ((if eagle = true ∧ 0 < hitLength then hitLength - minN align bs else hitLength) -
        (if eagle = true ∧ 0 < hitLength then hitLength - minN align bs else hitLength) % align)
      bs)
    prefix := p
    tail := tail
    probes := probes }

/-- After vLLM's phase 2 returned `r2` (the index it broke on, reads so
far), with `computed` full blocks: `hit_length` and the list grow by the
tail block when there is one. -/
def legacyAfterPhase2 (r2 : Option Nat × Nat) (computed bs align : Nat) (eagle : Bool) :
    FullResult :=
  match r2.1 with
  | none => legacyFinish (computed * bs) computed computed none r2.2 bs align eagle
  | some j => legacyFinish ((j + 1) * align) (computed + 1) computed (some j) r2.2 bs align eagle

/-- After vLLM's phase 1 returned `r1 = (len(computed), probes)`:
`scale_factor`, `first_partial_idx`, `max_partial_idx` and the phase-2
loop in fine-grained mode. -/
def legacyAfterPhase1 (f : Nat → Bool) (r1 : Nat × Nat) (nFine maxLength bs align : Nat)
    (eagle : Bool) : FullResult :=
  if align < bs ∧ bs % align = 0 then
    legacyAfterPhase2
      (legacyPhase2 f (r1.1 * (bs / align)) r1.2
        (minN (minN (r1.1 * (bs / align) + bs / align - 1) (maxLength / align)) nFine -
          r1.1 * (bs / align)))
      r1.1 bs align eagle
  else legacyFinish (r1.1 * bs) r1.1 r1.1 none r1.2 bs align eagle

/-- vLLM's `FullAttentionManager.find_longest_cache_hit`, line for line on
the masks (`swa_prefix_cache.pyspec.full.legacy_full_scan`). -/
def legacyFullScan (c f : Nat → Bool) (nCached nFine maxLength bs align : Nat) (eagle : Bool) :
    FullResult :=
  legacyAfterPhase1 f (legacyPhase1 c 0 0 (minN (maxLength / bs) nCached)) nFine maxLength bs
    align eagle

end PrefixCache
