"""The replacement for ``OffloadingConnectorScheduler._sliding_window_lookup``
(the KV-offload connector's sliding-window lookup).

vLLM scans every chunk right to left, one ``manager.lookup(key)`` per
chunk. For a manager whose lookup is pure and never answers ``RETRY`` the
answer is a function of a three-valued chunk mask, and the proved stride
search (``offload_stride_search``: swa_prefix_cache/core/proved/offload_lookup.c through the
extension, or swa_prefix_cache/pyspec/offload_lookup.py with the python core) returns the
same value while reading ``N / W + 2W`` chunks. Each chunk is read inline,
as the manager's ``lookup`` reads it (its policy's dicts, then
``ChunkStatus.is_ready``: ``ref_cnt >= 0``): a call of the manager's
``lookup`` cost about 0.5 µs a probe, most of a tier lookup's time with a
128-token window (gpt-oss-120b), and the inline read costs tens of ns.

Which managers: exactly vLLM's ``CPUOffloadingManager`` with its own
``lookup`` and an LRU or ARC policy with its own ``get`` (a dict read; the
chunk's ``is_ready`` property), as their sources were fingerprinted
(``fingerprint.OFFLOAD_LOOKUP``). Any other manager (the tiered
manager, whose lookup starts asynchronous work and answers ``RETRY``, a
custom one), any other policy, a patched method or an argument outside the
model is answered by vLLM's own scan. The per-call check is cheap: types and
identities. Same modes as the lookup patch (``SWA_PREFIX_CACHE_MODE``).

The full-attention groups' lookup, ``_maximal_prefix_lookup``, is replaced
too (patch ``offload_prefix``, its own binding): vLLM asks the manager
about every chunk of the cached run, through ``lookup``, the policy's
``get`` and ``is_ready``, and calls the events tracker once per hit. On a
long prompt that re-runs for every step a request waits, and it was most
of the connector's lookup time on the trace. For the same pure managers,
and a tracker whose ``record_lookup`` returns at once (self-describing
events off, vLLM's default), the answer is ``offload_prefix_lookup`` of
swa_prefix_cache/pyspec/offload_lookup.py over the chunks' states, read inline from the
policy's dicts (``ChunkStatus.is_ready`` is ``ref_cnt >= 0``). Any other
tracker, manager, chunk or key list gets vLLM's own method.
"""

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from swa_prefix_cache.vllm_adapter import fingerprint, offload_keys, registry
from swa_prefix_cache.vllm_adapter.instance_attrs import all_own_checker
from swa_prefix_cache.vllm_adapter.config import Mode

logger = logging.getLogger("swa_prefix_cache")

NAME = fingerprint.OFFLOAD_LOOKUP.name
PREFIX_NAME = fingerprint.OFFLOAD_PREFIX.name
_KEPT = "vLLM's own offload scan stays"


_counters = registry.Counters()  # answered: by the stride search
_prefix_counters = registry.Counters()  # answered: by the inline read of the policy's dicts
_prefix_resumed = [0]  # of those, lookups read on from a remembered ready run


class _Unsupported(Exception):
    """The manager answered something outside the three-valued model."""


def plans(mode: Mode, hotpath: Any, on_error: Callable[[BaseException], None],
          on_shadow: Callable[[Any, Any, dict[str, Any]], None]) -> dict[str, registry.Plan]:
    """The registry's plans for the offload scheduler's two lookups: each
    replaced if its sources and the pure managers' are known, otherwise
    vLLM's own stays (said once). ``hotpath``: the extension module, or None
    for the python core. ``on_shadow(ours, theirs, detail)`` records a
    shadow comparison."""
    if mode is Mode.OFF:
        return {NAME: registry.Refusal("mode off"), PREFIX_NAME: registry.Refusal("mode off")}

    def build(found: Any, originals: tuple[Any, ...]) -> tuple[Any, ...]:
        ours = _make_lookup(originals[0], hotpath, on_error)
        if mode is Mode.SHADOW:
            ours = _shadow(ours, originals[0], on_shadow)
        return (ours,)

    def build_prefix(found: Any, originals: tuple[Any, ...]) -> tuple[Any, ...]:
        answer = _make_prefix_answer(hotpath)
        if mode is Mode.SHADOW:
            return (_prefix_shadow(answer, originals[0], on_shadow),)
        return (_prefix_lookup(answer, originals[0], on_error),)

    return {
        NAME: registry.Build(build, _KEPT, logging.INFO),
        PREFIX_NAME: registry.Build(build_prefix, _KEPT, logging.INFO),
    }


def say_installed(mode: Mode, hotpath: Any) -> None:
    """The once-per-process line, when either lookup is replaced."""
    done, prefix_done = registry.is_installed(NAME), registry.is_installed(PREFIX_NAME)
    if done or prefix_done:
        logger.info(
            "swa-prefix-cache: KV-offload lookups replaced (mode %s, %s core): "
            "sliding-window %s, full-attention %s, for CPUOffloadingManager with LRU/ARC; "
            "other managers keep vLLM's scans",
            mode.value, "native" if hotpath is not None else "python",
            "yes" if done else "no", "yes" if prefix_done else "no",
        )


def status() -> dict[str, Any]:
    """The sliding-window lookup's record, with the full-attention one's
    under ``prefix`` and the request keys' under ``keys``."""
    prefix = dict(registry.status_of(PREFIX_NAME, _prefix_counters), resumed=_prefix_resumed[0])
    return dict(registry.status_of(NAME, _counters), prefix=prefix,
                keys=offload_keys.status())


def _pure_manager_check(hotpath: Any) -> Callable[[Any], bool]:
    """``pure_manager(manager)``: the manager is vLLM's CPUOffloadingManager
    with an LRU or ARC policy, nothing patched, so its lookup is a pure read
    of the policy's dicts that never answers RETRY."""
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
    from vllm.v1.kv_offload.cpu.policies.arc import ARCCachePolicy
    from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy

    all_own = all_own_checker(hotpath)
    lookup = (("lookup", CPUOffloadingManager.__dict__["lookup"]),)
    policy_get = {LRUCachePolicy: (("get", LRUCachePolicy.__dict__["get"]),),
                  ARCCachePolicy: (("get", ARCCachePolicy.__dict__["get"]),)}

    def pure_manager(manager: Any) -> bool:
        if type(manager) is not CPUOffloadingManager:
            return False
        policy = getattr(manager, "_policy", None)
        get = policy_get.get(type(policy))
        return get is not None and all_own(manager, lookup) and all_own(policy, get)

    return pure_manager


def _policy_maps_reader(hotpath: Any) -> Callable[[Any], tuple | None]:
    """``maps_of(manager)``: the dicts a pure manager's lookup reads, in the
    order its policy's ``get`` reads them (LRU ``chunks``; ARC ``t1`` then
    ``t2``), when a chunk read from them inline answers as its ``lookup``
    does; None otherwise (vLLM's own code then answers). ARC's
    ``t1.get(key) or t2.get(key)`` is ``is None`` only while chunks are
    truthy, and the maps must be plain dicts (a subclass may override
    ``get``)."""
    from vllm.v1.kv_offload.cpu.policies.arc import ARCCachePolicy
    from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus

    pure_manager = _pure_manager_check(hotpath)
    plain_maps = (dict, OrderedDict)
    truthy_chunks = not (hasattr(ChunkStatus, "__bool__") or hasattr(ChunkStatus, "__len__"))

    def maps_of(manager: Any) -> tuple | None:
        if not truthy_chunks or not pure_manager(manager):
            return None
        policy = manager._policy
        if type(policy) is ARCCachePolicy:
            maps = (policy.t1, policy.t2)
        else:
            maps = (policy.chunks,)
        for m in maps:
            if type(m) not in plain_maps:
                return None
        return maps

    return maps_of


def _make_lookup(original: Callable[..., Any], hotpath: Any,
                 on_error: Callable[[BaseException], None]) -> Callable[..., Any]:
    """The replacement method around vLLM's ``original``."""
    from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus

    from swa_prefix_cache.pyspec.offload_lookup import HIT, HIT_PENDING, MISS, offload_stride_search

    maps_of = _policy_maps_reader(hotpath)

    def python_search(maps: tuple, keys: Any, window: int, initial: int) -> int | None:
        """The native search's answer with the python core: the same inline
        reads, the search from pyspec."""

        def chunk(i: int) -> int:
            key = keys[i]
            for m in maps:
                found = m.get(key)
                if found is not None:
                    break
            else:
                return MISS
            if type(found) is not ChunkStatus or type(found.ref_cnt) is not int:
                raise _Unsupported
            return HIT_PENDING if found.ref_cnt < 0 else HIT

        try:
            return offload_stride_search(chunk, len(keys), window, initial or None)
        except _Unsupported:
            return NotImplemented  # type: ignore[return-value]

    search = hotpath.offload_lookup if hotpath is not None else None

    def _sliding_window_lookup(
        self: Any,
        keys: Any,
        sliding_window_size: int,
        req_context: Any,
        initial_window_size: int | None = None,
    ) -> int | None:
        _counters.calls += 1
        maps = maps_of(self.manager)
        if (
            maps is None
            or type(sliding_window_size) is not int
            or sliding_window_size < 0
            or (initial_window_size is not None
                and (type(initial_window_size) is not int or initial_window_size < 0))
        ):
            _counters.delegated += 1
            return original(self, keys, sliding_window_size, req_context, initial_window_size)
        initial = initial_window_size or 0  # vLLM: initial_window_size or sliding_window_size
        try:
            if search is not None:
                answer = search(maps, keys, sliding_window_size, initial, ChunkStatus)
            else:
                answer = python_search(maps, keys, sliding_window_size, initial)
        except Exception as exc:  # a failure of ours: vLLM's own scan answers
            on_error(exc)
            _counters.delegated += 1
            return original(self, keys, sliding_window_size, req_context, initial_window_size)
        if answer is NotImplemented:
            _counters.delegated += 1
            return original(self, keys, sliding_window_size, req_context, initial_window_size)
        _counters.answered += 1
        return answer

    _sliding_window_lookup.__doc__ = (
        "KV-offload sliding-window lookup by the proved stride search, the chunks "
        "read inline from the policy's dicts (swa-prefix-cache)."
    )
    return _sliding_window_lookup


def _shadow(ours: Callable[..., Any], original: Callable[..., Any],
            on_shadow: Callable[[Any, Any, dict[str, Any]], None]) -> Callable[..., Any]:
    """Run both (the manager's lookup is pure: reading twice changes
    nothing), return vLLM's answer, report the comparison."""

    def _sliding_window_lookup(self: Any, keys: Any, sliding_window_size: int,
                               req_context: Any, initial_window_size: int | None = None) -> Any:
        theirs = original(self, keys, sliding_window_size, req_context, initial_window_size)
        try:
            mine = ours(self, keys, sliding_window_size, req_context, initial_window_size)
        except Exception as exc:  # a crash in ours must not hurt serving
            mine = exc
        on_shadow(mine, theirs, {
            "lookup": "offload_sliding_window", "chunks": len(keys),
            "sliding_window_size": sliding_window_size,
            "initial_window_size": initial_window_size,
        })
        return theirs

    return _sliding_window_lookup


# A lookup this long or longer resumes from the request's remembered ready
# run (below it, the remembering costs more than the chunks it skips).
RESUME_MIN_CHUNKS = 32


def _make_prefix_answer(hotpath: Any) -> Callable[..., Any]:
    """``answer(scheduler, keys, req, group_config, start_chunk_idx)``: what
    vLLM's ``_maximal_prefix_lookup`` returns, read inline, or
    NotImplemented where the inline read is not known to equal it (then
    nothing was read that vLLM would not read).

    A request that waits is looked up again every step, and the inline read
    would re-read its whole cached run each time. So the leading run of
    *ready* chunks it found is remembered per request, group and start, with
    the manager's cache generation, and a later lookup reads on from there
    while the remembered run is sure to be unchanged: the same manager and
    generation (``reset_cache`` bumps it), and the manager never full since
    (``_num_allocated_chunks < _num_chunks``). That holds because in the
    fingerprinted sources a ready chunk leaves the policy only by ``evict``
    (``prepare_store`` evicts only when the offer outgrows the free chunks,
    and then allocates every fresh chunk, so the manager stays full until
    ``reset_cache``) or ``clear``; ``remove`` takes only a pending chunk (a
    failed store); ``insert`` is called only for an absent key; and a ready
    chunk's ``ref_cnt`` stays >= 0 (loads add and take back one). Each of
    those methods must be vLLM's own on the class and not shadowed on the
    object, or nothing is remembered or resumed. The remembered runs are
    weakly keyed by the request, so they leave with it."""
    import weakref

    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.events import (
        OffloadingEventsTracker,
    )
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
    from vllm.v1.kv_offload.cpu.policies.arc import ARCCachePolicy
    from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus
    from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy

    maps_of = _policy_maps_reader(hotpath)
    all_own = all_own_checker(hotpath)
    record_lookup = (("record_lookup", OffloadingEventsTracker.__dict__["record_lookup"]),)
    # What can take a ready chunk away or make it pending: vLLM's own, as fingerprinted.
    manager_writers = tuple((name, CPUOffloadingManager.__dict__[name]) for name in (
        "prepare_store", "complete_store", "prepare_load", "_prepare_load", "complete_load", "touch",
        "reset_cache", "_allocate_chunks", "_get_num_free_chunks", "_free_chunk")
        if name in CPUOffloadingManager.__dict__)
    policy_writers = {
        cls: tuple((name, cls.__dict__[name]) for name in (
            "insert", "remove", "evict", "clear", "touch", "on_request_finished") if name in cls.__dict__)
        for cls in (LRUCachePolicy, ARCCachePolicy)
    }
    runs: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], tuple[Any, int, int, Any]]] = (
        weakref.WeakKeyDictionary())

    def quiet(tracker: Any) -> bool:
        """vLLM's own tracker, whose ``record_lookup`` returns at once."""
        return (
            type(tracker) is OffloadingEventsTracker
            and all_own(tracker, record_lookup)
            and not tracker.self_describing_enabled
        )

    def unchanged_since(manager: Any, policy: Any) -> int | None:
        """The manager's cache generation if a ready run it holds now stays
        ready until it is next full or reset (None if that is not sure)."""
        if (not manager._num_allocated_chunks < manager._num_chunks
                or not all_own(manager, manager_writers)
                or not all_own(policy, policy_writers[type(policy)])):
            return None
        generation = manager._cache_generation
        return generation if type(generation) is int else None

    def answer(scheduler: Any, keys: Any, req: Any = None, group_config: Any = None,
               start_chunk_idx: Any = 0) -> Any:
        manager = scheduler.manager
        if type(keys) is not list or not quiet(scheduler._events_tracker):
            return NotImplemented
        maps = maps_of(manager)
        if maps is None:
            return NotImplemented
        policy = manager._policy
        # Resume from the request's remembered ready run where it is sure to hold.
        generation = None
        mine = None
        slot = None
        start = 0
        if len(keys) >= RESUME_MIN_CHUNKS and req is not None and type(start_chunk_idx) is int:
            generation = unchanged_since(manager, policy)
            if generation is not None:
                try:
                    mine = runs.get(req)
                except TypeError:  # not weakly referable: nothing remembered
                    generation = None
                slot = (id(group_config), start_chunk_idx)
                if mine is not None:
                    held = mine.get(slot)
                    if held is not None:
                        held_manager, held_generation, run, last_key = held
                        if (held_manager is manager and held_generation == generation
                                and 0 < run <= len(keys) and keys[run - 1] == last_key):
                            start = run
                            _prefix_resumed[0] += 1
        first = maps[0].get
        second = maps[1].get if len(maps) == 2 else None
        count = start
        ready_run = -1  # the leading ready chunks (-1: all counted so far)
        for key in keys[start:] if start else keys:
            chunk = first(key)
            if chunk is None and second is not None:
                chunk = second(key)
            if chunk is None:
                break
            if type(chunk) is not ChunkStatus:
                return NotImplemented
            if chunk.ref_cnt < 0 and ready_run < 0:  # not is_ready: HIT_PENDING
                ready_run = count
            count += 1
        if ready_run < 0:
            ready_run = count
        if generation is not None and ready_run > 0:
            if mine is None:
                mine = runs.setdefault(req, {})
            mine[slot] = (manager, generation, ready_run, keys[ready_run - 1])
        return count if ready_run == count else None

    return answer


def _prefix_lookup(answer: Callable[..., Any], original: Callable[..., Any],
                   on_error: Callable[[BaseException], None]) -> Callable[..., Any]:
    """The replacement ``_maximal_prefix_lookup`` around vLLM's ``original``."""

    def _maximal_prefix_lookup(self: Any, keys: Any, req_context: Any, req: Any,
                               group_config: Any, start_chunk_idx: int) -> int | None:
        _prefix_counters.calls += 1
        try:
            found = answer(self, keys, req, group_config, start_chunk_idx)
        except Exception as exc:  # a failure of ours: vLLM's own scan answers
            on_error(exc)
            found = NotImplemented
        if found is NotImplemented:
            _prefix_counters.delegated += 1
            return original(self, keys, req_context, req, group_config, start_chunk_idx)
        _prefix_counters.answered += 1
        return found

    _maximal_prefix_lookup.__doc__ = (
        "KV-offload full-attention lookup read inline from the policy's dicts (swa-prefix-cache)."
    )
    return _maximal_prefix_lookup


def _prefix_shadow(answer: Callable[..., Any], original: Callable[..., Any],
                   on_shadow: Callable[[Any, Any, dict[str, Any]], None]) -> Callable[..., Any]:
    """vLLM answers; ours is compared where it would answer (it reads
    only, so running it changes nothing)."""

    def _maximal_prefix_lookup(self: Any, keys: Any, req_context: Any, req: Any,
                               group_config: Any, start_chunk_idx: int) -> int | None:
        theirs = original(self, keys, req_context, req, group_config, start_chunk_idx)
        try:
            mine = answer(self, keys, req, group_config, start_chunk_idx)
        except Exception as exc:  # a crash in ours must not hurt serving
            mine = exc
        if mine is not NotImplemented:
            on_shadow(mine, theirs, {"lookup": "offload_prefix", "chunks": len(keys)})
        return theirs

    return _maximal_prefix_lookup
