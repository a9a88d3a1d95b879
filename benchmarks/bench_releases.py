"""Two vLLM releases side by side: bench_vllm's ratios (vLLM's lookup time
over ours) on each, measured in one run.

The machine is noisy, so a ratio measured minutes apart says little: this
script keeps one worker process per release (two vLLMs cannot share a
process) and has them measure the same bench_vllm rows (bench_vllm.py's
modules) in turn, row by row: A, B, A, B, ... (B first on every other row),
the same random workload for both, for ``--rounds`` rounds. It prints one
table: row | ratio on A | ratio on B (the median over rounds per release)
| B/A (the median over rounds of B's ratio over A's in the same round).
The rows:

* the sliding-window cells (``SlidingWindowManager.find_longest_cache_hit``,
  random masks per window x context x hit rate, benchmarks/swa_cells.py);
* the full-attention lookup alone, every block cached
  (benchmarks/full_attention_rows.py);
* the scheduler batches (``KVCacheManager.get_computed_blocks`` on a hybrid
  config) and one real ``Scheduler.schedule()`` step (reported, no target)
  (benchmarks/scheduler_rows.py).

Then the targets, judged on B, as PASS/MISS lines: every sliding-window
cell within 10% of A's ratio, the 2,048-block / window 2,048 cells >= 300x,
every sliding-window cell >= 40x, the full-attention lookup and the
scheduler batches at their bench_vllm targets. A MISS is printed and the
run still exits 0 (as bench_vllm does); a failed worker exits non-zero.

The release in .venv runs as is; another runs from its ``--no-deps``
install in build/releases/<version> (``make build/releases/<version>/.stamp``)
put first on PYTHONPATH. Writes a JSON receipt under benchmarks/results/.
``--quick``: tiny sizes, one round, so ``make bench-quick`` keeps every path
working; its timings mean nothing. With ``SWA_PREFIX_CACHE_STRICT_NATIVE=1``
a worker fails unless ours runs on the native core.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RELEASES_DIR = ROOT / "build" / "releases"
RESULTS = ROOT / "benchmarks" / "results"

# Targets for B (the newer release): each B ratio of a sliding-window cell
# at least this share of A's, the named big cells and every cell at least
# these ratios.
SWA_KEEP = 0.90
BIG_SWA = (2048, 2048)  # (window tokens, blocks)
BIG_SWA_SPEEDUP = 300.0
SWA_FLOOR = 40.0

WORKER_START_S = 300.0  # vLLM's import and the plugin's install
WORKER_ROW_S = 900.0  # one row (the scheduler rows plant 131,072 blocks)
WORKER_STOP_S = 30.0


@dataclass(frozen=True)
class Sizes:
    """What one worker run measures."""

    cells: tuple[tuple[int, int, float], ...]  # (window tokens, context tokens, hit rate)
    masks: int
    probe_masks: int
    rounds: int
    sample_ms: float
    filler: int
    full_blocks: int
    sched_rounds: int
    sched_cfgs: tuple[tuple[int, int, int, int], ...]  # (window, requests, context, swa groups)
    step: tuple[tuple[str, int], ...]  # scheduler_step_bench's keyword arguments

    @classmethod
    def quick(cls) -> Sizes:
        return cls(cells=((2048, 4096, 0.05), (128, 4096, 0.05), (2048, 8192, 0.10)),
                   masks=2, probe_masks=2, rounds=2, sample_ms=0.1, filler=2048,
                   full_blocks=128, sched_rounds=2, sched_cfgs=((1024, 6, 4096, 1),),
                   step=(("n_requests", 4), ("docs", 2), ("min_tokens", 1024),
                         ("max_tokens", 2048), ("window", 1024), ("swa_groups", 1),
                         ("budget", 8192), ("rounds", 2)))

    @classmethod
    def full(cls) -> Sizes:
        windows = (2048, 512, 1024, 128)
        contexts = (4096, 8192, 32768, 131072)
        cells = tuple((w, c, h) for h in (0.05, 0.10) for w in windows for c in contexts)
        return cls(cells=cells, masks=4, probe_masks=4, rounds=10, sample_ms=2.0, filler=65536,
                   full_blocks=2048, sched_rounds=10,
                   sched_cfgs=((1024, 64, 32768, 1), (128, 64, 32768, 1), (1024, 64, 32768, 3)),
                   step=(("n_requests", 64), ("docs", 8), ("min_tokens", 8192),
                         ("max_tokens", 32768), ("window", 1024), ("swa_groups", 1),
                         ("budget", 8192), ("rounds", 10)))


# ---- the worker: one release in its own process, one row per request --------

MARK = "@@bench-releases "  # prefixes the worker's answers on its stdout


def row_specs(sizes: Sizes) -> list[dict[str, Any]]:
    """The rows every worker measures, in table order."""
    specs: list[dict[str, Any]] = [{"kind": "swa", "window": w, "context": c, "hit_rate": h}
                                   for w, c, h in sizes.cells]
    specs.append({"kind": "full", "blocks": sizes.full_blocks})
    specs += [{"kind": "sched", "window": w, "requests": n, "context": c, "swa_groups": g}
              for w, n, c, g in sizes.sched_cfgs]
    specs.append({"kind": "step"})
    return specs


class Worker:
    """The rows on the vLLM this process imports. Ratios are vLLM's median
    time over ours'; only the ``vllm`` and ``ours`` columns are timed."""

    def __init__(self, quick: bool) -> None:
        sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
        from dataclasses import replace

        from benchmarks import bench_vllm  # noqa: F401 - sets the platform env before vLLM loads
        from benchmarks.harness import BS, capture_impls
        from benchmarks.swa_cells import Hashes
        from swa_prefix_cache import settings

        import vllm

        self.sizes = Sizes.quick() if quick else Sizes.full()
        self.bs = BS
        self.version = vllm.__version__
        impls = capture_impls()
        if settings.STRICT_NATIVE.read() and impls.backend != "native":
            raise SystemExit(f"SWA_PREFIX_CACHE_STRICT_NATIVE=1 but ours runs on the {impls.backend} "
                             f"core on vLLM {self.version}: {impls.native_error or impls.other_error}")
        self.impls = replace(impls, table={k: impls.table[k] for k in ("vllm", "ours")},
                             other=None, other_error="not measured here")
        self.hashes_of = Hashes(max(c for _, c, _ in self.sizes.cells) // BS)
        self.header = {"vllm_version": self.version, "vllm_path": str(Path(vllm.__file__).parent),
                       "core": impls.backend, "native_error": impls.native_error}

    def measure(self, spec: dict[str, Any], seed: int) -> dict[str, Any]:
        """One row; ``seed`` draws its workload (the same on every release)."""
        import random

        from benchmarks.full_attention_rows import full_bench
        from benchmarks.scheduler_rows import scheduler_bench, scheduler_step_bench
        from benchmarks.seed_table import SEED_HIT_RATE
        from benchmarks.small_n import SWEEP_HITS
        from benchmarks.swa_cells import CellSpec, run_cell

        s, impls, rng = self.sizes, self.impls, random.Random(seed)
        target_ns = s.sample_ms * 1e6
        kind = spec["kind"]
        if kind == "swa":
            cell_spec = CellSpec("random", spec["window"], spec["context"], spec["hit_rate"])
            cell = run_cell(cell_spec, impls, self.hashes_of, s.masks, s.probe_masks, s.rounds,
                            target_ns, s.filler, rng)
            return {"kind": kind, "window": spec["window"], "blocks": spec["context"] // self.bs,
                    "hit_rate": spec["hit_rate"], "ratio": cell["speedup"],
                    "vllm_us": cell["vllm_median_us"], "ours_us": cell["median_us"]}
        if kind == "full":
            full = full_bench(impls, spec["blocks"], (1,), SWEEP_HITS[:1], 2048,
                              max(s.rounds, 3), target_ns, s.filler, rng)["all_cached"]
            return {"kind": kind, "blocks": full["n_blocks"], "ratio": full["speedup"],
                    "vllm_us": full["vllm_median_us"], "ours_us": full["median_us"],
                    "want": full["target"]["want"]}
        if kind == "sched":
            row = scheduler_bench(impls, spec["window"], spec["requests"], spec["context"],
                                  SEED_HIT_RATE, s.sched_rounds, rng, swa_groups=spec["swa_groups"])
            return {"kind": kind, "window": spec["window"], "requests": spec["requests"],
                    "blocks": spec["context"] // self.bs, "swa_groups": spec["swa_groups"],
                    "ratio": row["speedup"], "vllm_ms": row["median_ms"]["vllm"],
                    "ours_ms": row["median_ms"]["ours"], "want": row["target"]["want"]}
        if kind == "step":
            step = scheduler_step_bench(impls, rng=rng, **dict(s.step))
            return {"kind": kind, "requests": step["requests"], "window": step["window_tokens"],
                    "ratio": step["speedup"], "vllm_ms": step["median_ms"]["vllm"],
                    "ours_ms": step["median_ms"]["ours"],
                    "triton_guard_passed": step["triton_guard_passed"]}
        raise ValueError(f"row kind: {kind!r}")


def serve(quick: bool) -> int:
    """The worker's loop: a header line, then one answer line per request
    line (``{"row": i, "seed": s}``) read from stdin, until ``quit`` or EOF."""
    worker = Worker(quick)
    specs = row_specs(worker.sizes)
    print(MARK + json.dumps({**worker.header, "rows": len(specs)}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        request = json.loads(line)
        row = worker.measure(specs[request["row"]], request["seed"])
        print(MARK + json.dumps(row), flush=True)
    return 0


# ---- the driver ----------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", nargs=2, metavar=("A", "B"), default=None,
                        help="two vLLM versions, A the base (default: .venv's release and 0.34.0)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds, each row on A and B in turn (default 3; 1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes; smoke test only")
    parser.add_argument("--seed", type=int, default=20261205)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.quick else 3
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.releases is not None:
        a, b = args.releases
        for version in (a, b):
            if not version or any(c not in "0123456789.abcdefghijklmnopqrstuvwxyz+-" for c in version):
                parser.error(f"--releases: not a version: {version!r}")
        if a == b:
            parser.error(f"--releases: the two releases are the same ({a})")
    return args


def release_overlay(version: str, venv_version: str, releases_dir: Path = RELEASES_DIR) -> Path | None:
    """The PYTHONPATH entry that makes ``version`` the imported vLLM: None for
    .venv's own release, else its install under ``releases_dir``."""
    if version == venv_version:
        return None
    overlay = releases_dir / version
    if not (overlay / "vllm" / "__init__.py").is_file():
        raise ValueError(f"vLLM {version} is neither .venv's ({venv_version}) nor installed in "
                         f"{overlay} (make build/releases/{version}/.stamp installs it)")
    return overlay


def row_key(row: dict[str, Any]) -> str:
    """A row's name in the table (the same row on both releases)."""
    kind = row["kind"]
    if kind == "swa":
        return (f"sliding window {row['window']:>5} / {row['blocks']:>5} blocks, "
                f"{row['hit_rate']:.0%} hits")
    if kind == "full":
        return f"full attention, {row['blocks']:,} blocks all cached"
    if kind == "sched":
        return (f"scheduler batch, window {row['window']}, {row['swa_groups']} sw group(s), "
                f"{row['requests']} x {row['blocks']:,} blocks")
    if kind == "step":
        return f"scheduler step, {row['requests']} requests (reported)"
    raise ValueError(f"row kind: {kind!r}")


def combine(runs: dict[str, list[dict[str, Any]]], versions: tuple[str, str]) -> list[dict[str, Any]]:
    """Per row: the median ratio over rounds on each release, and B/A as
    the median over rounds of B's ratio over A's in that round (the two
    were measured one after the other, so a burst of load on the machine
    that inflates or deflates a whole round cancels out). ``runs`` maps a
    version to its rounds' outputs; both must hold the same rows in the
    same order and as many rounds."""
    a, b = versions
    for version in versions:
        if not runs.get(version):
            raise ValueError(f"runs: no worker output for vLLM {version}")
    if len(runs[a]) != len(runs[b]):
        raise ValueError(f"runs: {len(runs[a])} rounds on {a}, {len(runs[b])} on {b}")
    keys = [row_key(r) for r in runs[a][0]["rows"]]
    for version in versions:
        for out in runs[version]:
            got = [row_key(r) for r in out["rows"]]
            if got != keys:
                raise ValueError(f"runs: vLLM {version} measured other rows than {a}: {got} vs {keys}")
    table = []
    for i, key in enumerate(keys):
        ratio = {v: statistics.median(out["rows"][i]["ratio"] for out in runs[v]) for v in versions}
        first = runs[a][0]["rows"][i]
        paired = [ob["rows"][i]["ratio"] / oa["rows"][i]["ratio"] for oa, ob in zip(runs[a], runs[b])]
        table.append({"key": key, **{k: v for k, v in first.items() if k not in ("ratio",)},
                      "ratio": ratio, "b_over_a": statistics.median(paired),
                      "rounds": {v: [out["rows"][i]["ratio"] for out in runs[v]] for v in versions}})
    return table


def verdicts(table: list[dict[str, Any]], versions: tuple[str, str]) -> list[dict[str, Any]]:
    """The targets, judged on B: ``name``, ``ok`` (None: no row to judge)
    and the detail printed after PASS/MISS."""
    a, b = versions
    swa = [r for r in table if r["kind"] == "swa"]
    out = []

    def verdict(name: str, rows: list[dict[str, Any]], ok_of: Any, show: Any, want: str) -> None:
        if not rows:
            out.append({"name": name, "ok": None, "detail": "no such row measured", "missed": []})
            return
        missed = [r["key"] for r in rows if not ok_of(r)]
        worst = min(rows, key=show)
        out.append({"name": name, "ok": not missed, "missed": missed,
                    "detail": f"{len(rows) - len(missed)} of {len(rows)} rows; lowest "
                              f"{show(worst):.2f} ({worst['key'].strip()}); want {want}"})

    verdict(f"sliding-window {b}/{a} >= {SWA_KEEP:.2f}", swa,
            lambda r: r["b_over_a"] >= SWA_KEEP, lambda r: r["b_over_a"],
            f">= {SWA_KEEP:.2f} x {a}'s ratio")
    big = [r for r in swa if (r["window"], r["blocks"]) == BIG_SWA]
    verdict(f"sliding-window {BIG_SWA[1]:,} blocks / window {BIG_SWA[0]:,} >= {BIG_SWA_SPEEDUP:g}x",
            big, lambda r: r["ratio"][b] >= BIG_SWA_SPEEDUP, lambda r: r["ratio"][b],
            f">= {BIG_SWA_SPEEDUP:g}x on {b}")
    verdict(f"every sliding-window cell >= {SWA_FLOOR:g}x", swa,
            lambda r: r["ratio"][b] >= SWA_FLOOR, lambda r: r["ratio"][b], f">= {SWA_FLOOR:g}x on {b}")
    for kind, label in (("full", "full attention"), ("sched", "scheduler batch")):
        rows = [r for r in table if r["kind"] == kind]
        want = min((r["want"] for r in rows), default=0.0)
        verdict(f"{label} >= {want:g}x", rows, lambda r: r["ratio"][b] >= r["want"],
                lambda r: r["ratio"][b], f">= {want:g}x on {b}")
    return out


def format_report(table: list[dict[str, Any]], checks: list[dict[str, Any]],
                  versions: tuple[str, str], workers: dict[str, list[dict[str, Any]]]) -> str:
    """The table and the PASS/MISS lines, as printed."""
    a, b = versions
    width = max([len(r["key"]) for r in table] + [4])
    lines = []
    for v in versions:
        first = workers[v][0]
        note = f", native error: {first['native_error']}" if first.get("native_error") else ""
        lines.append(f"vLLM {v}: {first['vllm_path']}, ours on the {first['core']} core{note}")
    for v in versions:
        passed = [row.get("triton_guard_passed") for out in workers[v] for row in out["rows"]
                  if row["kind"] == "step"]
        if any(passed):
            lines.append(f"vLLM {v}: the scheduler step's VllmConfig was built past the x86 "
                         "'requires Triton' guard (no model runs; the config is otherwise vLLM's)")
    head = f"{'row':<{width}} | {'on ' + a:>12} | {'on ' + b:>12} | {b + '/' + a + ' paired':>12}"
    lines += [head, "-" * len(head)]
    for r in table:
        lines.append(f"{r['key']:<{width}} | {r['ratio'][a]:>11.1f}x | {r['ratio'][b]:>11.1f}x | "
                     f"{r['b_over_a']:>12.2f}")
    for c in checks:
        tag = {True: "PASS", False: "MISS", None: "n/a "}[c["ok"]]
        lines.append(f"target {c['name']:<46}: {tag} ({c['detail']})")
        for key in c["missed"]:
            lines.append(f"    missed: {key.strip()}")
    return "\n".join(lines)


class WorkerProcess:
    """A worker on one release: its process, and its answer lines read by
    a thread (so that every wait is bounded). Other output goes to stderr."""

    def __init__(self, version: str, overlay: Path | None, quick: bool) -> None:
        self.version = version
        env = dict(os.environ)
        # An inherited release overlay would shadow the one asked for.
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                 if p and not Path(p).resolve().is_relative_to(RELEASES_DIR)]
        env["PYTHONPATH"] = os.pathsep.join(([str(overlay)] if overlay else []) + parts)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker"] + (["--quick"] if quick else [])
        self.proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.answers: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.header = self._answer(WORKER_START_S)
        if self.header["vllm_version"] != version:
            self.close()
            raise SystemExit(f"the worker for vLLM {version} imported vLLM "
                             f"{self.header['vllm_version']} from {self.header['vllm_path']}")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                self.answers.put(line[len(MARK):])
            else:
                sys.stderr.write(line)
        self.answers.put(None)

    def _answer(self, timeout_s: float) -> dict[str, Any]:
        try:
            line = self.answers.get(timeout=timeout_s)
        except queue.Empty:
            self.close()
            raise SystemExit(f"the worker on vLLM {self.version} gave no answer in {timeout_s:.0f} s")
        if line is None:
            code = self.proc.wait(timeout=WORKER_STOP_S)
            raise SystemExit(f"the worker on vLLM {self.version} stopped (exit {code})")
        return json.loads(line)

    def measure(self, row: int, seed: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"row": row, "seed": seed}) + "\n")
        self.proc.stdin.flush()
        return self._answer(WORKER_ROW_S)

    def close(self) -> None:
        """Ends the worker: ``quit``, then a kill past WORKER_STOP_S."""
        try:
            if self.proc.poll() is None and self.proc.stdin is not None:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            self.proc.wait(timeout=WORKER_STOP_S)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=WORKER_STOP_S)


def measure_side_by_side(args: argparse.Namespace, versions: tuple[str, str],
                         overlays: dict[str, Path | None]) -> dict[str, list[dict[str, Any]]]:
    """Per round, per row: the row on A then on B (B first on every other
    row, so neither release always goes first), the same seed for both.
    Returns per release one worker output (header + rows) per round."""
    workers: dict[str, WorkerProcess] = {}
    try:
        for v in versions:
            workers[v] = WorkerProcess(v, overlays[v], args.quick)
        counts = {workers[v].header["rows"] for v in versions}
        if len(counts) != 1:
            raise SystemExit(f"the workers measure different rows: {counts}")
        n_rows = counts.pop()
        runs: dict[str, list[dict[str, Any]]] = {v: [] for v in versions}
        for r in range(args.rounds):
            print(f"round {r + 1}/{args.rounds}: {n_rows} rows, each on {versions[0]} and "
                  f"{versions[1]} in turn", flush=True)
            for v in versions:
                runs[v].append({**workers[v].header, "rows": []})
            for i in range(n_rows):
                order = versions if (i + r) % 2 == 0 else versions[::-1]
                for v in order:
                    runs[v][-1]["rows"].append(workers[v].measure(i, args.seed + 1000 * r + i))
        return runs
    finally:
        for w in workers.values():
            w.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return serve(args.quick)
    started = time.perf_counter()
    venv_version = metadata.version("vllm")
    versions = tuple(args.releases) if args.releases else (venv_version, "0.34.0")
    try:
        overlays = {v: release_overlay(v, venv_version) for v in versions}
    except ValueError as exc:
        print(f"bench_releases: {exc}", file=sys.stderr)
        return 2
    stem = "releases-quick" if args.quick else f"releases-{time.strftime('%Y%m%dT%H%M%S')}"
    workers = measure_side_by_side(args, versions, overlays)
    table = combine(workers, versions)
    checks = verdicts(table, versions)
    print(format_report(table, checks, versions, workers))
    receipt = {"benchmark": "bench_releases", "quick": args.quick, "releases": list(versions),
               "rounds": args.rounds, "seed": args.seed, "table": table, "targets": checks,
               "workers": workers, "wall_s": time.perf_counter() - started}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{stem}.json"
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import receipts

    receipts.write(out, receipt)
    print(f"receipt: {out}")
    print(f"wall time {receipt['wall_s']:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
