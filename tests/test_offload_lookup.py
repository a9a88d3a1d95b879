"""The KV-offload sliding-window lookup (swa_prefix_cache/pyspec/offload_lookup.py).

1. ``offload_stride_search == legacy_offload_scan == offload_lookup`` on every
   three-valued mask of up to 8 chunks, every window 0..n+1 and every initial
   window None/0..n+1 (exhaustive), and with Hypothesis up to thousands of
   chunks; the stride search reads each chunk at most once, never more than
   vLLM's loop, and within ``probe_bound``.
2. ``legacy_offload_scan`` is vLLM's real
   ``OffloadingConnectorScheduler._sliding_window_lookup``: the real method is
   run on a real ``CPUOffloadingManager`` in which chunks are planted so that
   its ``lookup`` answers HIT (stored and ``complete_store``d), HIT_PENDING
   (``prepare_store``d only) or MISS (never stored), both unbound on a
   stand-in ``self`` and bound to a real scheduler built as
   tests/test_offload_filter.py builds it; same answer, same number of
   ``manager.lookup`` calls.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
from types import SimpleNamespace

import pytest
from conftest import CASE_COUNTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_reachable import offload_env, vllm_env  # noqa: F401 (fixtures)

from swa_prefix_cache.pyspec.offload_lookup import (
    HIT,
    HIT_PENDING,
    MISS,
    CountingChunks,
    check_offload_args,
    legacy_offload_scan,
    legacy_probes,
    offload_lookup,
    offload_stride_search,
    probe_bound,
)

SMALL_N = int(os.environ.get("PREFIX_CACHE_OFFLOAD_SMALL_N", "8"))


def all_cases(max_n: int):  # type: ignore[no-untyped-def]
    for n in range(max_n + 1):
        for mask in itertools.product((MISS, HIT, HIT_PENDING), repeat=n):
            for window in range(n + 2):
                for initial in [None, *range(n + 2)]:
                    yield list(mask), window, initial


def check_one(mask: list[int], window: int, initial: int | None) -> None:
    n = len(mask)
    legacy = CountingChunks(mask)
    stride = CountingChunks(mask)
    a = legacy_offload_scan(legacy, n, window, initial)
    b = offload_stride_search(stride, n, window, initial)
    d = offload_lookup(mask, window, initial)
    assert a == b == d, (mask, window, initial, a, b, d)
    assert len(set(stride.seen)) == len(stride.seen), "a chunk was read twice"
    assert stride.probes <= n
    assert stride.probes <= legacy.probes, "more reads than vLLM's loop"
    if window >= 1:
        assert stride.probes <= probe_bound(mask, window, initial)


def test_exhaustive_small() -> None:
    count = 0
    for mask, window, initial in all_cases(SMALL_N):
        check_one(mask, window, initial)
        count += 1
    CASE_COUNTS["offload_lookup exhaustive"] += count
    assert count > 900_000 or SMALL_N < 8


def _mask_strategy(max_n: int):  # type: ignore[no-untyped-def]
    # Mostly-hit masks with a few misses and pending chunks make long runs
    # (the interesting case); uniform masks make short ones.
    dense = st.lists(st.sampled_from([HIT] * 30 + [HIT_PENDING, MISS]), max_size=max_n)
    uniform = st.lists(st.sampled_from([MISS, HIT, HIT_PENDING]), max_size=max_n)
    sparse = st.lists(st.sampled_from([MISS] * 8 + [HIT, HIT_PENDING]), max_size=max_n)
    return st.one_of(dense, uniform, sparse)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mask=_mask_strategy(3000),
    window=st.integers(0, 70),
    initial=st.one_of(st.none(), st.integers(0, 80)),
)
def test_hypothesis_large(mask: list[int], window: int, initial: int | None) -> None:
    check_one(mask, window, initial)
    CASE_COUNTS["offload_lookup hypothesis"] += 1


def test_all_miss_reads_about_n_over_w() -> None:
    """On an empty cache the stride search reads 1 + (n - 1) // w + 1 chunks."""
    for n in (1, 10, 1000, 4096):
        for w in (1, 2, 7, 64):
            mask = [MISS] * n
            c = CountingChunks(mask)
            assert offload_stride_search(c, n, w) == 0
            assert c.probes <= 1 + (n - 1) // w + 1
            assert legacy_probes(mask, w) == n


def test_examples() -> None:
    H, P, M = HIT, HIT_PENDING, MISS
    cases = [
        ([], 3, None, 0),  # no keys: 0
        ([M], 0, None, 0),  # window 0: the miss itself
        ([H, H, M, H], 0, None, 2),  # window 0: the rightmost miss
        ([H, H, H], 0, None, 3),  # window 0, no miss: every chunk
        ([H, P, H], 0, None, None),  # ... unless one is pending
        ([H, H, H, M, H, H], 2, 3, 3),  # tail run 2 < initial 3; [1, 3) wins
        ([H, H, H, M, H, H], 2, None, 6),  # tail run 2 >= 2
        ([H, H, M, H, H, H], 3, 2, 6),  # initial smaller than the window
        ([H, M, H, H], 3, None, 1),  # no window: the leading run
        ([P, M, H, H], 3, None, None),  # ... pending in it
        ([H, P, M, H, H, H], 2, 4, None),  # the chosen window holds a pending chunk
        ([P, H, H, M, H], 2, None, 3),  # pending outside the chosen window
        ([H, H], 3, None, 2),  # too short for any window: n
        ([H, H], 3, 0, 2),  # initial 0 acts as None
        ([M, H, H, H], 1, None, 4),
        ([H, H, H, H, M], 1, 5, 4),
    ]
    for mask, w, i0, want in cases:
        assert offload_lookup(mask, w, i0) == want, (mask, w, i0)
        assert legacy_offload_scan(CountingChunks(mask), len(mask), w, i0) == want
        assert offload_stride_search(CountingChunks(mask), len(mask), w, i0) == want


@pytest.mark.parametrize(
    "args",
    [(-1, 1, None), (1, -1, None), (1, 1, -1), (1, True, None), (1, 1, 1.0), (1.0, 1, None)],
)
def test_preconditions_refused(args) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises((ValueError, TypeError)):
        check_offload_args(*args)
    n, w, i0 = args
    with pytest.raises((ValueError, TypeError)):
        offload_stride_search(lambda i: HIT, n, w, i0)  # type: ignore[arg-type]


def test_bad_mask_refused() -> None:
    with pytest.raises(ValueError, match="chunks\\[1\\]"):
        offload_lookup([1, 3], 1)
    with pytest.raises(ValueError):
        legacy_offload_scan(lambda i: 4, 1, 1)


# ---------------------------------------------------------------------------
# 2. against vLLM's real method on a real CPUOffloadingManager
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_offload():  # type: ignore[no-untyped-def]
    pytest.importorskip("vllm")
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        OffloadingConnectorScheduler,
    )
    from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    logging.getLogger("vllm").setLevel(logging.ERROR)
    return SimpleNamespace(**locals())


class CountingManager:
    """Forwards ``lookup`` to the real manager and counts the calls."""

    def __init__(self, real) -> None:  # type: ignore[no-untyped-def]
        self.real = real
        self.calls = 0
        self.lock = real.lock if hasattr(real, "lock") else None

    def lookup(self, key, req_context):  # type: ignore[no-untyped-def]
        self.calls += 1
        return self.real.lookup(key, req_context)


def planted_manager(env, mask: list[int], salt: int, policy: str = "lru"):  # type: ignore[no-untyped-def]
    """A real CPUOffloadingManager (cache policy ``policy``) whose lookup
    answers the mask; its keys."""
    manager = env.CPUOffloadingManager(num_chunks=max(16, 2 * len(mask)), cache_policy=policy)
    ctx = env.ReqContext(req_id=f"plant{salt}")
    keys = [
        env.make_offload_key(salt.to_bytes(8, "big") + i.to_bytes(24, "big"), 0)
        for i in range(len(mask))
    ]
    stored = [k for k, v in zip(keys, mask) if v != MISS]
    if stored:
        assert manager.prepare_store(stored, ctx) is not None
        ready = [k for k, v in zip(keys, mask) if v == HIT]
        if ready:
            manager.complete_store(ready, ctx)
    want = {MISS: env.LookupResult.MISS, HIT: env.LookupResult.HIT, HIT_PENDING: env.LookupResult.HIT_PENDING}
    lookup_ctx = env.ReqContext(req_id=f"query{salt}")
    got = [manager.lookup(k, lookup_ctx) for k in keys]
    assert got == [want[v] for v in mask], "the planted manager does not answer the mask"
    return manager, keys, lookup_ctx


def run_vllm(env, self_obj, keys, window, ctx, initial):  # type: ignore[no-untyped-def]
    return env.OffloadingConnectorScheduler._sliding_window_lookup(
        self_obj, keys, window, ctx, initial_window_size=initial
    )


def compare(env, mask: list[int], salt: int, params) -> int:  # type: ignore[no-untyped-def]
    manager, keys, ctx = planted_manager(env, mask, salt)
    counting = CountingManager(manager)
    stand_in = SimpleNamespace(manager=counting)
    for window, initial in params:
        counting.calls = 0
        got = run_vllm(env, stand_in, keys, window, ctx, initial)
        legacy = CountingChunks(mask)
        want = legacy_offload_scan(legacy, len(mask), window, initial)
        assert got == want, (mask, window, initial, got, want)
        assert counting.calls == legacy.probes, (mask, window, initial)
        assert offload_lookup(mask, window, initial) == got
    return len(params)


def test_vllm_exhaustive_small(vllm_offload) -> None:  # type: ignore[no-untyped-def]
    count = 0
    salt = 0
    for n in range(7):
        params = [(w, i0) for w in range(n + 2) for i0 in [None, *range(n + 2)]]
        for mask in itertools.product((MISS, HIT, HIT_PENDING), repeat=n):
            salt += 1
            count += compare(vllm_offload, list(mask), salt, params)
    CASE_COUNTS["offload_lookup vs vLLM exhaustive"] += count
    assert count > 70_000


def test_vllm_random_large(vllm_offload) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(1313)
    count = 0
    for salt in range(300):
        n = rng.choice([rng.randint(0, 40), rng.randint(40, 2000)])
        kind = rng.random()
        weights = [1, 30, 1] if kind < 0.5 else ([1, 1, 1] if kind < 0.8 else [8, 1, 1])
        mask = rng.choices([MISS, HIT, HIT_PENDING], weights=weights, k=n)
        params = [
            (rng.randint(0, 70), rng.choice([None, 0, rng.randint(1, 80)])) for _ in range(6)
        ]
        count += compare(vllm_offload, mask, 10**6 + salt, params)
    CASE_COUNTS["offload_lookup vs vLLM random"] += count


def test_vllm_real_scheduler(vllm_offload, offload_env) -> None:  # type: ignore[no-untyped-def]
    """The method bound to a real OffloadingConnectorScheduler (built as
    tests/test_offload_filter.py builds it), its manager a planted real one."""
    from test_reachable import _offload_scheduler

    rng = random.Random(77)
    count = 0
    for salt in range(60):
        n = rng.randint(0, 300)
        mask = rng.choices([MISS, HIT, HIT_PENDING], weights=[1, 12, 1], k=n)
        manager, keys, ctx = planted_manager(vllm_offload, mask, 2 * 10**6 + salt)
        sched = _offload_scheduler(offload_env, [(16, 64, False)], 16, 2, None, manager)
        assert sched.manager is manager
        for _ in range(5):
            window = rng.randint(0, 20)
            initial = rng.choice([None, 0, rng.randint(1, 25)])
            got = sched._sliding_window_lookup(keys, window, ctx, initial_window_size=initial)
            assert got == legacy_offload_scan(CountingChunks(mask), n, window, initial)
            assert got == offload_stride_search(CountingChunks(mask), n, window, initial)
            count += 1
    CASE_COUNTS["offload_lookup vs vLLM real scheduler"] += count


def test_retry_is_outside_the_model(vllm_offload) -> None:  # type: ignore[no-untyped-def]
    """With RETRY, vLLM's answer is not a function of a 3-valued mask: a RETRY
    chunk resets the run like a MISS but forces None."""
    env = vllm_offload
    answers = {0: env.LookupResult.HIT, 1: env.LookupResult.HIT, 2: env.LookupResult.RETRY}
    stand_in = SimpleNamespace(
        manager=SimpleNamespace(lookup=lambda key, ctx: answers[key])
    )
    got = env.OffloadingConnectorScheduler._sliding_window_lookup(stand_in, [0, 1, 2], 1, None)
    assert got is None
    # A MISS in the same place gives 2 (the window [1, 2)).
    assert offload_lookup([HIT, HIT, MISS], 1) == 2
    # A RETRY left of the decision is never asked about.
    answers = {0: env.LookupResult.RETRY, 1: env.LookupResult.HIT, 2: env.LookupResult.HIT}
    got = env.OffloadingConnectorScheduler._sliding_window_lookup(stand_in, [0, 1, 2], 1, None)
    assert got == 3
