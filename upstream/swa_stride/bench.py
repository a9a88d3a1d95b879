"""The patched pure-Python method against vLLM's stock one, on the bench cells.

The seed cells of benchmarks/bench_vllm.py: windows of 128, 512, 1024 and
2048 tokens x prompts of 4K, 8K and 32K tokens, block size 16, every block
cached with probability 5%, one group, on one real ``BlockPool`` whose hash
map also holds 65,536 other cached blocks; and four more cells at 32K
(``EXTRA_CELLS``): every block cached, and runs one block short of a window. Both methods are vLLM's
classmethods (the patched one from the patched copy of vLLM's module, loaded
next to the stock module), called by keyword as vLLM's coordinators call
them. Before timing, every answer is checked against the stock one (same
tokens, same block objects) and both methods' ``get_cached_block`` calls are
counted. Samples of the two are taken back to back, in alternating order;
times are medians, the speedup is the median of the paired ratios (a load
spike on a shared machine hits both samples of a pair alike).
Nothing is asserted on time.

Usage: python upstream/swa_stride/bench.py PATCHED_MODULE_FILE [--json OUT]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from benchmarks.seed_table import SEED_BLOCK_SIZE, SEED_CELLS, SEED_HIT_RATE  # noqa: E402
from upstream import make_patch  # noqa: E402
from vllm_support import (  # noqa: E402
    ORIGINAL_LOOKUP,
    count_get_cached_block,
    make_block_hashes,
    make_block_pool,
    make_spec,
)

from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager  # noqa: E402

BS = SEED_BLOCK_SIZE
FILLER = 65_536  # other cached blocks in the pool's hash map
MASKS = 4  # masks per cell
ROUNDS = 15  # interleaved samples per mask and method
SAMPLE_NS = 2e6  # each sample: calls back to back for about 2 ms
# Beyond the bench cells: where the scan is cheapest (every block cached: both
# read one window) and a hard case for any skipping search (runs one block
# short of a window).
EXTRA_CELLS = [(128, 32768, "all"), (1024, 32768, "all"),
               (128, 32768, "need-1"), (1024, 32768, "need-1")]


def make_mask(pattern: str, n: int, window: int, rng: random.Random) -> list[bool]:
    """``5%``: each block cached with probability 5%; ``all``: every block;
    ``need-1``: runs of one block fewer than a window needs, one miss
    between (every run is one block short of a hit)."""
    if pattern == "5%":
        return [rng.random() < SEED_HIT_RATE for _ in range(n)]
    if pattern == "all":
        return [True] * n
    need = SlidingWindowManager._contiguous_blocks_for_hit(window, BS, False)
    return [i % need != need - 1 for i in range(n)]


def time_per_call(fn: Callable[[], object], reps: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(reps):
        fn()
    return (time.perf_counter_ns() - start) / reps


def same(a: Any, b: Any) -> bool:
    (blocks_a, tokens_a), (blocks_b, tokens_b) = a, b
    return tokens_a == tokens_b and len(blocks_a) == len(blocks_b) and all(
        len(x) == len(y) and all(p is q for p, q in zip(x, y))
        for x, y in zip(blocks_a, blocks_b)
    )


def run(patched_file: Path) -> list[dict[str, Any]]:
    patched = make_patch.load_module(patched_file, "swa_stride_bench_patched")
    methods = {
        "stock": ORIGINAL_LOOKUP.__get__(None, SlidingWindowManager),
        "patched": patched.SlidingWindowManager.find_longest_cache_hit,
    }
    rng = random.Random(20261201)
    cells = [(w, c, "5%") for w, c in sorted(SEED_CELLS)] + EXTRA_CELLS
    masks = {
        (w, c, p, m): make_mask(p, c // BS, w, rng) for w, c, p in cells for m in range(MASKS)
    }
    pool = make_block_pool(1 + FILLER + sum(sum(mask) for mask in masks.values()), BS)
    free = (b for b in pool.blocks if b is not pool.null_block)
    for _ in range(FILLER):
        pool.cached_block_hash_to_block.insert(
            make_block_hash_with_group_id(BlockHash(rng.randbytes(32)), 0), next(free))
    hashes = {key: make_block_hashes(len(mask), repr(key).encode()) for key, mask in masks.items()}
    for key, mask in masks.items():
        for i, cached in enumerate(mask):
            if cached:
                pool.cached_block_hash_to_block.insert(
                    make_block_hash_with_group_id(hashes[key][i], 0), next(free))

    rows = []
    for window, context, pattern in cells:
        spec = make_spec(BS, window)
        pairs: list[dict[str, Callable[[], Any]]] = []  # per mask: name -> call
        probes: dict[str, list[int]] = {name: [] for name in methods}
        for m in range(MASKS):
            kwargs = dict(
                block_hashes=hashes[window, context, pattern, m], max_length=context,
                kv_cache_group_ids=[0], block_pool=pool, kv_cache_spec=spec,
                drop_eagle_block=False, alignment_tokens=BS,
            )
            answers = {}
            for name, method in methods.items():
                with count_get_cached_block(pool) as counter:
                    answers[name] = method(**kwargs)
                probes[name].append(counter[0])
            if not same(answers["patched"], answers["stock"]):
                raise SystemExit(f"bench: patched != stock at window {window}, context {context}")
            pairs.append({name: (lambda method=method, kw=kwargs: method(**kw))
                          for name, method in methods.items()})
        reps = {}
        for m, pair in enumerate(pairs):
            for name, fn in pair.items():
                fn()
                reps[m, name] = max(1, int(SAMPLE_NS / max(time_per_call(fn, 1), 1.0)))
        samples: dict[str, list[float]] = {name: [] for name in methods}
        ratios: list[float] = []  # stock / patched, sampled back to back
        gc.collect()
        gc.disable()
        try:
            for r in range(ROUNDS):
                for m, pair in enumerate(pairs):
                    names = list(pair) if r % 2 == 0 else list(pair)[::-1]
                    got = {name: time_per_call(pair[name], reps[m, name]) for name in names}
                    for name, ns in got.items():
                        samples[name].append(ns)
                    ratios.append(got["stock"] / got["patched"])
        finally:
            gc.enable()
        stock_us = statistics.median(samples["stock"]) / 1000
        patched_us = statistics.median(samples["patched"]) / 1000
        rows.append({
            "window_tokens": window, "context_tokens": context, "pattern": pattern,
            "n_blocks": context // BS,
            "need": SlidingWindowManager._contiguous_blocks_for_hit(window, BS, False),
            "stock_probes": statistics.mean(probes["stock"]),
            "patched_probes": statistics.mean(probes["patched"]),
            "stock_us": round(stock_us, 2), "patched_us": round(patched_us, 2),
            "speedup": round(statistics.median(ratios), 2),
        })
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("patched_file", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = run(args.patched_file)
    print(f"bench cells (block size {BS}, one group, {FILLER:,} other cached blocks; "
          f"{MASKS} masks x {ROUNDS} paired samples; medians, speedup = median of paired "
          "ratios); cached: 5% = each block with probability 5% (the bench cells), "
          "all = every block, need-1 = runs one block short of a window")
    print(f"  {'window':>6} {'context':>7} {'cached':>6} {'blocks':>6} "
          f"{'lookups stock/patched':>22} {'stock us':>9} {'patched us':>10} {'speedup':>8}")
    for r in rows:
        print(f"  {r['window_tokens']:>6} {r['context_tokens']:>7} {r['pattern']:>6} "
              f"{r['n_blocks']:>6} "
              f"{r['stock_probes']:>10.1f} / {r['patched_probes']:<9.1f} "
              f"{r['stock_us']:>9.1f} {r['patched_us']:>10.1f} {r['speedup']:>7.1f}x")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
