"""The tier lookup memory (swa_prefix_cache/vllm_adapter/tier_memo.py) against vLLM's
own ``_lookup_complete_chunks``, on a real ``OffloadingConnectorScheduler``
with a real ``CPUOffloadingManager`` (LRU and ARC, roomy and tight).

Requests are looked up again and again while the manager changes under
them through its real methods (stores offered, completed or failed, loads,
touches, evictions once it is tight, ``reset_cache``), chunks are being
loaded or not (the scheduler's own ``_chunks_being_loaded``, shared chunks
included), the GPU-computed prefix and the new-token cap move, and new
tokens extend a request's key lists. Every answer, and every group state's
``lookup_hit_end_chunk_idx`` it leaves, must be vLLM's method's on the same
state, and the memory must have answered most repeated lookups (so the
comparison covers it). Mutants that failed it: no forgetting on
``complete_store``, on ``prepare_store``'s evictions, or on
``reset_cache``; the closing check on the keys being loaded left out.
"""

from __future__ import annotations

import random
import zlib

import pytest

pytest.importorskip("vllm")

from conftest import CASE_COUNTS  # noqa: E402
from test_connector_lookup import _install, env  # noqa: E402, F401
from test_reachable import _offload_request, _offload_scheduler, offload_env, vllm_env  # noqa: E402, F401
from vllm_support import unpatched  # noqa: E402, F401 (autouse fixture)

from swa_prefix_cache import vllm_adapter  # noqa: E402
from swa_prefix_cache.vllm_adapter import fingerprint, tier_memo  # noqa: E402


def _known() -> bool:
    return fingerprint.check(fingerprint.TIER_MEMO).known


needs_memo = pytest.mark.skipif(not _known(), reason="the tier memory binds vLLM 0.33.0 and 0.34.0")

# (block size, window or None, eagle) per group: a hybrid layout, then one
# with an EAGLE group, as the trace's layouts have.
LAYOUTS = {
    "hybrid": [(16, None, False), (16, 64, False)],
    "eagle": [(16, None, False), (16, 128, False), (16, None, True)],
}


def _original():  # type: ignore[no-untyped-def]
    return vllm_adapter.registry.original(fingerprint.TIER_MEMO.name)


@needs_memo
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("policy", ["lru", "arc"])
@pytest.mark.parametrize("capacity", ["roomy", "tight"])
def test_remembered_answers_are_vllms(env, offload_env, layout: str, policy: str, capacity: str) -> None:  # type: ignore[no-untyped-def]
    _install("native")
    assert vllm_adapter.status()["offload_lookup"]["memo"]["installed"]
    original = _original()
    rng = random.Random(zlib.crc32(f"tier-memo/{layout}/{policy}/{capacity}".encode()))
    manager = env.CPUOffloadingManager(num_chunks=6000 if capacity == "roomy" else 400, cache_policy=policy)
    sched = _offload_scheduler(offload_env, LAYOUTS[layout], 16, 1, None, manager)
    shared = offload_env.make_block_hashes(rng.randint(4, 40), salt=b"system")
    requests = []
    for r in range(6):
        own = offload_env.make_block_hashes(rng.randint(20, 120), salt=b"own%d" % r)
        hashes = list(shared) + list(own)
        known = hashes[: rng.randint(len(hashes) // 2, len(hashes))]
        req = _offload_request(offload_env, f"r{r}", known, len(known) * 16 + rng.randint(0, 15), False)
        req.full_hashes = hashes
        sched.on_new_request(req)
        requests.append(req)
    ctx = sched._req_status["r0"].req_context
    pending: list[list] = []
    loading: list[list] = []
    before = tier_memo.status()
    lookups = 0
    for step in range(1200):
        op = rng.random()
        req = rng.choice(requests)
        status = sched._req_status[req.request_id]
        keys = [k for g in status.group_states for k in g.offload_keys] or [None]
        if op < 0.12 and keys[0] is not None:  # a store offered for a stretch of keys
            lo = rng.randrange(len(keys))
            out = manager.prepare_store(keys[lo:lo + rng.randint(1, 60)], ctx)
            if out is not None and out.keys_to_store:
                pending.append(list(out.keys_to_store))
        elif op < 0.22 and pending:  # a store job ends, mostly well
            manager.complete_store(pending.pop(rng.randrange(len(pending))), ctx,
                                   success=rng.random() < 0.85)
        elif op < 0.28 and keys[0] is not None:  # a load starts: its keys are being loaded
            ready = [k for k in keys[:rng.randint(1, len(keys))]
                     if manager.lookup(k, ctx) is env.LookupResult.HIT]
            if ready:
                manager.prepare_load(ready, ctx)
                sched._chunks_being_loaded.update(ready)
                loading.append(ready)
        elif op < 0.33 and loading:  # a load ends
            done = loading.pop(rng.randrange(len(loading)))
            manager.complete_load(done, ctx)
            sched._chunks_being_loaded.difference_update(done)
            for other in loading:  # still loading elsewhere
                sched._chunks_being_loaded.update(other)
        elif op < 0.35:  # a touch (vLLM 0.33.0's manager has one)
            if hasattr(manager, "touch") and keys[0] is not None:
                manager.touch(keys[:rng.randint(1, len(keys))], ctx)
        elif op < 0.36 and not loading:  # vLLM resets only with no job in flight
            manager.reset_cache()
            pending.clear()
        elif op < 0.38 and len(req.block_hashes) < len(req.full_hashes):  # new tokens
            req.block_hashes = req.full_hashes[: len(req.block_hashes) + rng.randint(1, 8)]
            req.num_tokens = req.num_prompt_tokens = len(req.block_hashes) * 16 + rng.randint(0, 15)
        else:  # looked up again (mostly as before)
            status.update_offload_keys()
            if rng.random() < 0.1:
                status.num_locally_computed_tokens = 16 * rng.randint(0, len(req.block_hashes) // 2)
            cap = None if rng.random() < 0.9 else rng.randint(0, req.num_tokens)
            ours = sched._lookup_complete_chunks(status, cap)
            our_ends = [g.lookup_hit_end_chunk_idx for g in status.group_states]
            theirs = original(sched, status, cap)
            their_ends = [g.lookup_hit_end_chunk_idx for g in status.group_states]
            assert ours == theirs and our_ends == their_ends, (step, ours, theirs, our_ends, their_ends)
            lookups += 1
    after = tier_memo.status()
    hits = after["hits"] - before["hits"]
    # A tight manager evicts a request's chunks often: fewer answers stay.
    assert hits > lookups // (3 if capacity == "roomy" else 6), (hits, lookups, str(after))
    if capacity == "tight":
        assert after["forgotten"] > before["forgotten"]
    CASE_COUNTS[f"tier memory vs vLLM ({policy}, {capacity})"] += lookups


@needs_memo
def test_a_foreign_writer_turns_the_memory_off(env, offload_env) -> None:  # type: ignore[no-untyped-def]
    """A manager writer the memory does not watch (patched on the object)
    or a class writer replaced after install: vLLM's method answers."""
    _install("native")
    manager = env.CPUOffloadingManager(num_chunks=1000)
    sched = _offload_scheduler(offload_env, LAYOUTS["hybrid"], 16, 1, None, manager)
    hashes = offload_env.make_block_hashes(40, salt=b"foreign")
    req = _offload_request(offload_env, "f", hashes, 40 * 16, False)
    sched.on_new_request(req)
    status = sched._req_status["f"]
    status.update_offload_keys()
    keys = [k for g in status.group_states for k in g.offload_keys]
    manager.complete_store(manager.prepare_store(keys, status.req_context).keys_to_store, status.req_context)
    for _ in range(3):
        sched._lookup_complete_chunks(status, None)
    hits = tier_memo.status()["hits"]
    assert hits > 0
    manager.complete_store = lambda *args, **kwargs: None  # shadows the watched writer
    for _ in range(3):
        sched._lookup_complete_chunks(status, None)
    assert tier_memo.status()["hits"] == hits
    del manager.complete_store
    sched._lookup_complete_chunks(status, None)
    assert tier_memo.status()["hits"] == hits + 1
    cls = type(manager)
    watcher = cls.__dict__["prepare_store"]
    cls.prepare_store = tier_memo.vllms(watcher)  # vLLM's own put back: writes not watched
    try:
        sched._lookup_complete_chunks(status, None)
        assert tier_memo.status()["hits"] == hits + 1
    finally:
        cls.prepare_store = watcher


@needs_memo
def test_finished_requests_leave_the_memory(env, offload_env) -> None:  # type: ignore[no-untyped-def]
    """Answers and marks hold their request state (its key lists): those
    of requests the scheduler let go are dropped once they outnumber twice
    the live ones plus ``SLACK``, so the memory stays bounded by what the
    scheduler holds, whatever the traffic."""
    _install("native")
    manager = env.CPUOffloadingManager(num_chunks=4000)
    sched = _offload_scheduler(offload_env, LAYOUTS["hybrid"], 16, 1, None, manager)
    live = 5
    most = 0
    for r in range(400):
        hashes = offload_env.make_block_hashes(12, salt=b"gone%d" % r)
        req = _offload_request(offload_env, f"g{r}", hashes, 12 * 16, False)
        sched.on_new_request(req)
        status = sched._req_status[req.request_id]
        status.update_offload_keys()
        for _ in range(3):  # marked, remembered, answered
            sched._lookup_complete_chunks(status, None)
        if len(sched._req_status) > live:  # the oldest request finishes
            del sched._req_status[next(iter(sched._req_status))]
        memo = tier_memo._memo_of(manager)
        held = len(memo.entries) + len(memo.marked)
        most = max(most, held)
        # Checked at each new lookup, before one more is held, against the
        # live states then (one more than now: the oldest just finished).
        assert held <= 2 * (live + 1) + tier_memo.SLACK + 1, (r, held)
    assert tier_memo.status()["hits"] >= 400
    assert most > live  # the bound was reached, not trivially kept
