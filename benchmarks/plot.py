"""Plot a bench_vllm receipt: probes and latency against N, log-log.

``python benchmarks/plot.py [RECEIPT.json] [-o OUT.png]`` (default: the
newest benchmarks/results/vllm-*.json, written next to it as .png).

Two panels over the random-mask cells at the seed's 5% hit rate (one group,
no EAGLE, no extra alignment): ``get_cached_block`` calls per lookup, and the
median latency per lookup, against the number of blocks N; one colour per
sliding window, solid for ours (the core install() picked), dotted for ours
on the other core when the receipt has one (``other_core``), dashed for
vLLM's scan (whose probes are N for every window), grey for the lower bound
N/need + 1.

Uses matplotlib when it is importable; otherwise draws the same two panels
with Pillow (a vLLM dependency, so always in this venv), without a font
beyond Pillow's default, so the plot never stops a run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def series(receipt: dict[str, Any], hit_rate: float = 0.05) -> dict[str, Any]:
    """Per window: lists of (N, value) for each line of each panel."""
    cells = [
        c for c in receipt["cells"]
        if c["pattern"] == "random" and c["hit_rate"] == hit_rate and c["groups"] == 1
        and not c["eagle"] and c["alignment_tokens"] == c["block_size"]
    ]
    windows = sorted({c["window_tokens"] for c in cells}, reverse=True)
    core = receipt.get("core", receipt.get("backend", "?"))
    # The extra column: ``other_core`` (older receipts: "python" when ours was native).
    other = receipt.get("other_core")
    other_key = "other_median_us"
    if other is None and "other_core" not in receipt and "python" in receipt.get("implementations", []):
        other, other_key = "python", "python_median_us"
    out: dict[str, Any] = {"windows": windows, "backend": core, "lines": []}
    vllm_probes = sorted({(c["n_blocks"], c["vllm_probes"]) for c in cells})
    if vllm_probes:
        out["lines"].append(("probes", "vLLM scan", None, "--", vllm_probes))
    for k, w in enumerate(windows):
        pts = sorted((c for c in cells if c["window_tokens"] == w), key=lambda c: c["n_blocks"])
        color = COLORS[k % len(COLORS)]
        out["lines"].append(("probes", f"ours, window {w}", color, "-",
                             [(c["n_blocks"], c["probes"]) for c in pts]))
        out["lines"].append(("probes", f"N/need+1, window {w}", "#999999", ":",
                             [(c["n_blocks"], c["lower_bound"]) for c in pts]))
        out["lines"].append(("latency", f"vLLM, window {w}", color, "--",
                             [(c["n_blocks"], c["vllm_median_us"]) for c in pts]))
        out["lines"].append(("latency", f"ours ({out['backend']}), window {w}", color, "-",
                             [(c["n_blocks"], c["median_us"]) for c in pts]))
        if other:
            out["lines"].append(("latency", f"ours ({other}), window {w}", color, ":",
                                 [(c["n_blocks"], c[other_key]) for c in pts]))
    return out


def plot_receipt(receipt: dict[str, Any], path: Path) -> Path:
    """Write the PNG; return its path."""
    data = series(receipt)
    title = (f"vLLM {receipt.get('vllm_version', '?')} BlockPool, block 16, 5% random hits"
             + (" [quick]" if receipt.get("quick") else ""))
    try:
        import matplotlib
    except ImportError:
        _plot_pillow(data, title, path)
    else:
        matplotlib.use("Agg")
        _plot_matplotlib(data, title, path)
    return path


def _plot_matplotlib(data: dict[str, Any], title: str, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    for ax, panel, ylabel in ((axes[0], "probes", "get_cached_block calls per lookup"),
                              (axes[1], "latency", "median latency per lookup (us)")):
        for kind, label, color, style, pts in data["lines"]:
            if kind != panel or not pts:
                continue
            xs, ys = zip(*pts)
            marker = {"-": "o", "--": "x", ":": "s"}[style] if color != "#999999" else None
            ax.plot(xs, ys, linestyle=style, marker=marker, markersize=4,
                    color=color or "black", label=label, linewidth=1.2 if color != "#999999" else 0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("N (blocks of 16 tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_pillow(data: dict[str, Any], title: str, path: Path) -> None:
    from PIL import Image, ImageDraw

    width, height, pad = 1300, 560, 70
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    draw.text((pad, 10), title + "  (left: probes, right: latency us; log-log)", fill="black")
    panel_w = (width - 3 * pad) // 2
    for p, panel in enumerate(("probes", "latency")):
        lines = [ln for ln in data["lines"] if ln[0] == panel and ln[4]]
        pts = [pt for ln in lines for pt in ln[4] if pt[1] and pt[1] > 0]
        if not pts:
            continue
        x0, y0, x1, y1 = pad + p * (panel_w + pad), 40, pad + p * (panel_w + pad) + panel_w, height - pad
        lx = [math.log10(x) for x, _ in pts]
        ly = [math.log10(y) for _, y in pts]
        ax_lo, ax_hi = min(lx) - 0.05, max(lx) + 0.05
        ay_lo, ay_hi = math.floor(min(ly)), math.ceil(max(ly))
        if ay_hi == ay_lo:
            ay_hi += 1

        def to_px(x: float, y: float) -> tuple[float, float]:
            px = x0 + (math.log10(x) - ax_lo) / (ax_hi - ax_lo) * (x1 - x0)
            py = y1 - (math.log10(y) - ay_lo) / (ay_hi - ay_lo) * (y1 - y0)
            return px, py

        draw.rectangle((x0, y0, x1, y1), outline="black")
        for d in range(ay_lo, ay_hi + 1):
            _, py = to_px(10 ** ax_lo, 10 ** d)
            draw.line((x0, py, x1, py), fill="#dddddd")
            draw.text((x0 - 45, py - 6), f"1e{d}", fill="black")
        for n in sorted({x for x, _ in pts}):
            px, _ = to_px(n, 10 ** ay_lo)
            draw.line((px, y0, px, y1), fill="#eeeeee")
            draw.text((px - 12, y1 + 6), str(n), fill="black")
        for k, (_, label, color, style, lpts) in enumerate(lines):
            xy = [to_px(x, y) for x, y in lpts if y and y > 0]
            fill = color or "black"
            for a, b in zip(xy, xy[1:]):
                if style == "-":
                    draw.line((a, b), fill=fill, width=2)
                else:  # dashed / dotted: short segments
                    steps = 12 if style == "--" else 24
                    for s in range(0, steps, 2):
                        t0, t1 = s / steps, (s + 1) / steps
                        draw.line((a[0] + (b[0] - a[0]) * t0, a[1] + (b[1] - a[1]) * t0,
                                   a[0] + (b[0] - a[0]) * t1, a[1] + (b[1] - a[1]) * t1),
                                  fill=fill, width=2)
            draw.text((x0 + 8, y0 + 6 + 12 * k), f"{style:>2} {label}", fill=fill)
        draw.text((x0 + panel_w // 2 - 40, y1 + 24), "N (blocks)", fill="black")
    img.save(path, "PNG")


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
    print(plot_receipt(json.loads(src.read_text()), out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
