"""Answer a repeated prefix-cache lookup from memory while nothing it reads changed.

vLLM's scheduler looks the head of its waiting queue up again at almost
every step it cannot admit it (on the Mooncake replay: 87,622 lookups in
88,673 steps of gemma-3-27b, nearly all of one blocked request). Each of
those lookups reads the same keys of the same hash map and returns the same
answer. This module remembers a hybrid coordinator's answer for such a
request and returns a copy of it until a key the lookup could read is
written (a unitary lookup is one native search, cheaper than remembering:
swa_prefix_cache/vllm_adapter/patch.py wraps hybrid coordinators only).

Why the answer is the same (the model: Lean/PrefixCache/Thm/Memo.lean;
the sources this rests on are the fingerprint binding ``LOOKUP_MEMO``):

* A coordinator's ``find_longest_cache_hit(block_hashes, max_len)`` and
  every manager lookup it calls read only their arguments, the
  coordinator's configuration (fixed at construction) and the pools'
  ``BlockHashToBlockMap`` at keys ``h + group id`` whose hash ``h`` is an
  element of ``block_hashes`` (a coarser block's key is the hash at its
  last hash block: ``BlockHashListWithBlockSize``).
* Every write to such a map goes through ``BlockHashToBlockMap.insert``,
  ``.pop`` or, from vLLM 0.34.0 on, ``.clear``. ``BlockPool.reset_prefix_cache``
  replaces the map up to 0.33.0 and clears it in place from 0.34.0 on
  (``BlockPool.move_block_hashes``, new in 0.34.0, writes through
  ``_remove_cached_block_hashes`` and ``_insert_block_hash``, so through pop
  and insert). While an answer is remembered, each pool's map is replaced
  in its pool by a watching view of it (``watch_type``): an object of a
  subclass that shares the map's containers and changes only ``insert``,
  ``pop`` and ``clear`` (where the class has one). A write of a key whose
  hash the remembered request holds forgets every remembered answer, a
  ``clear`` forgets them all, and so does a replaced map; forgetting puts
  vLLM's map back in its pool. Nothing is set on vLLM's map: a new
  attribute name would enter its class's shared keys, which stops CPython
  from specializing vLLM's ``map.insert(...)`` calls, and builds the map's
  ``__dict__`` once the class has made about 28 objects (instance_attrs.py).
* On 0.34.0 the map holds block ids and ``get_one_block`` answers
  ``blocks[id]`` from the pool's fixed list of blocks, so the map's keys
  and ids are all a lookup reads of it, as with the block lists before.
* ``block_hashes`` (``Request.block_hashes``) is only ever extended, or has a
  suffix replaced by newly computed hashes (``clear()`` or ``del [k:]``, as in
  0.34.0's ``truncate_block_hashes``, and then ``update_block_hashes``). The
  memory holds the list and its last element, so equal length and the very
  same last element pin its contents.

A request is remembered at its second identical lookup while its first is
among the coordinator's last ``SEEN_WINDOW`` distinct lookups (the first
only marks it): vLLM's scheduler looks its blocked head up again at its
next step with at most a few other lookups between, while a batch of
distinct requests looked up in turn (any batch longer than the window, in
any order) is never remembered and costs only the marks. A request
admitted at its first lookup costs nothing more.
The result's block lists are copied on the way in and on the way out:
vLLM's caller may change the lists it gets.
"""

from __future__ import annotations

import gc
import logging
import weakref
from dataclasses import dataclass
from typing import Any, Callable


logger = logging.getLogger("swa_prefix_cache")

# BlockHashWithGroupId is the hash followed by the group id, 4 bytes
# (vLLM's make_block_hash_with_group_id, in the binding).
GROUP_ID_BYTES = 4
# At most this many remembered answers per coordinator (the waiting queue's
# blocked head, and the few requests vLLM skips over, in practice one).
MAX_REMEMBERED = 8
# The marks of the last this many distinct lookups: a lookup repeats one of
# them to be remembered (the oldest mark leaves first).
SEEN_WINDOW = 4
# The attributes a map holds its state in (vLLM 0.28-0.33: ``_cache``;
# 0.34.0: ``_blocks``, ``_cache``, ``_dup_ids``; the binding pins
# ``BlockHashToBlockMap.__init__``), shared by its watching view. A map
# holding anything else is not viewed (``LookupMemo._view_of``).
MAP_STATE = ("_blocks", "_cache", "_dup_ids")


@dataclass
class MemoStats:
    """What the memory did (``swa_prefix_cache.vllm_adapter.stats()`` shows them)."""

    hits: int = 0  # lookups answered from memory
    remembered: int = 0  # answers stored
    forgotten: int = 0  # times a watched write, clear or new map forgot them


class _Entry:
    """One lookup's arguments, pinned: the list itself, its length and its
    last element (all held, so no id is reused while the entry lives)."""

    __slots__ = ("hashes", "length", "last", "max_length", "result")

    def __init__(self, hashes: list, max_length: int) -> None:
        self.hashes = hashes
        self.length = len(hashes)
        self.last = hashes[-1]
        self.max_length = max_length
        self.result: Any = None

    def matches(self, hashes: list, max_length: int) -> bool:
        return (
            self.hashes is hashes
            and self.length == len(hashes)
            and self.max_length == max_length
            and hashes[-1] is self.last
        )


def copy_result(result: tuple) -> tuple:
    """The coordinator's answer with fresh per-group lists (the blocks are
    the same objects)."""
    blocks = result[0]
    return (tuple([list(group) for group in blocks]),) + tuple(result[1:])


class LookupMemo:
    """The memory of one coordinator: remembered answers, the hashes they
    depend on, and the watch on its pools' maps while any is remembered."""

    def __init__(self, pools: list[Any], stats: MemoStats) -> None:
        self.pools = pools  # the distinct BlockPools its managers read
        self.stats = stats
        self.seen: dict[int, _Entry] = {}
        self.entries: dict[int, _Entry] = {}
        self.watch: set[bytes] = set()
        self.views: list[Any] = []  # in the pools' slots, one a pool, while remembering

    def lookup(self, find: Callable[..., tuple], owner: Any, hashes: list, max_length: int) -> tuple:
        """``find(owner, hashes, max_length)``, or a copy of its remembered
        answer."""
        if not hashes:
            return find(owner, hashes, max_length)
        if self.views and not self._maps_unchanged():
            self.forget()
        key = id(hashes)
        entry = self.entries.get(key)
        if entry is not None and entry.matches(hashes, max_length):
            self.stats.hits += 1
            return copy_result(entry.result)
        result = find(owner, hashes, max_length)
        marked = self.seen.get(key)
        if marked is not None and marked.matches(hashes, max_length):
            self._remember(marked, result)
        else:
            if len(self.seen) >= SEEN_WINDOW:
                del self.seen[next(iter(self.seen))]
            self.seen[key] = _Entry(hashes, max_length)
        return result

    def _remember(self, entry: _Entry, result: tuple) -> None:
        if not self.views and not self._watch_maps():
            return  # a map it cannot view: remember nothing
        if len(self.entries) >= MAX_REMEMBERED:
            self.forget()
            if not self._watch_maps():
                return
        entry.result = copy_result(result)
        self.entries[id(entry.hashes)] = entry
        self.seen.pop(id(entry.hashes), None)
        self.watch.update(entry.hashes)
        self.stats.remembered += 1

    def _maps_unchanged(self) -> bool:
        return all(pool.cached_block_hash_to_block is view
                   for pool, view in zip(self.pools, self.views))

    def _watch_maps(self) -> bool:
        """Put a watching view of each pool's map in its place (vLLM's
        ``self.cached_block_hash_to_block.insert(...)`` then calls the
        view's); False, with nothing changed, if a map cannot be viewed."""
        views = []
        for pool in self.pools:
            view = self._view_of(pool.cached_block_hash_to_block)
            if view is None:
                return False
            views.append(view)
        for pool, view in zip(self.pools, views):
            pool.cached_block_hash_to_block = view
        self.views = views
        return True

    def _view_of(self, block_map: Any) -> Any | None:
        """A watching view sharing ``block_map``'s state, or None when the
        map is not vLLM's class or holds more than ``MAP_STATE`` (another
        watcher's view, or an attribute someone set on it). Its GC
        referents are its attributes' values and its class, read without
        building its ``__dict__``."""
        map_type = type(block_map)
        if map_type in _watch_types.values():
            return None
        view = object.__new__(watch_type(map_type))
        shared = []
        for name in MAP_STATE:
            value = getattr(block_map, name, _ABSENT)
            if value is not _ABSENT:
                setattr(view, name, value)
                shared.append(value)
        held = [ref for ref in gc.get_referents(block_map) if ref is not map_type]
        if sorted(map(id, held)) != sorted(map(id, shared)):
            return None
        view._memo = self
        # The memory's watch set, held by the view too: a watched write then
        # reads one attribute, not two (every block cached or evicted pays
        # it while an answer is remembered).
        view._watch = self.watch
        view._vllm_map = block_map
        return view

    def forget(self) -> None:
        """Drop every remembered answer, and put vLLM's maps back."""
        if self.entries:
            self.stats.forgotten += 1
        self.entries.clear()
        self.watch.clear()
        for pool, view in zip(self.pools, self.views):
            if pool.cached_block_hash_to_block is view:  # not replaced since
                pool.cached_block_hash_to_block = view._vllm_map
        self.views = []


_ABSENT = object()

# The watching view's class of each map class.
_watch_types: dict[type, type] = {}


def watch_type(map_type: type) -> type:
    """The class of the lookup memory's watching views of ``map_type``'s
    maps: ``map_type`` with ``insert``, ``pop`` and ``clear`` (where it has
    one) forgetting the memory first when the write can change a remembered
    answer; every read is vLLM's own (the native lookup reads a view inline,
    as vLLM's map: swa_lookup.py names this class to it)."""
    found = _watch_types.get(map_type)
    if found is None:
        namespace: dict[str, Any] = {
            "__doc__": f"{map_type.__name__}, its writes watched (swa-prefix-cache's lookup memory).",
            "__module__": __name__,
            "insert": _watching(map_type.insert),
            "pop": _watching(map_type.pop),
        }
        clear = getattr(map_type, "clear", None)
        if clear is not None:  # vLLM 0.34.0's reset_prefix_cache
            namespace["clear"] = _forgetting(clear)
        found = _watch_types[map_type] = type(f"Watched{map_type.__name__}", (map_type,), namespace)
    return found


def _watching(write: Callable[[Any, bytes, Any], Any]) -> Callable[[Any, bytes, Any], Any]:
    """``write`` (the map class's insert or pop), forgetting the memory
    first when the key's hash is one a remembered lookup reads. Both take a
    key and one more argument, and vLLM passes them by position
    (``BlockPool._insert_block_hash`` and ``_remove_cached_block_hashes``,
    in the binding): plain positional parameters and a call of the class's
    function keep a watched write at about 205 ns on CPython 3.11, against
    vLLM's own 100 ns (a bound method called with ``*args`` cost 367 ns;
    every block cached or evicted pays it while an answer is remembered)."""

    def watched_write(self: Any, key: bytes, arg: Any) -> Any:
        if key[:-GROUP_ID_BYTES] in self._watch:
            self._memo.forget()
        return write(self, key, arg)

    watched_write.__name__ = write.__name__
    return watched_write


def _forgetting(clear: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``clear`` (the map class's), forgetting the memory first: it drops
    every key."""

    def watched_clear(self: Any) -> Any:
        self._memo.forget()
        return clear(self)

    return watched_clear


def pools_of(coordinator: Any) -> list[Any]:
    """The distinct BlockPools a coordinator's lookups read."""
    pools: list[Any] = []
    candidates = [coordinator.block_pool] + [
        manager.block_pool for manager in coordinator.single_type_managers
    ]
    for pool in candidates:
        if all(pool is not known for known in pools):
            pools.append(pool)
    return pools


# Every coordinator's memory, by the coordinator's id, with a weak reference
# that shows the id is still that coordinator's. Nothing is set on the
# coordinator: reading it back through its __dict__ would make CPython build
# one, and slow vLLM's every use of it (instance_attrs.py).
_memos: dict[int, tuple[weakref.ref, LookupMemo]] = {}


def memo_of(coordinator: Any) -> LookupMemo | None:
    """The coordinator's memory, if it has one."""
    entry = _memos.get(id(coordinator))
    if entry is None or entry[0]() is not coordinator:
        return None
    return entry[1]


def _new_memo(coordinator: Any, stats: MemoStats) -> LookupMemo | None:
    """A memory for ``coordinator``; None for one without weak references
    (its lookups are then not remembered)."""
    key = id(coordinator)

    def gone(ref: weakref.ref) -> None:
        entry = _memos.get(key)
        if entry is not None and entry[0] is ref:
            del _memos[key]

    try:
        ref = weakref.ref(coordinator, gone)
    except TypeError:
        return None
    memo = LookupMemo(pools_of(coordinator), stats)
    _memos[key] = (ref, memo)
    return memo


def release_all() -> int:
    """Drop every coordinator's memory: its answers and its watch on the
    pools' maps (the patch's uninstall). How many there were."""
    memos = [memo for _, memo in _memos.values()]
    _memos.clear()
    for memo in memos:
        memo.forget()
    return len(memos)


def make_memoized(original: Callable[..., tuple], stats: MemoStats) -> Callable[..., tuple]:
    """A coordinator method answering like ``original`` (vLLM's
    ``find_longest_cache_hit``, a plain function), from memory when it can."""

    def find_longest_cache_hit(self: Any, block_hashes: list, max_cache_hit_length: int) -> tuple:
        entry = _memos.get(id(self))
        if entry is not None and entry[0]() is self:
            memo = entry[1]
        else:
            memo = _new_memo(self, stats)
            if memo is None:
                return original(self, block_hashes, max_cache_hit_length)
        return memo.lookup(original, self, block_hashes, max_cache_hit_length)

    find_longest_cache_hit.__doc__ = (
        "vLLM's lookup, answered from memory while no key it reads was written "
        "(swa-prefix-cache, swa_prefix_cache/vllm_adapter/lookup_memo.py)."
    )
    find_longest_cache_hit.__wrapped__ = original  # type: ignore[attr-defined]
    return find_longest_cache_hit
