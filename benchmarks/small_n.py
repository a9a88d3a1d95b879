"""Small N: lookups of a few blocks, where a fixed cost per call shows.

N = 1, 2, 4, ..., 64 blocks at 0%, 50% and 100% hits, with a window of
128 tokens (8 blocks, so N runs below, at and above a window): the
``SlidingWindowManager`` lookup alone (one group) and vLLM's real
``HybridKVCacheCoordinator.find_longest_cache_hit`` (full attention with
every block cached, then one sliding-window group with the hits). A long
prompt hides a fixed cost behind the probes it saves; here a lookup is a
few microseconds, so this is where ours could be slower than vLLM's. The
target: never slower, in any cell.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

from benchmarks.harness import BS, Impls, Planter
from benchmarks.kv_cache_configs import hybrid_manager
from benchmarks.side_by_side import (
    Job,
    check_against_vllm,
    lookup_call,
    medians_us,
    other_keys,
    ours_vs_vllm,
    quartiles_us,
    time_interleaved,
)
from vllm_support import make_block_hashes, make_spec

SWEEP_SIZES = (1, 2, 4, 8, 16, 32, 64)
SWEEP_HITS = (0.0, 0.5, 1.0)
SWEEP_WINDOW = 128  # tokens: need 8 blocks, so the sweep has N < need, = need and > need
MODES = ("one group", "hybrid")


def small_n_sweep(impls: Impls, sizes: Sequence[int], hits: Sequence[float], window: int,
                  masks: int, rounds: int, target_ns: float, filler: int,
                  rng: random.Random) -> list[dict[str, Any]]:
    """Lookups of ``sizes`` blocks at each hit rate, where a lookup costs a
    few microseconds: ``one group`` is the SlidingWindowManager lookup on a
    pool with ``filler`` other blocks; ``hybrid`` is the real
    ``HybridKVCacheCoordinator.find_longest_cache_hit`` (full attention with
    every block cached, then the sliding-window group with the hits) on a
    prompt of N blocks and one token (``max_cache_hit_length`` N blocks)."""
    names = list(impls.table)
    plan = [(mode, n, h, m) for mode in MODES for n in sizes for h in hits for m in range(masks)]
    swa_masks = {key: [rng.random() < key[2] for _ in range(key[1])] for key in plan}
    hashes = {key: make_block_hashes(key[1], b"sweep-%s-%d-%r-%d" % (key[0].encode(), *key[1:]))
              for key in plan}
    one = Planter(filler + sum(sum(m) for k, m in swa_masks.items() if k[0] == "one group"))
    one.fill(filler, [0], rng)
    hybrid_planted = sum(k[1] + sum(m) for k, m in swa_masks.items() if k[0] == "hybrid")
    manager = hybrid_manager(1 + filler + hybrid_planted, max(sizes) * BS + BS, window, swa_groups=1)
    coordinator = manager.coordinator
    hyb = Planter(0, pool=manager.block_pool)
    hyb.fill(filler, [0, 1], rng)
    spec = make_spec(BS, window)
    calls: dict[tuple[str, int, float, int], Callable[[], Any]] = {}
    for key in plan:
        mode, n, _, _ = key
        if mode == "one group":
            one.plant(hashes[key], {0: swa_masks[key]})
            calls[key] = lookup_call(SlidingWindowManager, dict(
                block_hashes=hashes[key], max_length=n * BS, kv_cache_group_ids=[0],
                block_pool=one.pool, kv_cache_spec=spec, drop_eagle_block=False,
                alignment_tokens=BS))
        else:
            hyb.plant(hashes[key], {0: [True] * n, 1: swa_masks[key]})
            calls[key] = (lambda hs=hashes[key], t=n * BS:
                          coordinator.find_longest_cache_hit(hs, t))
    rows = []
    for mode in MODES:
        for n in sizes:
            for h in hits:
                groups: list[dict[str, Job]] = []
                hit_tokens = []
                for m in range(masks):
                    call = calls[(mode, n, h, m)]
                    ref = check_against_vllm(impls, names, call, f"sweep {mode} N={n} hits {h}")
                    hit_tokens.append(ref[1])
                    groups.append({name: (impls.table[name], call) for name in names})
                samples, _ = time_interleaved(groups, rounds, target_ns)
                med = medians_us(samples)
                rows.append({
                    "mode": mode,
                    "api": ("SlidingWindowManager.find_longest_cache_hit" if mode == "one group"
                            else f"{type(coordinator).__name__}.find_longest_cache_hit"),
                    "n_blocks": n, "hit_rate": h, "window_tokens": window,
                    "hit_tokens": hit_tokens,
                    **ours_vs_vllm(med),
                    **other_keys(impls, med),
                    "quartiles_us": quartiles_us(samples),
                    "ok": med["ours"] <= med["vllm"],
                })
    return rows
