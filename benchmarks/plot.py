"""Plot a bench_vllm receipt with matplotlib (Agg: no display needed).

``python benchmarks/plot.py [RECEIPT.json] [-o OUT.png]`` (default: the
newest benchmarks/results/vllm-*.json, written next to it as .png).

Nine panels (six for a receipt without the full-attention rows), one colour per implementation throughout (vLLM black, ours =
the default core blue, the other core orange) so a reader can follow each
one from panel to panel:

* probes and latency against N over the random cells at the seed's 5% hits
  (one group, no EAGLE, no extra alignment), log-log: vLLM's scan is one
  line (its cost does not depend on the window), ours and the other core
  one line per window (markers tell the windows apart);
* the speedup over vLLM in the 12 seed cells next to the wanted value
  (2.5 x the baseline receipt's) and the baseline itself;
* the cost model: fixed cost per call and cost per probe (hits, misses) of
  each implementation next to a bare ``BlockPool.get_cached_block``;
* the small-N sweep, one group and hybrid: latency against N, line style
  per hit rate, where a fixed cost would show as ours above vLLM;
* the full-attention lookup alone, small-N sweep (a cached
  prefix, then misses) like the two above; the same lookup on 2,048 cached
  blocks and in fine-grained mode (bars, speedup written on them); the
  scheduler: ``get_computed_blocks`` per hybrid batch and one real
  ``Scheduler.schedule()`` (bars per implementation, with both lookups free
  as the floor).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

VLLM_COLOR = "#222222"
CORE_COLORS = {"native": "#1f5fbf", "python": "#e07b00"}
WINDOW_MARKERS = ["o", "s", "^", "D", "v", "P"]
HIT_STYLES = {0.0: ":", 0.5: "--", 1.0: "-"}


def _impl_names(receipt: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(receipt name, legend label, colour) of each timed implementation."""
    core = receipt.get("core", receipt.get("backend", "?"))
    out = [("vllm", "vLLM (its own scan)", VLLM_COLOR),
           ("ours", f"ours: {core} core{' (extension)' if core == 'native' else ''}, default",
            CORE_COLORS.get(core, "#1f5fbf"))]
    other = receipt.get("other_core")
    if other:
        out.append((other, f"{other} core{' (extension)' if other == 'native' else ''}",
                    CORE_COLORS.get(other, "#e07b00")))
    return out


def _median(cell: dict[str, Any], name: str) -> float | None:
    if name == "vllm":
        return cell["vllm_median_us"]
    if name == "ours":
        return cell["median_us"]
    return cell.get("other_median_us") if cell.get("other_core") == name else None


def _seed_cells(receipt: dict[str, Any], hit_rate: float = 0.05) -> list[dict[str, Any]]:
    return [
        c for c in receipt["cells"]
        if c["pattern"] == "random" and c["hit_rate"] == hit_rate and c["groups"] == 1
        and not c["eagle"] and c["alignment_tokens"] == c["block_size"]
    ]


def _scaling(ax_probes: Any, ax_time: Any, receipt: dict[str, Any]) -> None:
    cells = _seed_cells(receipt)
    windows = sorted({c["window_tokens"] for c in cells}, reverse=True)
    impls = _impl_names(receipt)
    by_n: dict[int, list[dict[str, Any]]] = {}
    for c in cells:
        by_n.setdefault(c["n_blocks"], []).append(c)
    ns = sorted(by_n)
    # vLLM: one line (N probes whatever the window); time = mean over windows.
    ax_probes.plot(ns, [sum(c["vllm_probes"] for c in by_n[n]) / len(by_n[n]) for n in ns],
                   color=VLLM_COLOR, linestyle="--", linewidth=2, label="vLLM (all windows)")
    ax_time.plot(ns, [sum(c["vllm_median_us"] for c in by_n[n]) / len(by_n[n]) for n in ns],
                 color=VLLM_COLOR, linestyle="--", linewidth=2, label="vLLM (all windows)")
    for k, w in enumerate(windows):
        mine = sorted((c for c in cells if c["window_tokens"] == w), key=lambda c: c["n_blocks"])
        xs = [c["n_blocks"] for c in mine]
        marker = WINDOW_MARKERS[k % len(WINDOW_MARKERS)]
        ax_probes.plot(xs, [c["probes"] for c in mine], color=impls[1][2], marker=marker,
                       linestyle="-", label=f"ours, window {w} tok")
        ax_probes.plot(xs, [c["lower_bound"] for c in mine], color="#999999", linewidth=0.8,
                       linestyle=":", label="N/need + 1" if k == 0 else None)
        for name, label, color in impls[1:]:
            pts = [(c["n_blocks"], _median(c, name)) for c in mine if _median(c, name) is not None]
            if pts:
                x, y = zip(*pts)
                ax_time.plot(x, y, color=color, marker=marker,
                             linestyle="-" if name == "ours" else "-.",
                             label=f"{'ours' if name == 'ours' else name}, window {w} tok")
    for ax, ylabel in ((ax_probes, "get_cached_block probes per lookup"),
                       (ax_time, "median µs per lookup")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("N (blocks of 16 tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.25)
        _plain_log_ticks(ax)
    ax_probes.set_title("probes, 5% random hits")
    ax_time.set_title("latency, 5% random hits")
    _legend_below(ax_probes, ncol=3)
    _legend_below(ax_time, ncol=3)


def _plain_log_ticks(ax: Any) -> None:
    """Log axes labelled 0.6, 1, 10, 100 (not 6e-01 or 10^2); minor ticks
    labelled only when the axis spans less than two decades."""
    import math

    from matplotlib.ticker import FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    low, high = ax.get_ylim()
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(
        plain if low > 0 and math.log10(high / low) < 2 else NullFormatter())
    if ax.get_xscale() == "log":
        ax.xaxis.set_major_formatter(plain)


def _legend_below(ax: Any, ncol: int, handles: Any = None, **kw: Any) -> None:
    """The legend under the axes, so it never hides a line."""
    if handles is not None:
        kw["handles"] = handles
    ax.legend(fontsize=7.5, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=ncol,
              frameon=False, **kw)


def _seed_speedups(ax: Any, receipt: dict[str, Any]) -> None:
    cells = [c for c in _seed_cells(receipt) if c.get("seed_speedup") is not None]
    cells.sort(key=lambda c: (c["window_tokens"], c["context_tokens"]))
    impls = _impl_names(receipt)
    xs = list(range(len(cells)))
    width = 0.38
    ax.bar([x - width / 2 for x in xs], [c["speedup"] for c in cells], width,
           color=impls[1][2], label=impls[1][1].split(",")[0])
    if receipt.get("other_core"):
        ax.bar([x + width / 2 for x in xs], [c["other_speedup"] for c in cells], width,
               color=impls[2][2], label=impls[2][1])
    key = "speedup>=2.5xbaseline"
    wants = [c["targets"].get(key, {}).get("want") for c in cells]
    base = [c["targets"].get(key, {}).get("baseline") for c in cells]
    if any(w is not None for w in wants):
        ax.scatter(xs, wants, marker="_", s=500, color="#c00000", linewidths=2.5, zorder=3,
                   label="wanted: 2.5 × baseline")
        ax.scatter(xs, base, marker="x", s=30, color="#555555", zorder=3,
                   label="baseline (inlined Python path)")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"w{c['window_tokens']}\n{c['context_tokens'] // 1024}K" for c in cells],
                       fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("speedup over vLLM (×)")
    ax.set_title("seed cells: window (tokens) / context, 5% hits")
    ax.grid(True, axis="y", which="both", alpha=0.25)
    _plain_log_ticks(ax)
    ax.legend(fontsize=7.5, loc="upper left")


def _costs(ax: Any, receipt: dict[str, Any]) -> None:
    cost = receipt["cost_model"]
    impls = [(n, label.split(",")[0], color) for n, label, color in _impl_names(receipt)
             if n in cost["fixed_call_us"]]
    groups = ["fixed per call", "per probe, hit", "per probe, miss"]
    width = 0.8 / (len(impls) + 1)
    for k, (name, label, color) in enumerate(impls):
        pp = cost["per_probe_ns"][name]
        vals = [cost["fixed_call_us"][name] * 1000, pp["hit"], pp["miss"]]
        ax.bar([g + (k - len(impls) / 2) * width for g in range(3)], vals, width,
               color=color, label=label)
    bare = [float("nan"), cost["get_cached_block_hit_ns"], cost["get_cached_block_miss_ns"]]
    ax.bar([g + (len(impls) / 2) * width for g in range(3)], bare, width, color="#aaaaaa",
           label="bare get_cached_block")
    ax.set_xticks(range(3))
    ax.set_xticklabels(groups)
    ax.set_yscale("log")
    ax.set_ylabel("ns")
    ax.set_title(f"cost model (a pool of {cost['pool_entries']:,} cached blocks)")
    ax.grid(True, axis="y", which="both", alpha=0.25)
    _plain_log_ticks(ax)
    ax.legend(fontsize=7.5, loc="upper right")


def _sweep(ax: Any, receipt: dict[str, Any], mode: str) -> None:
    rows = [r for r in receipt.get("sweep", []) if r["mode"] == mode]
    if not rows:
        ax.set_visible(False)
        return
    for name, label, color in _impl_names(receipt):
        for h in sorted({r["hit_rate"] for r in rows}):
            mine = sorted((r for r in rows if r["hit_rate"] == h), key=lambda r: r["n_blocks"])
            ys = [_median(r, name) for r in mine]
            if any(y is None for y in ys):
                continue
            ax.plot([r["n_blocks"] for r in mine], ys, color=color,
                    linestyle=HIT_STYLES.get(h, "-"), marker=".")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("N (blocks of 16 tokens)")
    ax.set_ylabel("median µs per lookup")
    ax.set_title(f"small N, {mode}: {rows[0]['api'].split('.')[0]}, window "
                 f"{rows[0]['window_tokens']} tok", fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    _plain_log_ticks(ax)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=color, linewidth=2.5, label=label.split(",")[0])
               for _, label, color in _impl_names(receipt)]
    handles += [Line2D([], [], color="#666666", linestyle=style, label=f"{h:.0%} hits")
                for h, style in HIT_STYLES.items()]
    _legend_below(ax, ncol=3, handles=handles)


def _full_sweep(ax: Any, receipt: dict[str, Any]) -> None:
    full = receipt.get("full_attention") or {}
    rows = full.get("sweep", [])
    if not rows:
        ax.set_visible(False)
        return
    impls = [(n, label, color) for n, label, color in _impl_names(receipt)
             if n in rows[0]["median_us_by_impl"]]
    for name, _, color in impls:
        for h in sorted({r["hit_rate"] for r in rows}):
            mine = sorted((r for r in rows if r["hit_rate"] == h), key=lambda r: r["n_blocks"])
            ax.plot([r["n_blocks"] for r in mine], [r["median_us_by_impl"][name] for r in mine],
                    color=color, linestyle=HIT_STYLES.get(h, "-"), marker=".")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("N (blocks of 16 tokens)")
    ax.set_ylabel("median µs per lookup")
    ok = sum(r["ok"] for r in rows)
    ax.set_title(f"small N, full attention alone: FullAttentionManager\n"
                 f"cached prefix then misses; ours <= vLLM in {ok} of {len(rows)} cells", fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    _plain_log_ticks(ax)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=color, linewidth=2.5, label=label.split(",")[0])
               for _, label, color in impls]
    handles += [Line2D([], [], color="#666666", linestyle=style, label=f"{h:.0%} hits")
                for h, style in HIT_STYLES.items()]
    _legend_below(ax, ncol=3, handles=handles)


def _bars(ax: Any, receipt: dict[str, Any], labels: list[str], series: list[dict[str, float]],
          extra: tuple[str, str, str] | None, unit: str) -> None:
    """Grouped bars, one group per label, one bar per implementation (and
    ``extra``: (key, legend, colour)), the speedup of each over vLLM written
    above it."""
    impls = [(n, label.split(",")[0], color) for n, label, color in _impl_names(receipt)
             if any(n in s for s in series)]
    if extra:
        impls.append(extra)
    width = 0.8 / len(impls)
    for k, (name, label, color) in enumerate(impls):
        xs, ys = [], []
        for g, s in enumerate(series):
            if name in s:
                xs.append(g + (k - (len(impls) - 1) / 2) * width)
                ys.append(s[name])
        ax.bar(xs, ys, width, color=color, label=label)
        if name != "vllm":
            for x, g in zip(xs, [g for g, s in enumerate(series) if name in s]):
                ratio = series[g]["vllm"] / series[g][name]
                ax.annotate(f"{ratio:.1f}×", (x, series[g][name]), ha="center", va="bottom",
                            fontsize=7, xytext=(0, 1), textcoords="offset points")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7.5)
    ax.set_yscale("log")
    ax.set_ylabel(unit)
    ax.grid(True, axis="y", which="both", alpha=0.25)
    _plain_log_ticks(ax)
    _legend_below(ax, ncol=2)


def _full_alone(ax: Any, receipt: dict[str, Any]) -> None:
    full = receipt.get("full_attention")
    if not full:
        ax.set_visible(False)
        return
    a, f = full["all_cached"], full["fine_grained"]
    _bars(ax, receipt,
          [f"{a['n_blocks']:,} blocks of {a['block_size']}\nall cached",
           f"fine-grained: blocks of {f['block_size']},\nhashes of {f['hash_block_size']}, "
           f"partial tail"],
          [a["median_us_by_impl"], f["median_us_by_impl"]], None, "median µs per lookup")
    want = a.get("target", {}).get("want")
    ax.set_title("full-attention lookup alone (one group)"
                 + (f"; want >= {want:g}× on the all-cached one" if want else ""), fontsize=10)


def _scheduler(ax: Any, receipt: dict[str, Any]) -> None:
    sched = receipt.get("scheduler", [])
    step = receipt.get("scheduler_step")
    if not sched or "both_free" not in sched[0]["median_ms"]:
        ax.set_visible(False)
        return
    labels = [f"get_computed_blocks\n{s['requests']} x {s['context_tokens'] // 1024}K, "
              f"{s.get('swa_groups', 1)} SWA grp\nwindow {s['window_tokens']}" for s in sched]
    series = [dict(s["median_ms"]) for s in sched]
    if step:
        labels.append(f"Scheduler.schedule()\n{step['requests']} requests,\n"
                      f"{step['prompt_tokens'][0] // 1024}-{step['prompt_tokens'][1] // 1024}K cached")
        series.append(dict(step["median_ms"]))
    _bars(ax, receipt, labels, series, ("both_free", "both lookups free (floor)", "#aaaaaa"),
          "median ms per batch / per schedule()")
    ax.set_title("scheduler, hybrid full attention + SWA: plugin off (vLLM) vs on", fontsize=10)


def plot_receipt(receipt: dict[str, Any], path: Path) -> Path:
    """Write the PNG; return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_full = "full_attention" in receipt
    rows = 3 if has_full else 2
    fig, axes = plt.subplots(rows, 3, figsize=(19, 6 * rows), layout="constrained")
    _scaling(axes[0][0], axes[0][1], receipt)
    _seed_speedups(axes[0][2], receipt)
    _costs(axes[1][0], receipt)
    _sweep(axes[1][1], receipt, "one group")
    _sweep(axes[1][2], receipt, "hybrid")
    if has_full:
        _full_sweep(axes[2][0], receipt)
        _full_alone(axes[2][1], receipt)
        _scheduler(axes[2][2], receipt)
    core = receipt.get("core", "?")
    fig.suptitle(
        f"vLLM {receipt.get('vllm_version', '?')} prefix-cache lookups on its real "
        f"BlockPool: vLLM's own vs ours ({core} core) and the "
        f"{receipt.get('other_core') or 'other'} core, block 16, medians of interleaved samples"
        + (" [QUICK: timings mean nothing]" if receipt.get("quick") else ""),
        fontsize=12)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("receipt", nargs="?", help="a bench_vllm receipt (default: newest)")
    parser.add_argument("-o", "--out", help="PNG path (default: next to the receipt)")
    args = parser.parse_args()
    if args.receipt:
        src = Path(args.receipt)
    else:
        found = sorted(RESULTS.glob("vllm-2*.json"))
        if not found:
            print("no benchmarks/results/vllm-*.json; run benchmarks/bench_vllm.py", file=sys.stderr)
            return 1
        src = found[-1]
    out = Path(args.out) if args.out else src.with_suffix(".png")
    if str(RESULTS.parent.parent) not in sys.path:
        sys.path.insert(0, str(RESULTS.parent.parent))
    from benchmarks import receipts

    print(plot_receipt(receipts.load(src), out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
