import PrefixCache.Spec.Joint

/-!
# The lookup memory: a pool's map, its writes, and what a lookup reads of it

Transcribed from `swa_prefix_cache/vllm_adapter/lookup_memo.py` and the vLLM code it is
bound to (fingerprint binding `lookup_memo`):

* a pool's prefix-cache map (`BlockHashToBlockMap`) is seen as a function
  from a key `(hash, group id)` to whether a block is cached under it
  (hashes are numbers here; which block object is cached is not modelled:
  every write below may change it, and the memory forgets on every write of
  a watched key whatever it writes);
* a write (`insert`, `pop`) sets one key; `reset_prefix_cache` (a map
  replaced up to vLLM 0.33.0, noticed by identity in Python; the map's
  `clear` from 0.34.0 on, watched in Python) forgets every answer and is not
  modelled;
* a KV-cache group reads, for its block `i`, the request's hash at that
  block's last hash block (`BlockHashListWithBlockSize`): `coarseView`;
* the memory watches every hash of the request (`memB`).

The theorems (Thm/Memo.lean) say that a lookup over a map changed only by
writes of unwatched keys answers what it answered before.
-/

namespace PrefixCache

/-- A pool's map as the lookups see it: `m h g` says whether a block is
cached under the key of hash `h` and group id `g` (vLLM:
`make_block_hash_with_group_id`, `BlockHashToBlockMap`). -/
abbrev PoolMap := Nat → Nat → Bool

/-- One write to the map: after it, the key `(hash, group)` is `present`
(vLLM's `insert`: present; `pop`: whatever the key keeps). -/
structure MapWrite where
  hash : Nat
  group : Nat
  present : Bool

/-- The map after one write. -/
def applyWrite (m : PoolMap) (w : MapWrite) : PoolMap :=
  fun h g => if h = w.hash ∧ g = w.group then w.present else m h g

/-- The map after a list of writes, first to last. -/
def applyWrites (m : PoolMap) : List MapWrite → PoolMap
  | [] => m
  | w :: ws => applyWrites (applyWrite m w) ws

/-- No write of the list is to a watched hash (the memory was not told to
forget). -/
def WritesUnwatched (watch : Nat → Bool) : List MapWrite → Prop
  | [] => True
  | w :: ws => watch w.hash = false ∧ WritesUnwatched watch ws

/-- The request's `i`-th hash (Python `block_hashes[i]`), none past its end. -/
def hashAt : List Nat → Nat → Option Nat
  | [], _ => none
  | h :: _, 0 => some h
  | _ :: hs, i + 1 => hashAt hs i

/-- `h` is one of the request's hashes: the memory's watch
(`watch.update(entry.hashes)`). -/
def memB (h : Nat) : List Nat → Bool
  | [] => false
  | x :: xs => decide (h = x) || memB h xs

/-- The hash a group of `scale` hash blocks per block reads for its block
`i`: the request's hash at the block's last hash block
(`BlockHashListWithBlockSize._get_value_at`; `scale = 1`: the hash itself). -/
def coarseView (hashes : List Nat) (scale i : Nat) : Option Nat :=
  hashAt hashes ((i + 1) * scale - 1)

/-- What a group's lookup reads: the key's group id, the hash it reads for
each block (`view`), and the rest of `AttnGroup`. -/
structure GroupReads where
  groupId : Nat
  view : Nat → Option Nat
  blockSize : Nat
  full : Bool
  winBlocks : Nat
  eagle : Bool

/-- One key's state, or a miss where the request has no hash. -/
def readKey (m : PoolMap) (g : Nat) : Option Nat → Bool
  | some h => m h g
  | none => false

/-- The group's mask over the map: block `i` cached. -/
def groupMask (m : PoolMap) (r : GroupReads) (i : Nat) : Bool :=
  readKey m r.groupId (r.view i)

/-- The group as the joint lookup takes it, its mask read from the map. -/
def toAttnGroup (m : PoolMap) (r : GroupReads) : AttnGroup :=
  ⟨r.blockSize, r.full, r.winBlocks, r.eagle, groupMask m r⟩

/-- Every hash every group reads is watched. -/
def ReadsWatched (watch : Nat → Bool) : List GroupReads → Prop
  | [] => True
  | r :: rs => (∀ i h, r.view i = some h → watch h = true) ∧ ReadsWatched watch rs

/-- The coordinator's lookup over the map (pyspec `joint_lookup` on the
groups' masks). -/
def lookupOn (m : PoolMap) (rs : List GroupReads) (maxLength align cap : Nat) : JointResult :=
  jointLookup (rs.map (toAttnGroup m)) maxLength align cap

end PrefixCache
