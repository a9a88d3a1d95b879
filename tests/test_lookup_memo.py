"""The lookup memory (swa_prefix_cache/vllm_adapter/lookup_memo.py) answers exactly as vLLM.

Real vLLM objects only: ``KVCacheManager`` / coordinators / ``BlockPool``
built by vLLM from ``KVCacheConfig``s (one group, hybrids with several
windows and block sizes, EAGLE), real ``Request``s hashed by vLLM's own
block hasher. A random workload drives each manager the way the scheduler
does (admit with the looked-up hit, decode a token, preempt, finish, reset
the prefix cache, recompute a request's hash suffix, hand the answer to a
caller that changes its lists) on a pool small enough to evict, and looks
the waiting requests up again and again. Every lookup answered with the
plugin on (memory included) is compared with vLLM's own coordinator and
managers called right then on the same pool: the same hit length, the same
uncached-prefix count and, per group, the very same block objects.

Each premise of the memory is also broken on purpose (a mutant) and the same
workload, or a direct check, must catch it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

pytest.importorskip("vllm")

from swa_prefix_cache import vllm_adapter  # noqa: E402
from test_coordinators import FIXED_HYBRIDS, Group, Scenario, _make_request  # noqa: E402
from vllm.utils.hashing import sha256_cbor  # noqa: E402
from vllm.v1.core.block_pool import BlockPool  # noqa: E402
from vllm.v1.core.kv_cache_coordinator import (  # noqa: E402
    HybridKVCacheCoordinator,
    UnitaryKVCacheCoordinator,
)
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
from vllm.v1.core.kv_cache_utils import init_none_hash  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import (  # noqa: E402
    FullAttentionManager,
    SlidingWindowManager,
)
from swa_prefix_cache.vllm_adapter import lookup_memo  # noqa: E402
from vllm_support import unpatched  # noqa: E402, F401 (autouse: vLLM's own methods around each test)

ATTR = "find_longest_cache_hit"
# vLLM's own methods, taken at import, before any test installs the plugin.
VLLM_OWN = {
    cls: cls.__dict__[ATTR]
    for cls in (UnitaryKVCacheCoordinator, HybridKVCacheCoordinator,
                FullAttentionManager, SlidingWindowManager)
}

# The memory wraps hybrid coordinators; the one-group scenarios check that
# a unitary coordinator (vLLM's own lookup, unwrapped) still answers right.
SCENARIOS = [Scenario(groups, h, eagle) for groups, h in FIXED_HYBRIDS for eagle in (False, True)]
SCENARIOS += [Scenario((Group(16, 128),), 16, False), Scenario((Group(16),), 16, False)]


@contextmanager
def vllms_own() -> Iterator[None]:
    """vLLM's own coordinator and manager lookups for the duration; what was
    in place after."""
    installed = {cls: cls.__dict__[ATTR] for cls in VLLM_OWN}
    for cls, method in VLLM_OWN.items():
        setattr(cls, ATTR, method)
    try:
        yield
    finally:
        for cls, method in installed.items():
            setattr(cls, ATTR, method)


def vllm_answer(manager: KVCacheManager, request: Any) -> tuple:
    """What vLLM's own lookup answers now (a pure read of the pool), as
    ``get_computed_blocks`` reports it: blocks, hit, shared-prefix boundary."""
    with vllms_own():
        blocks, hit, uncached = manager.coordinator.find_longest_cache_hit(
            request.block_hashes, request.num_tokens - 1)
    return blocks, hit, hit + uncached if uncached else 0


def same_answer(ours: tuple, theirs: tuple) -> bool:
    """Equal lengths and counts; per group the very same block objects."""
    if tuple(ours[1:]) != tuple(theirs[1:]) or len(ours[0]) != len(theirs[0]):
        return False
    return all(
        len(a) == len(b) and all(x is y for x, y in zip(a, b))
        for a, b in zip(ours[0], theirs[0])
    )


class Workload:
    """A manager driven like vLLM's scheduler drives it, every lookup
    compared with vLLM's own."""

    def __init__(self, rng: random.Random, scenario: Scenario, num_blocks: int) -> None:
        self.rng = rng
        self.h = scenario.hash_block_size
        self.block = scenario.scheduler_block_size
        self.manager = KVCacheManager(
            kv_cache_config=scenario.kv_cache_config(num_blocks),
            max_model_len=64 * self.block,
            scheduler_block_size=self.block,
            hash_block_size=self.h,
            enable_caching=True,
            use_eagle=scenario.use_eagle,
        )
        # Prompts share a few prefixes, so requests hit each other's blocks.
        self.prefixes = [
            [rng.randrange(32_000) for _ in range(rng.randint(1, 12) * self.block)] for _ in range(3)
        ]
        self.waiting: list[Any] = []
        self.running: list[Any] = []
        self.next_id = 0
        self.lookups = self.mismatches = self.hits = 0
        self.first_mismatch = ""
        self.callers_change_lists = True

    def new_request(self) -> None:
        prefix = self.rng.choice(self.prefixes)
        tail = [self.rng.randrange(32_000) for _ in range(self.rng.randint(1, 6 * self.block))]
        self.waiting.append(_make_request(self.rng, f"r{self.next_id}", 0, self.h, prefix + tail))
        self.next_id += 1

    def lookup(self, request: Any) -> tuple:
        """The manager's answer (plugin on), checked against vLLM's own."""
        blocks, hit, boundary = self.manager.get_computed_blocks(request)
        ours = (tuple(blocks.blocks), hit, boundary)
        theirs = vllm_answer(self.manager, request)
        self.lookups += 1
        self.hits += hit > 0
        if not same_answer(ours, theirs):
            self.mismatches += 1
            if not self.first_mismatch:
                self.first_mismatch = (
                    f"{request.request_id}: ours hit {hit} {[len(b) for b in ours[0]]}, "
                    f"vLLM's {theirs[1]} {[len(b) for b in theirs[0]]}")
        return blocks, hit

    def admit(self, request: Any) -> None:
        blocks, hit = self.lookup(request)
        if self.callers_change_lists and self.rng.random() < 0.1:
            for group in blocks.blocks:  # a caller that changes what it got
                if isinstance(group, list):  # (no hit: vLLM's shared empty tuples)
                    group.clear()
            return
        new = self.manager.allocate_slots(request, request.num_tokens - hit, hit, blocks)
        if new is None:
            return  # no room: it waits, and is looked up again
        request.num_computed_tokens = request.num_tokens
        self.waiting.remove(request)
        self.running.append(request)

    def decode(self, request: Any) -> None:
        request.append_output_token_ids(self.rng.randrange(32_000))
        if self.manager.allocate_slots(request, 1) is None:
            self.manager.free(request)  # preempted: back to waiting, recomputed
            request.num_computed_tokens = 0
            self.running.remove(request)
            self.waiting.insert(0, request)
            return
        request.num_computed_tokens += 1

    def step(self) -> None:
        rng = self.rng
        roll = rng.random()
        if len(self.waiting) < 3 or roll < 0.05:
            self.new_request()
        elif roll < 0.45:
            # The waiting queue's head, looked up again (the memory's case).
            self.admit(self.waiting[0] if rng.random() < 0.8 else rng.choice(self.waiting))
        elif roll < 0.7 and self.running:
            self.decode(rng.choice(self.running))
        elif roll < 0.8 and self.running:
            finished = rng.choice(self.running)
            self.manager.free(finished)
            self.running.remove(finished)
        elif roll < 0.83 and not self.running:
            assert self.manager.reset_prefix_cache()
        elif roll < 0.87:
            # Recompute a waiting request's hash suffix, as vLLM does for a
            # resumable request: the same values, new objects.
            request = rng.choice(self.waiting)
            keep = rng.randrange(len(request.block_hashes) + 1)
            del request.block_hashes[keep:]
            request.update_block_hashes()
        else:
            self.lookup(self.waiting[0])


def run_workloads(seed: int, steps: int, scenarios: list[Scenario] = SCENARIOS,
                  memo: bool = True) -> list[Workload]:
    init_none_hash(sha256_cbor)
    rng = random.Random(seed)
    assert vllm_adapter.install(vllm_adapter.Mode.ON)
    status = vllm_adapter.status()["lookup_memo"]
    assert status["installed"] == memo, status["reason"]
    done = []
    for scenario in scenarios:
        work = Workload(rng, scenario, num_blocks=rng.randint(24, 60) * len(scenario.groups))
        for _ in range(steps):
            work.step()
        done.append(work)
    return done


def memo_stats() -> dict[str, int]:
    return vllm_adapter.status()["lookup_memo"]["stats"]


def test_memory_answers_as_vllm_under_a_changing_pool() -> None:
    works = run_workloads(seed=20261205, steps=600)
    bad = [(str(i), w.mismatches, w.first_mismatch) for i, w in enumerate(works) if w.mismatches]
    assert not bad, bad
    stats = memo_stats()
    lookups = sum(w.lookups for w in works)
    # The memory really answered, and was really told to forget.
    assert stats["hits"] > lookups // 5, (stats, lookups)
    assert stats["forgotten"] > 20, stats
    assert sum(w.hits for w in works) > lookups // 10, "the workload should hit often"


def test_memory_is_off_when_asked_and_in_shadow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWA_PREFIX_CACHE_LOOKUP_MEMO", "off")
    assert vllm_adapter.install(vllm_adapter.Mode.ON)
    assert vllm_adapter.status()["lookup_memo"] == {
        "installed": False, "reason": "SWA_PREFIX_CACHE_LOOKUP_MEMO=off", "stats": {}}
    assert HybridKVCacheCoordinator.__dict__[ATTR] is VLLM_OWN[HybridKVCacheCoordinator]
    vllm_adapter.uninstall()
    monkeypatch.setenv("SWA_PREFIX_CACHE_LOOKUP_MEMO", "on")
    assert vllm_adapter.install(vllm_adapter.Mode.ON)
    # Hybrid coordinators only: a unitary lookup is one search, cheaper than remembering.
    assert HybridKVCacheCoordinator.__dict__[ATTR] is not VLLM_OWN[HybridKVCacheCoordinator]
    assert UnitaryKVCacheCoordinator.__dict__[ATTR] is VLLM_OWN[UnitaryKVCacheCoordinator]
    vllm_adapter.uninstall()
    monkeypatch.setenv("SWA_PREFIX_CACHE_LOOKUP_MEMO", "sometimes")
    assert vllm_adapter.install(vllm_adapter.Mode.ON)  # the lookups still install
    reason = vllm_adapter.status()["lookup_memo"]["reason"]
    assert "SWA_PREFIX_CACHE_LOOKUP_MEMO" in reason and "'sometimes'" in reason
    vllm_adapter.uninstall()
    monkeypatch.delenv("SWA_PREFIX_CACHE_LOOKUP_MEMO")
    assert vllm_adapter.install(vllm_adapter.Mode.SHADOW)
    assert vllm_adapter.status()["lookup_memo"]["reason"] == "mode shadow"
    vllm_adapter.uninstall()
    for cls, method in VLLM_OWN.items():
        assert cls.__dict__[ATTR] is method


def test_memory_is_off_on_unknown_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    from swa_prefix_cache.vllm_adapter import fingerprint

    real = fingerprint.installed_digests

    def one_changed(binding: Any, *rest: Any) -> dict[str, str | None]:
        digests = real(binding, *rest)
        if binding.name == "lookup_memo":
            digests["BlockHashToBlockMap.pop"] = "0" * 64
        return digests

    monkeypatch.setattr(fingerprint, "installed_digests", one_changed)
    assert vllm_adapter.install(vllm_adapter.Mode.ON)
    memo = vllm_adapter.status()["lookup_memo"]
    assert not memo["installed"] and "BlockHashToBlockMap.pop" in memo["reason"], memo
    assert HybridKVCacheCoordinator.__dict__[ATTR] is VLLM_OWN[HybridKVCacheCoordinator]


def _one_waiting(seed: int) -> tuple[Workload, Any, Any]:
    """A fresh one-scenario workload with one waiting request: the
    workload, its pool's hash map and the request."""
    [work] = run_workloads(seed=seed, steps=0, scenarios=[SCENARIOS[0]])
    work.callers_change_lists = False
    work.new_request()
    return work, work.manager.block_pool.cached_block_hash_to_block, work.waiting[0]


def _in_its_pool(work: Workload, block_map: Any) -> str:
    """What the pool holds in its map's place: ``"vllm's map"`` (the very
    object, with nothing of ours set on it), ``"a view"`` (the memory's
    watching view sharing that map's containers), or what else."""
    pool = work.manager.block_pool
    held = pool.cached_block_hash_to_block
    own = all(getattr(getattr(block_map, name), "__func__", None) is getattr(type(block_map), name)
              for name in ("insert", "pop"))
    if held is block_map and own:
        return "vllm's map"
    if type(held) is lookup_memo.watch_type(type(block_map)) and held._cache is block_map._cache:
        return "a view"
    return f"something else: {held!r}"


def test_the_watch_lives_only_while_something_is_remembered() -> None:
    """No cost when nothing is remembered: the pool holds vLLM's own map
    again once the memory forgot, and nothing was ever set on that map."""
    work, block_map, request = _one_waiting(seed=3)
    work.lookup(request)
    assert _in_its_pool(work, block_map) == "vllm's map"  # seen once: nothing remembered yet
    work.lookup(request)
    assert _in_its_pool(work, block_map) == "a view"
    work.lookup(request)
    assert memo_stats()["hits"] == 1
    work.admit(request)  # caches the request's blocks (through the view): a watched key is written
    assert _in_its_pool(work, block_map) == "vllm's map"
    assert memo_stats()["forgotten"] == 1
    assert work.mismatches == 0, work.first_mismatch


def test_a_map_with_more_than_its_state_is_not_viewed() -> None:
    """A map holding an attribute the view would not share (another
    watcher's, a profiler's) is left alone: nothing is remembered."""
    work, block_map, request = _one_waiting(seed=3)
    block_map.insert = type(block_map).insert.__get__(block_map)
    for _ in range(3):
        work.lookup(request)
    assert memo_stats()["remembered"] == 0 and memo_stats()["hits"] == 0
    assert work.manager.block_pool.cached_block_hash_to_block is block_map
    assert work.mismatches == 0, work.first_mismatch


def test_a_reset_prefix_cache_forgets() -> None:
    """``reset_prefix_cache`` drops every key: up to vLLM 0.33.0 by a new
    map, from 0.34.0 on by the map's ``clear``. The next lookup is vLLM's."""
    [work] = run_workloads(seed=5, steps=0, scenarios=[SCENARIOS[0]])
    work.callers_change_lists = False
    work.new_request()
    first = work.waiting[0]
    work.admit(first)
    assert first in work.running
    work.manager.free(first)
    work.running.remove(first)
    again = _make_request(work.rng, "again", 0, work.h, list(first.prompt_token_ids))
    for _ in range(3):
        _, hit = work.lookup(again)
    assert hit > 0 and memo_stats()["hits"] == 1, memo_stats()
    assert work.manager.reset_prefix_cache()
    _, hit = work.lookup(again)
    assert hit == 0 and memo_stats()["forgotten"] == 1, memo_stats()
    block_map = work.manager.block_pool.cached_block_hash_to_block
    assert _in_its_pool(work, block_map) == "vllm's map"
    assert work.mismatches == 0, work.first_mismatch


# ---- mutants: each broken premise is caught ------------------------------------


def _no_watch_on(kind: str) -> Callable[[pytest.MonkeyPatch], None]:
    def plant(monkeypatch: pytest.MonkeyPatch) -> None:
        real = lookup_memo.LookupMemo._watch_maps

        def watch_maps(self: lookup_memo.LookupMemo) -> bool:
            if not real(self):
                return False
            for view in self.views:  # vLLM's own write again, unwatched
                setattr(view, kind, getattr(type(view).__mro__[1], kind).__get__(view))
            return True

        monkeypatch.setattr(lookup_memo.LookupMemo, "_watch_maps", watch_maps)

    return plant


def _ignore_new_maps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lookup_memo.LookupMemo, "_maps_unchanged", lambda self: True)


def _no_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lookup_memo, "copy_result", lambda result: result)


def _matches_without(part: str) -> Callable[[pytest.MonkeyPatch], None]:
    def plant(monkeypatch: pytest.MonkeyPatch) -> None:
        def matches(self: Any, hashes: list, max_length: int) -> bool:
            return (
                self.hashes is hashes
                and (part == "length" or self.length == len(hashes))
                and (part == "max_length" or self.max_length == max_length)
                and (part == "last" or hashes[-1] is self.last)
            )

        monkeypatch.setattr(lookup_memo._Entry, "matches", matches)

    return plant


# Up to vLLM 0.33.0 reset_prefix_cache replaces the map; from 0.34.0 on it
# clears the map in place (BlockHashToBlockMap.clear).
CLEARS_IN_PLACE = hasattr(BlockPool(2, True, 16).cached_block_hash_to_block, "clear")

WORKLOAD_MUTANTS = {
    "no watch on pop": _no_watch_on("pop"),
    "no watch on insert": _no_watch_on("insert"),
    "the answer's lists not copied": _no_copies,
}
if CLEARS_IN_PLACE:
    WORKLOAD_MUTANTS["no watch on clear"] = _no_watch_on("clear")
else:
    WORKLOAD_MUTANTS["a new map is not noticed"] = _ignore_new_maps


@pytest.mark.parametrize("mutant", list(WORKLOAD_MUTANTS))
def test_a_broken_memory_is_caught_by_the_workload(mutant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    WORKLOAD_MUTANTS[mutant](monkeypatch)
    try:
        works = run_workloads(seed=20261205, steps=600)
    except ValueError as exc:
        # vLLM itself failed on the wrong answer (the lists it got and then
        # changed, handed out again: its allocator runs out of blocks).
        assert "free blocks" in str(exc), exc
        return
    assert sum(w.mismatches for w in works) > 0, f"mutant {mutant!r} survived"


def test_an_entry_pins_its_list_by_identity_length_and_last_element() -> None:
    """The entry's own check, on plain lists: vLLM never shortens a list to
    an element it held last (a shorter list ends on an earlier hash), so the
    workload cannot reach the length check; it is checked here."""
    a, b, c = b"a" * 32, b"b" * 32, b"c" * 32
    hashes = [a, b, c]
    entry = lookup_memo._Entry(hashes, 47)
    assert entry.matches(hashes, 47)
    assert not entry.matches(list(hashes), 47)  # another list
    assert not entry.matches(hashes, 46)
    hashes.append(b"d" * 32)
    assert not entry.matches(hashes, 47)
    hashes[:] = [b, c]  # shorter, ending on the same object
    assert not entry.matches(hashes, 47)
    hashes[:] = [a, b, c[:1] + c[1:]]  # equal value, another object
    assert not entry.matches(hashes, 47)
    hashes[:] = [a, b, c]
    assert entry.matches(hashes, 47)


def test_a_replaced_suffix_of_other_hashes_is_not_answered_from_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same list, the same length, another chain: vLLM's answer changes,
    and so must ours (the held last element). Without that check, or
    without the max-length check, the memory answers wrongly."""

    def run() -> int:
        [work] = run_workloads(seed=11, steps=0, scenarios=[SCENARIOS[0]])
        work.callers_change_lists = False
        work.new_request()
        cached = work.waiting[0]
        work.admit(cached)  # its blocks are now in the pool
        assert work.running == [cached]
        other = _make_request(work.rng, "other", len(cached.prompt_token_ids), work.h,
                              [t + 1 for t in cached.prompt_token_ids])
        probe = _make_request(work.rng, "probe", 0, work.h, list(cached.prompt_token_ids))
        work.lookup(probe)
        work.lookup(probe)  # remembered: a hit on `cached`'s blocks
        assert work.hits == 2 and work.mismatches == 0
        probe.block_hashes[:] = list(other.block_hashes)  # same length, another chain
        work.lookup(probe)
        probe.block_hashes[:] = list(cached.block_hashes)
        work.lookup(probe)
        work.lookup(probe)
        # A lower cap: a new answer.
        blocks, hit, _ = work.manager.get_computed_blocks(probe, work.block)
        with vllms_own():
            theirs = work.manager.coordinator.find_longest_cache_hit(probe.block_hashes, work.block)
        ours = (tuple(blocks.blocks), hit, _ - hit if _ else 0)
        return work.mismatches + (not same_answer(ours, theirs))

    assert run() == 0
    for part in ("last", "max_length"):
        with monkeypatch.context() as m:
            _matches_without(part)(m)
            vllm_adapter.uninstall()
            assert run() > 0, f"a memory without its {part} check survived"
        vllm_adapter.uninstall()


def test_uninstall_takes_the_memory_and_its_watch_away() -> None:
    """Issue 44: after uninstall no coordinator keeps a memory and no pool
    map keeps the memory's watching insert and pop."""
    from swa_prefix_cache.vllm_adapter import lookup_memo

    work, block_map, request = _one_waiting(seed=4)
    work.lookup(request)
    work.lookup(request)
    coordinator = work.manager.coordinator
    assert _in_its_pool(work, block_map) == "a view" and lookup_memo.memo_of(coordinator) is not None
    vllm_adapter.uninstall()
    assert _in_its_pool(work, block_map) == "vllm's map"
    assert lookup_memo.memo_of(coordinator) is None
    assert HybridKVCacheCoordinator.__dict__[ATTR] is VLLM_OWN[HybridKVCacheCoordinator]


def test_a_batch_of_distinct_lookups_is_never_remembered() -> None:
    """Issue 45: a batch of 8 distinct waiting requests (longer than the
    memory's window), looked up in turn again and again (a benchmark's batch,
    a long queue), is never remembered, watched or copied: each lookup is a
    first one. A request looked up again within the window is remembered,
    as the blocked head of vLLM's waiting queue is."""
    from swa_prefix_cache.vllm_adapter import lookup_memo

    work, block_map, _ = _one_waiting(seed=5)
    assert lookup_memo.SEEN_WINDOW < 8
    while len(work.waiting) < 8:
        work.new_request()
    for _ in range(3):
        for request in work.waiting:
            work.lookup(request)
    assert memo_stats()["remembered"] == 0 and memo_stats()["hits"] == 0
    assert _in_its_pool(work, block_map) == "vllm's map"
    head = work.waiting[-1]
    work.lookup(head)  # again right after its last lookup
    assert memo_stats()["remembered"] == 1 and _in_its_pool(work, block_map) == "a view"
    work.lookup(head)
    assert memo_stats()["hits"] == 1
    assert work.mismatches == 0, work.first_mismatch
