"""Exact beside other code that patches vLLM (issue 44): a "never reuse"
policy or a profiler that wraps one of the functions a patch reads or
replaces, before or after the plugin installs, on vLLM's real classes.
The plugin's answers must be vLLM-with-the-wrapper's, the wrapper must keep
its calls, and uninstall must never remove a wrapper it did not set."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager, SlidingWindowManager
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm_support import build_planted_cache, make_spec, unpatched  # noqa: F401 (autouse fixture)

from swa_prefix_cache import vllm_adapter
from swa_prefix_cache.vllm_adapter import Mode, registry

ORIGINAL_PROBE = BlockPool.__dict__["get_cached_block"]
ORIGINAL_SWA = SlidingWindowManager.__dict__["find_longest_cache_hit"]


@contextmanager
def wrapped(owner: type, attr: str, make: Callable[[Any], Any]) -> Iterator[None]:
    """``owner.attr`` replaced by ``make(current)`` for the duration, then
    put back as it was (whatever the plugin did in between)."""
    before = owner.__dict__[attr]
    setattr(owner, attr, make(before))
    try:
        yield
    finally:
        vllm_adapter.uninstall()
        setattr(owner, attr, before)


def never_reuse(probe: Any) -> Any:
    """Another plugin's policy: no cached block is ever reused."""

    @functools.wraps(probe)
    def get_cached_block(self: Any, block_hash: Any, kv_cache_group_ids: Any) -> Any:
        return None

    return get_cached_block


def counting(calls: list[int]) -> Callable[[Any], Any]:
    """A profiler: counts the calls of a classmethod, then calls it."""

    def make(method: Any) -> Any:
        inner = method.__func__

        @functools.wraps(inner)
        def find_longest_cache_hit(cls: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            return inner(cls, *args, **kwargs)

        return classmethod(find_longest_cache_hit)

    return make


def _lookups(cache: Any, block_size: int = 4) -> tuple[Any, Any]:
    """A sliding-window and a full-attention lookup over ``cache``, through
    whatever the classes hold now."""
    swa = SlidingWindowManager.find_longest_cache_hit(
        block_hashes=cache.block_hashes, max_length=8 * block_size, kv_cache_group_ids=[0],
        block_pool=cache.block_pool, kv_cache_spec=make_spec(block_size, 2 * block_size + 1),
        drop_eagle_block=False, alignment_tokens=block_size,
    )
    full = FullAttentionManager.find_longest_cache_hit(
        block_hashes=cache.block_hashes, max_length=8 * block_size, kv_cache_group_ids=[0],
        block_pool=cache.block_pool,
        kv_cache_spec=FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32),
        drop_eagle_block=False, alignment_tokens=block_size,
    )
    return swa, full


def _hit_blocks(answer: Any) -> list[int]:
    """The blocks each group hit (vLLM returns the lists, then the hit's tokens)."""
    lists, _hit_tokens = answer
    return [len(blocks) for blocks in lists]


def test_a_wrapped_probe_before_install_is_honoured() -> None:
    """A "never reuse" wrapper of BlockPool.get_cached_block put in place
    before the plugin: the inline pool read and the lookup memory step
    aside naming the wrapper's file, the lookups still run ours but probe
    through the wrapper, and every answer is vLLM-with-the-wrapper's (no
    hit), where without the wrapper both lookups hit 8 blocks."""
    cache = build_planted_cache({0: [True] * 8}, 4)
    assert _hit_blocks(_lookups(cache)[0]) == [8]
    with wrapped(BlockPool, "get_cached_block", never_reuse):
        theirs = _lookups(cache)
        assert vllm_adapter.install(Mode.ON)
        assert registry.is_installed("sliding_window")
        for name in ("pool_read", "lookup_memo"):
            reason = registry.state(name).reason
            assert not registry.is_installed(name) and "steps aside" in reason, (name, reason)
            assert "BlockPool.get_cached_block is replaced or wrapped by" in reason
            assert __file__ in reason
        degraded = vllm_adapter.status()["degraded"]  # what the once-per-process DEGRADED line says
        assert sum(__file__ in line for line in degraded) == 2, degraded
        assert vllm_adapter.status()["paths"]["sliding_window"]["probes"] == "get_cached_block"
        ours = _lookups(cache)
        assert [_hit_blocks(a) for a in ours] == [_hit_blocks(a) for a in theirs] == [[0], [0]]
    vllm_adapter.install(Mode.ON)
    assert [_hit_blocks(a) for a in _lookups(cache)] == [[8], [8]]


def test_a_wrapped_probe_after_install_is_honoured() -> None:
    """The same wrapper put in place after the plugin installed: the
    per-call identity check of the probe sees it, and the answers are the
    wrapper's."""
    cache = build_planted_cache({0: [True] * 8}, 4)
    assert vllm_adapter.install(Mode.ON)
    assert [_hit_blocks(a) for a in _lookups(cache)] == [[8], [8]]
    with wrapped(BlockPool, "get_cached_block", never_reuse):
        assert [_hit_blocks(a) for a in _lookups(cache)] == [[0], [0]]


def test_a_profiler_before_install_keeps_its_calls() -> None:
    """A counting wrapper of SlidingWindowManager.find_longest_cache_hit
    put in place before the plugin: the sliding-window patch steps aside
    (DEGRADED in status and the log, naming the file), the profiler counts every lookup, and the
    answers are vLLM's."""
    calls: list[int] = []
    cache = build_planted_cache({0: [True] * 8}, 4)
    with wrapped(SlidingWindowManager, "find_longest_cache_hit", counting(calls)):
        profiler = SlidingWindowManager.__dict__["find_longest_cache_hit"]
        vllm_adapter.install(Mode.ON)
        reason = registry.state("sliding_window").reason
        assert not registry.is_installed("sliding_window") and "steps aside" in reason and __file__ in reason
        assert any(__file__ in line for line in vllm_adapter.status()["degraded"])
        assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is profiler
        for _ in range(5):
            assert _hit_blocks(_lookups(cache)[0]) == [8]
        assert len(calls) == 5


def test_a_profiler_after_install_is_left_in_place_by_uninstall(caplog: pytest.LogCaptureFixture) -> None:
    """A counting wrapper put around the plugin's installed lookup: it
    counts the calls, and uninstall leaves it (and says so) instead of
    writing vLLM's method over it; installing again is refused while it
    sits there, and once it is gone the cycle is clean."""
    calls: list[int] = []
    cache = build_planted_cache({0: [True] * 8}, 4)
    assert vllm_adapter.install(Mode.ON)
    ours = SlidingWindowManager.__dict__["find_longest_cache_hit"]
    profiler = counting(calls)(ours)
    SlidingWindowManager.find_longest_cache_hit = profiler
    try:
        assert _hit_blocks(_lookups(cache)[0]) == [8] and len(calls) == 1
        with caplog.at_level(logging.WARNING, logger="swa_prefix_cache"):
            vllm_adapter.uninstall()
        assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is profiler
        reason = registry.state("sliding_window").reason
        assert "left in place" in reason and __file__ in reason
        assert any("left in place" in r.getMessage() for r in caplog.records)
    finally:
        SlidingWindowManager.find_longest_cache_hit = ORIGINAL_SWA
    for _ in range(3):  # clean install/uninstall cycles restore vLLM's own objects
        assert vllm_adapter.install(Mode.ON)
        assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is not ORIGINAL_SWA
        vllm_adapter.uninstall()
        assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is ORIGINAL_SWA
        assert BlockPool.__dict__["get_cached_block"] is ORIGINAL_PROBE


def never_offloaded(lookup: Any) -> Any:
    """Another plugin's policy: the host tier is never read."""
    from vllm.v1.kv_offload.base import LookupResult

    @functools.wraps(lookup)
    def lookup_(self: Any, key: Any, req_context: Any) -> Any:
        return LookupResult.MISS

    return lookup_


def _offload_lookups(manager: Any, keys: list[Any], ctx: Any) -> tuple[Any, Any]:
    """The offload scheduler's sliding-window and full-attention lookups of
    ``keys`` on ``manager``, through whatever the class holds now."""
    from types import SimpleNamespace

    from test_connector_lookup import _tracker
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        OffloadingConnectorScheduler,
    )

    stand_in = SimpleNamespace(manager=manager, _events_tracker=_tracker(None))
    swa = OffloadingConnectorScheduler._sliding_window_lookup(stand_in, keys, 3, ctx, initial_window_size=None)
    prefix = OffloadingConnectorScheduler._maximal_prefix_lookup(stand_in, keys, ctx, None, None, 0)
    return swa, prefix


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_wrapped_offload_lookup_is_honoured(when: str) -> None:
    """A "never read the host tier" wrapper of CPUOffloadingManager.lookup,
    whose policy the offload lookups read inline. Before install: both
    offload patches step aside naming the wrapper's file. After install:
    their per-call check sees the class's lookup is no longer vLLM's and
    asks the manager. Either way every answer is vLLM-with-the-wrapper's,
    where without the wrapper both lookups find the planted chunks."""
    from types import SimpleNamespace

    from test_offload_lookup import planted_manager
    from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    from swa_prefix_cache.pyspec.offload_lookup import HIT
    from swa_prefix_cache.vllm_adapter import connector_lookup

    env = SimpleNamespace(CPUOffloadingManager=CPUOffloadingManager, ReqContext=ReqContext,
                          make_offload_key=make_offload_key, LookupResult=LookupResult)
    manager, keys, ctx = planted_manager(env, [HIT] * 8, 4400)
    names = (connector_lookup.NAME, connector_lookup.PREFIX_NAME)
    if when == "after":
        vllm_adapter.install(Mode.ON)
        plain = _offload_lookups(manager, keys, ctx)
        with wrapped(CPUOffloadingManager, "lookup", never_offloaded):
            assert all(registry.is_installed(name) for name in names)
            ours = _offload_lookups(manager, keys, ctx)
            vllm_adapter.uninstall()
            theirs = _offload_lookups(manager, keys, ctx)
    else:
        plain = _offload_lookups(manager, keys, ctx)
        with wrapped(CPUOffloadingManager, "lookup", never_offloaded):
            theirs = _offload_lookups(manager, keys, ctx)
            vllm_adapter.install(Mode.ON)
            for name in names:
                reason = registry.state(name).reason
                assert not registry.is_installed(name) and "steps aside" in reason, (name, reason)
                assert "CPUOffloadingManager.lookup is replaced or wrapped by" in reason
                assert __file__ in reason
            ours = _offload_lookups(manager, keys, ctx)
    assert plain[1] == 8 and plain[0], plain
    assert not theirs[0] and not theirs[1], theirs
    assert ours == theirs
