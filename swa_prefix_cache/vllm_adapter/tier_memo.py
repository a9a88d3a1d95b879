"""Answer a waiting request's repeated KV-offload tier lookup from memory
while no chunk it reads changed.

vLLM's scheduler asks the offloading connector about every waiting request
it considers, at every step (``get_num_new_matched_tokens`` ->
``_lookup`` -> ``_lookup_complete_chunks``). On the trace's overloaded
instance each request was looked up about 256 times while it waited, and
each lookup re-read its chunks and re-ran vLLM's group loop, which copies
each group's key list: with the searches replaced, most of the tier
lookups' time (docs/replay.md). This module remembers
``_lookup_complete_chunks``'s answer for such a request and gives it back
until a manager write touches a key the lookup could read.

Why the answer is the same (the sources are fingerprint binding
``tier_memo``):

* With a pure manager and a quiet events tracker (connector_lookup.py:
  vLLM's ``CPUOffloadingManager`` with an LRU or ARC policy, nothing
  patched; ``record_lookup`` returns at once) the method reads its
  arguments; the request state's ``num_locally_computed_tokens`` and
  ``max_load_tokens``, its request's ``num_tokens`` and (0.34.0's assert)
  the length of its ``block_hashes``; each group's ``offload_keys`` from
  the request's computed chunks on; the scheduler's configuration (set at
  construction); each key's lookup result (whether the policy holds it,
  and whether its ``ref_cnt >= 0``); and, for a hit, whether
  ``_chunks_being_loaded`` holds one of the keys the hit would load (then
  it answers None: the closing check, which ``_loaded_keys`` keeps as the
  set of those keys). It writes each group state's
  ``lookup_hit_end_chunk_idx`` and nothing else but its debug log.
* A key's lookup result changes only in three of the manager's methods:
  ``prepare_store`` (``keys_to_store`` become pending, ``evicted_keys``
  leave), ``complete_store`` (its keys become ready, or leave after a
  failed store) and ``reset_cache`` (every key leaves). ``prepare_load``
  and ``complete_load`` keep a ready chunk ready (their asserts), and
  ``touch`` and ``on_request_finished`` reorder chunks or move them
  between ARC's ``t1`` and ``t2``, which ``get`` reads alike. The plugin
  wraps those three methods on ``CPUOffloadingManager``: after vLLM's own
  code ran, each tells the manager's memory which keys it wrote (every
  remembered answer that could read one is forgotten), and ``reset_cache``,
  or any exception from them, forgets all.
* ``offload_keys`` lists only grow (``update_offload_keys`` appends), and
  the memory holds each list and its length.

So an answer is given back only while: it is the same request state with
the same arguments and the same lists and lengths; the manager is pure,
with the same policy dicts, its writers vLLM's own (the three through the
plugin's wrappers) and its policy's writers vLLM's own; the tracker is
quiet; the scheduler's two searches are vLLM's or the plugin's; and
vLLM's debug log is off. Anything else asks vLLM's own method, as does
any request not yet looked up twice with the same arguments (a request
admitted at its first lookup costs a mark only). At the second lookup the
memory asks vLLM's method for the groups' answer with nothing being loaded
(``_chunks_being_loaded`` is an empty set for that call, and put back
after it: while a shared chunk such as the system prompt's is being
loaded, every request holding it would otherwise answer the delay), and
applies the closing check itself, then and at every later answer.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any

from swa_prefix_cache.vllm_adapter import fingerprint

# At most this many remembered answers per manager: each holds a set of the
# keys its lookup could read (a few thousand for a long prompt).
MAX_REMEMBERED = 1024
# The first lookups marked, to be remembered at their second (oldest first out).
MAX_MARKED = 4096
# Answers and marks hold their request state (its key lists too): once they
# outnumber twice the scheduler's live request states plus this, those of
# finished requests are dropped, so the memory never holds much more than
# the scheduler does.
SLACK = 64
# The manager's methods whose writes the memory watches.
WATCHED = ("prepare_store", "complete_store", "reset_cache")

_SCHEDULER = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler"


@dataclass
class TierMemoStats:
    """What the memory did (``swa_prefix_cache.vllm_adapter.status()``)."""

    hits: int = 0  # lookups answered from memory
    remembered: int = 0  # answers stored
    forgotten: int = 0  # answers dropped by a watched write of one of their keys
    cleared: int = 0  # times every answer was dropped (reset_cache, an exception, new dicts)


class _Entry:
    """One request state's lookup: what it read, pinned, and what it answered."""

    __slots__ = ("status", "req", "groups", "lists", "args", "scheduler", "maps",
                 "keys", "result", "ends", "loaded", "delayed")

    def __init__(self, scheduler: Any, status: Any, args: tuple, maps: tuple) -> None:
        self.scheduler = weakref.ref(scheduler)
        self.status = status
        self.req = status.req
        self.groups = status.group_states
        self.lists = tuple(group.offload_keys for group in self.groups)
        self.args = args
        self.maps = maps
        self.keys: frozenset = frozenset()
        self.result: Any = None
        self.ends: tuple[int, ...] = ()
        self.loaded: frozenset = frozenset()  # a hit is delayed while one of these is loading
        self.delayed: Any = None  # the answer then

    def fill(self, scheduler: Any, result: Any) -> None:
        """Hold the groups' answer ``result`` (the method's, with nothing
        being loaded) and what it read and wrote."""
        computed = self.status.num_locally_computed_tokens
        configs = scheduler.config.kv_group_configs
        keys: set = set()
        for config, held in zip(configs, self.lists):
            keys.update(islice(held, computed // config.tokens_per_chunk, None))
        self.keys = frozenset(keys)
        self.result = result
        self.ends = tuple([group.lookup_hit_end_chunk_idx for group in self.groups])
        hit = _hit_tokens(result)
        if hit:
            self.loaded = _loaded_keys(configs, self.lists, computed, hit)
            self.delayed = (None,) + result[1:] if type(result) is tuple else None

    def answer(self, loading: Any) -> Any:
        """The method's answer while ``loading`` (``_chunks_being_loaded``)
        is being loaded: the delay when the hit would load one of them."""
        if loading and not self.loaded.isdisjoint(loading):
            return self.delayed
        return self.result

    def matches(self, scheduler: Any, status: Any, args: tuple, maps: tuple) -> bool:
        if (self.status is not status or self.args != args or self.scheduler() is not scheduler
                or status.req is not self.req or status.group_states is not self.groups):
            return False
        for group, held in zip(self.groups, self.lists):
            if group.offload_keys is not held:
                return False
        for now, held in zip(maps, self.maps):
            if now is not held:
                return False
        return True


def _args(status: Any, max_num_new_tokens: Any) -> tuple:
    """The values the lookup reads besides its keys' states (the lists'
    identity is checked apart)."""
    req = status.req
    return (
        max_num_new_tokens, status.num_locally_computed_tokens, status.max_load_tokens,
        req.num_tokens, len(req.block_hashes),
        tuple([len(group.offload_keys) for group in status.group_states]),
    )


def _hit_tokens(result: Any) -> int:
    """The hit tokens of an answer (0.34.0 answers ``(hit, boundary)``); 0
    for None or 0. Only the groups' converged answer, which the closing
    check may delay, is above 0: the method's other returns are 0 or None."""
    hit = result[0] if type(result) is tuple else result
    return hit if type(hit) is int and hit > 0 else 0


def _loaded_keys(configs: Any, lists: tuple, computed: int, hit: int) -> frozenset:
    """The keys whose loading delays a hit of ``hit`` tokens after
    ``computed``: the closing check of vLLM's ``_lookup_complete_chunks``
    (the same in 0.33.0 and 0.34.0), which answers None (0.34.0:
    ``(None, boundary)``) when one of them is in ``_chunks_being_loaded``."""
    from vllm.utils.math_utils import cdiv

    keys: set = set()
    for config, offload_keys in zip(configs, lists):
        window = config.load_window_size_in_chunks(computed + hit)
        num_chunks = cdiv(computed + hit, config.tokens_per_chunk)
        start_chunk_idx = computed // config.tokens_per_chunk
        offload_keys = offload_keys[start_chunk_idx:num_chunks]
        if window is not None:
            offload_keys = offload_keys[-window:]
        keys.update(offload_keys)
    return frozenset(keys)


class TierMemo:
    """One manager's memory: remembered answers and the keys they read."""

    def __init__(self, stats: TierMemoStats) -> None:
        self.stats = stats
        self.entries: dict[int, _Entry] = {}  # by id(request state); the entry holds it
        self.marked: dict[int, _Entry] = {}
        # Every key a remembered answer could read (and, until the next
        # rebuild, keys of answers since forgotten): a write outside it is
        # one set lookup.
        self.watched: set = set()
        self.live_keys = 0

    def lookup(self, original: Callable[..., Any], scheduler: Any, status: Any,
               max_num_new_tokens: Any, maps: tuple) -> Any:
        """``original(scheduler, status, max_num_new_tokens)``, or its
        remembered answer with the group states' ends written back."""
        key = id(status)
        args = _args(status, max_num_new_tokens)
        entry = self.entries.get(key)
        if entry is not None:
            if entry.matches(scheduler, status, args, maps):
                for group, end in zip(entry.groups, entry.ends):
                    group.lookup_hit_end_chunk_idx = end
                self.stats.hits += 1
                return entry.answer(scheduler._chunks_being_loaded)
            self._drop(key, entry)
        if len(self.entries) + len(self.marked) > 2 * len(scheduler._req_status) + SLACK:
            self._sweep(scheduler)
        mark = self.marked.get(key)
        if mark is None or not mark.matches(scheduler, status, args, maps):
            if len(self.marked) >= MAX_MARKED:
                del self.marked[next(iter(self.marked))]
            self.marked[key] = _Entry(scheduler, status, args, maps)
            return original(scheduler, status, max_num_new_tokens)
        del self.marked[key]
        loading = scheduler._chunks_being_loaded
        if loading:
            # The groups' answer, without the closing check (its None would
            # hide it): the check is the entry's, on the keys being loaded.
            scheduler._chunks_being_loaded = set()
            try:
                result = original(scheduler, status, max_num_new_tokens)
            finally:
                scheduler._chunks_being_loaded = loading
        else:
            result = original(scheduler, status, max_num_new_tokens)
        mark.fill(scheduler, result)
        self._remember(scheduler, mark)
        return mark.answer(loading)

    def _remember(self, scheduler: Any, entry: _Entry) -> None:
        if len(self.entries) >= MAX_REMEMBERED:
            return
        self.entries[id(entry.status)] = entry
        self.watched |= entry.keys
        self.live_keys += len(entry.keys)
        self.stats.remembered += 1

    def _drop(self, key: int, entry: _Entry) -> None:
        del self.entries[key]
        self.live_keys -= len(entry.keys)

    def _sweep(self, scheduler: Any) -> None:
        """Drop the answers and marks of request states the scheduler no
        longer holds (each holds its state, key lists included)."""
        held = scheduler._req_status
        for key, entry in list(self.entries.items()):
            if held.get(entry.req.request_id) is not entry.status:
                self._drop(key, entry)
        for key, mark in list(self.marked.items()):
            if held.get(mark.req.request_id) is not mark.status:
                del self.marked[key]
        self._rebuild_watched()

    def _rebuild_watched(self) -> None:
        self.watched = set()
        for entry in self.entries.values():
            self.watched |= entry.keys

    def written(self, keys: Any) -> None:
        """A watched method wrote ``keys``: forget the answers that read one."""
        touched = self.watched.intersection(keys)
        if touched:
            for key, entry in list(self.entries.items()):
                if not entry.keys.isdisjoint(touched):
                    self._drop(key, entry)
                    self.stats.forgotten += 1
        if len(self.watched) > 2 * self.live_keys + 65536:
            self._rebuild_watched()

    def clear(self) -> None:
        """Forget every answer and mark."""
        if self.entries:
            self.stats.cleared += 1
        self.entries.clear()
        self.marked.clear()
        self.watched = set()
        self.live_keys = 0


_stats = [TierMemoStats()]


def new_stats() -> TierMemoStats:
    """Fresh counters for a new installation (``status()`` shows them)."""
    _stats[0] = TierMemoStats()
    return _stats[0]


def status() -> dict[str, Any]:
    """The patch's record and what the memory did."""
    from swa_prefix_cache.vllm_adapter import registry

    found = registry.state(fingerprint.TIER_MEMO.name)
    return {"installed": found.installed, "reason": found.reason, **vars(_stats[0])}


# Each manager's memory, by the manager's id, with a weak reference that
# shows the id is still that manager's (nothing is set on the manager:
# instance_attrs.py says why).
_memos: dict[int, tuple[weakref.ref, TierMemo]] = {}


def _memo_of(manager: Any) -> TierMemo | None:
    entry = _memos.get(id(manager))
    if entry is None or entry[0]() is not manager:
        return None
    return entry[1]


def _new_memo(manager: Any, stats: TierMemoStats) -> TierMemo | None:
    key = id(manager)

    def gone(ref: weakref.ref) -> None:
        found = _memos.get(key)
        if found is not None and found[0] is ref:
            del _memos[key]

    try:
        ref = weakref.ref(manager, gone)
    except TypeError:
        return None
    memo = TierMemo(stats)
    _memos[key] = (ref, memo)
    return memo


def release_all() -> int:
    """Drop every manager's memory (the patch's uninstall). How many there were."""
    count = len(_memos)
    for _, memo in list(_memos.values()):
        memo.clear()
    _memos.clear()
    return count


# Every watcher made, with the vLLM method it wraps, by the watcher's id.
_watchers: dict[int, tuple[Any, Any]] = {}


def vllms(fn: Any) -> Any:
    """vLLM's method under ``fn`` when ``fn`` is one of this module's
    watchers; ``fn`` otherwise."""
    found = _watchers.get(id(fn))
    return found[1] if found is not None and found[0] is fn else fn


def make_watchers(originals: tuple[Any, ...]) -> tuple[Any, ...]:
    """The three watched methods (``WATCHED``, vLLM's ``originals`` in that
    order): each runs vLLM's own, then tells the manager's memory what it
    wrote. With no memory (no answer remembered for this manager) the cost
    is one dict lookup."""
    prepare_store, complete_store, reset_cache = originals

    def forget_all(manager: Any) -> None:
        memo = _memo_of(manager)
        if memo is not None:
            memo.clear()

    def watched_prepare_store(self: Any, keys: Any, req_context: Any) -> Any:
        try:
            output = prepare_store(self, keys, req_context)
        except BaseException:
            forget_all(self)
            raise
        memo = _memo_of(self)
        if memo is not None and memo.entries and output is not None:
            memo.written(output.keys_to_store)
            memo.written(output.evicted_keys)
        return output

    def watched_complete_store(self: Any, keys: Any, req_context: Any, *args: Any, **kwargs: Any) -> Any:
        if type(keys) not in (list, tuple, set, frozenset):
            keys = list(keys)  # read twice: by vLLM's method, then here
        try:
            done = complete_store(self, keys, req_context, *args, **kwargs)
        except BaseException:
            forget_all(self)
            raise
        memo = _memo_of(self)
        if memo is not None and memo.entries:
            memo.written(keys)
        return done

    def watched_reset_cache(self: Any) -> Any:
        try:
            return reset_cache(self)
        finally:
            forget_all(self)

    watchers = (watched_prepare_store, watched_complete_store, watched_reset_cache)
    for watcher, original in zip(watchers, originals):
        watcher.__name__ = original.__name__
        watcher.__qualname__ = original.__qualname__
        watcher.__doc__ = (f"vLLM's {original.__name__}, its writes told to the tier "
                           "lookup memory (swa-prefix-cache).")
        watcher.__wrapped__ = original  # type: ignore[attr-defined]
        _watchers[id(watcher)] = (watcher, original)
    return watchers


def make_memoized(original: Callable[..., Any], watchers: tuple[Any, ...], hotpath: Any,
                  stats: TierMemoStats) -> Callable[..., Any]:
    """``OffloadingConnectorScheduler._lookup_complete_chunks`` answering
    like vLLM's ``original``, from memory where it can: while ``watchers``
    (``make_watchers``') are the manager class's ``WATCHED`` methods, and
    the scheduler's two searches are vLLM's own or connector_lookup.py's
    mode-on replacements."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        OffloadingConnectorScheduler,
    )
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    from swa_prefix_cache.vllm_adapter.connector_lookup import lookup_purity, made_here

    pure = lookup_purity(hotpath)
    vllm_log = logging.getLogger(_SCHEDULER)
    searches = ("_maximal_prefix_lookup", "_sliding_window_lookup")
    vllm_searches = {name: fingerprint.underlying(OffloadingConnectorScheduler.__dict__[name])
                     for name in searches}  # read while the plugin's own are known as such
    known: dict[tuple, tuple | None] = {}

    def searches_pairs() -> tuple | None:
        """The scheduler class's two searches, when each is vLLM's own or
        connector_lookup.py's."""
        current = tuple([OffloadingConnectorScheduler.__dict__.get(name) for name in searches])
        pairs = known.get(current)
        if pairs is None and current not in known:
            mine = all(fn is vllm_searches[name] or made_here(fn) for name, fn in zip(searches, current))
            pairs = known[current] = tuple(zip(searches, current)) if mine else None
        return pairs

    all_own = pure.all_own
    manager_class = CPUOffloadingManager.__dict__

    def watching() -> bool:
        for name, watcher in zip(WATCHED, watchers):
            if manager_class.get(name) is not watcher:
                return False
        return True

    def _lookup_complete_chunks(self: Any, req_status: Any, max_num_new_tokens: Any = None) -> Any:
        manager = self.manager
        maps = pure.maps(self, manager)  # the manager's methods resolve to the class's
        pairs = searches_pairs()
        if (maps is None or pairs is None or not watching()
                or vllm_log.isEnabledFor(logging.DEBUG) or not all_own(self, pairs)):
            return original(self, req_status, max_num_new_tokens)
        memo = _memo_of(manager)
        if memo is None:
            memo = _new_memo(manager, stats)
            if memo is None:
                return original(self, req_status, max_num_new_tokens)
        return memo.lookup(original, self, req_status, max_num_new_tokens, maps)

    _lookup_complete_chunks.__doc__ = (
        "vLLM's complete-chunk tier lookup, answered from memory while no chunk it "
        "reads was written (swa-prefix-cache, swa_prefix_cache/vllm_adapter/tier_memo.py)."
    )
    _lookup_complete_chunks.__wrapped__ = original  # type: ignore[attr-defined]
    return _lookup_complete_chunks
