import PrefixCache.Spec.Stride

/-!
# The joint (multi-group) lookup

Transcribed from `swa_prefix_cache/pyspec/joint.py` (`full_attention_hit`, `swa_hit`,
`group_hit`, `accepts`, `joint_lookup`, `max_rounds_bound`): vLLM 0.33.0's
`HybridKVCacheCoordinator.find_longest_cache_hit`, the fixed point over the
KV-cache groups of a hybrid model.

Simplifications against pyspec (all checked by
`tests/test_theorems.py::test_joint_transcription_matches_pyspec`):

* the input is the list of *attention groups* (pyspec `attention_groups`:
  groups with equal specs already merged, full attention first); merging is
  list bookkeeping, not part of the fixed point;
* a group's cache is a total function `cached : Nat → Bool` (pyspec: a tuple;
  past its end every block reads as a miss, which is what pyspec's
  `min(max_length // block_size, len(cached))` and the mask length check do);
* a sliding window is given by `winBlocks = cdiv(W - 1, block_size)` for a
  window of `W ≥ 1` tokens (vLLM windows are positive); the lookup's run is
  then `max(winBlocks + drop, 1)` blocks, pyspec's
  `max(contiguous_blocks_for_hit(W, bs, drop), 1)`;
* the alignment period of a sliding-window group is `align / blockSize`,
  pyspec's `align / gcd(align, blockSize)` under pyspec's input check
  `align % blockSize == 0`;
* only what the fixed point needs is returned: the hit length, the number of
  rounds and the trace (pyspec `JointResult.hit_length`, `.rounds`,
  `.trace`); the per-group block lists, `num_uncached_common_prefix_tokens`
  and `eagle_unproven_groups` are not modelled;
* the `cap` argument is pyspec's `num_hash_blocks * hash_block_size`.
-/

namespace PrefixCache

/-- A flag as a number, `0` or `1` (pyspec `int(flag)`). -/
def egOf (b : Bool) : Nat := if b = true then 1 else 0

/-- One attention group (pyspec `AttentionGroup`): full attention when
`full = true`, else a sliding window of `winBlocks` blocks
(`cdiv(W - 1, blockSize)`); `eagle` says whether it drops the EAGLE block. -/
structure AttnGroup where
  blockSize : Nat
  full : Bool
  winBlocks : Nat
  eagle : Bool
  cached : Nat → Bool

/-- The EAGLE drop of the full-attention lookup: `hit - amount` when
dropping and the hit is not empty. -/
def jointEagleDrop (drop : Bool) (amount hit : Nat) : Nat :=
  if drop = true ∧ 0 < hit then hit - amount else hit

/-- pyspec `full_attention_hit` (tokens): the cached run from block 0 within
`maxLength / blockSize` blocks, in tokens; EAGLE drops
`min(align, blockSize)` tokens of a non-empty hit; then rounded down to
`align`. -/
def fullAttentionHit (cached : Nat → Bool) (maxLength blockSize align : Nat) (drop : Bool) :
    Nat :=
  realign (jointEagleDrop drop (minN align blockSize)
    (scanRun cached 0 (maxLength / blockSize) * blockSize)) align

/-- pyspec `swa_hit` (in tokens, as pyspec `group_hit` uses it): `findHit`
on `maxLength / blockSize` blocks, run `winBlocks + drop`, period
`align / blockSize`, EAGLE flag `drop`. -/
def swaHit (cached : Nat → Bool) (maxLength blockSize winBlocks align : Nat) (drop : Bool) :
    Nat :=
  (findHit cached (maxLength / blockSize) (winBlocks + egOf drop) (align / blockSize)
    (egOf drop)).length * blockSize

/-- pyspec `group_hit` (tokens only): one lookup of one attention group. -/
def groupHit (g : AttnGroup) (align : Nat) (drop : Bool) (maxLength : Nat) : Nat :=
  if g.full = true then fullAttentionHit g.cached maxLength g.blockSize align drop
  else swaHit g.cached maxLength g.blockSize g.winBlocks align drop

/-- The `max_length` of the loop's call at candidate `c`: one block past the
candidate, capped at `cap`, when dropping; `c` otherwise. -/
def callMax (g : AttnGroup) (cap : Nat) (drop : Bool) (c : Nat) : Nat :=
  if drop = true then minN (c + g.blockSize) cap else c

/-- pyspec `accepts(g, L)`: the group's own lookup, called as the loop calls
it at candidate `L` (EAGLE: with the drop, from one block past), returns
exactly `L`. -/
def Accepts (g : AttnGroup) (align cap L : Nat) : Prop :=
  groupHit g align g.eagle (callMax g cap g.eagle L) = L

/-- pyspec `accepts(g, L, plain=True)`: the lookup without the drop at
`max_length = L` returns `L`. -/
def PlainAccepts (g : AttnGroup) (align L : Nat) : Prop :=
  groupHit g align false L = L

/-! ## The loop -/

/-- The loop state inside a round: the running candidate `curr`, the
EAGLE-verified attention groups (by index) and the recorded answers
(pyspec `answers`, `none` until the group is looked up). -/
structure JointState where
  curr : Nat
  verified : Nat → Bool
  answers : Nat → Option Nat

/-- `answers[idx] is not None`. -/
def hasAns : Option Nat → Bool
  | some _ => true
  | none => false

/-- The recorded answer (`0` when there is none; never read then). -/
def optGet : Option Nat → Nat
  | some a => a
  | none => 0

/-- `verified.add(idx)`. -/
def setTrue (v : Nat → Bool) (idx : Nat) : Nat → Bool :=
  fun j => if j = idx then true else v j

/-- `answers[idx] = t`. -/
def setAns (a : Nat → Option Nat) (idx t : Nat) : Nat → Option Nat :=
  fun j => if j = idx then some t else a j

/-- pyspec `drop = a.eagle and idx not in eagle_verified`. -/
def dropFlag (g : AttnGroup) (s : JointState) (idx : Nat) : Bool :=
  g.eagle && !(s.verified idx)

/-- A full-attention group already looked up (pyspec: `a.is_full and
answers[idx] is not None`) is not looked up again. -/
def skipFull (g : AttnGroup) (s : JointState) (idx : Nat) : Prop :=
  g.full = true ∧ hasAns (s.answers idx) = true

instance instDecidableSkipFull (g : AttnGroup) (s : JointState) (idx : Nat) :
    Decidable (skipFull g s idx) :=
  inferInstanceAs (Decidable (g.full = true ∧ hasAns (s.answers idx) = true))

/-- The answer of the lookup the loop makes for group `g` at index `idx`. -/
def stepAnswer (g : AttnGroup) (align cap idx : Nat) (s : JointState) : Nat :=
  groupHit g align (dropFlag g s idx) (callMax g cap (dropFlag g s idx) s.curr)

/-- `curr` after group `idx`: `min(curr, answers[idx])` for a full group
already looked up, else the lookup's answer. -/
def stepCurr (g : AttnGroup) (align cap idx : Nat) (s : JointState) : Nat :=
  if skipFull g s idx then minN s.curr (optGet (s.answers idx))
  else stepAnswer g align cap idx s

/-- The verified set after group `idx`: add `idx` after a drop; clear it
after a non-dropping lookup that shrank the candidate (#32802). -/
def stepVerified (g : AttnGroup) (align cap idx : Nat) (s : JointState) : Nat → Bool :=
  if skipFull g s idx then s.verified
  else if dropFlag g s idx = true then setTrue s.verified idx
  else if stepAnswer g align cap idx s < s.curr then (fun _ => false)
  else s.verified

/-- The answers after group `idx`. -/
def stepAnswers (g : AttnGroup) (align cap idx : Nat) (s : JointState) : Nat → Option Nat :=
  if skipFull g s idx then s.answers
  else setAns s.answers idx (stepAnswer g align cap idx s)

/-- One group's turn in a round (the body of pyspec's `for idx, a in
enumerate(agroups)`). -/
def jointStep (g : AttnGroup) (align cap idx : Nat) (s : JointState) : JointState :=
  ⟨stepCurr g align cap idx s, stepVerified g align cap idx s, stepAnswers g align cap idx s⟩

/-- One round: every attention group in order, from index `idx`. -/
def jointRound (align cap : Nat) : List AttnGroup → Nat → JointState → JointState
  | [], _, s => s
  | g :: rest, idx, s => jointRound align cap rest (idx + 1) (jointStep g align cap idx s)

/-- pyspec `is_simple_hybrid`: exactly two attention groups, the first full
attention. -/
def isSimpleHybrid : List AttnGroup → Bool
  | [g, _] => g.full
  | _ => false

/-- What the loop returns: pyspec `JointResult.hit_length`, `.rounds` and
`.trace` (`hit_length` at the start of every round, then the answer). -/
structure JointResult where
  hitLength : Nat
  rounds : Nat
  trace : List Nat

/-- The state at the end of the round that starts at candidate `hit`. -/
def roundOf (gs : List AttnGroup) (align cap hit : Nat) (v : Nat → Bool)
    (ans : Nat → Option Nat) : JointState :=
  jointRound align cap gs 0 ⟨hit, v, ans⟩

/-- pyspec `joint_lookup`'s `while True` loop, on fuel. A round that leaves
`curr ≥ hit_length` ends the loop (fixed point); otherwise the candidate
becomes `curr`, and the loop ends after one round for a simple hybrid. Each
continuing round lowers `hit_length` strictly, so fuel `hit + 1` never runs
out (`jointLoop_fuel`). -/
def jointLoop (gs : List AttnGroup) (align cap : Nat) :
    Nat → Nat → (Nat → Bool) → (Nat → Option Nat) → JointResult
  | 0, hit, _, _ => ⟨hit, 0, [hit]⟩
  | fuel + 1, hit, v, ans =>
    if hit ≤ (roundOf gs align cap hit v ans).curr then ⟨hit, 1, [hit, hit]⟩
    else if isSimpleHybrid gs = true then
      ⟨(roundOf gs align cap hit v ans).curr, 1, [hit, (roundOf gs align cap hit v ans).curr]⟩
    else
      ⟨(jointLoop gs align cap fuel (roundOf gs align cap hit v ans).curr
          (roundOf gs align cap hit v ans).verified (roundOf gs align cap hit v ans).answers).hitLength,
        (jointLoop gs align cap fuel (roundOf gs align cap hit v ans).curr
          (roundOf gs align cap hit v ans).verified (roundOf gs align cap hit v ans).answers).rounds + 1,
        hit :: (jointLoop gs align cap fuel (roundOf gs align cap hit v ans).curr
          (roundOf gs align cap hit v ans).verified (roundOf gs align cap hit v ans).answers).trace⟩

/-- pyspec `joint_lookup` on attention groups: start at
`max_cache_hit_length`, nothing verified, nothing recorded. `cap` is
`num_hash_blocks * hash_block_size`. -/
def jointLookup (gs : List AttnGroup) (maxLength align cap : Nat) : JointResult :=
  jointLoop gs align cap (maxLength + 1) maxLength (fun _ => false) (fun _ => none)

/-- pyspec `max_rounds_bound`. -/
def maxRoundsBound (maxLength align : Nat) : Nat := 2 + maxLength / align

end PrefixCache
