/-!
# Windows, the alignment gate, re-alignment

The vocabulary shared by every other file. Same names as `swa_prefix_cache/pyspec/search.py`
(camelCase here, snake_case there).

Model: the cache is a function `cached : Nat → Bool` (block `i` is cached when
`cached i = true`) and the request has `n` blocks; only blocks `< n` are ever
looked at (see `strideSearch_boundary_safety`). The EAGLE flag is the number
`eg`, `0` or `1` (pyspec's `int(eagle)`); `need ≥ 1` and `period ≥ 1` are
hypotheses of the theorems, never of the definitions (every function here is
total).
-/

namespace PrefixCache

/-- `minN a b` is `min a b`, written as an `if` so that proofs can split on
it without depending on library lemmas about `min`. -/
def minN (a b : Nat) : Nat := if a ≤ b then a else b

/-- Blocks `[s, e)` are all cached. -/
def AllCached (cached : Nat → Bool) (s e : Nat) : Prop :=
  ∀ i, s ≤ i → i < e → cached i = true

/-- `ValidWindow`: the half-open block range `[s, e)` lies in the `n`-block
request, spans at least `need` blocks and is all cached (pyspec
`valid_window`; `s ≥ 0` is automatic for `Nat`). -/
def ValidWindow (cached : Nat → Bool) (n need s e : Nat) : Prop :=
  s ≤ e ∧ e ≤ n ∧ need ≤ e - s ∧ AllCached cached s e

/-- The alignment gate: a window ending at `e` leaves `e - eg` blocks after
the EAGLE drop, and that count must be a multiple of `period` (pyspec
`aligned_end`). Stated with `eg ≤ e` so that the `Nat` subtraction is exact:
Python's `(e - eagle) % period` differs only for `e < eg`, i.e. `e = 0` with
EAGLE on, which is never the end of a window (windows have `e ≥ need ≥ 1`). -/
def AlignedEnd (period eg e : Nat) : Prop :=
  eg ≤ e ∧ (e - eg) % period = 0

instance instDecidableAlignedEnd (period eg e : Nat) :
    Decidable (AlignedEnd period eg e) :=
  inferInstanceAs (Decidable (eg ≤ e ∧ (e - eg) % period = 0))

/-- vLLM's re-alignment loop (pop until aligned) in closed form: the largest
multiple of `period` that is at most `len` (pyspec `realign`). -/
def realign (len period : Nat) : Nat := len - len % period

/-- The largest `e ≤ bound` with `AlignedEnd period eg e`, valid when
`eg ≤ bound` (see `alignDown_aligned` and `le_alignDown_of_aligned`). -/
def alignDown (bound period eg : Nat) : Nat := bound - (bound - eg) % period

/-- pyspec `last_aligned_end`, with `none` where pyspec returns `-1`
(no candidate: `bound < eg`). The search inlines this as
`if bound < eg then … else alignDown bound period eg`. -/
def lastAlignedEnd (bound period eg : Nat) : Option Nat :=
  if bound < eg then none else some (alignDown bound period eg)

/-- No valid window of `need` blocks has an aligned end in `(b, n]`. -/
def NoValidAfter (cached : Nat → Bool) (n need period eg b : Nat) : Prop :=
  ∀ e, b < e → AlignedEnd period eg e → ValidWindow cached n need (e - need) e → False

/-- No valid window of `need` blocks has an aligned end at all. -/
def NoValidWindow (cached : Nat → Bool) (n need period eg : Nat) : Prop :=
  ∀ e, AlignedEnd period eg e → ValidWindow cached n need (e - need) e → False

/-- `e` is the answer of the stride search: the window `[e - need, e)` is
valid, `e` is aligned, and no valid window has an aligned end after `e`. -/
def IsRightmost (cached : Nat → Bool) (n need period eg e : Nat) : Prop :=
  AlignedEnd period eg e ∧ ValidWindow cached n need (e - need) e ∧
    NoValidAfter cached n need period eg e

/-- `p` is the run of cached blocks from block 0, capped at `limit`:
`[0, p)` is cached and either `p = limit` or block `p` is a miss. -/
def MaxCachedPrefix (cached : Nat → Bool) (limit p : Nat) : Prop :=
  p ≤ limit ∧ AllCached cached 0 p ∧ (p < limit → ¬ cached p = true)

end PrefixCache
