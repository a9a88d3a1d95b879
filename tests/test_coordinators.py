"""vLLM's KV-cache coordinators answer the same with and without the plugin.

Real vLLM objects only (no mocks): ``KVCacheConfig`` / ``KVCacheGroupSpec``
/ ``FullAttentionSpec`` / ``SlidingWindowSpec`` configs turned into
coordinators by vLLM's own ``get_kv_cache_coordinator``:

* ``UnitaryKVCacheCoordinator``: one sliding-window group;
* ``HybridKVCacheCoordinator``: full attention plus one to three
  sliding-window groups, with block sizes that differ between groups and
  from the hash block size (e.g. full 16 + SWA 32 on 16-token hashes, full
  32 + SWA 16, ...), several SWA windows (so the coordinator's fixed-point
  loop calls the SWA finder repeatedly), SWA groups sharing one spec (one
  finder call over two group ids), SWA-only hybrids, EAGLE on and off (all
  groups, or only the flagged ones).

Cached blocks are planted per group in the coordinator's real
``BlockPool`` under each group's block-size view of the hashes (random
masks: sparse, dense, runs, runs one block short of the window, cached
prefixes; blocks cached in some groups only). Every lookup
(``coordinator.find_longest_cache_hit`` and, for hybrids,
``find_longest_cache_hit_per_group``) runs once with vLLM's own method
(``swa_prefix_cache.vllm_adapter.uninstall()``) and once patched
(``swa_prefix_cache.vllm_adapter.install(Mode.ON)``): same hit length, same uncached-prefix
count, and per group the very same block objects (``is``: ``KVCacheBlock``
compares by value). ``swa_prefix_cache.vllm_adapter.stats().calls`` must grow while
installed, so the patched path really ran. ``KVCacheManager.
get_computed_blocks`` is compared the same way on real ``Request``s.

``PREFIX_CACHE_COORDINATOR_CASES`` sets the number of compared lookups of
the main test (default 3,000).
"""

from __future__ import annotations

import inspect
import math
import os
import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("vllm")

import torch  # noqa: E402
from conftest import CASE_COUNTS  # noqa: E402
from masks import random_mask  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256_cbor  # noqa: E402
from vllm.v1.core.block_pool import BlockPool  # noqa: E402
from vllm.v1.core.kv_cache_coordinator import (  # noqa: E402
    HybridKVCacheCoordinator,
    KVCacheCoordinator,
    UnitaryKVCacheCoordinator,
    get_kv_cache_coordinator,
)
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    BlockHash,
    KVCacheBlock,
    get_request_block_hasher,
    init_none_hash,
    make_block_hash_with_group_id,
)
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    SlidingWindowSpec,
)
from vllm.v1.request import Request  # noqa: E402
from vllm_support import (  # noqa: E402, F401 (unpatched: autouse fixture)
    ORIGINAL_LOOKUP,
    unpatched,
    coarse_block_hashes,
    count_native,
    make_block_hashes,
    split_mask_across_groups,
)

from swa_prefix_cache import vllm_adapter  # noqa: E402
from benchmarks import cffi_core as native  # noqa: E402

CASES = int(os.environ.get("PREFIX_CACHE_COORDINATOR_CASES", "3000"))
COUNT_KEY = "coordinators (with vs without plugin)"

# vLLM's own method, taken before anything is patched; ``unpatched`` is an
# autouse fixture that keeps it in place around every test.
ORIGINAL = ORIGINAL_LOOKUP


@pytest.fixture(params=["python", "native"])
def backend(request, monkeypatch) -> str:
    """The core ``install()`` is asked for (``SWA_PREFIX_CACHE_CORE``);
    ``native`` falls back to Python only when the library is missing."""
    monkeypatch.setenv(vllm_adapter.CORE_ENV, request.param)
    return request.param


# ---- configs -------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    """One KV cache group: ``window`` None means full attention."""

    block_size: int
    window: int | None = None
    eagle: bool = False  # KVCacheGroupSpec.is_eagle_group

    def spec(self) -> KVCacheSpec:
        if self.window is None:
            return FullAttentionSpec(
                block_size=self.block_size, num_kv_heads=1, head_size=1,
                dtype=torch.float32,
            )
        return SlidingWindowSpec(
            block_size=self.block_size, num_kv_heads=1, head_size=1,
            dtype=torch.float32, sliding_window=self.window,
        )


@dataclass(frozen=True)
class Scenario:
    groups: tuple[Group, ...]
    hash_block_size: int
    use_eagle: bool

    @property
    def scheduler_block_size(self) -> int:
        return math.lcm(self.hash_block_size, *(g.block_size for g in self.groups))

    def kv_cache_config(self, num_blocks: int) -> KVCacheConfig:
        return KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec([f"layer{i}"], g.spec(), is_eagle_group=g.eagle)
                for i, g in enumerate(self.groups)
            ],
        )

    def coordinator(self, num_blocks: int, max_model_len: int) -> KVCacheCoordinator:
        return get_kv_cache_coordinator(
            kv_cache_config=self.kv_cache_config(num_blocks),
            max_model_len=max_model_len,
            max_in_flight_tokens=max_model_len,
            use_eagle=self.use_eagle,
            enable_caching=True,
            enable_kv_cache_events=False,
            dcp_world_size=1,
            pcp_world_size=1,
            scheduler_block_size=self.scheduler_block_size,
            hash_block_size=self.hash_block_size,
        )


def _swa_window(rng: random.Random, block_size: int) -> int:
    """A window needing 1 .. ~12 contiguous blocks (sometimes 1 token)."""
    need = rng.choice((1, 2, 3, rng.randint(1, 6), rng.randint(4, 12)))
    if rng.random() < 0.05:
        return 1  # needs 0 blocks: any run (even empty) is a hit
    return rng.randint((need - 1) * block_size + 2, need * block_size + 1)


def random_scenario(rng: random.Random) -> Scenario:
    """A unitary SWA config (a third of the time) or a hybrid one."""
    use_eagle = rng.random() < 0.4
    if rng.random() < 1 / 3:
        bs = rng.choice((1, 2, 16, 32, rng.randint(1, 64)))
        return Scenario((Group(bs, _swa_window(rng, bs)),), bs, use_eagle)
    h = rng.choice((1, 2, 4, 8, 16, 16, 16))
    sizes = (h, h, h, 2 * h, 2 * h, 3 * h, 4 * h)
    groups: list[Group] = []
    if rng.random() < 0.85:
        groups.append(Group(rng.choice(sizes)))
    for _ in range(rng.choice((1, 1, 2, 2, 3))):
        if groups and groups[-1].window is not None and rng.random() < 0.3:
            groups.append(groups[-1])  # same spec: one finder call, two group ids
        else:
            bs = rng.choice(sizes)
            groups.append(Group(bs, _swa_window(rng, bs)))
    if len(groups) == 1:  # a single full group would not be hybrid
        bs = rng.choice(sizes)
        groups.append(Group(bs, _swa_window(rng, bs)))
    if use_eagle and rng.random() < 0.5:
        flagged = {i for i in range(len(groups)) if rng.random() < 0.5}
        groups = [Group(g.block_size, g.window, i in flagged) for i, g in enumerate(groups)]
    scenario = Scenario(tuple(groups), h, use_eagle)
    if scenario.scheduler_block_size > 16 * h:  # keep hits reachable
        return random_scenario(rng)
    return scenario


FIXED_HYBRIDS = [
    # (groups, hash block size): the shapes the brief names, always run.
    ((Group(16), Group(16, 128)), 16),
    ((Group(16), Group(32, 128)), 16),  # SWA block > full block
    ((Group(32), Group(16, 100)), 16),  # SWA block < alignment (32)
    ((Group(32), Group(32, 200)), 16),  # hash block smaller than both
    ((Group(16), Group(16, 64), Group(16, 64)), 16),  # shared SWA spec
    ((Group(16), Group(16, 64), Group(32, 300)), 16),  # two windows
    ((Group(16, 48), Group(32, 160)), 16),  # SWA only
]


# ---- planting --------------------------------------------------------------------


def _group_view(scenario: Scenario, fine: Sequence[BlockHash], gid: int) -> list[BlockHash]:
    return coarse_block_hashes(fine, scenario.hash_block_size, scenario.groups[gid].block_size)


def random_group_masks(
    rng: random.Random, scenario: Scenario, num_fine: int
) -> dict[int, list[bool]]:
    """Per-group cached masks over each group's block-size view.

    Full attention: a cached prefix of random length, sometimes with a
    random tail. SWA: ``masks.random_mask`` shapes around the window's
    block count. Groups sharing a spec get one mask split so that some
    blocks are cached in only one of them. Whole groups are sometimes empty.
    """
    masks: dict[int, list[bool]] = {}
    groups = scenario.groups
    for gid, g in enumerate(groups):
        n = num_fine // (g.block_size // scenario.hash_block_size)
        if g.window is None:
            cut = rng.choice((n, rng.randint(0, n), rng.randint(0, n)))
            mask = [True] * cut + [False] * (n - cut)
            if rng.random() < 0.3:
                mask[cut:] = [rng.random() < 0.5 for _ in range(n - cut)]
        elif gid > 0 and groups[gid - 1] == g and gid - 1 in masks:
            continue  # filled in with the previous group below
        else:
            need = max(1, math.ceil((g.window - 1) / g.block_size))
            mask = random_mask(rng, n, need)
            twins = [gid]
            while twins[-1] + 1 < len(groups) and groups[twins[-1] + 1] == g:
                twins.append(twins[-1] + 1)
            if len(twins) > 1:
                masks.update(split_mask_across_groups(mask, twins, rng, partial_prob=0.4))
                continue
        if rng.random() < 0.03:
            mask = [False] * n
        masks[gid] = mask
    return masks


def plant(
    block_pool: BlockPool,
    views: dict[int, list[BlockHash]],
    masks: dict[int, list[bool]],
) -> int:
    """Put one distinct pool block under ``(views[g][i], g)`` for every true
    ``masks[g][i]``; return how many were planted."""
    free = (b for b in block_pool.blocks if b is not block_pool.null_block)
    planted = 0
    for gid, mask in masks.items():
        for i, present in enumerate(mask):
            if present:
                block = next(free)
                block_pool.cached_block_hash_to_block.insert(
                    make_block_hash_with_group_id(views[gid][i], gid), block
                )
                planted += 1
    return planted


def random_max_length(rng: random.Random, num_fine: int, h: int, align: int) -> int:
    """A ``max_cache_hit_length`` as the scheduler passes it: at most
    ``num_tokens - 1`` for a request whose hashes cover ``num_fine`` blocks,
    often near an alignment boundary, often not block-aligned."""
    top = num_fine * h + h - 2  # num_tokens - 1 with num_tokens < (num_fine + 1) * h
    if top <= 0:
        return 0
    k = rng.randint(0, top // align)
    return max(0, min(top, rng.choice((
        top, rng.randint(0, top), k * align, k * align - 1, k * align + 1,
        k * align + rng.randint(0, align),
    ))))


# ---- comparing ---------------------------------------------------------------------


def _call(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:  # vLLM raising is an answer too: ours must match
        return ("raised", type(exc).__name__, str(exc))


def _assert_same_blocks(
    ours: Sequence[Sequence[KVCacheBlock]], theirs: Sequence[Sequence[KVCacheBlock]], ctx: str
) -> None:
    assert len(ours) == len(theirs), ctx
    for gid, (mine, vllms) in enumerate(zip(ours, theirs)):
        assert len(mine) == len(vllms), f"{ctx}: group {gid} has {len(mine)} vs {len(vllms)} blocks"
        for j, (a, b) in enumerate(zip(mine, vllms)):
            assert a is b, f"{ctx}: group {gid} block {j}: {a.block_id} vs {b.block_id}"


def assert_same(ours: Any, theirs: Any, ctx: str) -> None:
    """Same answer: equal scalars and, per group, the very same blocks."""
    if isinstance(theirs, tuple) and theirs and theirs[0] == "raised":
        assert ours == theirs, ctx
        return
    assert not (isinstance(ours, tuple) and ours and ours[0] == "raised"), f"{ctx}: {ours}"
    blocks_ours, *rest_ours = ours
    blocks_theirs, *rest_theirs = theirs
    assert rest_ours == rest_theirs, f"{ctx}: {rest_ours} vs {rest_theirs}"
    _assert_same_blocks(blocks_ours, blocks_theirs, ctx)


def _hit_tokens(result: Any) -> int:
    """The hit length of a lookup answer (0 for a raise; the longest group
    hit for ``find_longest_cache_hit_per_group``)."""
    if isinstance(result, tuple) and result and result[0] == "raised":
        return 0
    hit = result[1]
    return max(hit, default=0) if isinstance(hit, tuple) else hit


HITS: list[int] = [0]  # lookups whose (unpatched) answer was a non-empty hit
REFUSED_CONFIGS: list[int] = [0]  # scenarios vLLM would not build a coordinator for


def with_and_without(
    queries: Sequence[Callable[[], Any]], ctx: Callable[[int], str]
) -> int:
    """Run every query unpatched, then patched; compare; return the count.

    Asserts that the patched method was called (or the lookup memory
    answered) at least once per query, and
    counts non-empty hits in ``HITS`` (so a workload that never hits shows).
    """
    vllm_adapter.uninstall()
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is ORIGINAL
    theirs = [_call(q) for q in queries]
    HITS[0] += sum(1 for r in theirs if _hit_tokens(r) > 0)
    calls_before = vllm_adapter.stats().calls
    assert vllm_adapter.install(vllm_adapter.Mode.ON), vllm_adapter.status()["reason"]
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is not ORIGINAL
    try:
        ours = [_call(q) for q in queries]
        calls = vllm_adapter.stats().calls - calls_before
        # A repeated identical lookup of a hybrid coordinator is answered by
        # the lookup memory (swa_prefix_cache/vllm_adapter/lookup_memo.py) without a search.
        remembered = vllm_adapter.status()["lookup_memo"]["stats"].get("hits", 0)
    finally:
        vllm_adapter.uninstall()
    assert calls + remembered >= len(queries), (
        f"patched method called {calls} times, {remembered} answered from memory, "
        f"for {len(queries)} lookups")
    for k, (mine, vllms) in enumerate(zip(ours, theirs)):
        assert_same(mine, vllms, ctx(k))
    return len(queries)


# ---- the tests -----------------------------------------------------------------------


def _run_pool(rng: random.Random, scenario: Scenario, lookups: int) -> int:
    h = scenario.hash_block_size
    num_fine = rng.choice((rng.randint(0, 40), rng.randint(20, 400)))
    fine = make_block_hashes(num_fine, salt=rng.randbytes(8))
    masks = random_group_masks(rng, scenario, num_fine)
    views = {gid: _group_view(scenario, fine, gid) for gid in range(len(scenario.groups))}
    num_blocks = 1 + sum(sum(m) for m in masks.values())
    max_model_len = (num_fine + 2) * h
    try:
        coordinator = scenario.coordinator(num_blocks, max_model_len)
    except AssertionError:
        # vLLM 0.28/0.29 refuse a hybrid whose groups share one spec (one
        # attention group); nothing to compare (the tests bound how often).
        REFUSED_CONFIGS[0] += 1
        return 0
    if len(scenario.groups) == 1:
        assert isinstance(coordinator, UnitaryKVCacheCoordinator)
    else:
        assert isinstance(coordinator, HybridKVCacheCoordinator)
    assert plant(coordinator.block_pool, views, masks) == num_blocks - 1

    queries: list[Callable[[], Any]] = []
    descr: list[str] = []
    for _ in range(lookups):
        length = random_max_length(rng, num_fine, h, scenario.scheduler_block_size)
        queries.append(lambda n=length: coordinator.find_longest_cache_hit(fine, n))
        descr.append(f"find_longest_cache_hit(max={length})")
        if isinstance(coordinator, HybridKVCacheCoordinator) and rng.random() < 0.2:
            queries.append(
                lambda n=length: coordinator.find_longest_cache_hit_per_group(fine, n)
            )
            descr.append(f"find_longest_cache_hit_per_group(max={length})")
    return with_and_without(
        queries, lambda k: f"{scenario} num_fine={num_fine} {descr[k]}"
    )


def test_random_coordinators_same_with_and_without_plugin(backend) -> None:
    rng = random.Random(20261129)
    done = 0
    hits_before = HITS[0]
    kinds: set[str] = set()
    scenarios, refused_before = 0, REFUSED_CONFIGS[0]
    with count_native() as path:
        while done < CASES:
            scenario = random_scenario(rng)
            kinds.add("unitary" if len(scenario.groups) == 1 else "hybrid")
            done += _run_pool(rng, scenario, min(rng.randint(10, 60), CASES - done))
            scenarios += 1
    assert kinds == {"unitary", "hybrid"}
    refused = REFUSED_CONFIGS[0] - refused_before
    assert refused <= scenarios // 4, f"vLLM refused {refused} of {scenarios} configs"
    assert HITS[0] - hits_before > done // 5, "the workload should hit often"
    assert vllm_adapter.status()["backend"] == backend
    # The native core answers the sliding-window lookups in C (one and
    # several groups); the python core never goes there.
    if backend == "native":
        assert path["native"] > done // 4 and path["delegated"] == 0, path
    else:
        assert path == {"native": 0, "delegated": 0}, path
    CASE_COUNTS[COUNT_KEY] += done


@pytest.mark.parametrize("use_eagle", [False, True], ids=["no-eagle", "eagle"])
@pytest.mark.parametrize(
    "groups,h", FIXED_HYBRIDS,
    ids=["f16+s16", "f16+s32", "f32+s16", "f32+s32/h16", "f16+2xs16", "f16+s16+s32", "s16+s32"],
)
def test_fixed_hybrids_same_with_and_without_plugin(groups, h, use_eagle) -> None:
    rng = random.Random(zlib.crc32(repr((groups, h, use_eagle)).encode()))
    scenario = Scenario(groups, h, use_eagle)
    hits_before = HITS[0]
    done = sum(_run_pool(rng, scenario, 40) for _ in range(4))
    assert HITS[0] > hits_before, "no lookup hit: the comparison says little"
    CASE_COUNTS[COUNT_KEY] += done


# ---- KVCacheManager.get_computed_blocks on real Requests -----------------------------


def _make_request(rng: random.Random, request_id: str, num_tokens: int, h: int,
                  prompt_token_ids: list[int] | None = None) -> Request:
    """A real Request of ``num_tokens`` random tokens (or these), hashed by
    vLLM's own block hasher (sha256_cbor, ``h`` tokens per hash)."""
    sampling_params = SamplingParams(max_tokens=4)
    sampling_params.update_from_generation_config({}, eos_token_id=100)
    if prompt_token_ids is None:
        prompt_token_ids = [rng.randrange(32_000) for _ in range(num_tokens)]
    return Request(
        request_id=request_id,
        prompt_token_ids=prompt_token_ids,
        sampling_params=sampling_params,
        pooling_params=None,
        block_hasher=get_request_block_hasher(h, sha256_cbor),
    )


# vLLM 0.33.0 lets the caller cap the hit (``max_cache_hit_length``); 0.32.0
# (the end-to-end venv) always looks up ``num_tokens - 1``.
TAKES_MAX_LENGTH = "max_cache_hit_length" in inspect.signature(
    KVCacheManager.get_computed_blocks
).parameters


def test_kv_cache_manager_get_computed_blocks_same_with_and_without_plugin() -> None:
    init_none_hash(sha256_cbor)
    rng = random.Random(7)
    scenarios = [Scenario(g, h, e) for g, h in FIXED_HYBRIDS for e in (False, True)]
    scenarios += [
        Scenario((Group(bs, w),), bs, e)
        for bs, w in ((16, 128), (16, 40), (32, 1000), (1, 7))
        for e in (False, True)
    ]
    done, hits_before = 0, HITS[0]
    for sid, scenario in enumerate(scenarios):
        h = scenario.hash_block_size
        for r in range(3):
            num_tokens = rng.randint(1, 300 * h // 16 + 40)
            request = _make_request(rng, f"req-{sid}-{r}", num_tokens, h)
            fine = list(request.block_hashes)
            assert len(fine) == num_tokens // h
            masks = random_group_masks(rng, scenario, len(fine))
            views = {g: _group_view(scenario, fine, g) for g in range(len(scenario.groups))}
            manager = KVCacheManager(
                kv_cache_config=scenario.kv_cache_config(1 + sum(sum(m) for m in masks.values())),
                max_model_len=num_tokens + 64,
                scheduler_block_size=scenario.scheduler_block_size,
                hash_block_size=h,
                enable_caching=True,
                use_eagle=scenario.use_eagle,
            )
            plant(manager.coordinator.block_pool, views, masks)

            def lookup(max_len: int | None = None, manager=manager, request=request):
                if max_len is None:
                    blocks, hit, boundary = manager.get_computed_blocks(request)
                else:
                    blocks, hit, boundary = manager.get_computed_blocks(request, max_len)
                return blocks.blocks, hit, boundary

            queries = [lookup]
            if TAKES_MAX_LENGTH:
                queries += [
                    (lambda n=random_max_length(rng, len(fine), h, scenario.scheduler_block_size):
                     lookup(min(n, num_tokens - 1)))
                    for _ in range(5)
                ]
            done += with_and_without(
                queries, lambda k, s=scenario, t=num_tokens: f"{s} num_tokens={t} query {k}"
            )
    assert HITS[0] - hits_before > done // 10
    CASE_COUNTS[COUNT_KEY] += done
