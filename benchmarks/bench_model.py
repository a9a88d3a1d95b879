"""Legacy scan vs stride search on the boolean model (no vLLM needed).

For each cell (sliding window, context length, hit rate) it draws random
cached-block masks and measures, interleaved in one process:

* probes: reads of the mask by vLLM's loop (``swa_prefix_cache.pyspec.legacy_scan``) and by
  the stride search (``swa_prefix_cache.pyspec.find_hit``), next to the lower bound
  ``n // need + 1`` and the seed's claimed figure;
* ``iid bound``: on masks whose blocks are cached independently with
  probability h, ANY search must find a miss in each of the ``n // need``
  disjoint windows, and each probe finds one with probability ``1 - h``,
  so it needs at least ``(n // need) / (1 - h)`` probes on average;
* time: the C core's ``legacy_scan`` vs ``find_hit`` timed inside C
  (benchmarks/bench_core.c, no Python call overhead), and the same pair in
  pure Python. Ratios are ratios of medians over interleaved samples, never
  figures from another run.

Writes a JSON receipt under benchmarks/results/. ``--quick`` runs tiny sizes
so ``make check`` keeps this script working; its timings mean nothing.
"""

import argparse
import platform
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import receipts  # noqa: E402
from benchmarks.seed_table import SEED_BLOCK_SIZE, SEED_CELLS, SEED_HIT_RATE  # noqa: E402
from benchmarks.timing import time_calls  # noqa: E402
from benchmarks import cffi_core as native  # noqa: E402
from swa_prefix_cache.pyspec import CountingMask, SearchParams, find_hit, legacy_scan  # noqa: E402

from cffi import FFI  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BENCH_LIB = Path(__file__).resolve().parent.parent / "build" / "libprefix_cache_bench.so"
_ffi = FFI()
_ffi.cdef("double pc_bench_ns(int which, const uint8_t *cached, int64_t n, int64_t need,"
          " int64_t period, int eagle, int64_t reps);")
WINDOWS = (2048, 512, 1024, 128)
CONTEXTS = (4096, 8192, 32768, 131072)


def run_cell(window: int, context: int, hit_rate: float, masks: int, reps: int,
             rng: random.Random, core: object) -> dict:
    bs = SEED_BLOCK_SIZE
    raw = (context, bs, window, bs, False)
    p = SearchParams.from_vllm(*raw)
    legacy_probes, stride_probes = [], []
    samples: dict[str, list[float]] = {k: [] for k in ("c_legacy", "c_stride", "py_legacy", "py_stride")}
    for _ in range(masks):
        mask = bytes(rng.random() < hit_rate for _ in range(p.n))
        slow_mask, fast_mask = CountingMask(mask), CountingMask(mask)
        expected = legacy_scan(slow_mask, *raw)
        if find_hit(fast_mask, p) != expected:
            raise AssertionError(f"stride search disagrees with legacy at {raw}")
        legacy_probes.append(slow_mask.probes)
        stride_probes.append(fast_mask.probes)
        c_fast = native.find_hit(mask, p.n, p.need, p.period, p.eagle)
        if c_fast.hit != expected or c_fast.probes != fast_mask.probes:
            raise AssertionError(f"C find_hit disagrees at {raw}")
        # Interleave the four timings so drift hits them alike.
        buf = _ffi.from_buffer("uint8_t[]", mask)
        c_args = (buf, p.n, p.need, p.period, int(p.eagle), reps * 20)
        samples["c_legacy"].append(core.pc_bench_ns(1, *c_args))
        samples["c_stride"].append(core.pc_bench_ns(0, *c_args))
        samples["py_legacy"].append(time_calls(lambda: legacy_scan(mask, *raw), max(reps // 10, 1)))
        samples["py_stride"].append(time_calls(lambda: find_hit(mask, p), reps))
    med = {k: statistics.median(v) for k, v in samples.items()}
    seed = SEED_CELLS.get((window, context))
    return {
        "window_tokens": window,
        "context_tokens": context,
        "block_size": bs,
        "hit_rate": hit_rate,
        "n_blocks": p.n,
        "need": p.need,
        "legacy_probes": statistics.mean(legacy_probes),
        "probes": statistics.mean(stride_probes),
        "probes_max": max(stride_probes),
        "lower_bound": p.n // p.need + 1,
        "iid_bound": (p.n // p.need) / (1 - hit_rate),
        "seed_probes": seed[1] if seed else None,
        "seed_speedup": seed[2] if seed else None,
        "median_ns": med,
        "c_speedup": med["c_legacy"] / med["c_stride"],
        "py_speedup": med["py_legacy"] / med["py_stride"],
        "samples_ns": samples,
    }


def print_table(cells: list[dict]) -> None:
    head = (f"{'window':>6} {'ctx':>6} {'hit':>4} {'N':>5} {'need':>4} | {'legacy':>6} "
            f"{'stride':>7} {'N/need+1':>8} {'iid':>6} {'seed':>5} | {'C legacy':>9} "
            f"{'C stride':>9} {'C x':>7} | {'py x':>6} {'seed x':>6}")
    print(head)
    print("-" * len(head))
    for c in cells:
        m = c["median_ns"]
        seed_p = "-" if c["seed_probes"] is None else str(c["seed_probes"])
        seed_x = "-" if c["seed_speedup"] is None else f"{c['seed_speedup']:.1f}"
        print(f"{c['window_tokens']:>6} {c['context_tokens']:>6} {c['hit_rate']:>4.2f} "
              f"{c['n_blocks']:>5} {c['need']:>4} | {c['legacy_probes']:>6.0f} "
              f"{c['probes']:>7.1f} {c['lower_bound']:>8} {c['iid_bound']:>6.1f} {seed_p:>5} | "
              f"{m['c_legacy']:>7.0f}ns {m['c_stride']:>7.0f}ns "
              f"{c['c_speedup']:>6.1f}x | {c['py_speedup']:>5.1f}x {seed_x:>6}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes; smoke test only")
    parser.add_argument("--masks", type=int, default=40, help="random masks per cell")
    parser.add_argument("--reps", type=int, default=50, help="calls per timing sample")
    parser.add_argument("--seed", type=int, default=20261129)
    args = parser.parse_args()
    if args.quick:
        contexts, hit_rates, masks, reps = (4096,), (0.05,), 3, 2
    else:
        contexts, hit_rates, masks, reps = CONTEXTS, (0.05, 0.10), args.masks, args.reps
    native.load()
    core = _ffi.dlopen(str(BENCH_LIB))
    rng = random.Random(args.seed)
    cells = [run_cell(w, c, h, masks, reps, rng, core)
             for h in hit_rates for w in WINDOWS for c in contexts]
    print(f"Boolean model, block size {SEED_BLOCK_SIZE}, {masks} random masks per cell; "
          "probes are means, times are medians of interleaved samples.")
    print_table(cells)
    seeded = [c for c in cells if c["seed_probes"] is not None and c["hit_rate"] == SEED_HIT_RATE]
    over = [c for c in seeded if c["probes"] > c["seed_probes"]]
    print(f"seed cells (5% hits) where we probe more than the seed claims: {len(over)} of {len(seeded)}")
    for c in over:
        print(f"  window {c['window_tokens']} / {c['context_tokens']}: {c['probes']:.1f} probes vs seed "
              f"{c['seed_probes']}; no search can average below {c['iid_bound']:.1f} on such masks")
    RESULTS.mkdir(exist_ok=True)
    name = "model-quick.json" if args.quick else f"model-{time.strftime('%Y%m%dT%H%M%S')}.json"
    receipt = {
        "benchmark": "boolean model (pyspec + C core); vLLM's BlockPool is bench_vllm.py's",
        "python": platform.python_version(),
        "machine": platform.platform(),
        "args": vars(args),
        "cells": cells,
    }
    receipts.write(RESULTS / name, receipt)
    print(f"receipt: {RESULTS / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
