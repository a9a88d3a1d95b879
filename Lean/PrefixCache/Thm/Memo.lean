import PrefixCache.Spec.Memo
import PrefixCache.Thm.Joint

/-!
# The lookup memory answers what the lookup would

`memo_sound`: a lookup over a map changed only by writes of unwatched keys
answers exactly what it answered before the writes, so an answer
remembered at that time is still the answer. `coarseView_watched`: every
hash a group reads, at any block size, is one of the request's hashes, so
watching the request's hashes (`memB`) watches everything the lookup reads.
`applyWrite_watched_may_change`: the watch cannot be narrower in general: a
write of a read key changes that key.

`tests/test_theorems_memo.py` checks each statement on pyspec's joint
lookup; `tests/test_lookup_memo.py` checks the Python memory against vLLM.
-/

namespace PrefixCache

/-- A write of an unwatched hash leaves every watched key as it was. -/
theorem applyWrite_unwatched (m : PoolMap) (w : MapWrite) (watch : Nat → Bool)
    (hw : watch w.hash = false) (h g : Nat) (hh : watch h = true) :
    applyWrite m w h g = m h g := by
  show (if h = w.hash ∧ g = w.group then w.present else m h g) = m h g
  have hne : ¬ (h = w.hash ∧ g = w.group) := by
    intro c
    have e : watch h = watch w.hash := congrArg watch c.1
    rw [hh, hw] at e
    exact false_ne_true' e.symm
  exact if_neg hne

/-- Writes of unwatched hashes leave every watched key as it was. -/
theorem applyWrites_unwatched (watch : Nat → Bool) (h g : Nat) (hh : watch h = true) :
    ∀ (ws : List MapWrite) (m : PoolMap), WritesUnwatched watch ws →
      applyWrites m ws h g = m h g
  | [], _, _ => rfl
  | w :: ws, m, hws => by
    have hws' : watch w.hash = false ∧ WritesUnwatched watch ws := hws
    show applyWrites (applyWrite m w) ws h g = m h g
    rw [applyWrites_unwatched watch h g hh ws (applyWrite m w) hws'.2]
    exact applyWrite_unwatched m w watch hws'.1 h g hh

/-- A group's mask depends on the map only at the keys it reads. -/
theorem groupMask_frame (m m' : PoolMap) (watch : Nat → Bool) (r : GroupReads)
    (agree : ∀ h g, watch h = true → m h g = m' h g)
    (reads : ∀ i h, r.view i = some h → watch h = true) :
    groupMask m r = groupMask m' r := by
  apply funext
  intro i
  show readKey m r.groupId (r.view i) = readKey m' r.groupId (r.view i)
  cases hv : r.view i with
  | none => rfl
  | some h => exact agree h r.groupId (reads i h hv)

/-- Maps that agree on the watched keys give the joint lookup the same
groups. -/
theorem attnGroups_frame (m m' : PoolMap) (watch : Nat → Bool)
    (agree : ∀ h g, watch h = true → m h g = m' h g) :
    ∀ rs : List GroupReads, ReadsWatched watch rs →
      rs.map (toAttnGroup m) = rs.map (toAttnGroup m')
  | [], _ => rfl
  | r :: rs, hr => by
    have hr' : (∀ i h, r.view i = some h → watch h = true) ∧ ReadsWatched watch rs := hr
    show toAttnGroup m r :: rs.map (toAttnGroup m) = toAttnGroup m' r :: rs.map (toAttnGroup m')
    rw [attnGroups_frame m m' watch agree rs hr'.2]
    show (⟨r.blockSize, r.full, r.winBlocks, r.eagle, groupMask m r⟩ : AttnGroup) ::
        rs.map (toAttnGroup m') =
      (⟨r.blockSize, r.full, r.winBlocks, r.eagle, groupMask m' r⟩ : AttnGroup) ::
        rs.map (toAttnGroup m')
    rw [groupMask_frame m m' watch r agree hr'.1]

/-- The lookup depends on the map only at the keys its groups read. -/
theorem lookupOn_frame (m m' : PoolMap) (watch : Nat → Bool) (rs : List GroupReads)
    (maxLength align cap : Nat)
    (agree : ∀ h g, watch h = true → m h g = m' h g) (reads : ReadsWatched watch rs) :
    lookupOn m rs maxLength align cap = lookupOn m' rs maxLength align cap := by
  show jointLookup (rs.map (toAttnGroup m)) maxLength align cap =
    jointLookup (rs.map (toAttnGroup m')) maxLength align cap
  rw [attnGroups_frame m m' watch agree rs reads]

/-- **The memory is sound**: after writes none of which is to a watched
hash, the lookup answers what it answered before them (so the remembered
answer is the answer). -/
theorem memo_sound (m : PoolMap) (ws : List MapWrite) (watch : Nat → Bool)
    (rs : List GroupReads) (maxLength align cap : Nat)
    (hws : WritesUnwatched watch ws) (reads : ReadsWatched watch rs) :
    lookupOn (applyWrites m ws) rs maxLength align cap = lookupOn m rs maxLength align cap :=
  lookupOn_frame (applyWrites m ws) m watch rs maxLength align cap
    (fun h g hh => applyWrites_unwatched watch h g hh ws m hws) reads

/-- Every hash the request has is in its watch. -/
theorem memB_of_hashAt : ∀ (hs : List Nat) (i h : Nat), hashAt hs i = some h → memB h hs = true
  | [], _, h, e => by
    have e' : (none : Option Nat) = some h := e
    exact Option.noConfusion e'
  | x :: xs, 0, h, e => by
    have e' : some x = some h := e
    have hx : x = h := Option.some.inj e'
    show (decide (h = x) || memB h xs) = true
    exact bor_left (decide_eq_true hx.symm)
  | x :: xs, i + 1, h, e => by
    show (decide (h = x) || memB h xs) = true
    exact bor_right (memB_of_hashAt xs i h e)

/-- Whatever its block size, a group reads only hashes of the request:
watching the request's hashes watches every key the lookup reads. -/
theorem coarseView_watched (hashes : List Nat) (scale i h : Nat)
    (e : coarseView hashes scale i = some h) : memB h hashes = true :=
  memB_of_hashAt hashes ((i + 1) * scale - 1) h e

/-- A write of a key is seen at that key: a watch that skipped a read hash
could keep an answer the write changed. -/
theorem applyWrite_watched_may_change (m : PoolMap) (w : MapWrite) :
    applyWrite m w w.hash w.group = w.present := by
  show (if w.hash = w.hash ∧ w.group = w.group then w.present else m w.hash w.group) = w.present
  exact if_pos ⟨rfl, rfl⟩

end PrefixCache
