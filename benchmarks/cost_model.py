"""The cost model: what bounds the sliding-window speedup.

A lookup costs a fixed amount per call plus an amount per probe; vLLM's
scan probes every block from the right, ours about ``N / need`` of them.
Per implementation this measures the fixed cost of a call that probes
nothing (``max_length`` 0) and the cost per probe, the slope of the time
over lookups of 64..1,024 probes that all miss (a window of one block,
nothing cached) and that all hit (every block cached, a window of N
blocks, N blocks in the answer), next to bare ``BlockPool.get_cached_block``
calls on the same hashes: how much cheaper than vLLM's own read a probe of
ours is. One group, on a pool that also holds other cached blocks.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from typing import Any

from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

from benchmarks.harness import BS, ORIGINAL, Impls, Planter
from benchmarks.probes import bare_probe_loop, count_probes
from benchmarks.side_by_side import Job, check_against_vllm, lookup_call, time_interleaved
from vllm_support import make_block_hashes, make_spec

COST_SIZES = (64, 256, 1024)  # probes per lookup, the points of the slope

# Targets (they judge "ours", the default core).
PER_PROBE_MAX_NS = 80.0  # ours per probe, hits and misses
PER_PROBE_VS_GCB = 6.0  # ... and this many times cheaper than get_cached_block
FIXED_MAX_US = 0.5  # ours per call, before any probe


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    mx = statistics.mean(x for x, _ in points)
    my = statistics.mean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def cost_model(impls: Impls, sizes: Sequence[int], filler: int, target_ns: float, rounds: int,
               cells: list[dict[str, Any]], rng: random.Random) -> dict[str, Any]:
    """Per implementation: the fixed cost of a call (``max_length`` 0: no
    probe at all) and the cost of one probe, as the slope of its time over
    lookups whose probes all miss (window of one block, nothing cached: N
    probes) and all hit (all N blocks cached, window N blocks: N probes and
    N blocks in the answer); next to bare ``BlockPool.get_cached_block``
    calls on the same hashes. One group, a pool of ``filler`` other cached
    blocks plus these."""
    n_max = max(sizes)
    hit_hashes = make_block_hashes(n_max, b"cost-hit")
    miss_hashes = make_block_hashes(n_max, b"cost-miss")
    planter = Planter(filler + n_max)
    planter.fill(filler, [0], rng)
    planter.plant(hit_hashes, {0: [True] * n_max})
    pool = planter.pool
    gids = [0]
    names = list(impls.table)

    def kwargs_of(kind: str, n: int) -> dict[str, Any]:
        hit = kind == "hit"
        return dict(block_hashes=(hit_hashes if hit else miss_hashes)[:n], max_length=n * BS,
                    kv_cache_group_ids=gids, block_pool=pool,
                    kv_cache_spec=make_spec(BS, n * BS if hit else BS),
                    drop_eagle_block=False, alignment_tokens=BS)

    groups: list[dict[str, Job]] = []
    probes: dict[tuple[str, str, int], int] = {}
    zero = lookup_call(SlidingWindowManager, dict(kwargs_of("miss", 1), max_length=0))
    groups.append({f"{name}/fixed": (impls.table[name], zero) for name in names})
    for kind in ("miss", "hit"):
        for n in sizes:
            kwargs = kwargs_of(kind, n)
            call = lookup_call(SlidingWindowManager, kwargs)
            what = f"cost model ({kind}, N={n})"
            ref = check_against_vllm(impls, names, call, what,
                                     want_tokens=n * BS if kind == "hit" else 0)
            group: dict[str, Job] = {}
            for name in names:
                probes[(name, kind, n)] = count_probes(impls, name, kwargs, ref, what)
                group[f"{name}/{kind}/{n}"] = (impls.table[name], call)
            group[f"bare/{kind}/{n}"] = (ORIGINAL, bare_probe_loop(pool, kwargs["block_hashes"], gids))
            groups.append(group)
    samples, _ = time_interleaved(groups, rounds, target_ns)
    med = {k: statistics.median(v) for k, v in samples.items()}  # ns
    per_probe: dict[str, dict[str, float]] = {}
    for name in names + ["bare"]:
        per_probe[name] = {}
        for kind in ("miss", "hit"):
            pts = [(probes.get((name, kind, n), n), med[f"{name}/{kind}/{n}"]) for n in sizes]
            per_probe[name][kind] = _slope(pts)
    gcb = per_probe.pop("bare")
    fixed_us = {name: med[f"{name}/fixed"] / 1000 for name in names}
    return {
        "pool_entries": len(pool.cached_block_hash_to_block),
        "sizes": list(sizes),
        "probes": {f"{name}/{kind}": [probes[(name, kind, n)] for n in sizes]
                   for name in names for kind in ("miss", "hit")},
        "get_cached_block_hit_ns": gcb["hit"],
        "get_cached_block_miss_ns": gcb["miss"],
        "fixed_call_us": fixed_us,
        "per_probe_ns": per_probe,
        "median_us": {k: round(v / 1000, 4) for k, v in med.items()},
        # The older estimate, from the random cells: (median - fixed) / probes.
        "per_probe_ns_cells": per_probe_ns_cells(cells, fixed_us),
    }


def per_probe_ns_cells(cells: list[dict[str, Any]], fixed_us: dict[str, float]) -> dict[str, float]:
    """Median over the one-group random cells with at least 50 probes of
    ``(median time - fixed cost) / probes``: a probe's cost at the cells'
    own mix of hits and misses (and the answer lists they build)."""
    out = {}
    rand = [c for c in cells if c["pattern"] == "random" and c["groups"] == 1]
    for k in fixed_us:
        est = []
        for c in rand:
            t = {"vllm": c["vllm_median_us"], "ours": c["median_us"]}.get(
                k, c["other_median_us"] if k == c["other_core"] else None)
            p = c["vllm_probes"] if k == "vllm" else c["probes_by_impl"].get(k, c["probes"])
            if t is not None and p >= 50:
                est.append((t - fixed_us[k]) / p * 1000)
        if est:
            out[k] = statistics.median(est)
    return out
