"""vLLM's KV-offload sliding-window lookup vs ours, on vLLM 0.33.0's real
``CPUOffloadingManager`` (the KV-offload lookup's bench row).

``OffloadingConnectorScheduler._sliding_window_lookup`` scans every chunk key
right to left, one ``manager.lookup(key)`` per chunk. Ours (installed by
``swa_prefix_cache.vllm_adapter.install()``: the proved ``offload_stride_search`` through the
extension with the native core, pyspec's with the python core) asks the
manager about the chunks the stride search reads. Per cell (chunks N,
window W in chunks, share of chunks stored and ready):

* the manager is vLLM's real one (LRU), the hits planted with its own
  ``prepare_store`` / ``complete_store``; the method is called on a
  stand-in scheduler holding that manager, as vLLM calls it;
* before timing, ours and vLLM's answers must be equal (``None`` included),
  and ours must have been answered by the search (not delegated);
* probes: vLLM's are ``swa_prefix_cache.pyspec.legacy_probes`` of the mask, ours the C
  search's own count on the same mask (``benchmarks.cffi_core``), which makes
  the same reads as the probe instance the extension runs;
* time: samples of vLLM / native / python interleaved in one process,
  medians, speedup = ratio of medians.

Targets (judging the native core, the default), printed PASS/MISS: probes
<= 1.1 x (floor(N / W) + 1) + the initial window at 0% hits; time >= 40x at
N = 8,192, W = 64, 0% hits. ``--quick`` runs tiny sizes so ``make check``
keeps this script working (its timings mean nothing; answers are checked).
Writes a compact JSON receipt under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import receipts  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
CORES = ("native", "python")


def build_manager(n: int, hit_rate: float, rng: random.Random) -> tuple[Any, list[Any], Any, list[int]]:
    """A real CPUOffloadingManager holding a random ``hit_rate`` share of
    ``n`` chunk keys, stored and ready; the keys, a request context and the
    mask (0 miss, 1 hit)."""
    from vllm.v1.kv_offload.base import ReqContext, make_offload_key
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    manager = CPUOffloadingManager(num_chunks=max(16, n))
    keys = [make_offload_key(rng.randbytes(8) + i.to_bytes(24, "big"), 0) for i in range(n)]
    mask = [1 if rng.random() < hit_rate else 0 for _ in range(n)]
    stored = [k for k, v in zip(keys, mask) if v]
    ctx = ReqContext(req_id="store")
    if stored:
        assert manager.prepare_store(stored, ctx) is not None
        manager.complete_store(stored, ctx)
    return manager, keys, ReqContext(req_id="bench"), mask


def install(core: str) -> Callable[..., Any]:
    """Install the plugin with ``core``; the patched method."""
    from swa_prefix_cache import vllm_adapter
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        OffloadingConnectorScheduler,
    )

    vllm_adapter.uninstall()
    os.environ[vllm_adapter.CORE_ENV] = core
    try:
        assert vllm_adapter.install(vllm_adapter.Mode.ON), vllm_adapter.status()["reason"]
    finally:
        del os.environ[vllm_adapter.CORE_ENV]
    status = vllm_adapter.status()["offload_lookup"]
    assert status["installed"], status
    return OffloadingConnectorScheduler.__dict__["_sliding_window_lookup"]


def time_call(fn: Callable[[], object], target_ns: float) -> float:
    """Mean ns of back-to-back calls lasting about ``target_ns``."""
    reps = 1
    while True:
        start = time.perf_counter_ns()
        for _ in range(reps):
            fn()
        spent = time.perf_counter_ns() - start
        if spent >= target_ns or reps >= 1 << 20:
            return spent / reps
        reps *= 2


def run_cell(impls: dict[str, Callable[..., Any]], n: int, window: int, hit_rate: float,
             rng: random.Random, rounds: int, target_ns: float) -> dict[str, Any]:
    from benchmarks import cffi_core as native
    from swa_prefix_cache.pyspec.offload_lookup import legacy_probes
    from swa_prefix_cache.vllm_adapter import connector_lookup

    manager, keys, ctx, mask = build_manager(n, hit_rate, rng)
    stand_in = SimpleNamespace(manager=manager)
    calls = {name: (lambda f=f: f(stand_in, keys, window, ctx, None)) for name, f in impls.items()}
    answers = {}
    for name, call in calls.items():
        before = connector_lookup.status()["answered"]
        answers[name] = call()
        if name != "vllm":
            assert connector_lookup.status()["answered"] == before + 1, f"{name} was delegated"
    want = answers["vllm"]
    for name, got in answers.items():
        assert (got is None) == (want is None) and got == want, (name, got, want, n, window)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls)
    for r in range(rounds):
        for name in order[r % len(order):] + order[: r % len(order)]:
            samples[name].append(time_call(calls[name], target_ns))
    ours_answer, ours_probes = native.offload_stride_search(bytes(mask), window, None)
    assert ours_answer == want
    med = {name: statistics.median(v) for name, v in samples.items()}
    bound = 1.1 * (n // window + 1) + window  # initial window = the window here
    return {
        "chunks": n, "window": window, "hit_rate": hit_rate, "answer": want,
        "probes": {"vllm": legacy_probes(mask, window, None), "ours": ours_probes},
        "probe_target": bound,
        "median_us": {name: round(v / 1000, 3) for name, v in med.items()},
        "speedup": {name: round(med["vllm"] / v, 2) for name, v in med.items() if name != "vllm"},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    logging.getLogger("vllm").setLevel(logging.ERROR)
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        OffloadingConnectorScheduler,
    )

    impls: dict[str, Callable[..., Any]] = {
        "vllm": OffloadingConnectorScheduler.__dict__["_sliding_window_lookup"]
    }
    for core in CORES:
        impls[core] = install(core)
    sizes = (256, 1024) if args.quick else (2048, 8192, 65536)
    windows = (8, 64)
    rates = (0.0, 0.05)
    rounds, target_ns = (3, 2e5) if args.quick else (7, 3e6)
    rng = random.Random(20261201)
    cells = []
    print(f"{'chunks':>7} {'W':>3} {'hits':>5} | {'probes vLLM':>11} {'ours':>6} {'want':>7} | "
          f"{'vLLM us':>9} {'native us':>9} {'python us':>9} | {'x native':>8} {'x python':>8}")
    for n in sizes:
        for window in windows:
            for rate in rates:
                c = run_cell(impls, n, window, rate, rng, rounds, target_ns)
                cells.append(c)
                p, m, s = c["probes"], c["median_us"], c["speedup"]
                print(f"{n:>7} {window:>3} {rate:>5.2f} | {p['vllm']:>11} {p['ours']:>6} "
                      f"{c['probe_target']:>7.1f} | {m['vllm']:>9.1f} {m['native']:>9.2f} "
                      f"{m['python']:>9.2f} | {s['native']:>8.1f} {s['python']:>8.1f}", flush=True)
    from swa_prefix_cache import vllm_adapter

    vllm_adapter.uninstall()
    zero = [c for c in cells if c["hit_rate"] == 0.0]
    probe_ok = [c for c in zero if c["probes"]["ours"] <= c["probe_target"]]
    print(f"target probes<=1.1x(N/W+1)+W at 0% hits: {'PASS' if len(probe_ok) == len(zero) else 'MISS'} "
          f"({len(probe_ok)} of {len(zero)} cells)")
    key = [c for c in zero if c["chunks"] == 8192 and c["window"] == 64]
    if key:
        x = key[0]["speedup"]["native"]
        print(f"target time>=40x at 8192 chunks / W 64 / 0% hits: {'PASS' if x >= 40 else 'MISS'} "
              f"({x:.1f}x; probes {key[0]['probes']['vllm']} vs {key[0]['probes']['ours']})")
    else:
        print("target time>=40x at 8192 chunks / W 64: not measured (--quick)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = "quick" if args.quick else dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    path = RESULTS / f"offload-{stamp}.json"
    receipts.write(path, {
        "generated": dt.datetime.now(dt.timezone.utc).isoformat(),
        "quick": args.quick, "cells": cells,
    })
    print(f"receipt: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
