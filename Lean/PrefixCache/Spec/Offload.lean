import PrefixCache.Spec.Window

/-!
# vLLM's KV-offload sliding-window lookup

Transcribed from `swa_prefix_cache/pyspec/offload_lookup.py` (`legacy_offload_scan`,
`offload_lookup`, `offload_stride_search`; C twins in
`swa_prefix_cache/core/proved/offload_lookup.{h,c}`).

Model: chunk `i` answers `manager.lookup(keys[i])` with `chunks i`:
`0` MISS, `2` HIT_PENDING, anything else HIT (pyspec and the C use `1`).
`RETRY` is not modelled. The answer is `Option Nat`: `none` is vLLM's `None`.
`initial = none` and `initial = some 0` both mean vLLM's
`initial_window_size or sliding_window_size` falls back to the window.

Every function is total by structural recursion: on the chunks left to read
(`offloadLegacyLoop`, `phase1`, `scanTri`, the searches of the declarative answer)
or on a fuel counter (`strideLoop2`, started with `m + 1 > bound`; see
`strideLoop2_fuel` in `Thm/Offload.lean`).
-/

namespace PrefixCache

/-! ## Vocabulary -/

/-- Chunks `[s, e)` are all HIT or HIT_PENDING. -/
def NonMiss (chunks : Nat → Nat) (s e : Nat) : Prop :=
  ∀ i, s ≤ i → i < e → chunks i ≠ 0

/-- No chunk of `[s, e)` is HIT_PENDING. -/
def NoPending (chunks : Nat → Nat) (s e : Nat) : Prop :=
  ∀ i, s ≤ i → i < e → chunks i ≠ 2

/-- vLLM's `initial_window_size or sliding_window_size`. -/
def requiredWindow (window : Nat) (initial : Option Nat) : Nat :=
  match initial with
  | some k => if k = 0 then window else k
  | none => window

/-- The answer `e` of a window, or `none` when the window holds a pending
chunk (vLLM's `None if pending_in_window else ...`). -/
def gate (pend : Bool) (e : Nat) : Option Nat :=
  if pend = true then none else some e

/-- `true` when one of the `k` chunks from `s` on is pending. -/
def pendingIn (chunks : Nat → Nat) (s : Nat) : Nat → Bool
  | 0 => false
  | k + 1 => chunks s == 2 || pendingIn chunks (s + 1) k

/-- `true` when the `k` chunks from `s` on are all non-miss. -/
def nonMissB (chunks : Nat → Nat) (s : Nat) : Nat → Bool
  | 0 => true
  | k + 1 => chunks s != 0 && nonMissB chunks (s + 1) k

/-- The rightmost miss in `[0, k)`. -/
def rightmostMiss (chunks : Nat → Nat) : Nat → Option Nat
  | 0 => none
  | k + 1 => if chunks k = 0 then some k else rightmostMiss chunks k

/-- The first miss at or after `j`, looking at `k` chunks (else `j + k`). -/
def leadingRun (chunks : Nat → Nat) (j : Nat) : Nat → Nat
  | 0 => j
  | k + 1 => if chunks j = 0 then j else leadingRun chunks (j + 1) k

/-- The largest `e ≤ e0` such that `window ≤ e` and `[e - window, e)` is
all non-miss. -/
def lastWindow (chunks : Nat → Nat) (window : Nat) : Nat → Option Nat
  | 0 => if window = 0 then some 0 else none
  | e + 1 =>
    if window ≤ e + 1 ∧ nonMissB chunks (e + 1 - window) window = true then some (e + 1)
    else lastWindow chunks window e

/-! ## The declarative answer (pyspec `offload_lookup`, clauses 1-4) -/

/-- 1. the window of `requiredWindow` chunks touching the right end;
2. no miss at all: `n`; 3. the rightmost window of `window` non-miss chunks
ending at or before the rightmost miss `m`; 4. the leading run. Each gated by
its pending chunks. -/
def offloadLookup (chunks : Nat → Nat) (n window : Nat) (initial : Option Nat) :
    Option Nat :=
  if 1 ≤ requiredWindow window initial ∧ requiredWindow window initial ≤ n ∧
      nonMissB chunks (n - requiredWindow window initial) (requiredWindow window initial) = true then
    gate (pendingIn chunks (n - requiredWindow window initial) (requiredWindow window initial)) n
  else
    match rightmostMiss chunks n with
    | none => gate (pendingIn chunks 0 n) n
    | some m =>
      match lastWindow chunks window m with
      | some e => gate (pendingIn chunks (e - window) window) e
      | none => gate (pendingIn chunks 0 (leadingRun chunks 0 n)) (leadingRun chunks 0 n)

/-! ## vLLM's loop (pyspec `legacy_offload_scan`) -/

/-- vLLM's loop with `k` chunks left to read (the next one is `k - 1`),
`hits = consecutive_hits`, `pend = pending_in_window`, `req = required_window`.
(Named `offloadLegacyLoop`, not `legacyLoop`: `Spec/Legacy.lean` already
declares `PrefixCache.legacyLoop`, and `PrefixCache.lean` imports both.) -/
def offloadLegacyLoop (chunks : Nat → Nat) (window : Nat) :
    Nat → Nat → Bool → Nat → Option Nat
  | 0, hits, pend, _ => gate pend hits
  | k + 1, hits, pend, req =>
    if chunks k = 0 then
      -- MISS: consecutive_hits = 0; pending_in_window = False; required = window
      if 0 = window then gate false (k + window)
      else offloadLegacyLoop chunks window k 0 false window
    else
      -- HIT / HIT_PENDING
      if hits + 1 = req then gate (pend || chunks k == 2) (k + req)
      else offloadLegacyLoop chunks window k (hits + 1) (pend || chunks k == 2) req

/-- vLLM 0.33.0's `_sliding_window_lookup` on `n` chunks. -/
def legacyOffloadScan (chunks : Nat → Nat) (n window : Nat) (initial : Option Nat) :
    Option Nat :=
  offloadLegacyLoop chunks window n 0 false (requiredWindow window initial)

/-! ## The stride search (pyspec `offload_stride_search`) -/

/-- Phase 1, as vLLM: with `k` chunks left from the right end, `count` read.
`.inl a`: decided (the initial window, or no miss at all); `.inr m`: the
rightmost miss `m`. -/
def phase1 (chunks : Nat → Nat) (n r : Nat) : Nat → Nat → Bool → Sum (Option Nat) Nat
  | 0, _, pend => .inl (gate pend n)
  | k + 1, count, pend =>
    if chunks k = 0 then .inr k
    else if count + 1 = r then .inl (gate (pend || chunks k == 2) n)
    else phase1 chunks n r k (count + 1) (pend || chunks k == 2)

/-- Read chunks `j, j+1, …` (at most `k`) and stop at the first miss:
(where it stopped, whether a chunk read before it was pending). -/
def scanTri (chunks : Nat → Nat) (j : Nat) : Nat → Nat × Bool
  | 0 => (j, false)
  | k + 1 =>
    if chunks j = 0 then (j, false)
    else ((scanTri chunks (j + 1) k).1, chunks j == 2 || (scanTri chunks (j + 1) k).2)

/-- Phase 2: candidate `[bound - window, bound)`, read left to right from its
start up to `knownLo` (`[knownLo, bound)` is known non-miss, `kp`: one of them
pending). `.inl a`: found; `.inr (bound, knownLo, kp)`: no window. -/
def strideLoop2 (chunks : Nat → Nat) (window : Nat) :
    Nat → Nat → Nat → Bool → Sum (Option Nat) (Nat × Nat × Bool)
  | 0, bound, knownLo, kp => .inr (bound, knownLo, kp)
  | fuel + 1, bound, knownLo, kp =>
    if bound < window then .inr (bound, knownLo, kp)
    else if (scanTri chunks (bound - window) (knownLo - (bound - window))).1 = knownLo then
      .inl (gate ((scanTri chunks (bound - window) (knownLo - (bound - window))).2 || kp) bound)
    else
      strideLoop2 chunks window fuel
        (scanTri chunks (bound - window) (knownLo - (bound - window))).1 (bound - window)
        (scanTri chunks (bound - window) (knownLo - (bound - window))).2

/-- Phase 3: the leading run, reusing `[knownLo, bound)`. -/
def phase3 (chunks : Nat → Nat) (bound knownLo : Nat) (kp : Bool) : Option Nat :=
  if (scanTri chunks 0 knownLo).1 = knownLo then gate ((scanTri chunks 0 knownLo).2 || kp) bound
  else gate (scanTri chunks 0 knownLo).2 (scanTri chunks 0 knownLo).1

/-- The stride search (fuel `m + 1 > bound = m` for phase 2). -/
def offloadStrideSearch (chunks : Nat → Nat) (n window : Nat) (initial : Option Nat) :
    Option Nat :=
  match phase1 chunks n (requiredWindow window initial) n 0 false with
  | .inl a => a
  | .inr m =>
    if window = 0 then some m
    else
      match strideLoop2 chunks window (m + 1) m m false with
      | .inl a => a
      | .inr (b, kl, kp) => phase3 chunks b kl kp

/-- How many chunks `scanTri chunks j k` reads. -/
def scanTriProbes (chunks : Nat → Nat) (j : Nat) : Nat → Nat
  | 0 => 0
  | k + 1 => if chunks j = 0 then 1 else scanTriProbes chunks (j + 1) k + 1

end PrefixCache
