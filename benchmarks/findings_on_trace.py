"""The hit tokens a store/lookup finding costs on the trace: the replay on
stock vLLM and on vLLM with that finding's upstream fix, same requests,
same tier, same store filter.

    python benchmarks/findings_on_trace.py --findings L3,L5 \\
        --layout gpt-oss-120b-eagle3 [--requests 2000] [--offload-gb 256] [--jobs 2]

A fix is ``upstream/findings/fixes/<id>.py``, spliced by
``upstream/findings/check.py`` into a copy of the installed vLLM
(``build/findings-trace/site-<id>``, hard links but for the patched files);
its run puts that copy first on ``PYTHONPATH``. Each run is
``python -m benchmarks.replay`` in its own process (one instance's share of
the trace, ``--turns blocks``); the difference in hit tokens (GPU pool plus
tier) against stock is what the finding cost there. A fix that changes a
function the plugin's lookups are bound to stops the replay (the plugin
must install for its off/on check): J1's fix does, and J1 needs a window of
at most one token, which no layout here has. The tier's store findings
(O1-O5) are fixed together by the plugin's corrected store
(``--store corrected`` of the replay and of benchmarks/tier_sweep.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import receipts  # noqa: E402
from benchmarks import replay_layouts  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
SITES = ROOT / "build" / "findings-trace"
# Lookup-side fixes the plugin's bindings see (the replay needs the plugin).
REFUSED = {"J1": "changes SlidingWindowManager._contiguous_blocks_for_hit, which the plugin is bound to"}


def fixed_site(finding: str) -> Path:
    """A copy of the installed vLLM with ``finding``'s fix spliced in."""
    sys.path.insert(0, str(ROOT / "upstream" / "findings"))
    import check

    if finding not in check.FINDINGS:
        raise SystemExit(f"--findings: {finding!r} is not one of {check.FINDINGS}")
    return check.build(finding, check.site_packages(), copy=True, out=SITES).site


def run(site: Path | None, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One replay, on ``site``'s vLLM (None: stock); its receipt."""
    cmd = [sys.executable, "-m", "benchmarks.replay", "--layout", args.layout, "--requests",
           str(args.requests), "--instances", "auto", "--turns", "blocks", "--json", str(out)]
    if args.offload_gb:
        cmd += ["--offload-gb", f"{args.offload_gb:g}", "--store", args.store]
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = str(site)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, text=True, capture_output=True)
    if proc.returncode not in (0, 1) or not out.is_file():
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"replay on {site or 'stock vLLM'} failed (exit {proc.returncode})")
    receipt = receipts.load(out)
    receipt["vllm_site"] = None if site is None else str(site.relative_to(ROOT))
    return receipt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--findings", required=True, help="comma-separated finding ids (L1..O5)")
    parser.add_argument("--layout", required=True, choices=replay_layouts.names())
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--offload-gb", type=float, default=0.0, help="a host tier per GPU (0: none)")
    parser.add_argument("--store", choices=("stock", "corrected"), default="stock")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    findings = [f for f in args.findings.split(",") if f]
    for f in findings:
        if f in REFUSED:
            parser.error(f"--findings: {f}'s fix {REFUSED[f]}")
    if args.requests < 1 or args.jobs < 1 or args.offload_gb < 0:
        parser.error("--requests and --jobs must be positive, --offload-gb not negative")
    sites: dict[str, Path | None] = {"stock": None}
    sites.update((f, fixed_site(f)) for f in findings)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    SITES.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {name: pool.submit(run, site, args, SITES / f"{name}-{stamp}.json")
                   for name, site in sites.items()}
        runs = {name: future.result() for name, future in futures.items()}
    base = runs["stock"]
    base_hits = base["gpu_hit_tokens"] + base["tier_hit_tokens"]
    print(f"{args.layout}, {base['requests']:,} requests (instance {base['instance']} of {base['instances']}), "
          f"tier {args.offload_gb:g} GiB, store {args.store}; prompt tokens {base['prompt_tokens']:,}")
    print("| vLLM | identical | hit tokens | hit rate | lost to the finding (tokens, points) |")
    print("|---|---|---|---|---|")
    for name, r in runs.items():
        hits = r["gpu_hit_tokens"] + r["tier_hit_tokens"]
        lost = "-" if name == "stock" else f"{hits - base_hits:,} ({100 * (hits - base_hits) / r['prompt_tokens']:.2f})"
        print(f"| {name if name == 'stock' else name + ' fixed'} | {'yes' if r['identical'] else 'NO'} | "
              f"{hits:,} | {100 * r['hit_rate']:.2f} % | {lost} |")
    receipt = RESULTS / f"findings-trace-{args.layout}-{stamp}.json"
    summary = {name: {k: r[k] for k in ("vllm_site", "identical", "requests", "prompt_tokens", "gpu_hit_tokens",
                                        "tier_hit_tokens", "hit_rate", "reference_hit_rate", "short_of_reference",
                                        "command")}
               for name, r in runs.items()}
    receipts.write(receipt, {"layout": args.layout, "offload_gb": args.offload_gb, "store": args.store,
                                   "runs": summary})
    print(f"receipt {receipt.relative_to(ROOT)}")
    return 0 if all(r["identical"] for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
