"""The project's store/lookup agreement property, on random cases, against
whichever vLLM is first on ``PYTHONPATH`` (check.py points it at a patched
copy). Unlike the reproductions, this part reuses the project's tests:
tests/test_reachable.py (random scenarios, the real local and KV-offload
store + lookup pipelines, the findings' preconditions) and tests/test_joint.py
(random hybrid lookups on the real coordinator).

Environment (set by check.py):

* ``UPSTREAM_FINDINGS_FIXED``: comma-separated findings the patched vLLM
  fixes. A violation of the property must be explained by a finding that is
  *not* fixed (the preconditions of ``LocalScenario.findings`` /
  ``offload_findings`` and the kinds each finding can cause, ``EXPLAINS``),
  so with every finding fixed no violation at all is allowed.
* ``UPSTREAM_FINDINGS_CASES``: random cases per test.
* ``UPSTREAM_FINDINGS_VLLM``: the vllm package directory that must be
  imported; ``UPSTREAM_FINDINGS_REPORT``: JSON file of the case counts.

Tests (``-k``): ``local`` (a real KVCacheManager stores a prompt, real
requests read it back; stored vs every block stored: dense every sibling,
sparse the multiples of the retention interval, and always the resend, the
longer sibling and the junction sibling), ``waste`` (every block the store
keeps changes some group-local lookup, blocks of tails reaching past the
stored range exempt), ``offload`` (the real offloading scheduler, stored vs
every chunk stored), ``joint`` (the coordinator's answer is the greatest
length every group's own lookup accepts as the loop asks it).
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter

import pytest

import vllm

FIXED = frozenset(x for x in os.environ.get("UPSTREAM_FINDINGS_FIXED", "").split(",") if x)
CASES = int(os.environ.get("UPSTREAM_FINDINGS_CASES", "40"))
SEED = int(os.environ.get("UPSTREAM_FINDINGS_SEED", "0"))  # added to each test's seed
COUNTS: Counter[str] = Counter()

from test_reachable import (  # noqa: E402  (tests/ is on PYTHONPATH)
    EXPLAINS,
    OFFLOAD_EXPLAINS,
    LocalScenario,
    local_pipeline,
    offload_env,  # noqa: F401  (fixture)
    offload_findings,
    offload_violations,
    random_local_scenario,
    vllm_env,  # noqa: F401  (fixture)
)


def setup_module() -> None:
    want = os.environ.get("UPSTREAM_FINDINGS_VLLM")
    have = os.path.dirname(os.path.abspath(vllm.__file__))
    assert not want or have == os.path.abspath(want), f"vllm from {have}, expected {want}"


def teardown_module() -> None:
    path = os.environ.get("UPSTREAM_FINDINGS_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({**COUNTS, "vllm": os.path.dirname(os.path.abspath(vllm.__file__))}, fh)


def _scenario(rng: random.Random) -> LocalScenario:
    s = random_local_scenario(rng)
    if s.num_prompt_tokens > 12 * s.alignment:  # as test_local_pipeline_agrees_with_spec_and_findings
        s = LocalScenario(**{**s.__dict__, "num_prompt_tokens": rng.randint(1, 12 * s.alignment), "shared_prefix_boundary": 0})
    return s


def local_violations(env, s: LocalScenario) -> list[tuple[str, object]]:  # type: ignore[no-untyped-def]
    """The property on vLLM's real store and lookup (whatever vLLM is
    loaded): stored vs every block stored."""
    named = s.named_queries()
    queries = [(p, n) for _, p, n in named] + s.sibling_queries()
    stored = local_pipeline(env, s, queries, everything=False)
    full = local_pipeline(env, s, queries, everything=True)
    out: list[tuple[str, object]] = [
        (name, (p, n, got, want)) for (name, p, n), got, want in zip(named, stored, full) if got != want
    ]
    r = s.retention_interval
    best = 0
    for (p, n), got, want in zip(queries[len(named):], stored[len(named):], full[len(named):]):
        if r is None or (r > 0 and want % r == 0):
            best = max(best, want)
        if got < best:
            out.append(("lost", (p, n, got, best)))
    return out


def test_local_property(vllm_env) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(20261215 + SEED)
    bad = []
    for _ in range(CASES):
        s = _scenario(rng)
        found = s.findings() - FIXED
        for kind, x in local_violations(vllm_env, s):
            if not found & EXPLAINS[kind]:
                bad.append((s, kind, x))
        COUNTS["local scenarios"] += 1
    assert bad == [], bad[:5]


# ---- waste ----------------------------------------------------------------------------


def _stored_and_boundaries(env, s: LocalScenario):  # type: ignore[no-untyped-def]
    """Store ``s``'s prompt in a real KVCacheManager; the SWA group's cached
    blocks and the arguments its ``reachable_block_mask`` was called with."""
    from vllm_support import coarse_block_hashes

    from test_reachable import _request, _spec

    groups = (
        [(s.block_size, s.window, False)]
        if s.full_block_size is None
        else [(s.full_block_size, None, s.full_eagle), (s.block_size, s.window, s.eagle)]
    )
    h = s.h
    n = s.num_prompt_tokens
    config = env.KVCacheConfig(
        num_blocks=4 * (n + 8 * s.alignment + 64) + 16,
        kv_cache_tensors=[],
        kv_cache_groups=[
            env.KVCacheGroupSpec([f"l{i}"], _spec(env, bs, w), is_eagle_group=e) for i, (bs, w, e) in enumerate(groups)
        ],
        prefix_cache_retention_interval=s.retention_interval,
    )
    manager = env.KVCacheManager(
        kv_cache_config=config, max_model_len=n + 8 * s.alignment + 64,
        scheduler_block_size=math.lcm(h, *(bs for bs, _, _ in groups)), hash_block_size=h,
        enable_caching=True, use_eagle=s.eagle or s.full_eagle,
    )
    calls: list[dict] = []  # type: ignore[type-arg]
    cls = env.SlidingWindowManager
    original = cls.__dict__["reachable_block_mask"]

    def recording(klass, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(dict(kwargs))
        return original.__func__(klass, *args, **kwargs)

    cls.reachable_block_mask = classmethod(recording)
    try:
        req = _request(env, [1000 + i for i in range(n)], h)
        req.shared_prefix_boundary = s.shared_prefix_boundary
        assert manager.allocate_slots(req, n) is not None
    finally:
        cls.reachable_block_mask = original
    gid = len(groups) - 1
    view = coarse_block_hashes(req.block_hashes, h, s.block_size)
    end = s.stored_blocks()
    stored = [manager.block_pool.get_cached_block(view[i], [gid]) is not None for i in range(end)]
    return stored, calls


def test_waste_property(vllm_env) -> None:  # type: ignore[no-untyped-def]
    from vllm_support import build_planted_cache, make_spec, vllm_find_longest_cache_hit

    from swa_prefix_cache.pyspec.reachable import pending_segment_blocks

    rng = random.Random(20261216 + SEED)
    bad = []
    done = 0
    while done < CASES:
        s = _scenario(rng)
        if s.window < 2 or s.num_prompt_tokens > 8 * s.alignment:
            continue  # windows of <= 1 token are L1 / J1's
        stored, calls = _stored_and_boundaries(vllm_env, s)
        end = len(stored)
        spec = make_spec(s.block_size, s.window)

        def answers(mask):  # type: ignore[no-untyped-def]
            cache = build_planted_cache({0: list(mask)}, s.block_size)
            return [
                vllm_find_longest_cache_hit(cache, [0], b * s.block_size, spec, s.eagle, s.alignment)[1]
                for b in range(end + 1)
            ]

        base = answers(stored)
        exempt: set[int] = set()
        for call in calls:
            exempt.update(pending_segment_blocks(
                end, s.alignment, s.block_size, s.window, s.eagle, s.retention_interval,
                list(call.get("reachable_boundaries", ())),
            ))
        wasted = []
        for j in range(end):
            if stored[j] and j not in exempt:
                without = list(stored)
                without[j] = False
                if answers(without) == base:
                    wasted.append(j)
        if wasted and not (s.findings() - FIXED) & EXPLAINS["waste"]:
            bad.append((s, wasted))
        done += 1
        COUNTS["waste scenarios"] += 1
    assert bad == [], bad[:5]


# ---- KV offload -------------------------------------------------------------------------


def _with_hash_lookahead(scheduler_cls):  # type: ignore[no-untyped-def]
    """The offloading scheduler, given a config that says
    ``num_hash_lookahead_tokens`` (vLLM 0.34.0+ reads it at construction;
    tests/test_reachable.py's namespace config predates it): 0, what
    ``VllmConfig`` resolves with the offloading connector, which does not
    support lookahead block hashes."""

    def build(spec, vllm_config, kv_cache_config):  # type: ignore[no-untyped-def]
        if not hasattr(vllm_config, "num_hash_lookahead_tokens"):
            vllm_config.num_hash_lookahead_tokens = 0
        return scheduler_cls(spec, vllm_config, kv_cache_config)

    return build


def test_offload_property(offload_env, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """As tests/test_reachable.py's test_offload_disagrees_only_as_documented,
    with the fixed findings no longer an explanation."""
    monkeypatch.setattr(offload_env, "OffloadingConnectorScheduler",
                        _with_hash_lookahead(offload_env.OffloadingConnectorScheduler))
    rng = random.Random(20261217 + SEED)
    bad = []
    for _ in range(CASES):
        h, bpc = rng.choice((1, 2)), rng.choice((1, 1, 2))
        bsf, bs = h * rng.choice((1, 2, 4)), h * rng.choice((1, 1, 2))
        chunk, align = bs * bpc, bsf * bpc
        w = rng.randint(2, 5 * chunk + 1)
        es, ef = rng.random() < 0.3, rng.random() < 0.2
        retention = rng.choice((None, None, 0, chunk * rng.randint(1, 4)))
        n = rng.randint(1, 30)
        shared = rng.choice([0, 0, *range(align, n + 1, align)])
        found = offload_findings(h, bpc, bsf, bs, w, es, ef, retention, n) - FIXED
        violations, _, _ = offload_violations(offload_env, [(bsf, None, ef), (bs, w, es)], h, bpc, retention, n, shared)
        for kind, x in violations:
            if not found & OFFLOAD_EXPLAINS[kind]:
                bad.append(((h, bpc, bsf, bs, w, es, ef, retention, n, shared), kind, x))
        COUNTS["offload scenarios"] += 1
        COUNTS["offload queries"] += n + 3
    assert bad == [], bad[:5]


# ---- joint lookup ----------------------------------------------------------------------


def _accepted(coord, hashes, length: int) -> bool:  # type: ignore[no-untyped-def]
    """Every attention group's own lookup, called as the convergence loop
    calls it at candidate ``length`` (EAGLE: with the drop and the margin),
    answers exactly ``length``."""
    from vllm.v1.core.kv_cache_utils import eagle_proof_margin

    h = coord.hash_block_size
    for spec, group_ids, manager_cls, use_eagle in coord.attention_groups:
        manager = coord.single_type_managers[group_ids[0]]
        mx = length
        if use_eagle:
            margin = eagle_proof_margin(manager.block_size, h, False)
            mx = min(length + margin, len(hashes) * h)
        _, got = manager_cls.find_longest_cache_hit(
            block_hashes=hashes, max_length=mx, kv_cache_group_ids=group_ids,
            block_pool=manager.block_pool, kv_cache_spec=spec, drop_eagle_block=use_eagle,
            alignment_tokens=coord._cache_hit_alignment_tokens,
        )
        if got != length:
            return False
    return True


def test_joint_property() -> None:
    """The coordinator answers the greatest length every group accepts
    (random hybrid lookups as tests/test_joint.py draws them, more windows of
    one token)."""
    from test_joint import _mask, _spec, random_joint_scenario
    from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
    from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec
    from vllm_support import coarse_block_hashes, make_block_hashes

    env = type("Env", (), {})()
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    env.torch, env.FullAttentionSpec, env.SlidingWindowSpec = torch, FullAttentionSpec, SlidingWindowSpec
    rng = random.Random(20261218 + SEED)
    bad = []
    lookups = 0
    scenarios = 0
    while scenarios < CASES * 4:
        specs, h, use_eagle = random_joint_scenario(rng)
        if rng.random() < 0.3:  # windows of one token (J1's precondition)
            specs = [(bs, 1 if w is not None else None, e) for bs, w, e in specs]
        sched = math.lcm(h, *(bs for bs, _, _ in specs))
        if sched > 12 * h:
            continue
        num_hash = rng.randint(0, 16)
        masks = [_mask(rng, num_hash * h // bs, w, bs) for bs, w, _ in specs]
        config = KVCacheConfig(
            num_blocks=1 + sum(sum(m) for m in masks), kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec([f"layer{i}"], _spec(env, bs, w), is_eagle_group=e) for i, (bs, w, e) in enumerate(specs)],
        )
        coord = get_kv_cache_coordinator(
            kv_cache_config=config, max_model_len=(num_hash + 2) * h, max_in_flight_tokens=(num_hash + 2) * h,
            use_eagle=use_eagle, enable_caching=True, enable_kv_cache_events=False, dcp_world_size=1,
            pcp_world_size=1, scheduler_block_size=sched, hash_block_size=h,
        )
        if not hasattr(coord, "attention_groups"):
            continue  # a unitary coordinator: one group, nothing to reconcile
        fine = make_block_hashes(num_hash, salt=rng.randbytes(8))
        free = (b for b in coord.block_pool.blocks if b is not coord.block_pool.null_block)
        for gid, ((bs, _, _), mask) in enumerate(zip(specs, masks)):
            view = coarse_block_hashes(fine, h, bs)
            for i, present in enumerate(mask):
                if present:
                    coord.block_pool.cached_block_hash_to_block.insert(make_block_hash_with_group_id(view[i], gid), next(free))
        one_token_eagle = any(w is not None and w <= 1 for (bs, w, _), flag in zip(specs, _drops(coord, len(specs))) if flag)
        top = num_hash * h + h - 2
        for max_len in sorted({max(top, 0), *(rng.randint(0, max(top, 0)) for _ in range(6))}):
            _, hit, _ = coord.find_longest_cache_hit(fine, max_len)
            best = next((L for L in range(max_len, 0, -1) if _accepted(coord, fine, L)), 0)
            lookups += 1
            if hit < best and not (one_token_eagle and "J1" not in FIXED):
                bad.append((specs, h, use_eagle, num_hash, masks, max_len, hit, best))
        scenarios += 1
    COUNTS["joint scenarios"] += scenarios
    COUNTS["joint lookups"] += lookups
    assert bad == [], bad[:5]


def _drops(coord, n: int) -> list[bool]:  # type: ignore[no-untyped-def]
    """Per KV-cache group: does its attention group drop the EAGLE block."""
    out = [False] * n
    for _, group_ids, _, use_eagle in coord.attention_groups:
        for gid in group_ids:
            out[gid] = use_eagle
    return out


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
