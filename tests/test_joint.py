"""The joint multi-group lookup: swa_prefix_cache.pyspec.joint vs vLLM's real coordinator.

Two sections:

1. **Pure spec** (runs without vLLM): the fixed-point properties of
   ``swa_prefix_cache.pyspec.joint.joint_lookup`` stated in its module docstring, exhaustively
   on small inputs and by hypothesis:

   * monotone: ``hit_length`` never grows from round to round, nor ``curr``
     from lookup to lookup inside a round;
   * terminates: ``rounds <= 2 + max_cache_hit_length // alignment_tokens``;
   * accepted: every non-EAGLE and every full-attention group accepts the
     answer exactly as the loop asks it; an EAGLE sliding-window group
     accepts it either with its drop or plainly (verified at an earlier
     candidate, #32802);
   * maximal: with every sliding window >= 2 tokens, no longer length up to
     ``max_cache_hit_length`` is accepted by every group; with an EAGLE
     window of 1 token vLLM's loop can stop below one (the smallest
     counterexample is pinned in ``test_window_one_eagle_counterexample`` and
     checked against vLLM in section 2).

2. **vLLM** (skipped without vLLM): ``PREFIX_CACHE_JOINT_CASES`` (default
   10,000) random lookups compare ``joint_lookup`` with the real
   ``HybridKVCacheCoordinator.find_longest_cache_hit``, built by vLLM's own
   ``get_kv_cache_coordinator`` from real ``KVCacheConfig``s (full attention
   plus one to three sliding-window groups, or sliding-window only; block
   sizes 1x..4x the hash block size; EAGLE off, on for all groups, or on for
   flagged groups; groups sharing one spec), with blocks planted per group
   in its real ``BlockPool`` under the group's block-size view of the
   hashes. Compared: hit length, ``num_uncached_common_prefix_tokens``, and
   per group the list length, the null-block prefix and the identity of
   every real block. Small-window and 1-token-window scenarios are included.
"""

from __future__ import annotations

import itertools
import math
import os
import random
from collections.abc import Sequence

import pytest
from conftest import CASE_COUNTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swa_prefix_cache.pyspec.joint import (
    Group,
    accepts,
    attention_groups,
    drop_flags,
    full_attention_hit,
    greatest_common_accepted,
    joint_lookup,
    max_rounds_bound,
    scheduler_block_size,
)

CASES = int(os.environ.get("PREFIX_CACHE_JOINT_CASES", "10000"))

# ---------------------------------------------------------------------------
# 1. pure spec
# ---------------------------------------------------------------------------


def check_fixed_point(
    groups: Sequence[Group],
    max_len: int,
    align: int,
    h: int,
    num_hash: int,
    *,
    expect_maximal: bool,
) -> int:
    """Assert the four properties; return the answer."""
    r = joint_lookup(groups, max_len, align, h, num_hash)
    ctx = f"{groups} masks={[g.cached for g in groups]} max={max_len} A={align} h={h} nh={num_hash}: {r}"
    # Monotone: across rounds and inside a round.
    assert all(a >= b for a, b in zip(r.trace, r.trace[1:])), ctx
    assert r.trace[0] == max_len and r.trace[-1] == r.hit_length, ctx
    for _idx, mx, drop, tokens in r.lookups:
        assert tokens <= (mx if not drop else max(mx - 1, 0)), ctx
    # Terminates within the bound.
    assert 1 <= r.rounds <= max_rounds_bound(max_len, align), ctx
    # Answer is aligned (or 0) and within max.
    assert 0 <= r.hit_length <= max_len and r.hit_length % align == 0, ctx
    # Accepted by every group.
    cap = num_hash * h
    for a in attention_groups(groups):
        strict = accepts(a, r.hit_length, align, cap)
        if a.eagle and not a.is_full:
            assert strict or accepts(a, r.hit_length, align, cap, plain=True), ctx
            assert strict == (a.members[0] not in r.eagle_unproven_groups), ctx
        else:
            assert strict, ctx
    # Maximal.
    best = greatest_common_accepted(groups, max_len, align, h, num_hash)
    if expect_maximal:
        assert r.hit_length >= best, ctx
    return r.hit_length


def _small_group(kind: int, e: bool, mask: tuple[bool, ...]) -> Group:
    window = (None, 2, 3, 4)[kind]
    return Group(1, window, e, mask)


def test_exhaustive_two_groups_block_size_one() -> None:
    """Every pair of groups (full / windows 2..4, EAGLE on/off) with every
    pair of masks of up to 4 blocks and every max length."""
    done = 0
    for n in range(0, 5):
        masks = list(itertools.product((False, True), repeat=n))
        for k0, k1 in itertools.product(range(4), repeat=2):
            for e0, e1 in itertools.product((False, True), repeat=2):
                for m0 in masks:
                    for m1 in masks:
                        groups = [_small_group(k0, e0, m0), _small_group(k1, e1, m1)]
                        for mx in range(0, n + 1):
                            check_fixed_point(groups, mx, 1, 1, n, expect_maximal=True)
                            done += 1
    CASE_COUNTS["joint spec (exhaustive, 2 groups)"] += done


def test_exhaustive_three_groups_mixed_block_sizes() -> None:
    """Full (bs 2) + SWA bs 1 + SWA bs 2 on hash size 1 (alignment 2), every
    mask of up to 4 hash blocks, windows 2..5, EAGLE subsets."""
    done = 0
    for n in range(0, 5):
        m1s = list(itertools.product((False, True), repeat=n))
        m2s = list(itertools.product((False, True), repeat=n // 2))
        for w1, w2 in itertools.product((2, 3, 5), (2, 3, 5)):
            for eagle in itertools.product((False, True), repeat=3):
                for mf in m2s:
                    if any(mf[i + 1] and not mf[i] for i in range(len(mf) - 1)):
                        continue  # full attention caches prefixes in practice
                    for m1 in m1s:
                        for m2 in m2s:
                            groups = [
                                Group(2, None, eagle[0], mf),
                                Group(1, w1, eagle[1], m1),
                                Group(2, w2, eagle[2], m2),
                            ]
                            for mx in range(0, n + 1):
                                check_fixed_point(groups, mx, 2, 1, n, expect_maximal=True)
                                done += 1
    CASE_COUNTS["joint spec (exhaustive, 3 groups)"] += done


@st.composite
def joint_inputs(draw, min_window: int = 2):  # type: ignore[no-untyped-def]
    h = draw(st.sampled_from((1, 2)))
    num_groups = draw(st.integers(2, 4))
    specs = []
    for _ in range(num_groups):
        bs = h * draw(st.sampled_from((1, 1, 2, 3)))
        full = draw(st.booleans()) and draw(st.booleans())
        window = None if full else draw(st.integers(min_window, 4 * bs + 1))
        specs.append((bs, window, draw(st.booleans())))
    num_hash = draw(st.integers(0, 16))
    groups = []
    for bs, window, eagle in specs:
        n = num_hash * h // bs
        rate = draw(st.sampled_from((0.5, 0.8, 0.95)))
        bits = draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
        groups.append(Group(bs, window, eagle, tuple(b < rate for b in bits)))
    align = scheduler_block_size([g.block_size for g in groups], h)
    max_len = draw(st.integers(0, num_hash * h + h - 1))
    return groups, max_len, align, h, num_hash


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(joint_inputs())
def test_hypothesis_fixed_point_properties(args) -> None:  # type: ignore[no-untyped-def]
    check_fixed_point(*args, expect_maximal=True)
    CASE_COUNTS["joint spec (hypothesis)"] += 1


@SETTINGS
@given(joint_inputs(min_window=0))
def test_hypothesis_properties_any_window(args) -> None:  # type: ignore[no-untyped-def]
    """Windows of 0 or 1 token too: everything but maximality holds."""
    check_fixed_point(*args, expect_maximal=False)
    CASE_COUNTS["joint spec (hypothesis, any window)"] += 1


def test_window_one_eagle_counterexample() -> None:
    """The smallest input on which vLLM's loop stops below a commonly
    accepted length: two 1-token-window SWA groups (one spec, EAGLE),
    block size 1, two hash blocks, block 1 cached, max 2.

    Round 1 drops at max 2 and gets 1 (block 1 is the whole EAGLE window:
    ``cdiv(0, 1) + 1 == 1`` block). Round 2 re-checks 1 plainly, and the
    plain window (0 blocks, which vLLM's loop treats as 1) wants block 0:
    0. That shrink clears the EAGLE verification, round 3 drops at max 1: 0.
    Yet the group accepts 1 (its drop lookup at max 2 returns 1).
    """
    groups = [Group(1, 1, False, (False, True)), Group(1, 1, True, (False, True))]
    r = joint_lookup(groups, 2, 1, 1, 2)
    assert r.hit_length == 0 and r.trace == (2, 1, 0, 0) and r.rounds == 3
    assert greatest_common_accepted(groups, 2, 1, 1, 2) == 1
    # Exhaustively smallest: no input with fewer blocks, cached blocks or a
    # smaller max shows it (windows None/1..4, EAGLE on/off, two bs-1 groups).
    for n in range(0, 3):
        masks = list(itertools.product((False, True), repeat=n))
        for w0, w1 in itertools.product((None, 1, 2, 3, 4), repeat=2):
            for e0, e1 in itertools.product((False, True), repeat=2):
                for m0 in masks:
                    for m1 in masks:
                        gs = [Group(1, w0, e0, m0), Group(1, w1, e1, m1)]
                        for mx in range(0, n + 1):
                            if (n, sum(m0) + sum(m1), mx) >= (2, 2, 2):
                                continue
                            got = joint_lookup(gs, mx, 1, 1, n).hit_length
                            assert got >= greatest_common_accepted(gs, mx, 1, 1, n)


def test_eagle_unproven_example() -> None:
    """An EAGLE SWA group can end up accepting the answer only plainly
    (windows >= 2): bs-1 W=4 EAGLE, all 5 blocks cached, and a bs-2 W=9 EAGLE
    group with 2 blocks cached, max 5 (alignment 2). Group 0 is verified at
    candidate 5 (answer 4), group 1 lowers the candidate to 2 with its own
    drop, so group 0 is asked plainly at 2 (accepts). Its drop lookup at 2
    would give 0 (the prefix fallback re-aligns, drops, re-aligns), so 2 is
    above ``greatest_common_accepted``; the peek past 2 is cached, so the
    hit is sound."""
    groups = [
        Group(1, 4, True, (True,) * 5),
        Group(2, 9, True, (True, True)),
    ]
    r = joint_lookup(groups, 5, 2, 1, 5)
    assert r.hit_length == 2 and r.eagle_unproven_groups == (0,)
    assert greatest_common_accepted(groups, 5, 2, 1, 5) == 0


def test_rounds_grow_linearly_with_interleaved_groups() -> None:
    """Two non-EAGLE SWA groups (block size 2, windows 2 and 3 tokens: one
    block each, distinct specs) whose accepted lengths interleave (one
    accepts 4k tokens, the other 4k + 2) walk down 4 tokens per round: the
    number of rounds is linear in ``max_cache_hit_length / alignment_tokens``
    (no constant bound), and within ``max_rounds_bound``."""
    n = 12
    accepts_4k = tuple(i % 2 == 1 for i in range(n))  # block k-1 cached for even k
    accepts_4k_2 = tuple(i % 2 == 0 for i in range(n))
    groups = [Group(2, 2, False, accepts_4k), Group(2, 3, False, accepts_4k_2)]
    r = joint_lookup(groups, 2 * n, 2, 2, n)
    assert r.hit_length == 0
    assert r.trace == (24, 22, 18, 14, 10, 6, 2, 0, 0)
    assert r.rounds == 8 <= max_rounds_bound(2 * n, 2)


def test_full_attention_hit_examples() -> None:
    # prefix of 3 blocks of 16, alignment 32: 48 -> 32; EAGLE: 48-16=32 -> 32.
    assert full_attention_hit([True, True, True, False], 1000, 16, 32, False) == 32
    assert full_attention_hit([True, True, True, False], 1000, 16, 32, True) == 32
    assert full_attention_hit([True, True, False], 1000, 16, 32, True) == 0
    assert full_attention_hit([True] * 4, 47, 16, 16, False) == 32
    assert full_attention_hit([], 47, 16, 16, True) == 0
    with pytest.raises(ValueError):
        full_attention_hit([True], 16, 16, 8, False)  # fine-grained: not modelled


def test_drop_flags() -> None:
    assert drop_flags([False, True], True) == [False, True]
    assert drop_flags([False, False], True) == [True, True]
    assert drop_flags([True, True], False) == [False, False]


# ---------------------------------------------------------------------------
# 2. against vLLM's real HybridKVCacheCoordinator
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_env():  # type: ignore[no-untyped-def]
    pytest.importorskip("vllm")
    import torch
    from vllm.v1.core.kv_cache_coordinator import (
        HybridKVCacheCoordinator,
        get_kv_cache_coordinator,
    )
    from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
        SlidingWindowSpec,
    )
    from vllm_support import coarse_block_hashes, make_block_hashes

    class Env:
        pass

    env = Env()
    env.__dict__.update(locals())
    return env


def _spec(env, bs: int, window: int | None):  # type: ignore[no-untyped-def]
    kw = dict(block_size=bs, num_kv_heads=1, head_size=1, dtype=env.torch.float32)
    if window is None:
        return env.FullAttentionSpec(**kw)
    return env.SlidingWindowSpec(**kw, sliding_window=window)


def build_and_compare(
    env,  # type: ignore[no-untyped-def]
    specs: Sequence[tuple[int, int | None, bool]],
    masks: Sequence[Sequence[bool]],
    h: int,
    use_eagle: bool,
    num_hash: int,
    max_lengths: Sequence[int],
    rng: random.Random,
    models: Sequence = (joint_lookup,),
) -> tuple[int, int]:
    """Build a real hybrid coordinator for ``specs`` ((block size, window or
    None, is_eagle_group)), plant ``masks``, run every max length through it
    and through each of ``models`` (pyspec's ``joint_lookup`` by default;
    the C ``joint_lookup`` has the same signature); assert they agree.
    Returns (lookups, hits)."""
    sched = math.lcm(h, *(bs for bs, _, _ in specs))
    num_blocks = 1 + sum(sum(m) for m in masks)
    config = env.KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            env.KVCacheGroupSpec([f"layer{i}"], _spec(env, bs, w), is_eagle_group=e)
            for i, (bs, w, e) in enumerate(specs)
        ],
    )
    coord = env.get_kv_cache_coordinator(
        kv_cache_config=config,
        max_model_len=(num_hash + 2) * h,
        max_in_flight_tokens=(num_hash + 2) * h,
        use_eagle=use_eagle,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=sched,
        hash_block_size=h,
    )
    assert isinstance(coord, env.HybridKVCacheCoordinator)
    assert coord._cache_hit_alignment_tokens == sched
    fine = env.make_block_hashes(num_hash, salt=rng.randbytes(8))
    free = (b for b in coord.block_pool.blocks if b is not coord.block_pool.null_block)
    planted: dict[tuple[int, int], object] = {}
    for gid, ((bs, _, _), mask) in enumerate(zip(specs, masks)):
        view = env.coarse_block_hashes(fine, h, bs)
        assert len(view) == len(mask)
        for i, present in enumerate(mask):
            if present:
                block = next(free)
                coord.block_pool.cached_block_hash_to_block.insert(
                    env.make_block_hash_with_group_id(view[i], gid), block
                )
                planted[(i, gid)] = block
    flags = drop_flags([e for _, _, e in specs], use_eagle)
    groups = [
        Group(bs, w, flag, tuple(mask))
        for (bs, w, _), flag, mask in zip(specs, flags, masks)
    ]
    null = coord.block_pool.null_block
    hits = 0
    for max_len in max_lengths:
        blocks, hit, uncached = coord.find_longest_cache_hit(fine, max_len)
        for model in models:
            ours = model(groups, max_len, sched, h, num_hash)
            ctx = f"specs={specs} use_eagle={use_eagle} h={h} nh={num_hash} max={max_len} masks={masks}: {ours}"
            assert hit == ours.hit_length, f"{ctx}: vLLM {hit}"
            assert uncached == ours.num_uncached_common_prefix_tokens, f"{ctx}: vLLM uncached {uncached}"
            for gid, (got, want) in enumerate(zip(blocks, ours.groups)):
                assert len(got) == want.length, f"{ctx}: group {gid} len {len(got)}"
                for i, block in enumerate(got):
                    if i < want.first_real:
                        assert block is null, f"{ctx}: group {gid} block {i} not null"
                    else:
                        assert block is planted.get((i, gid)), f"{ctx}: group {gid} block {i}"
        hits += hit > 0
    return len(max_lengths), hits


def _window(rng: random.Random, bs: int) -> int:
    need = rng.choice((1, 1, 2, 2, 3, 4, rng.randint(1, 8)))
    if rng.random() < 0.04:
        return 1
    return rng.randint((need - 1) * bs + 2, need * bs + 1)


def _mask(rng: random.Random, n: int, window: int | None, bs: int) -> list[bool]:
    if window is None:
        cut = rng.choice((n, rng.randint(0, n), rng.randint(n // 2, n)))
        mask = [i < cut for i in range(n)]
        if rng.random() < 0.2:
            mask[cut:] = [rng.random() < 0.5 for _ in range(n - cut)]
        return mask
    need = max(1, math.ceil((window - 1) / bs))
    kind = rng.choice(("dense", "dense", "runs", "uniform", "all", "prefix"))
    if kind == "all":
        return [True] * n
    if kind == "prefix":
        cut = rng.randint(0, n)
        return [i < cut for i in range(n)]
    if kind == "dense":
        return [rng.random() < 0.9 for _ in range(n)]
    if kind == "uniform":
        rate = rng.random()
        return [rng.random() < rate for _ in range(n)]
    out: list[bool] = []
    while len(out) < n:
        out += [True] * rng.randint(max(need - 1, 0), need + 2) + [False] * rng.randint(1, 2)
    return out[:n]


def random_joint_scenario(rng: random.Random):  # type: ignore[no-untyped-def]
    h = rng.choice((1, 2, 4, 16, 16))
    mults = (1, 1, 1, 2, 2, 3, 4)
    specs: list[tuple[int, int | None, bool]] = []
    if rng.random() < 0.8:
        specs.append((h * rng.choice(mults), None, False))
        if rng.random() < 0.1:
            specs.append(specs[-1])  # a second full-attention group (draft)
    for _ in range(rng.choice((1, 1, 2, 2, 3))):
        if specs and specs[-1][1] is not None and rng.random() < 0.25:
            specs.append(specs[-1])  # same spec: one lookup over two group ids
        else:
            bs = h * rng.choice(mults)
            specs.append((bs, _window(rng, bs), False))
    if len(specs) == 1:
        bs = h * rng.choice(mults)
        specs.append((bs, _window(rng, bs), False))
    if rng.random() < 0.3:
        rng.shuffle(specs)  # vLLM sorts full attention first (stably)
    use_eagle = rng.random() < 0.5
    if use_eagle and rng.random() < 0.6:
        specs = [(bs, w, rng.random() < 0.5) for bs, w, _ in specs]
    return specs, h, use_eagle


def test_random_joint_lookup_matches_vllm(vllm_env) -> None:  # type: ignore[no-untyped-def]
    done = _random_joint_lookups(vllm_env, random.Random(20260712), CASES, (joint_lookup,))
    CASE_COUNTS["joint vs vLLM HybridKVCacheCoordinator"] += done


def test_c_joint_lookup_matches_vllm_with_the_plugin(vllm_env, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The same workloads with the plugin installed (native core: the
    sliding-window and the full-attention lookups are the extension's):
    vLLM's coordinator answers as pyspec's and the proved C joint_lookup
    and both kinds of lookup were answered in C."""
    from conftest import require_native
    from vllm_support import count_native

    from swa_prefix_cache import vllm_adapter
    from benchmarks import cffi_core as native

    require_native()
    monkeypatch.setenv(vllm_adapter.CORE_ENV, "native")
    vllm_adapter.uninstall()
    assert vllm_adapter.install(vllm_adapter.Mode.ON)
    assert vllm_adapter.status()["full_attention"]["installed"]
    try:
        before = vllm_adapter.stats()
        swa_calls, full_calls = before.calls, before.full_calls
        with count_native() as path:
            done = _random_joint_lookups(
                vllm_env, random.Random(20261201), CASES // 4, (joint_lookup, native.joint_lookup)
            )
        after = vllm_adapter.stats()
        assert after.calls > swa_calls and after.full_calls > full_calls
        assert path["native"] == (after.calls - swa_calls) + (after.full_calls - full_calls), path
        assert path["delegated"] == 0, path
    finally:
        vllm_adapter.uninstall()
    CASE_COUNTS["joint (pyspec and C) vs vLLM HybridKVCacheCoordinator, plugin on"] += done


def _random_joint_lookups(env, rng: random.Random, cases: int, models: Sequence) -> int:  # type: ignore[no-untyped-def]
    """``cases`` random hybrid lookups through ``build_and_compare``."""
    done = hits = 0
    kinds: set[str] = set()
    while done < cases:
        specs, h, use_eagle = random_joint_scenario(rng)
        sched = math.lcm(h, *(bs for bs, _, _ in specs))
        if sched > 12 * h:
            continue
        num_hash = rng.choice((rng.randint(0, 24), rng.randint(8, 120)))
        masks = [_mask(rng, num_hash * h // bs, w, bs) for bs, w, _ in specs]
        top = num_hash * h + h - 2  # num_tokens - 1, num_tokens < (num_hash + 1) * h
        lengths = []
        for _ in range(min(rng.randint(8, 30), cases - done)):
            k = rng.randint(0, max(top, 0) // sched)
            lengths.append(max(0, min(top, rng.choice((top, rng.randint(0, max(top, 0)), k * sched, k * sched + rng.randint(0, sched - 1))))))
        n, hit = build_and_compare(env, specs, masks, h, use_eagle, num_hash, lengths, rng, models)
        done += n
        hits += hit
        kinds.add("full+swa" if any(w is None for _, w, _ in specs) else "swa-only")
        if use_eagle:
            kinds.add("eagle")
    assert kinds == {"full+swa", "swa-only", "eagle"}
    assert hits > done // 4, f"only {hits} of {done} lookups hit"
    return done


def test_counterexamples_reproduce_on_vllm(vllm_env) -> None:  # type: ignore[no-untyped-def]
    """The two documented cases, on the real coordinator."""
    rng = random.Random(3)
    # Window-1 EAGLE: vLLM answers 0 although 1 is accepted.
    build_and_compare(
        vllm_env, [(1, 1, False), (1, 1, True)], [[False, True], [False, True]], 1, True, 2, [2], rng
    )
    # EAGLE group accepting only plainly.
    build_and_compare(
        vllm_env, [(1, 4, True), (2, 9, True)], [[True] * 5, [True, True]], 1, True, 5, [5], rng
    )


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="vLLM's loop stops below a commonly accepted length with a 1-token EAGLE window")
def test_vllm_loop_is_maximal_on_the_window_one_counterexample(vllm_env) -> None:  # type: ignore[no-untyped-def]
    """The real coordinator on ``test_window_one_eagle_counterexample``: 1 is
    accepted by every group, vLLM answers 0."""
    env = vllm_env
    config = env.KVCacheConfig(
        num_blocks=8,
        kv_cache_tensors=[],
        kv_cache_groups=[
            env.KVCacheGroupSpec(["l0"], _spec(env, 1, 1), is_eagle_group=False),
            env.KVCacheGroupSpec(["l1"], _spec(env, 1, 1), is_eagle_group=True),
        ],
    )
    coord = env.get_kv_cache_coordinator(
        kv_cache_config=config, max_model_len=8, max_in_flight_tokens=8, use_eagle=True,
        enable_caching=True, enable_kv_cache_events=False, dcp_world_size=1,
        pcp_world_size=1, scheduler_block_size=1, hash_block_size=1,
    )
    fine = env.make_block_hashes(2, salt=b"w1")
    free = (b for b in coord.block_pool.blocks if b is not coord.block_pool.null_block)
    for gid in (0, 1):
        coord.block_pool.cached_block_hash_to_block.insert(
            env.make_block_hash_with_group_id(fine[1], gid), next(free)
        )
    _, hit, _ = coord.find_longest_cache_hit(fine, 2)
    groups = [Group(1, 1, False, (False, True)), Group(1, 1, True, (False, True))]
    assert hit == greatest_common_accepted(groups, 2, 1, 1, 2) == 1


def test_exhaustive_small_against_vllm(vllm_env) -> None:  # type: ignore[no-untyped-def]
    """Full bs 2 + SWA bs 1 (window 2 or 3) on hash size 1, EAGLE on the SWA
    group or off, every mask pair of up to 4 hash blocks, every max."""
    rng = random.Random(5)
    done = 0
    for n in range(1, 5):
        for w in (2, 3):
            for use_eagle in (False, True):
                for mf in itertools.product((False, True), repeat=n // 2):
                    for ms in itertools.product((False, True), repeat=n):
                        specs = [(2, None, False), (1, w, use_eagle)]
                        k, _ = build_and_compare(
                            vllm_env, specs, [list(mf), list(ms)], 1, use_eagle, n,
                            list(range(0, n + 1)), rng,
                        )
                        done += k
    CASE_COUNTS["joint vs vLLM (exhaustive small)"] += done
