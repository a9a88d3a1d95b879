"""What each CPython gets: the scheduler-level batch lookup under every
interpreter this machine has a venv for.

    python benchmarks/bench_interpreters.py [--quick]

The measurement is scheduler_rows.py's ``scheduler_bench`` (``KVCacheManager.
get_computed_blocks`` on a batch of hybrid requests, full attention + one
sliding-window group, real ``BlockPool``; vLLM's own lookups and ours timed
interleaved, answers checked equal first), run by each interpreter in its
own process (``--child``), which prints one JSON line. Only the ratios
measured inside one process are compared: the table never divides a time
taken under one interpreter by one taken under another.

Interpreters: .venv (CPython 3.11) always; build/venvs/py312, py313 and
py314 where ``make matrix`` built them (the table says which are missing
and how to build them). Writes benchmarks/results/interpreters-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
VENVS = {
    "3.11": ROOT / ".venv",
    "3.12": ROOT / "build" / "venvs" / "py312",
    "3.13": ROOT / "build" / "venvs" / "py313",
    "3.14": ROOT / "build" / "venvs" / "py314",
}
# The batch: 1,024-token window, 32K-token prompts (bench_vllm.py's first
# scheduler configuration), fewer requests and rounds with --quick.
WINDOW, CONTEXT = 1024, 32768


def child(quick: bool, seed: int) -> dict:
    """This interpreter's row (run inside the venv under test)."""
    import platform

    sys.path[:0] = [str(ROOT)]
    from benchmarks.harness import capture_impls
    from benchmarks.scheduler_rows import scheduler_bench
    from benchmarks.seed_table import SEED_HIT_RATE
    from swa_prefix_cache.core import hotpath
    from swa_prefix_cache.vllm_adapter import fingerprint

    impls = capture_impls()
    requests, rounds = (4, 2) if quick else (64, 15)
    row = scheduler_bench(
        impls, WINDOW, requests, CONTEXT, SEED_HIT_RATE, rounds,
        random.Random(seed), swa_groups=1,
    )
    return {
        "python": platform.python_version(),
        "vllm": fingerprint.installed_version(),
        "core": impls.backend,
        "fast_paths": hotpath.fast_paths(),
        "requests": requests,
        "median_ms": row["median_ms"],
        "speedup": row["speedup"],
        "read_ahead_speedup": row["read_ahead_speedup"],
        "lookups_share_of_vllm": row["lookups_share_of_vllm"],
    }


def run_child(python: Path, quick: bool, seed: int) -> dict:
    """Run ``--child`` under ``python``; its last stdout line is the row."""
    cmd = [str(python), str(Path(__file__).resolve()), "--child", "--seed", str(seed)]
    if quick:
        cmd.append("--quick")
    env = dict(os.environ, SWA_PREFIX_CACHE_STRICT_NATIVE="1")
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {done.returncode}: " + " | ".join(tail)}
    return json.loads(done.stdout.strip().splitlines()[-1])


def fast_paths_said(paths: dict) -> str:
    ahead = "read-ahead on" if paths.get("read_ahead") else "read-ahead off"
    return f"{ahead}, hash {paths.get('hash', '?')}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny batch; smoke test only")
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.quick, args.seed)))
        return 0
    rows: dict[str, dict] = {}
    for version, venv in VENVS.items():
        python = venv / "bin" / "python"
        if not python.exists():
            rows[version] = {"missing": f"no venv {venv.relative_to(ROOT)} "
                                        f"(make matrix-py{version.replace('.', '')} builds it)"}
            continue
        print(f"CPython {version}: {venv.relative_to(ROOT)} ...", flush=True)
        rows[version] = run_child(python, args.quick, args.seed)
    print(f"\nget_computed_blocks, {WINDOW}-token window, {CONTEXT:,}-token prompts, "
          "hybrid batch (full + 1 sliding window); ratios measured in one process each"
          + (" [QUICK: timings mean nothing]" if args.quick else ""))
    print(f"{'CPython':<9} {'vLLM':<8} {'core':<7} {'fast paths':<38} "
          f"{'vLLM ms':>8} {'ours ms':>8} {'speedup':>8} {'read-ahead':>10}")
    failed = False
    for version, row in rows.items():
        if "missing" in row or "error" in row:
            failed |= "error" in row
            print(f"{version:<9} {row.get('missing') or 'FAILED ' + row['error']}")
            continue
        ahead = row["read_ahead_speedup"]
        print(f"{row['python']:<9} {row['vllm']:<8} {row['core']:<7} "
              f"{fast_paths_said(row['fast_paths']):<38} {row['median_ms']['vllm']:>8.2f} "
              f"{row['median_ms']['ours']:>8.2f} {row['speedup']:>7.1f}x "
              f"{(f'{ahead:.2f}x' if ahead else '-'):>10}")
    RESULTS.mkdir(exist_ok=True)
    stem = "interpreters-quick" if args.quick else f"interpreters-{time.strftime('%Y%m%dT%H%M%S')}"
    out = RESULTS / f"{stem}.json"
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks import receipts

    receipts.write(out, {"benchmark": "benchmarks/bench_interpreters.py", "quick": args.quick,
                               "window": WINDOW, "context": CONTEXT, "rows": rows})
    print(f"receipt: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
