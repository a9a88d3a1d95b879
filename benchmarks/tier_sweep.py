"""Hit rate against host-tier size: the trace replay with vLLM's offloading
connector per layout, tier size and store filter, then one table, the
targets and one plot.

    python benchmarks/tier_sweep.py [--layouts A,B] [--gib 0,128,256,512,1024]
        [--stores stock,corrected] [--requests N|all] [--jobs 2] [--quick]

Each run is ``python -m benchmarks.replay --instances auto --offload-gb G
--store S`` in its own process (vLLM's classes are patched per process),
two at a time on the machine's two cores: one instance's share of the
trace's first ``--requests`` requests, each conversation on one instance
(``--turns``: by default a conversation's next turn starts with the
earlier turn's whole prompt),
as many instances as one GPU keeps up with by the step model (one GPU
serving the whole trace queues for tens of minutes and no cache can serve a
turn whose previous turn is still waiting: docs/replay.md). A tier of 0 GiB
is the GPU pool alone (one run per layout, no store filter). Every figure is
printed beside the trace's ceiling (every earlier prompt kept) as a ratio.
A run whose plugin-off and plugin-on schedules differ fails the sweep.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import receipts  # noqa: E402
from benchmarks import mooncake, replay_layouts  # noqa: E402
from benchmarks.replay import LOOKUP_SHARE_MAX, STORES, TURNS  # noqa: E402
from benchmarks.replay import vllm  # noqa: E402 (the replay sets vLLM's platform first)

RESULTS = ROOT / "benchmarks" / "results"
PLOT_COPY = ROOT / "docs" / "img" / "tier-sweep.png"
SWA_LAYOUTS = ("gemma-3-27b", "gpt-oss-120b")  # make replay-trace's whole-trace sweep
REFERENCE_SHARE = 0.9  # target: the corrected store's hit rate against the reference store's
REFERENCE_FROM_GIB = 256.0  # ... for tiers this large and larger
QUICK = {"layouts": ("gpt-oss-120b",), "gib": (0.0, 256.0), "requests": 200}


def run_one(layout: str, gib: float, store: str | None, requests: int | None, turns: str, trace: Path,
            out: Path) -> dict[str, Any]:
    """One replay run (``requests`` None: the whole trace); its receipt
    (with its last line)."""
    cmd = [sys.executable, "-m", "benchmarks.replay", "--trace", str(trace), "--layout", layout,
           "--instances", "auto", "--turns", turns, "--json", str(out)]
    if requests is not None:
        cmd += ["--requests", str(requests)]
    if gib > 0:
        cmd += ["--offload-gb", f"{gib:g}", "--store", str(store)]
    proc = subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode not in (0, 1) or not out.is_file():
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"replay {layout} {gib:g} GiB {store} failed (exit {proc.returncode}): {' '.join(cmd[1:])}")
    receipt = receipts.load(out)
    receipt["replay_line"] = lines[-1]
    receipt["command"] = " ".join(cmd[1:])
    return receipt


def table(runs: list[dict[str, Any]]) -> list[str]:
    """One row per run: hit rates beside the ceiling, what the tier cost."""
    rows = ["| layout | instances | requests | tier GiB | store | identical | hit rate | GPU | tier | reference | "
            "of reference | ceiling | of ceiling | prefill tokens | TTFT p50 / p90 s | tier lookups % off / on |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        tier = r.get("tier")
        ceiling = r["ceiling_hit_rate"]
        ref = r.get("reference_hit_rate")
        ref_cells = "- | -" if ref is None else f"{100 * ref:.2f} % | {r['hit_rate'] / ref if ref else 0:.2f}"
        p50, p90 = (r["ttft_p50_ms"] or 0) / 1000, (r["ttft_p90_ms"] or 0) / 1000
        share = (f"{100 * r['off']['tier_lookup_share']:.1f} / {100 * r['on']['tier_lookup_share']:.1f}"
                 if tier else "-")
        rows.append(
            f"| {r['layout']} | {r['instance']} of {r['instances']} | {r['requests']:,} | "
            f"{tier['gib'] if tier else 0:g} | {tier['store'] if tier else '-'} | "
            f"{'yes' if r['identical'] else 'NO'} | {100 * r['hit_rate']:.2f} % | {100 * r['gpu_hit_rate']:.2f} % | "
            f"{100 * r['tier_hit_rate']:.2f} % | {ref_cells} | {100 * ceiling:.2f} % | "
            f"{r['hit_rate'] / ceiling if ceiling else 0:.2f} | {r['prefill_tokens']:,} | {p50:.1f} / {p90:.1f} | "
            f"{share} |")
    return rows


def plot(runs: list[dict[str, Any]], out: Path) -> None:
    """Hit rate against tier GiB, one panel per layout: a line per store
    filter (the GPU pool alone at 0 GiB on each), the reference store at
    the same bytes dotted, the ceiling dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = list(dict.fromkeys(r["layout"] for r in runs))
    fig, axes = plt.subplots(1, len(layouts), figsize=(6 * len(layouts), 4), squeeze=False)
    for ax, layout in zip(axes.flat, layouts):
        mine = [r for r in runs if r["layout"] == layout]
        base = [r for r in mine if r.get("tier") is None]
        for store, color, style, size in (("stock", "#222222", "s--", 9), ("corrected", "#1f5fbf", "o-", 5)):
            points = sorted((r["tier"]["gib"], 100 * r["hit_rate"]) for r in mine
                            if r.get("tier") and r["tier"]["store"] == store)
            points = [(0.0, 100 * b["hit_rate"]) for b in base] + points
            if len(points) > len(base):
                ax.plot(*zip(*points), style, color=color, markersize=size, label=f"{store} store")
        refs = sorted({(r["tier"]["gib"] if r.get("tier") else 0.0, 100 * r["reference_hit_rate"])
                       for r in mine if r.get("reference_hit_rate") is not None})
        if refs:
            ax.plot(*zip(*refs), "^:", color="#2a8a2a", label="reference store, same bytes")
        ceiling = max(100 * r["ceiling_hit_rate"] for r in mine)
        ax.axhline(ceiling, linestyle="--", color="#aa3333", label="ceiling (every earlier prompt kept)")
        ax.set_xlabel("host tier per GPU (GiB)")
        ax.set_ylabel("hit tokens / prompt tokens (%)")
        ax.set_ylim(0, ceiling * 1.15)
        ax.set_title(f"{layout}, instance {mine[0]['instance']} of {mine[0]['instances']}, "
                     f"turns {mine[0].get('turns', 'blocks')}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def parse_list(text: str, name: str, parse: Any) -> list[Any]:
    try:
        values = [parse(x) for x in text.split(",") if x]
    except ValueError:
        raise SystemExit(f"--{name}: not a comma-separated list: {text!r}") from None
    if not values:
        raise SystemExit(f"--{name}: empty")
    return values


def stores_for(layout: str, stores: list[str]) -> list[str]:
    """The store filters worth a run on ``layout``: both where it has a
    sliding-window layer, else only stock (the corrected filter changes
    what is stored for sliding-window groups only, so its run would repeat
    stock's)."""
    if "sliding_attention" in replay_layouts.load(layout).layer_types():
        return stores
    return [s for s in stores if s == "stock"] or stores[:1]


def parse_requests(text: str, parser: argparse.ArgumentParser) -> int | None:
    """``--requests``: a positive count, or ``all`` (None: the whole trace)."""
    if text == "all":
        return None
    try:
        requests = int(text)
    except ValueError:
        parser.error(f"--requests must be a positive integer or 'all', got {text!r}")
    if requests < 1:
        parser.error(f"--requests must be a positive integer or 'all', got {text!r}")
    return requests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=mooncake.DEFAULT_TRACE)
    parser.add_argument("--layouts", default=",".join(replay_layouts.names()))
    parser.add_argument("--gib", default="0,128,256,512,1024", help="tier sizes per GPU, GiB (0: none)")
    parser.add_argument("--stores", default=",".join(STORES))
    parser.add_argument("--requests", default="4000", help="the trace's first N requests, or 'all'")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--turns", choices=TURNS, default="extend",
                        help="how prompts are made from the trace (benchmarks/replay.py make_requests)")
    parser.add_argument("--plot-copy", type=Path, default=None, metavar="PNG",
                        help=f"also write the plot here (the docs' figure: {PLOT_COPY.relative_to(ROOT)})")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK['layouts']} at {QUICK['gib']} GiB, {QUICK['requests']} requests")
    args = parser.parse_args(argv)
    layouts = list(QUICK["layouts"]) if args.quick else parse_list(args.layouts, "layouts", str)
    gibs = list(QUICK["gib"]) if args.quick else parse_list(args.gib, "gib", float)
    stores = parse_list(args.stores, "stores", str)
    requests = QUICK["requests"] if args.quick else parse_requests(args.requests, parser)
    if set(layouts) - set(replay_layouts.names()):
        parser.error(f"--layouts must be among {replay_layouts.names()}, got {args.layouts!r}")
    if set(stores) - set(STORES):
        parser.error(f"--stores must be among {STORES}, got {args.stores!r}")
    if any(g < 0 for g in gibs):
        parser.error(f"--gib must be >= 0, got {args.gib!r}")
    if args.jobs < 1:
        parser.error(f"--jobs must be positive, got {args.jobs}")
    if not args.trace.is_file():
        parser.error(f"--trace: no such file {args.trace}")
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    plan = [(layout, gib, None if gib == 0 else store) for layout in layouts for gib in sorted(set(gibs))
            for store in ([None] if gib == 0 else stores_for(layout, stores))]
    with tempfile.TemporaryDirectory(prefix="tier-sweep-") as tmp:
        with ThreadPoolExecutor(args.jobs) as pool:
            futures = [pool.submit(run_one, layout, gib, store, requests, args.turns, args.trace,
                                   Path(tmp) / f"{layout}-{gib:g}-{store}.json")
                       for layout, gib, store in plan]
            runs = []
            for future in futures:
                r = future.result()
                print(r["replay_line"], flush=True)
                runs.append(r)
    print()
    for line in table(runs):
        print(line)
    print()
    ok = all(r["identical"] for r in runs)
    for r in runs:
        tier = r.get("tier")
        what = f"{r['layout']} {tier['gib']:g} GiB {tier['store']}" if tier else f"{r['layout']} GPU pool only"
        line = f"target {what}: identical=yes {'PASS' if r['identical'] else 'MISS'}"
        ref = r.get("reference_hit_rate")
        if tier and tier["gib"] >= REFERENCE_FROM_GIB and ref:
            ratio = r["hit_rate"] / ref
            if tier["store"] == "corrected":
                line += (f"; hit rate >= {REFERENCE_SHARE:.0%} of the reference store's "
                         f"{'PASS' if ratio >= REFERENCE_SHARE else 'MISS'} ({ratio:.2f})")
            else:
                line += f"; {ratio:.2f} of the reference store's (gap {100 * (ref - r['hit_rate']):.2f} points)"
            short = r.get("short_of_reference")
            if short and short["tokens"]:
                line += "; short of it by " + ", ".join(
                    f"{cause} {100 * v['tokens'] / r['prompt_tokens']:.2f} points ({v['requests']} requests)"
                    for cause, v in short["by_cause"].items() if v["tokens"])
        if tier and tier["gib"] == max(gibs):
            share = r["on"]["tier_lookup_share"]
            line += (f"; tier lookups <= {100 * LOOKUP_SHARE_MAX:.0f}% of the scheduler's time, plugin on "
                     f"{'PASS' if share <= LOOKUP_SHARE_MAX else 'MISS'} ({100 * share:.2f}%)")
        print(line)
    release = "" if vllm.__version__ == "0.33.0" else f"-vllm{vllm.__version__}"
    name = "tier-sweep-quick" if args.quick else f"tier-sweep-{requests or 'all'}-{args.turns}{release}-{stamp}"
    receipt = RESULTS / f"{name}.json"
    RESULTS.mkdir(parents=True, exist_ok=True)
    receipts.write(receipt, {"requests": requests, "turns": args.turns, "vllm": vllm.__version__,
                                   "runs": runs})
    print(f"receipt {receipt.relative_to(ROOT)}")
    png = receipt.with_suffix(".png")
    plot(runs, png)
    if args.plot_copy is not None:
        args.plot_copy.parent.mkdir(parents=True, exist_ok=True)
        args.plot_copy.write_bytes(png.read_bytes())
        print(f"plot {png.relative_to(ROOT)} (copied to {args.plot_copy})")
    else:
        print(f"plot {png.relative_to(ROOT)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
