"""Every layout of the trace replay, each in a fresh process, then one table,
the targets (PASS/MISS) and the CDF plot.

    python benchmarks/replay_suite.py [--requests N|all] [--pools full,half] [--quick]

``make bench`` runs the first 2,000 requests of every layout at the full
pool; ``make check`` runs ``--quick`` (a few requests per layout: every
path runs and the runs must be identical, the timings mean nothing);
``make replay-trace`` runs the whole trace on every layout and both pools
and writes the receipt that is committed. ``--merge RECEIPT ...`` joins
the runs of receipts written by earlier invocations (the whole trace takes
hours, so it may be run a few layouts at a time) into one receipt, its
table, targets and plot, each run kept as it was measured. Each run is
``python -m benchmarks.replay`` (its own process: vLLM's classes are
patched per process); a run whose plugin-off and plugin-on schedules differ
fails the suite.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import receipts  # noqa: E402
from benchmarks import mooncake, replay_layouts  # noqa: E402
from benchmarks.replay import LOOKUP_SHARE_MAX, split  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PLOT_COPY = ROOT / "docs" / "img" / "replay-cdf.png"
QUICK_REQUESTS = 12


def run_one(layout: str, pool: str, requests: int | None, trace: Path, out: Path,
            short_prompts: int | None = None) -> dict[str, Any]:
    """One ``python -m benchmarks.replay`` run; its receipt."""
    cmd = [sys.executable, "-m", "benchmarks.replay", "--trace", str(trace), "--layout", layout,
           "--pool", pool, "--json", str(out)]
    if requests is not None:
        cmd += ["--requests", str(requests)]
    if short_prompts is not None:
        cmd += ["--short-prompts", str(short_prompts)]
    print("$", " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    for line in lines:
        print("  " + line, flush=True)
    if proc.returncode not in (0, 1) or not out.is_file():
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"replay {layout} {pool} failed (exit {proc.returncode})")
    receipt = receipts.load(out)
    receipt["replay_line"] = lines[-1]
    return receipt


def table(runs: list[dict[str, Any]]) -> list[str]:
    """The README's table: one row per layout and pool."""
    rows = ["| layout | pool (blocks) | requests | steps | identical | scheduler ms off / on | "
            "speedup | p99 ms off / on | steps > 10 ms off / on | lookups % off / on | "
            "of which Mamba's | hit rate |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        off, on = r["off"], r["on"]
        rows.append(
            f"| {r['layout']} | {r['pool']} ({r['num_blocks']:,}) | {r['requests']:,} | {r['steps']:,} | "
            f"{'yes' if r['identical'] else 'NO'} | {off['total_ms']:,.0f} / {on['total_ms']:,.0f} | "
            f"{r['speedup']:.2f}x | {off['p99_ms']:.2f} / {on['p99_ms']:.2f} | "
            f"{off['steps_over_ms']['10.0']} / {on['steps_over_ms']['10.0']} | "
            f"{100 * off['lookup_share']:.1f} / {100 * on['lookup_share']:.1f} | "
            f"{100 * off['mamba_lookup_share']:.1f} / {100 * on['mamba_lookup_share']:.1f} | "
            f"{on['hit_rate']:.3f} |")
    return rows


def plot(runs: list[dict[str, Any]], out: Path) -> None:
    """The CDF of scheduler time per step, off and on, one panel per layout
    (full pool solid, half pool dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = sorted({r["layout"] for r in runs})
    cols = min(2, len(layouts))
    rows = -(-len(layouts) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4 * rows), squeeze=False)
    for ax in axes.flat[len(layouts):]:
        ax.set_visible(False)
    for ax, layout in zip(axes.flat, layouts):
        for r in (r for r in runs if r["layout"] == layout):
            style = "-" if r["pool"] == "full" else "--"
            for name, color in (("off", "#222222"), ("on", "#1f5fbf")):
                cdf = r[name]["cdf_ms"]
                ys = [i / (len(cdf) - 1) for i in range(len(cdf))]
                ax.plot([max(x, 1e-3) for x in cdf], ys, style, color=color,
                        label=f"plugin {name}, {r['pool']} pool")
        ax.set_xscale("log")
        ax.set_xlabel("scheduler ms per step (schedule + update_from_output)")
        ax.set_ylabel("fraction of steps")
        short = runs[0].get("short_prompts")
        ax.set_title(f"{layout}, {runs[0]['requests']:,} requests"
                     + ("" if short is None else f" of <= {short:,} prompt tokens"))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def merged_runs(paths: list[Path]) -> tuple[list[dict[str, Any]], int | None]:
    """The runs of several suite receipts, each layout and pool once, all of
    the same number of requests; raises ValueError naming the receipt."""
    runs: list[dict[str, Any]] = []
    requests: set[int | None] = set()
    seen: dict[tuple[str, str], Path] = {}
    for path in paths:
        if not path.is_file():
            raise ValueError(f"--merge: no such receipt {path}")
        try:
            data = receipts.load(path)
            found = data["runs"]
            requests.add(data["requests"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"--merge: {path} is not a replay_suite receipt ({exc!r})") from None
        for run in found:
            key = (run["layout"], run["pool"])
            if key in seen:
                raise ValueError(f"--merge: {key[0]} {key[1]} pool is in both {seen[key]} and {path}")
            seen[key] = path
            runs.append(dict(run, receipt=path.name))
    if len(requests) != 1:
        raise ValueError(f"--merge: the receipts replay different numbers of requests: {sorted(map(str, requests))}")
    order = {name: i for i, name in enumerate(replay_layouts.names())}
    runs.sort(key=lambda r: (order.get(r["layout"], len(order)), r["pool"] != "full"))
    return runs, requests.pop()


def report(runs: list[dict[str, Any]], requests: int | None, stamp: str, *, quick: bool,
           layouts: list[str] | None = None, merged_from: list[Path] | None = None) -> int:
    """The table, the targets, the receipt (named by ``stamp``, when the
    suite started) and the plot of ``runs``; the exit code (1 when a run
    was not identical)."""
    if layouts is None:
        layouts = sorted({r["layout"] for r in runs})
    print()
    for line in table(runs):
        print(line)
    print()
    ok = True
    for r in runs:
        share_ok = r["on"]["lookup_share"] <= LOOKUP_SHARE_MAX
        ok &= r["identical"]
        sp = r.get("split") or split(r["off"], r["on"], r["steps"])
        print(f"target {r['layout']} {r['pool']}: identical=yes {'PASS' if r['identical'] else 'MISS'}; "
              f"lookups <= {100 * LOOKUP_SHARE_MAX:.0f}% with the plugin on "
              f"{'PASS' if share_ok else 'MISS'} ({100 * r['on']['lookup_share']:.2f}%); "
              f"scheduler >= 1.00x {'PASS' if r['speedup'] >= 1.0 else 'MISS'} ({r['speedup']:.3f}x: "
              f"{sp['saved_in_lookups_ms']:.0f} ms saved in lookups, {sp['added_elsewhere_ms']:+.0f} ms "
              f"elsewhere, {sp['added_elsewhere_us_per_step']:+.1f} µs per step)")
    short = runs[0].get("short_prompts") if runs else None
    kind = "replay" if short is None else f"replay-short{short}"
    name = "replay-quick" if quick and short is None else f"{kind}-quick" if quick else (
        f"{kind}-trace-{stamp}" if requests is None else f"{kind}-{requests}-{stamp}")
    receipt = RESULTS / f"{name}.json"
    RESULTS.mkdir(parents=True, exist_ok=True)
    pools = [pool for pool in ("full", "half") if any(r["pool"] == pool for r in runs)]
    body: dict[str, Any] = {"requests": requests, "pools": pools, "runs": runs}
    if merged_from:
        body["merged_from"] = [path.name for path in merged_from]
    receipts.write(receipt, body)
    print(f"receipt {receipt.relative_to(ROOT)}")
    if not quick:
        png = receipt.with_suffix(".png")
        plot(runs, png)
        # The README's copy only from a run of every layout.
        if set(layouts) == set(replay_layouts.names()) and short is None:
            PLOT_COPY.parent.mkdir(parents=True, exist_ok=True)
            PLOT_COPY.write_bytes(png.read_bytes())
            print(f"plot {png.relative_to(ROOT)} (copied to {PLOT_COPY.relative_to(ROOT)})")
        else:
            print(f"plot {png.relative_to(ROOT)}")
    for r in runs:
        print(r["replay_line"])
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=mooncake.DEFAULT_TRACE)
    parser.add_argument("--requests", default="2000", help="the first N requests, or 'all'")
    parser.add_argument("--pools", default="full", help="comma-separated: full, half")
    parser.add_argument("--layouts", default=",".join(replay_layouts.names()))
    parser.add_argument("--short-prompts", type=int, default=None, metavar="TOKENS",
                        help="the trace cut to its requests of at most TOKENS prompt tokens")
    parser.add_argument("--quick", action="store_true",
                        help=f"the trace's first {QUICK_REQUESTS} requests per layout: "
                             "every path, no meaningful timing")
    parser.add_argument("--merge", type=Path, nargs="+", metavar="RECEIPT",
                        help="join the runs of these suite receipts into one (no run is made)")
    args = parser.parse_args(argv)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    if args.merge:
        try:
            runs, requests = merged_runs(args.merge)
        except ValueError as exc:
            parser.error(str(exc))
        return report(runs, requests, stamp, quick=False, merged_from=args.merge)
    if args.requests == "all":
        requests = None
    elif args.requests.isdigit() and int(args.requests) > 0:
        requests = int(args.requests)
    else:
        parser.error(f"--requests must be a positive int or 'all', got {args.requests!r}")
    if args.quick:
        requests = QUICK_REQUESTS
    if not args.trace.is_file():
        parser.error(f"--trace: no such file {args.trace}")
    if args.short_prompts is not None and args.short_prompts < 1:
        parser.error(f"--short-prompts must be a positive int, got {args.short_prompts}")
    pools = args.pools.split(",")
    if set(pools) - {"full", "half"}:
        parser.error(f"--pools must list full and/or half, got {args.pools!r}")
    layouts = args.layouts.split(",")
    if set(layouts) - set(replay_layouts.names()):
        parser.error(f"--layouts must be among {replay_layouts.names()}, got {args.layouts!r}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="replay-") as tmp:
        for layout in layouts:
            for pool in pools:
                runs.append(run_one(layout, pool, requests, args.trace,
                                    Path(tmp) / f"{layout}-{pool}.json", args.short_prompts))
    return report(runs, requests, stamp, quick=args.quick, layouts=layouts)


if __name__ == "__main__":
    sys.exit(main())
