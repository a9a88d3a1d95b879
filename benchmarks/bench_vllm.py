"""vLLM's own sliding-window lookup vs ours, on vLLM 0.33.0's real BlockPool.

Three implementations are put in turn on vLLM's classes (the class
attributes vLLM's coordinators call, by keyword) and timed side by side,
interleaved, in one process (benchmarks/harness.py):

* ``vllm``: vLLM's ORIGINAL classmethods (taken from the class ``__dict__``
  before the plugin is installed);
* ``ours``: the plugin as ``install()`` builds it from the environment
  (``SWA_PREFIX_CACHE_CORE``; unset = ``native``: the extension
  ``swa_prefix_cache.core._hotpath``, the proved C search with the BlockPool probe and
  vLLM's output lists in C). The PASS/MISS verdicts judge this column;
* the other core (``python`` when ours is native: pyspec's search over mask
  objects; ``native`` when the environment asked for python), so the ratio
  between the two cores is measured in the same run.

Every pool is a real ``BlockPool`` (block size 16, 32-byte sha256 block
hashes) whose hash map holds ``--pool-entries`` other cached blocks besides
the lookup's (default 65,536, i.e. a 1M-token KV cache). Before anything is
timed, every implementation's answer is checked against vLLM's; a mismatch
aborts the run. This file is the driver; each row is measured by its module:

* benchmarks/swa_cells.py: the sliding-window cells (probes, time, the seed
  and baseline targets);
* benchmarks/cost_model.py: fixed cost per call and cost per probe;
* benchmarks/small_n.py: the small-N sweep, one group and hybrid;
* benchmarks/full_attention_rows.py: the full-attention lookup alone;
* benchmarks/scheduler_rows.py: ``get_computed_blocks`` on a hybrid batch
  and one real ``Scheduler.schedule()`` step;
* benchmarks/report.py: the tables, the targets PASS/MISS, the receipt.

Writes a compact JSON receipt and a PNG (benchmarks/plot.py) under
benchmarks/results/, and a full run copies the PNG to
docs/img/bench-scaling.png (the README embeds it). ``--quick`` runs tiny
sizes so ``make check`` keeps every path of this script working; its
timings mean nothing and nothing is asserted on them (answers are still
checked). With ``SWA_PREFIX_CACHE_STRICT_NATIVE=1`` the run fails unless the
native core is measured in one of the two columns.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
# The scheduler-step row builds vLLM's real Scheduler (a VllmConfig) the way
# vLLM's own tests do on a CPU machine: CPU platform, set before vLLM is
# first imported; no hub access (the model config is a local config.json,
# no weights, no tokenizer).
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks import report  # noqa: E402
from swa_prefix_cache import settings  # noqa: E402
from benchmarks.cost_model import COST_SIZES, cost_model  # noqa: E402
from benchmarks.full_attention_rows import FINE_TOKENS, FULL_BLOCKS, full_bench  # noqa: E402
from benchmarks.harness import BS, Impls, capture_impls  # noqa: E402
from benchmarks.scheduler_rows import scheduler_bench, scheduler_step_bench  # noqa: E402
from benchmarks.seed_table import SEED_HIT_RATE  # noqa: E402
from benchmarks.small_n import SWEEP_HITS, SWEEP_SIZES, SWEEP_WINDOW, small_n_sweep  # noqa: E402
from benchmarks.swa_cells import (  # noqa: E402
    CONTEXTS,
    HIT_RATES,
    WINDOWS,
    Hashes,
    baseline_speedups,
    cell_specs,
    run_cell,
)

PLOT_COPY = ROOT / "docs" / "img" / "bench-scaling.png"
POOL_ENTRIES = 65536  # other cached blocks in every pool's hash map


@dataclass(frozen=True)
class RunSizes:
    """How much of each row one run measures."""

    masks: int  # random masks timed per cell
    probe_masks: int  # masks per cell on which answers are checked and probes counted
    rounds: int  # interleaved rounds per mask
    target_ns: float  # the length of one sample
    filler: int  # other cached blocks in every pool
    cost_sizes: tuple[int, ...]
    sweep_sizes: tuple[int, ...]
    sweep_masks: int
    full_blocks: int
    fine_tokens: int
    full_sizes: tuple[int, ...]
    sched_rounds: int
    # get_computed_blocks batches: (window, requests, context, sliding-window groups)
    sched_cfgs: tuple[tuple[int, int, int, int], ...]
    step: dict[str, int]  # scheduler_step_bench's arguments

    @classmethod
    def quick(cls) -> RunSizes:
        return cls(masks=2, probe_masks=3, rounds=2, target_ns=0.1e6, filler=2048,
                   cost_sizes=(16, 64), sweep_sizes=(1, 8, 16), sweep_masks=1,
                   full_blocks=128, fine_tokens=2048, full_sizes=(1, 8, 16), sched_rounds=2,
                   sched_cfgs=((1024, 6, 4096, 1), (1024, 6, 4096, 3)),
                   step=dict(n_requests=4, docs=2, min_tokens=1024, max_tokens=2048, window=1024,
                             swa_groups=1, budget=8192, rounds=2))

    @classmethod
    def full(cls, args: argparse.Namespace) -> RunSizes:
        return cls(masks=args.masks, probe_masks=args.probe_masks, rounds=args.rounds,
                   target_ns=args.sample_ms * 1e6, filler=args.pool_entries,
                   cost_sizes=COST_SIZES, sweep_sizes=SWEEP_SIZES, sweep_masks=3,
                   full_blocks=FULL_BLOCKS, fine_tokens=FINE_TOKENS, full_sizes=SWEEP_SIZES,
                   sched_rounds=args.sched_rounds,
                   sched_cfgs=((1024, 64, 32768, 1), (128, 64, 32768, 1), (1024, 64, 32768, 3)),
                   step=dict(n_requests=64, docs=8, min_tokens=8192, max_tokens=32768, window=1024,
                             swa_groups=1, budget=8192, rounds=args.sched_rounds))

    def inputs(self) -> dict[str, Any]:
        """The receipt's ``inputs``."""
        return {"block_size": BS, "hash_bytes": 32, "masks_timed": self.masks,
                "masks_counted": self.probe_masks, "rounds": self.rounds,
                "sample_target_ns": self.target_ns, "windows": list(WINDOWS),
                "contexts": list(CONTEXTS), "hit_rates": list(HIT_RATES),
                "sweep_sizes": list(self.sweep_sizes), "sweep_hits": list(SWEEP_HITS),
                "sweep_window": SWEEP_WINDOW, "sweep_masks": self.sweep_masks}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes; smoke test only")
    parser.add_argument("--masks", type=int, default=6, help="random masks (timed) per cell")
    parser.add_argument("--probe-masks", type=int, default=30,
                        help="masks per cell on which answers are checked and probes counted")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds per mask")
    parser.add_argument("--sample-ms", type=float, default=2.0, help="target length of one sample")
    parser.add_argument("--sched-rounds", type=int, default=15, help="interleaved batches")
    parser.add_argument("--pool-entries", type=int, default=POOL_ENTRIES,
                        help="other cached blocks in every pool's hash map")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--no-plot", action="store_true")
    return parser.parse_args()


def measure(sizes: RunSizes, impls: Impls, quick: bool, rng: random.Random) -> report.Measured:
    """Every row, in the order that draws the run's random numbers."""
    s = sizes
    specs = cell_specs(quick)
    hashes_of = Hashes(max(spec.context for spec in specs) // BS)
    cells = [run_cell(spec, impls, hashes_of, s.masks, s.probe_masks, s.rounds, s.target_ns,
                      s.filler, rng) for spec in specs]
    cost = cost_model(impls, s.cost_sizes, s.filler, s.target_ns, max(s.rounds, 3), cells, rng)
    sweep = small_n_sweep(impls, s.sweep_sizes, SWEEP_HITS, SWEEP_WINDOW, s.sweep_masks, s.rounds,
                          s.target_ns / 2, s.filler, rng)
    full = full_bench(impls, s.full_blocks, s.full_sizes, SWEEP_HITS, s.fine_tokens,
                      max(s.rounds, 3), s.target_ns, s.filler, rng)
    sched = [scheduler_bench(impls, w, nr, ctx, SEED_HIT_RATE, s.sched_rounds, rng, swa_groups=g)
             for w, nr, ctx, g in s.sched_cfgs]
    step = scheduler_step_bench(impls, rng=rng, **s.step)
    return report.Measured(cells=cells, cost_model=cost, sweep=sweep, full_attention=full,
                           scheduler=sched, scheduler_step=step)


def main() -> int:
    args = parse_args()
    started = time.perf_counter()
    sizes = RunSizes.quick() if args.quick else RunSizes.full(args)
    rng = random.Random(args.seed)
    lookup = report.LookupCode.installed()
    baseline_speedups()  # fail early without the baseline receipt
    impls = capture_impls()
    if impls.native_error:
        print(f"WARNING: install() chose the native core but it fails: {impls.native_error}; "
              "measuring the python core as ours")
    if impls.other is None:
        print(f"no other column: {impls.other_error}")
    if settings.STRICT_NATIVE.read() and "native" not in (impls.backend, impls.other):
        print("SWA_PREFIX_CACHE_STRICT_NATIVE=1 but the native core is measured in neither column "
              f"({impls.other_error or 'extension unavailable'})")
        return 1
    measured = measure(sizes, impls, args.quick, rng)
    summary = report.print_report(lookup, measured, impls, sizes.filler, sizes.masks,
                                  sizes.probe_masks, sizes.rounds, args.quick)
    wall = time.perf_counter() - started
    stem = "vllm-quick" if args.quick else f"vllm-{time.strftime('%Y%m%dT%H%M%S')}"
    receipt = report.build_receipt(args, sizes.inputs(), lookup, impls, sizes.filler, summary, measured,
                             wall)
    out = report.write_receipt(receipt, stem)
    print(f"receipt: {out}")
    if not args.no_plot:
        from benchmarks.plot import plot_receipt

        png = plot_receipt(receipt, out.with_suffix(".png"))
        print(f"plot: {png}")
        if not args.quick:
            PLOT_COPY.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, PLOT_COPY)
            print(f"plot copied to {PLOT_COPY.relative_to(ROOT)}")
    print(f"wall time {wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
