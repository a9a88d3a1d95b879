"""The KV-offload lookup replacement against vLLM's own
scan, on vLLM's real ``CPUOffloadingManager`` and its real
``OffloadingConnectorScheduler``.

With the plugin installed, ``OffloadingConnectorScheduler.
_sliding_window_lookup`` is ours (swa_prefix_cache/vllm_adapter/connector_lookup.py): the
proved stride search (the extension's ``offload_lookup`` with the native
core, pyspec's with the python core), each chunk read inline from the
manager's policy dicts as its own ``lookup`` reads them.
Every answer must be vLLM's own scan's (``None`` included), the path
asserted (answered by the search, not delegated), with:

* random lookups on long planted key lists (LRU and ARC policies), slices of
  them as the request's keys, HIT_PENDING placed in, at the edge of and
  outside the found window, ``initial_window_size`` None / 0 / smaller /
  larger than the window, the window sizes vLLM's caller uses with EAGLE
  (+1 each);
* the method bound to a real scheduler, with the corrected store filter on
  and off;
* managers the model does not cover (a subclass, a patched lookup, RETRY)
  answered by vLLM's own scan; shadow mode; bad window sizes.

``PREFIX_CACHE_OFFLOAD_ADAPTER_CASES`` sets the number of random lookups
(default 100,000 with the native core).
"""

from __future__ import annotations

import logging
import os
import random
import zlib
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm")

from conftest import CASE_COUNTS  # noqa: E402
from test_offload_lookup import planted_manager  # noqa: E402
from test_reachable import _offload_scheduler, offload_env, vllm_env  # noqa: E402, F401
from vllm_support import unpatched  # noqa: E402, F401 (autouse fixture)

from swa_prefix_cache import vllm_adapter  # noqa: E402
from swa_prefix_cache.pyspec.offload_lookup import HIT, HIT_PENDING, MISS  # noqa: E402
from swa_prefix_cache.vllm_adapter import Mode, connector_lookup  # noqa: E402

CASES = int(os.environ.get("PREFIX_CACHE_OFFLOAD_ADAPTER_CASES", "100000"))


@pytest.fixture(scope="module")
def env():  # type: ignore[no-untyped-def]
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        OffloadingConnectorScheduler,
    )
    from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    logging.getLogger("vllm").setLevel(logging.ERROR)
    original = OffloadingConnectorScheduler.__dict__["_sliding_window_lookup"]
    return SimpleNamespace(**locals())


def _install(core: str, mode: Mode = Mode.ON) -> None:
    os.environ[vllm_adapter.CORE_ENV] = core
    try:
        assert vllm_adapter.install(mode)
    finally:
        del os.environ[vllm_adapter.CORE_ENV]
    status = vllm_adapter.status()["offload_lookup"]
    assert status["installed"], status


def _random_mask(rng: random.Random, n: int) -> list[int]:
    kind = rng.random()
    if kind < 0.4:  # mostly hits: windows are found, pending decides
        weights = [1, 25, rng.choice((0, 1, 3))]
    elif kind < 0.7:
        weights = [1, 1, 1]
    else:  # mostly misses: the stride skips
        weights = [10, 1, rng.choice((0, 1))]
    return rng.choices([MISS, HIT, HIT_PENDING], weights=weights, k=n)


def _compare(env, lookup, keys, ctx, window, initial) -> object:  # type: ignore[no-untyped-def]
    stand_in = SimpleNamespace(manager=lookup)
    ours = env.OffloadingConnectorScheduler._sliding_window_lookup(
        stand_in, keys, window, ctx, initial_window_size=initial
    )
    theirs = env.original(stand_in, keys, window, ctx, initial_window_size=initial)
    assert (ours is None) == (theirs is None) and ours == theirs, (window, initial, ours, theirs)
    return theirs


@pytest.mark.parametrize("core", ["native", "python"])
@pytest.mark.parametrize("policy", ["lru", "arc"])
def test_random_lookups_same_as_vllm(env, core: str, policy: str) -> None:
    """Slices of long planted key lists, answered by the stride search."""
    _install(core)
    rng = random.Random(zlib.crc32(f"{core}/{policy}".encode()))
    cases = CASES // 2 if core == "native" else CASES // 20
    done = nones = found = 0
    before = connector_lookup.status()
    while done < cases:
        n = rng.choice((rng.randint(0, 30), rng.randint(30, 400), rng.randint(400, 3000)))
        mask = _random_mask(rng, n)
        manager, keys, ctx = planted_manager(env, mask, rng.getrandbits(40), policy)
        assert type(manager._policy).__name__ == {"lru": "LRUCachePolicy", "arc": "ARCCachePolicy"}[policy]
        for _ in range(min(50, cases - done)):
            lo = rng.randint(0, n)
            hi = rng.randint(lo, n)
            window = rng.choice((0, 1, rng.randint(1, 8), rng.randint(1, 70)))
            if rng.random() < 0.3:
                window += 1  # vLLM's caller with an unverified EAGLE token
            initial = rng.choice((None, 0, window, max(window - 2, 0), window + rng.randint(1, 9)))
            answer = _compare(env, manager, keys[lo:hi], ctx, window, initial)
            nones += answer is None
            found += bool(answer)
            done += 1
    after = connector_lookup.status()
    assert after["answered"] - before["answered"] == done, (before, after)
    assert after["delegated"] == before["delegated"]
    assert nones > done // 50 and found > done // 4, (nones, found, done)
    CASE_COUNTS[f"offload lookup adapter vs vLLM ({core}, {policy})"] += done


def test_pending_in_at_edge_and_outside_the_window(env) -> None:
    """A HIT_PENDING chunk inside the found window gives None, just outside
    it (either side) the window's end."""
    _install("native")
    w = 4
    base = [HIT] * 6 + [MISS] + [HIT] * 8 + [MISS] + [HIT] * 2
    cases = 0
    for pos in range(len(base)):
        if base[pos] == MISS:
            continue
        mask = list(base)
        mask[pos] = HIT_PENDING
        manager, keys, ctx = planted_manager(env, mask, 7000 + pos)
        for initial in (None, 3, 6):
            _compare(env, manager, keys, ctx, w, initial)
            cases += 1
    # The window found is [11, 15) (the run of 8 before the second miss).
    manager, keys, ctx = planted_manager(env, base[:11] + [HIT_PENDING] + base[12:], 7100)
    assert _compare(env, manager, keys, ctx, w, None) is None
    manager, keys, ctx = planted_manager(env, base[:10] + [HIT_PENDING] + base[11:], 7101)
    assert _compare(env, manager, keys, ctx, w, None) == 15
    CASE_COUNTS["offload lookup adapter: pending placement"] += cases + 2


def _filter_known() -> bool:
    from swa_prefix_cache.vllm_adapter import fingerprint

    return fingerprint.check(fingerprint.OFFLOAD_FILTER).known


@pytest.mark.skipif(not _filter_known(), reason="the corrected store filter binds vLLM 0.33.0's offload scheduler only")
def test_real_scheduler_with_and_without_the_corrected_filter(env, offload_env, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The method bound to a real OffloadingConnectorScheduler, its manager a
    planted real CPUOffloadingManager; the corrected store filter on and
    off (independent patches, both installed together)."""
    rng = random.Random(99)
    count = 0
    for setting in ("off", "corrected"):
        vllm_adapter.uninstall()
        monkeypatch.setenv("SWA_PREFIX_CACHE_OFFLOAD_FILTER", setting)
        _install("native")
        assert vllm_adapter.status()["offload_filter"]["installed"] == (setting == "corrected")
        before = connector_lookup.status()["answered"]
        for salt in range(40):
            n = rng.randint(0, 400)
            manager, keys, ctx = planted_manager(env, _random_mask(rng, n), 8000 + salt)
            sched = _offload_scheduler(offload_env, [(16, 64, False)], 16, 2, None, manager)
            for _ in range(5):
                window = rng.randint(0, 20)
                initial = rng.choice((None, 0, rng.randint(1, 25)))
                ours = sched._sliding_window_lookup(keys, window, ctx, initial_window_size=initial)
                theirs = env.original(sched, keys, window, ctx, initial_window_size=initial)
                assert (ours is None) == (theirs is None) and ours == theirs
                count += 1
        assert connector_lookup.status()["answered"] - before == 200
    CASE_COUNTS["offload lookup adapter: real scheduler"] += count


def test_managers_outside_the_model_get_vllms_scan(env) -> None:
    """A subclass, a patched lookup, a lookup that answers RETRY, negative
    sizes: vLLM's own scan answers (delegated, not an error)."""
    _install("native")
    mask = [HIT] * 5 + [MISS] + [HIT] * 5
    manager, keys, ctx = planted_manager(env, mask, 9000)

    class Sub(env.CPUOffloadingManager):
        pass

    sub = Sub(num_chunks=64)
    retry = SimpleNamespace(lookup=lambda key, c: env.LookupResult.RETRY)
    patched = planted_manager(env, mask, 9001)[0]
    lookup_own = patched.lookup
    # An instance attribute shadows the class's: a wrapper, as a profiler's
    # (the very bound method put back on the instance calls the class's own).
    patched.lookup = lambda *args, **kwargs: lookup_own(*args, **kwargs)
    before = connector_lookup.status()
    errors = vllm_adapter.stats().errors
    for other in (sub, retry, patched):
        _compare(env, other, keys, ctx, 3, None)
    stand_in = SimpleNamespace(manager=manager)
    for window, initial in ((-1, None), (3, -2), (3, 1.5)):
        try:
            theirs = env.original(stand_in, keys, window, ctx, initial_window_size=initial)
        except Exception as exc:  # vLLM's own outcome, whatever it is
            with pytest.raises(type(exc)):
                env.OffloadingConnectorScheduler._sliding_window_lookup(
                    stand_in, keys, window, ctx, initial_window_size=initial)
        else:
            ours = env.OffloadingConnectorScheduler._sliding_window_lookup(
                stand_in, keys, window, ctx, initial_window_size=initial)
            assert ours == theirs
    after = connector_lookup.status()
    assert after["delegated"] - before["delegated"] == 6
    assert after["answered"] == before["answered"]
    assert vllm_adapter.stats().errors == errors


def test_bad_input_to_the_c_function_raises_naming_the_argument(env) -> None:
    from vllm.v1.kv_offload.cpu.policies.base import ChunkStatus

    from swa_prefix_cache.core import hotpath

    module = hotpath.load()
    maps = ({},)
    for args, error, name in (
        ((maps, [], -1, 0, ChunkStatus), ValueError, "window"),
        ((maps, [], 1, -1, ChunkStatus), ValueError, "initial_window"),
        ((maps, [], "1", 0, ChunkStatus), ValueError, "window"),
        (({}, [], 1, 0, ChunkStatus), TypeError, "maps"),
        (((), [], 1, 0, ChunkStatus), TypeError, "maps"),
        ((({}, {}, {}), [], 1, 0, ChunkStatus), TypeError, "maps"),
        ((([],), [], 1, 0, ChunkStatus), TypeError, "maps"),
        ((maps, 7, 1, 0, ChunkStatus), TypeError, "keys"),
        ((maps, [], 1, 0, "ChunkStatus"), TypeError, "chunk_type"),
        ((maps, []), TypeError, "5 arguments"),
    ):
        with pytest.raises(error, match=name):
            module.offload_lookup(*args)
    # A value that is not exactly the chunk class, or a chunk whose ref_cnt
    # is not an int: NotImplemented (the caller runs vLLM's scan).
    ready = ChunkStatus(0)
    ready.ref_cnt = 0

    class OddChunk(ChunkStatus):
        pass

    assert module.offload_lookup(({b"a": ready},), [b"a"], 1, 0, ChunkStatus) == 1
    assert module.offload_lookup(({b"a": OddChunk(0)},), [b"a"], 1, 0, ChunkStatus) is NotImplemented
    assert module.offload_lookup(({b"a": "chunk"},), [b"a"], 1, 0, ChunkStatus) is NotImplemented

    class FloatCount:
        ref_cnt = 0.0

    assert module.offload_lookup(({b"a": FloatCount()},), [b"a"], 1, 0, FloatCount) is NotImplemented

    # An exception while reading a chunk (a key's hash, a field) propagates.
    class Unhashable:
        def __hash__(self) -> int:
            raise KeyError("hash")

    with pytest.raises(KeyError):
        module.offload_lookup(({b"a": ready},), [Unhashable()], 1, 0, ChunkStatus)

    class Raises:
        @property
        def ref_cnt(self) -> int:
            raise KeyError("ref_cnt")

    with pytest.raises(KeyError):
        module.offload_lookup(({b"a": Raises()},), [b"a"], 1, 0, Raises)


def test_a_chunk_outside_the_model_gets_vllms_scan(env) -> None:
    """A policy dict holding something other than vLLM's ChunkStatus (put
    there by other code): the inline read refuses it and vLLM's own scan
    answers, through the manager's lookup, whatever it makes of it."""
    _install("native")
    mask = [HIT] * 6
    manager, keys, ctx = planted_manager(env, mask, 9100)
    chunks = manager._policy.chunks

    class Ready:
        is_ready = True

    chunks[keys[5]] = Ready()  # the search reads the last chunk first
    before = connector_lookup.status()
    _compare(env, manager, keys, ctx, 2, None)
    after = connector_lookup.status()
    assert after["delegated"] - before["delegated"] == 1
    assert after["answered"] == before["answered"]


def test_shadow_compares_and_returns_vllms_answer(env) -> None:
    _install("native", Mode.SHADOW)
    rng = random.Random(4)
    compared = vllm_adapter.stats().shadow_compared
    mismatches = vllm_adapter.stats().shadow_mismatches
    for salt in range(20):
        mask = _random_mask(rng, rng.randint(0, 200))
        manager, keys, ctx = planted_manager(env, mask, 9500 + salt)
        _compare(env, manager, keys, ctx, rng.randint(0, 9), rng.choice((None, 3)))
    assert vllm_adapter.stats().shadow_compared - compared == 20
    assert vllm_adapter.stats().shadow_mismatches == mismatches


def test_uninstall_restores_vllms_method(env) -> None:
    _install("native")
    assert env.OffloadingConnectorScheduler.__dict__["_sliding_window_lookup"] is not env.original
    vllm_adapter.uninstall()
    assert env.OffloadingConnectorScheduler.__dict__["_sliding_window_lookup"] is env.original
    assert not connector_lookup.status()["installed"]


# ---- the full-attention groups' lookup (patch offload_prefix) ----------------


def _prefix_known() -> bool:
    from swa_prefix_cache.vllm_adapter import fingerprint

    return fingerprint.check(fingerprint.OFFLOAD_PREFIX).known


needs_prefix = pytest.mark.skipif(
    not _prefix_known(), reason="the inline full-attention offload lookup binds vLLM 0.33.0 and 0.34.0"
)


def _tracker(env, self_describing: bool = False):  # type: ignore[no-untyped-def]
    """vLLM's own events tracker."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.events import (
        OffloadingEventsTracker,
    )
    from vllm.v1.kv_offload.base import OffloadingKVEventsConfig

    return OffloadingEventsTracker(OffloadingKVEventsConfig(
        enable_kv_cache_events=self_describing, self_describing_kv_events=self_describing))


def _compare_prefix(env, scheduler, keys, ctx) -> object:  # type: ignore[no-untyped-def]
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        OffloadingConnectorScheduler,
    )

    ours = OffloadingConnectorScheduler._maximal_prefix_lookup(scheduler, keys, ctx, None, None, 0)
    theirs = env.original_prefix(scheduler, keys, ctx, None, None, 0)
    assert (ours is None) == (theirs is None) and ours == theirs, (ours, theirs)
    return theirs


@pytest.fixture(scope="module")
def prefix_env(env):  # type: ignore[no-untyped-def]
    env.original_prefix = env.OffloadingConnectorScheduler.__dict__["_maximal_prefix_lookup"]
    return env


@needs_prefix
@pytest.mark.parametrize("policy", ["lru", "arc"])
def test_prefix_lookups_same_as_vllm(prefix_env, policy: str) -> None:
    """Slices of planted key lists (misses, pending chunks, ready chunks),
    answered inline; the answer is also pyspec's offload_prefix_lookup."""
    from swa_prefix_cache.pyspec.offload_lookup import offload_prefix_lookup

    env = prefix_env
    _install("native")
    assert vllm_adapter.status()["offload_lookup"]["prefix"]["installed"]
    rng = random.Random(zlib.crc32(f"prefix/{policy}".encode()))
    cases = max(CASES // 20, 500)
    done = nones = found = 0
    before = connector_lookup.status()["prefix"]
    while done < cases:
        n = rng.choice((rng.randint(0, 30), rng.randint(30, 400), rng.randint(400, 3000)))
        mask = _random_mask(rng, n)
        if rng.random() < 0.5:  # a long cached run first, as on a returning conversation
            run = rng.randint(0, n)
            mask[:run] = [HIT] * run
        manager, keys, ctx = planted_manager(env, mask, rng.getrandbits(40), policy)
        scheduler = SimpleNamespace(manager=manager, _events_tracker=_tracker(env))
        for _ in range(min(20, cases - done)):
            lo = rng.randint(0, n)
            hi = rng.randint(lo, n)
            answer = _compare_prefix(env, scheduler, keys[lo:hi], ctx)
            assert answer == offload_prefix_lookup(mask[lo:hi])
            nones += answer is None
            found += bool(answer)
            done += 1
    after = connector_lookup.status()["prefix"]
    assert after["answered"] - before["answered"] == done, (before, after)
    assert after["delegated"] == before["delegated"]
    assert nones > done // 50 and found > done // 4, (nones, found, done)
    CASE_COUNTS[f"offload prefix lookup vs vLLM ({policy})"] += done


@needs_prefix
def test_prefix_lookup_outside_the_model_is_vllms(prefix_env) -> None:
    """A self-describing events tracker (vLLM records each hit), a tracker
    whose record_lookup is patched, a manager subclass, keys that are not a
    list, a chunk that is not vLLM's ChunkStatus: vLLM's own method answers,
    and the tracker sees every call vLLM makes."""
    env = prefix_env
    _install("native")
    mask = [HIT] * 5 + [HIT_PENDING] + [HIT] * 3 + [MISS] + [HIT] * 4
    manager, keys, ctx = planted_manager(env, mask, 9900)
    recorded: list[int] = []
    counting = _tracker(env)
    counting.record_lookup = lambda req, group, idx, key: recorded.append(idx)

    class Sub(env.CPUOffloadingManager):
        pass

    odd = planted_manager(env, [HIT] * 4, 9901)[0]
    only_key = next(iter(odd._policy.chunks))
    odd._policy.chunks[only_key] = SimpleNamespace(ref_cnt=0, is_ready=True)
    before = connector_lookup.status()["prefix"]
    cases = (
        (SimpleNamespace(manager=manager, _events_tracker=_tracker(env, True)), keys[9:]),
        (SimpleNamespace(manager=manager, _events_tracker=counting), keys),
        (SimpleNamespace(manager=Sub(num_chunks=64), _events_tracker=_tracker(env)), keys),
        (SimpleNamespace(manager=manager, _events_tracker=_tracker(env)), tuple(keys)),
        (SimpleNamespace(manager=odd, _events_tracker=_tracker(env)), list(odd._policy.chunks)),
    )
    for scheduler, these in cases:
        _compare_prefix(env, scheduler, these, ctx)
    assert recorded == list(range(9)) * 2  # vLLM's method, run twice by _compare_prefix
    after = connector_lookup.status()["prefix"]
    assert after["delegated"] - before["delegated"] == len(cases)
    assert after["answered"] == before["answered"]


@needs_prefix
def test_prefix_lookup_on_a_real_scheduler(prefix_env, offload_env) -> None:  # type: ignore[no-untyped-def]
    """The method bound to a real OffloadingConnectorScheduler (its own
    events tracker, vLLM's default config) with a planted real manager."""
    env = prefix_env
    _install("native")
    rng = random.Random(5)
    before = connector_lookup.status()["prefix"]["answered"]
    for salt in range(30):
        mask = _random_mask(rng, rng.randint(0, 300))
        manager, keys, ctx = planted_manager(env, mask, 9950 + salt)
        sched = _offload_scheduler(offload_env, [(16, None, False)], 16, 2, None, manager)
        ours = sched._maximal_prefix_lookup(keys, ctx, None, None, 0)
        theirs = env.original_prefix(sched, keys, ctx, None, None, 0)
        assert (ours is None) == (theirs is None) and ours == theirs
    assert connector_lookup.status()["prefix"]["answered"] - before == 30


@needs_prefix
def test_prefix_shadow_and_uninstall(prefix_env) -> None:
    env = prefix_env
    _install("native", Mode.SHADOW)
    compared = vllm_adapter.stats().shadow_compared
    mismatches = vllm_adapter.stats().shadow_mismatches
    rng = random.Random(6)
    for salt in range(10):
        manager, keys, ctx = planted_manager(env, _random_mask(rng, rng.randint(0, 100)), 9980 + salt)
        _compare_prefix(env, SimpleNamespace(manager=manager, _events_tracker=_tracker(env)), keys, ctx)
    assert vllm_adapter.stats().shadow_compared - compared == 10
    assert vllm_adapter.stats().shadow_mismatches == mismatches
    vllm_adapter.uninstall()
    assert env.OffloadingConnectorScheduler.__dict__["_maximal_prefix_lookup"] is env.original_prefix
    assert not connector_lookup.status()["prefix"]["installed"]


@needs_prefix
@pytest.mark.parametrize("policy", ["lru", "arc"])
@pytest.mark.parametrize("capacity", ["roomy", "tight"])
def test_prefix_lookups_resume_and_stay_vllms(prefix_env, policy: str, capacity: str) -> None:
    """Requests looked up again and again while vLLM's real manager changes
    under them (stores offered, completed or failed, loads, touches,
    evictions once it is full, reset_cache): every answer is vLLM's, and the
    remembered ready runs are resumed from (a roomy manager is never full,
    a tight one evicts). Mutants that failed it: resuming after the
    manager filled, resuming across reset_cache."""
    env = prefix_env
    _install("native")
    rng = random.Random(zlib.crc32(f"resume/{policy}/{capacity}".encode()))
    shared = [env.make_offload_key(b"shared" + i.to_bytes(26, "big"), 0) for i in range(200)]

    class Req:  # the plugin keys its memory weakly by the request object
        pass

    group = object()
    requests = []
    for r in range(8):
        own = [env.make_offload_key(r.to_bytes(8, "big") + i.to_bytes(24, "big"), 0)
               for i in range(rng.randint(40, 300))]
        requests.append((Req(), shared[:rng.randint(0, 200)] + own))
    chunks = 4000 if capacity == "roomy" else 300
    manager = env.CPUOffloadingManager(num_chunks=chunks, cache_policy=policy)
    scheduler = SimpleNamespace(manager=manager, _events_tracker=_tracker(env))
    ctx = env.ReqContext(req_id="resume")
    pending: list[list[object]] = []
    loading: list[list[object]] = []
    before = connector_lookup.status()["prefix"]
    lookups = full_seen = 0
    for step in range(1500):
        op = rng.random()
        req, keys = rng.choice(requests)
        if op < 0.25:  # a store offered for a stretch of the request's chunks, mostly its next ones
            lo = rng.randint(0, len(keys) - 1)
            if rng.random() < 0.7:
                lo = next((i for i, k in enumerate(keys) if manager.lookup(k, ctx) is env.LookupResult.MISS), lo)
            out = manager.prepare_store(keys[lo:lo + rng.randint(1, 80)], ctx)
            if out is not None and out.keys_to_store:
                pending.append(list(out.keys_to_store))
        elif op < 0.40 and pending:  # a store job ends, mostly well
            done = pending.pop(rng.randrange(len(pending)))
            manager.complete_store(done, ctx, success=rng.random() < 0.9)
        elif op < 0.47:  # a load of a ready run, later completed
            ready = [k for k in keys[:rng.randint(1, len(keys))]
                     if manager.lookup(k, ctx) is env.LookupResult.HIT]
            if ready:
                manager.prepare_load(ready, ctx)
                loading.append(ready)
        elif op < 0.52 and loading:
            manager.complete_load(loading.pop(rng.randrange(len(loading))), ctx)
        elif op < 0.55 and hasattr(manager, "touch"):  # vLLM 0.33.0's manager
            manager.touch(keys[:rng.randint(1, len(keys))], ctx)
        elif op < 0.56 and not loading:  # vLLM resets only with no job in flight
            manager.reset_cache()
            pending.clear()
        else:  # the request is looked up again, from its start or a later chunk
            lo = 0 if rng.random() < 0.7 else rng.randint(0, len(keys) // 2)
            hi = rng.randint(max(lo, len(keys) - 40), len(keys))
            ours = env.OffloadingConnectorScheduler._maximal_prefix_lookup(
                scheduler, keys[lo:hi], ctx, req, group, lo)
            theirs = env.original_prefix(scheduler, keys[lo:hi], ctx, req, group, lo)
            assert (ours is None) == (theirs is None) and ours == theirs, (step, ours, theirs)
            lookups += 1
        full_seen += manager._num_allocated_chunks == manager._num_chunks
    after = connector_lookup.status()["prefix"]
    assert after["answered"] - before["answered"] == lookups
    resumed = after["resumed"] - before["resumed"]
    assert (full_seen > 500) == (capacity == "tight"), full_seen
    if capacity == "roomy":
        assert resumed > lookups // 4, (resumed, lookups)
    CASE_COUNTS[f"offload prefix lookup resumed vs vLLM ({policy})"] += lookups
