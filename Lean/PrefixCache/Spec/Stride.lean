import PrefixCache.Spec.Window

/-!
# The stride search, the prefix fallback and `findHit`

Transcribed from `swa_prefix_cache/pyspec/search.py` (`stride_search`, `prefix_fallback`,
`find_hit`). Every function is total and defined by structural recursion:

* the inner scan `scanRun` recurses on the number of blocks left to read;
* the outer loop `strideLoop` recurses on a fuel counter. pyspec's loop
  terminates because `bound` strictly decreases; here `strideSearch` starts
  with fuel `n + 1 > bound`, and `strideSearch_total` (Thm/Stride.lean)
  proves that any larger fuel gives the same answer, so the fuel never cuts
  the loop short.

Probes (reads of `cached`) are modelled by two companions that follow the
same control flow: `strideProbesLoop` counts them and `strideReadsLoop` says
which indices are read.
-/

namespace PrefixCache

/-! ## The inner scan -/

/-- Read blocks `j, j+1, …` left to right, at most `k` of them, and stop at
the first miss. Returns the index of the miss, or `j + k` when all `k` blocks
are cached (pyspec: `while j < scan_to and cached[j]: j += 1`). -/
def scanRun (cached : Nat → Bool) (j : Nat) : Nat → Nat
  | 0 => j
  | k + 1 => if cached j = true then scanRun cached (j + 1) k else j

/-- Number of reads `scanRun cached j k` makes: the cached blocks it walks
over, plus the miss if it stops on one. -/
def scanProbes (cached : Nat → Bool) (j : Nat) : Nat → Nat
  | 0 => 0
  | k + 1 => if cached j = true then scanProbes cached (j + 1) k + 1 else 1

/-- `scanReads cached j k i`: block `i` is read by `scanRun cached j k`. -/
def scanReads (cached : Nat → Bool) (j : Nat) : Nat → Nat → Prop
  | 0, _ => False
  | k + 1, i => i = j ∨ (cached j = true ∧ scanReads cached (j + 1) k i)

/-! ## One step of the outer loop -/

/-- `start = end - need`, the anchor of the candidate window whose end is the
last aligned end at or below `bound`. -/
def winStart (need period eg bound : Nat) : Nat := alignDown bound period eg - need

/-- `scan_to = min end knownLo`: blocks `[knownLo, bound)` are already known
to be cached and are not read again. -/
def scanLimit (period eg bound knownLo : Nat) : Nat :=
  minN (alignDown bound period eg) knownLo

/-- Where the scan of the candidate window stops: the first miss in
`[start, scan_to)`, or `scan_to`. -/
def missAt (cached : Nat → Bool) (need period eg bound knownLo : Nat) : Nat :=
  scanRun cached (winStart need period eg bound)
    (scanLimit period eg bound knownLo - winStart need period eg bound)

/-! ## The outer loop -/

/-- pyspec `stride_search`'s loop with state `(bound, knownLo)`, on fuel.
Each round: `end := lastAlignedEnd bound`; give up if there is none or
`end < need`; scan `[end - need, min end knownLo)`; a miss at `j` continues
with `bound := j`, `knownLo := end - need`; no miss returns `end`.
(pyspec tests `j == scan_to`; here the round continues exactly when
`j < scan_to`, which is the same since the scan never passes `scan_to`.) -/
def strideLoop (cached : Nat → Bool) (need period eg : Nat) :
    Nat → Nat → Nat → Option Nat
  | 0, _, _ => none
  | fuel + 1, bound, knownLo =>
    if bound < eg then none
    else if alignDown bound period eg < need then none
    else if missAt cached need period eg bound knownLo < scanLimit period eg bound knownLo then
      strideLoop cached need period eg fuel
        (missAt cached need period eg bound knownLo) (winStart need period eg bound)
    else some (alignDown bound period eg)

/-- The stride search: the largest aligned `end` whose window
`[end - need, end)` is valid, or `none` (pyspec `stride_search`). Starts with
`bound = knownLo = n` and fuel `n + 1`. -/
def strideSearch (cached : Nat → Bool) (n need period eg : Nat) : Option Nat :=
  strideLoop cached need period eg (n + 1) n n

/-- Probes made by `strideLoop` (same control flow, counting reads). -/
def strideProbesLoop (cached : Nat → Bool) (need period eg : Nat) :
    Nat → Nat → Nat → Nat
  | 0, _, _ => 0
  | fuel + 1, bound, knownLo =>
    if bound < eg then 0
    else if alignDown bound period eg < need then 0
    else if missAt cached need period eg bound knownLo < scanLimit period eg bound knownLo then
      scanProbes cached (winStart need period eg bound)
          (scanLimit period eg bound knownLo - winStart need period eg bound) +
        strideProbesLoop cached need period eg fuel
          (missAt cached need period eg bound knownLo) (winStart need period eg bound)
    else
      scanProbes cached (winStart need period eg bound)
        (scanLimit period eg bound knownLo - winStart need period eg bound)

/-- Probes made by `strideSearch` (pyspec: `CountingMask.probes` after
`stride_search`). -/
def strideProbes (cached : Nat → Bool) (n need period eg : Nat) : Nat :=
  strideProbesLoop cached need period eg (n + 1) n n

/-- `strideReadsLoop … i`: block `i` is read by `strideLoop` (same control
flow as the loop). -/
def strideReadsLoop (cached : Nat → Bool) (need period eg : Nat) :
    Nat → Nat → Nat → Nat → Prop
  | 0, _, _, _ => False
  | fuel + 1, bound, knownLo, i =>
    if bound < eg then False
    else if alignDown bound period eg < need then False
    else if missAt cached need period eg bound knownLo < scanLimit period eg bound knownLo then
      scanReads cached (winStart need period eg bound)
          (scanLimit period eg bound knownLo - winStart need period eg bound) i ∨
        strideReadsLoop cached need period eg fuel
          (missAt cached need period eg bound knownLo) (winStart need period eg bound) i
    else
      scanReads cached (winStart need period eg bound)
        (scanLimit period eg bound knownLo - winStart need period eg bound) i

/-- `strideReads cached n need period eg i`: block `i` is read by
`strideSearch`. -/
def strideReads (cached : Nat → Bool) (n need period eg i : Nat) : Prop :=
  strideReadsLoop cached need period eg (n + 1) n n i

/-! ## The prefix fallback -/

/-- `max(last_aligned_end(p), 0)` in pyspec: `0` when `p < eg`. -/
def lastAlignedClamp (period eg p : Nat) : Nat :=
  if p < eg then 0 else alignDown p period eg

/-- The EAGLE drop: if EAGLE is on and the hit is not empty, drop the last
block and re-align (pyspec `if p.eagle and length > 0`; vLLM
`if drop_eagle_block and computed`). -/
def eaglePop (period eg len : Nat) : Nat :=
  if 0 < eg ∧ 0 < len then realign (len - 1) period else len

/-- pyspec `prefix_fallback`'s formula over the cached prefix `p`:
clamp to the last aligned end, re-align, EAGLE pop. -/
def fallbackLength (period eg p : Nat) : Nat :=
  eaglePop period eg (realign (lastAlignedClamp period eg p) period)

/-- How far the fallback looks: `min (need - 1) n`. -/
def prefixLimit (n need : Nat) : Nat := minN (need - 1) n

/-- The cached run from block 0, capped at `prefixLimit` (pyspec:
`while prefix < limit and cached[prefix]: prefix += 1`). -/
def prefixRun (cached : Nat → Bool) (n need : Nat) : Nat :=
  scanRun cached 0 (prefixLimit n need)

/-- pyspec `prefix_fallback`: hit length in blocks when no window is found. -/
def prefixFallback (cached : Nat → Bool) (n need period eg : Nat) : Nat :=
  fallbackLength period eg (prefixRun cached n need)

/-! ## `findHit` -/

/-- Everything vLLM's output lists depend on: `length` blocks, of which
`[0, firstReal)` are null blocks and `[firstReal, length)` cached ones
(pyspec `HitResult`). -/
structure HitResult where
  length : Nat
  firstReal : Nat
  deriving Repr

/-- vLLM's loop treats any `need` below 1 as 1 (`max need 1`). -/
def effNeed (need : Nat) : Nat := if need = 0 then 1 else need

/-- The hit for a stride-search answer (`need` is the effective need). -/
def hitOf (cached : Nat → Bool) (n need period eg : Nat) : Option Nat → HitResult
  | some e => ⟨e - eg, e - need⟩
  | none => ⟨prefixFallback cached n need period eg, 0⟩

/-- `findHit` for an effective `need ≥ 1` (pyspec `find_hit`). -/
def findHitCore (cached : Nat → Bool) (n need period eg : Nat) : HitResult :=
  hitOf cached n need period eg (strideSearch cached n need period eg)

/-- vLLM's SWA cache hit from the stride search or the prefix fallback; any
`need` is first clamped to at least 1. -/
def findHit (cached : Nat → Bool) (n need period eg : Nat) : HitResult :=
  findHitCore cached n (effNeed need) period eg

end PrefixCache
