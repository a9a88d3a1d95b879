"""The report of a bench_vllm.py run: the tables, the targets PASS/MISS
and the JSON receipt.

Each target is printed with PASS or MISS and, for a miss, what bounds it
(the cost model's fixed cost and per-probe cost, the floor of a batch with
both lookups free). The verdicts judge "ours", the core ``install()`` picks
here; a ``--quick`` run prints them but its timings mean nothing.

Receipt keys: top level ``core`` (ours' core), ``other_core`` (the other
column's core, or null), ``other_error`` (why there is no other column),
``native_error`` (ours was native but failed its first call, so python was
measured as ours), ``implementations`` (timed names), ``baseline`` (the
receipt the 2.5x target reads), ``pool_entries``. Per cell: ``median_us``
and ``speedup`` (ours), ``vllm_median_us``, ``other_median_us`` /
``other_speedup``, ``python_median_us`` / ``python_speedup``,
``native_median_us`` / ``native_speedup`` (whichever column holds that
core; null when not measured), ``quartiles_us`` (p25/p75 per timed series),
``probes`` (ours), ``probes_by_impl``, ``targets``. ``cost_model``:
``fixed_call_us`` and ``per_probe_ns`` (``hit``/``miss``) keyed by
implementation name. ``sweep``: one row per (mode, N, hits).
``scheduler``: the get_computed_blocks rows (``median_ms`` per
implementation and ``both_free``; ``target``). ``full_attention``:
``all_cached``, ``fine_grained`` and ``sweep`` (``median_us_by_impl``).
``scheduler_step``: the ``Scheduler.schedule()`` row. Raw samples are not
kept (their quartiles are).
"""

from __future__ import annotations

import argparse
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import vllm

from benchmarks import receipts
from benchmarks.cost_model import FIXED_MAX_US, PER_PROBE_MAX_NS, PER_PROBE_VS_GCB
from benchmarks.full_attention_rows import FULL_SPEEDUP
from benchmarks.harness import BS, Impls
from benchmarks.probes import contiguous_need
from benchmarks.scheduler_rows import MEMO, MEMO_COST_MAX, SCHED_CEILING_SHARE, SCHED_SPEEDUP
from benchmarks.side_by_side import NO_AHEAD
from benchmarks.swa_cells import BASELINE
from swa_prefix_cache.vllm_adapter import fingerprint as adapter_fingerprint

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class LookupCode:
    """The installed vLLM, and whether the code of its sliding-window
    lookup is a variant the plugin knows (``variant``: which one, or what
    changed)."""

    version: str
    known: bool
    variant: str

    @classmethod
    def installed(cls) -> LookupCode:
        version = adapter_fingerprint.installed_version()
        found = adapter_fingerprint.check(adapter_fingerprint.SLIDING_WINDOW)
        return cls(version, found.known, found.variant or "changed: " + ", ".join(found.changed))


@dataclass
class Measured:
    """Every row of one run, as the row modules return them."""

    cells: list[dict[str, Any]]
    cost_model: dict[str, Any]
    sweep: list[dict[str, Any]]
    full_attention: dict[str, Any]
    scheduler: list[dict[str, Any]]
    scheduler_step: dict[str, Any]


def print_report(lookup: LookupCode, measured: Measured, impls: Impls, filler: int, masks: int,
                 probe_masks: int, rounds: int, quick: bool) -> dict[str, Any]:
    """Every table and target of the run, in order; the targets' verdicts
    (the receipt's ``targets``)."""
    m = measured
    code = "as in " + lookup.variant if lookup.known else "UNKNOWN, " + lookup.variant
    print(f"vLLM {lookup.version} (lookup code {code}) real BlockPool, "
          f"block size {BS}, 32-byte hashes, {filler:,} other cached blocks in every pool; answers checked "
          f"and probes counted on {max(masks, probe_masks)} masks per cell, timed on {masks} masks x "
          f"{rounds} rounds; baseline {BASELINE.name}" + (" [QUICK: timings mean nothing]" if quick else ""))
    print_table(m.cells, impls)
    print_sweep(m.sweep, impls)
    summary = print_summary(m.cells, m.cost_model, m.sweep, impls, quick)
    print_full_attention(m.full_attention, impls)
    print_scheduler(m.scheduler, m.scheduler_step, impls)
    summary.update(scheduler_and_full_verdicts(m.scheduler, m.full_attention, m.cost_model))
    return summary


def _mark(t: dict[str, Any] | None) -> str:
    return "" if t is None else ("PASS" if t["ok"] else "MISS")


def print_table(cells: list[dict[str, Any]], impls: Impls) -> None:
    backend, other = impls.backend, impls.other
    print(f"ours = the {backend} core (what install() picks here; the verdicts judge it)"
          + (f"; {other} = ours forced onto the {other} core" if other else "")
          + ". Probes: mean get_cached_block calls per lookup; times: medians of interleaved "
          "samples, us per lookup.")
    print("want = 2.5 x the speedup of ours in the baseline receipt (seed cells), 100 at 8192 blocks / "
          "10% / window 128 blocks, 8 all cached; pbound = vLLM us / (our probes made as bare "
          "get_cached_block calls), ceil = vLLM us / (those + ours with max_length 0); ours reads the "
          "hash map inline, so it can pass both.")
    head = (f"{'pattern':<15} {'win':>5} {'ctx':>6} {'hit':>4} {'N':>5} {'need':>4} | "
            f"{'vLLM':>5} {'ours':>6} {'N/nd+1':>6} {'iid':>6} {'seed':>4} {'<=seed':>6} {'<=1.1LB':>7} | "
            f"{'vLLM us':>8} {f'{other} us' if other else '':>9} {'ours us':>8} | "
            f"{f'x {other}' if other else '':>8} {'x ours':>7} {'want':>6} {'':>4} | {'pbound':>6} {'ceil':>6}")
    print(head)
    print("-" * len(head))
    for c in cells:
        t = c["targets"]
        label = c["note"] or c["pattern"]
        speed_t = (t.get("speedup>=2.5xbaseline") or t.get("speedup>=100x")
                   or t.get("all-cached>=8x"))
        iid = "-" if c["iid_bound"] is None else f"{c['iid_bound']:.1f}"
        seed_p = "-" if c["seed_probes"] is None else str(c["seed_probes"])
        other_us = f"{c['other_median_us']:9.1f}" if other else ""
        other_x = f"{c['other_speedup']:8.1f}" if other else ""
        want = "" if speed_t is None else f"{speed_t['want']:.1f}"
        print(f"{label:<15} {c['window_tokens']:>5} {c['context_tokens']:>6} {c['hit_rate']:>4.2f} "
              f"{c['n_blocks']:>5} {c['need']:>4} | {c['vllm_probes']:>5.0f} {c['probes']:>6.1f} "
              f"{c['lower_bound']:>6} {iid:>6} {seed_p:>4} {_mark(t.get('probes<=seed')):>6} "
              f"{_mark(t.get('probes<=1.1xLB')):>7} | {c['vllm_median_us']:>8.1f} {other_us:>9} "
              f"{c['median_us']:>8.2f} | {other_x:>8} {c['speedup']:>7.1f} {want:>6} {_mark(speed_t):>4} | "
              f"{c['probe_bound']:>6.1f} {c['ceiling_speedup']:>6.1f}")


def print_sweep(rows: list[dict[str, Any]], impls: Impls) -> None:
    other = impls.other
    if not rows:
        return
    print()
    print(f"small N (window {rows[0]['window_tokens']} tokens = {contiguous_need(rows[0]['window_tokens'], False)} "
          "blocks; hybrid: full attention all cached + the sliding-window group at the hit rate), "
          "median us per lookup:")
    head = (f"{'mode':<10} {'N':>3} {'hits':>5} | {'vLLM':>7} {other or '':>7} {'ours':>7} | "
            f"{'x ours':>6} {'':>4}")
    print(head)
    print("-" * len(head))
    for r in rows:
        o = f"{r['other_median_us']:7.2f}" if other else ""
        print(f"{r['mode']:<10} {r['n_blocks']:>3} {r['hit_rate']:>5.0%} | {r['vllm_median_us']:>7.2f} "
              f"{o:>7} {r['median_us']:>7.2f} | {r['speedup']:>6.2f} {'ok' if r['ok'] else 'SLOWER':>4}")


def _verdict(key: str, ok: bool, detail: str) -> dict[str, Any]:
    print(f"target {key:<26}: {'PASS' if ok else 'MISS'} {detail}")
    return {"ok": ok, "detail": detail}


def _never_slower(summary: dict[str, Any], key: str, cells_key: str, rows: list[dict[str, Any]],
                  with_mode: bool) -> None:
    """The never-slower target of a small-N sweep: every row ours <= vLLM."""
    slower = [r for r in rows if not r["ok"]]
    where = ", ".join(f"{r['mode'] + ' ' if with_mode else ''}N={r['n_blocks']} {r['hit_rate']:.0%} "
                      f"({r['median_us']:.2f} vs {r['vllm_median_us']:.2f} us)" for r in slower)
    summary[key] = _verdict(
        key, not slower,
        f"({len(rows) - len(slower)} of {len(rows)} cells: ours <= vLLM)"
        + (": slower in " + where if slower else ""))
    summary[cells_key] = {"cells": len(rows), "pass": len(rows) - len(slower)}


def print_summary(cells: list[dict[str, Any]], cost: dict[str, Any], rows: list[dict[str, Any]],
                  impls: Impls, quick: bool) -> dict[str, Any]:
    """The cost model, then the targets it and the cells and the small-N
    sweep are judged by."""
    backend = impls.backend
    summary: dict[str, Any] = {}
    print()
    if quick:
        print("QUICK run: tiny sizes, few samples; the verdicts below are printed, not asserted, "
              "and mean nothing")
    fixed, per = cost["fixed_call_us"], cost["per_probe_ns"]
    gcb_hit, gcb_miss = cost["get_cached_block_hit_ns"], cost["get_cached_block_miss_ns"]
    print(f"cost model (one group, a pool of {cost['pool_entries']:,} cached blocks; per probe = slope of "
          f"the time over lookups of {', '.join(map(str, cost['sizes']))} probes): bare "
          f"BlockPool.get_cached_block {gcb_hit:.0f} ns on a hit, {gcb_miss:.0f} ns on a miss")
    for k in fixed:
        name = {"vllm": "vLLM", "ours": f"ours ({backend})"}.get(k, f"{k} core")
        cells_pp = cost["per_probe_ns_cells"].get(k)
        print(f"  {name:<16} fixed {fixed[k]:6.2f} us per call (max_length 0: no probe); per probe "
              f"{per[k]['hit']:5.0f} ns on a hit, {per[k]['miss']:5.0f} ns on a miss"
              + (f" ({cells_pp:.0f} ns in the random cells)" if cells_pp is not None else ""))
    for key in ("probes<=seed", "probes<=1.1xLB", "speedup>=1.5xseed", "speedup>=100x",
                "speedup>=2.5xbaseline", "all-cached>=8x"):
        hits = [c for c in cells if key in c["targets"]]
        missed = [c for c in hits if not c["targets"][key]["ok"]]
        summary[key] = {"cells": len(hits), "pass": len(hits) - len(missed),
                        "missed": [f"{c['window_tokens']}/{c['context_tokens']}/{c['hit_rate']}"
                                   for c in missed]}
        verdict = "n/a " if not hits else ("PASS" if not missed else "MISS")
        extra = ""
        if key == "speedup>=2.5xbaseline" and hits:
            tight = min(hits, key=lambda c: c["speedup"] / c["targets"][key]["want"])
            extra = (f"; tightest {tight['window_tokens']}/{tight['context_tokens']}: "
                     f"{tight['speedup']:.1f}x against {tight['targets'][key]['want']:.1f}x")
        if key == "all-cached>=8x" and hits:
            extra = "; " + ", ".join(f"{c['n_blocks']} blocks {c['speedup']:.1f}x" for c in hits)
        print(f"target {key:<26}: {verdict} ({len(hits) - len(missed)} of {len(hits)} cells meet it)"
              + (f"; missed (window/context/hits): {', '.join(summary[key]['missed'])}" if missed else "")
              + extra)
    ours_pp = max(per["ours"]["hit"], per["ours"]["miss"])
    summary["per-probe<=80ns"] = _verdict(
        "per-probe<=80ns", ours_pp <= PER_PROBE_MAX_NS,
        f"(ours {per['ours']['hit']:.0f} ns on a hit, {per['ours']['miss']:.0f} ns on a miss; "
        f"want <= {PER_PROBE_MAX_NS:.0f})")
    ratios = {"hit": gcb_hit / per["ours"]["hit"], "miss": gcb_miss / per["ours"]["miss"]}
    summary["per-probe>=6x-cheaper"] = _verdict(
        "per-probe>=6x-cheaper", min(ratios.values()) >= PER_PROBE_VS_GCB,
        f"(get_cached_block / ours per probe: {ratios['hit']:.1f}x on a hit, {ratios['miss']:.1f}x "
        f"on a miss; want >= {PER_PROBE_VS_GCB:.0f}x)")
    summary["fixed<=0.5us"] = _verdict(
        "fixed<=0.5us", fixed["ours"] <= FIXED_MAX_US,
        f"(ours {fixed['ours']:.2f} us per call, vLLM {fixed['vllm']:.2f} us; want <= {FIXED_MAX_US})")
    _never_slower(summary, "never-slower-small-N", "sweep_cells", rows, with_mode=True)
    for c in cells:
        t = c["targets"].get("probes<=seed")
        if t and not t["ok"] and c["iid_bound"] is not None and c["iid_bound"] > c["seed_probes"]:
            print(f"  probes {c['window_tokens']}/{c['context_tokens']}: the seed claims {c['seed_probes']}, "
                  f"below the iid bound {c['iid_bound']:.1f} that no search can beat on average")
    for c in cells:
        if len(set(v for k, v in c["probes_by_impl"].items() if k != "vllm")) > 1:
            print(f"  note: cores probe differently in {c['note'] or c['pattern']} "
                  f"{c['window_tokens']}/{c['context_tokens']}: {c['probes_by_impl']}")
    missed = [c for c in cells if any(not v["ok"] for k, v in c["targets"].items()
                                       if not k.startswith("probes"))]
    if missed:
        print(f"speed misses (ours, {backend} core): measured / want; allowed = vLLM us / want; "
              "model = fixed + probes x per-probe (the cost model above):")
        for c in missed:
            t = c["targets"]
            want = max(v["want"] for k, v in t.items() if not k.startswith("probes") and not v["ok"])
            allowed = c["vllm_median_us"] / want
            pp = (per["ours"]["hit"] + per["ours"]["miss"]) / 2 / 1000
            model = fixed["ours"] + c["probes"] * pp
            rest = c["median_us"] - model
            why = ("the fixed cost alone exceeds the allowed time" if fixed["ours"] > allowed else
                   "fixed + probes exceed the allowed time" if model > allowed else
                   f"{rest:.2f} us beyond the probe model (building the {c['n_blocks']}-entry answer lists, "
                   "noise)")
            print(f"  {c['note'] or c['pattern']} {c['window_tokens']:>5}/{c['context_tokens']:<6}/"
                  f"{c['hit_rate']:.2f}: {c['speedup']:6.1f}x / {want:5.1f}x; ours {c['median_us']:.2f} us, "
                  f"allowed {allowed:.2f} us, model {model:.2f} us ({c['probes']:.1f} probes); "
                  f"vLLM {c['vllm_median_us']:.1f} us; {why}")
    return summary


def print_full_attention(full: dict[str, Any], impls: Impls) -> None:
    backend, other = impls.backend, impls.other
    names = full["names"]
    extra = [n for n in names if n not in ("vllm", "ours")]
    print()
    print(f"full attention alone: {full['api']}, one group, a pool of {full['pool_entries']:,} cached "
          f"blocks; vLLM's own vs ours ({backend}: the extension's proved full_hit)"
          + (f" and the {', '.join(extra)} core" if extra else
             (f"; the {other} core leaves vLLM's own (not timed twice)" if other else "")))
    a, f = full["all_cached"], full["fine_grained"]
    print(f"  {a['n_blocks']:,} blocks of {a['block_size']}, all cached ({a['vllm_probes']} vLLM probes): "
          f"vLLM {a['vllm_median_us']:.1f} us, ours {a['median_us']:.2f} us ({a['speedup']:.1f}x)"
          + (f"; ours with the read-ahead off {a['read_ahead_off_us']:.2f} us"
             if a.get("read_ahead_off_us") else ""))
    print(f"  fine-grained (hash_block_size {f['hash_block_size']}, block_size {f['block_size']}, alignment "
          f"{f['alignment_tokens']}; {f['full_blocks']} full blocks + the tail's 2nd hash cached, max_length "
          f"{f['max_length']}): hit {f['hit_tokens']} tokens ({f['vllm_probes']} vLLM probes, phase 2 "
          f"included): vLLM {f['vllm_median_us']:.1f} us, ours {f['median_us']:.2f} us ({f['speedup']:.1f}x)")
    rows = full["sweep"]
    print("  small N (a cached prefix of round(hits x N) blocks, then misses), median us per lookup:")
    head = f"  {'N':>3} {'hits':>5} | {'vLLM':>7} {'ours':>7} | {'x ours':>6} {'':>6}"
    print(head)
    print("  " + "-" * (len(head) - 2))
    for r in rows:
        print(f"  {r['n_blocks']:>3} {r['hit_rate']:>5.0%} | {r['vllm_median_us']:>7.2f} {r['median_us']:>7.2f} "
              f"| {r['speedup']:>6.2f} {'ok' if r['ok'] else 'SLOWER':>6}")


def print_scheduler(sched: list[dict[str, Any]], step: dict[str, Any], impls: Impls) -> None:
    backend, other = impls.backend, impls.other
    print()
    for s in sched:
        m = s["median_ms"]
        ex = (f", ours on the {other} core {m[other]:.1f} ms ({s['other_speedup']:.2f}x; "
              f"{'both lookups' if s['full_replaced'].get(other) else 'only the sliding-window lookup'} "
              "replaced)" if other else "")
        print(f"scheduler: {s['api']} ({s['coordinator']}, {s['groups']}), batch of {s['requests']} "
              f"waiting requests x {s['context_tokens']} tokens, window {s['window_tokens']}, full attention "
              f"all cached, {s['swa_hit_rate']:.0%} random SWA hits:")
        print(f"  vLLM {m['vllm']:.1f} ms, ours ({backend}) {m['ours']:.2f} ms ({s['speedup']:.1f}x){ex}; "
              f"with both lookups free {m['both_free']:.2f} ms, so the ceiling is {s['ceiling_speedup']:.1f}x "
              f"(vLLM's two lookups are {s['lookups_share_of_vllm']:.0%} of its batch); lookups per block of the "
              f"batch ({s['requests'] * s['context_tokens'] // BS:,} distinct blocks) over that floor: "
              + ", ".join(f"{k} {v:.0f} ns" for k, v in s["lookup_ns_per_block"].items())
              + "; get_cached_block calls per batch (counted through a wrapped probe): "
              + ", ".join(f"{k} {v}" for k, v in s["probes_per_batch"].items())
              + (f"; ours with the pool probe's read-ahead off {m[NO_AHEAD]:.2f} ms (read-ahead: "
                 f"{s['read_ahead_speedup']:.2f}x)" if s.get("read_ahead_speedup") else ""))
        if s.get("memory_cost") is not None:
            print(f"  ours as install() leaves vLLM, the lookup memory on: {m[MEMO]:.2f} ms, "
                  f"{s['memory_cost']:.3f}x the memory off (every lookup of the batch a first one)")
    m = step["median_ms"]
    print(f"scheduler step: {step['scheduler']}.schedule() ({step['coordinator']}, {step['groups']}, window "
          f"{step['window_tokens']}), {step['requests']} waiting requests of {step['prompt_tokens'][0]:,}.."
          f"{step['prompt_tokens'][1]:,} cached tokens over {step['documents']} shared documents + 1..15 new "
          f"tokens each; all {step['scheduled_requests']} admitted, {step['hit_tokens']:,} hit tokens; "
          f"one schedule() per sample, {step['rounds']} interleaved rounds:")
    print(f"  plugin off (vLLM) {m['vllm']:.1f} ms, on (ours, {backend}) {m['ours']:.2f} ms "
          f"({step['speedup']:.2f}x)"
          + (f", {other} core {m[other]:.1f} ms ({step['other_speedup']:.2f}x)" if other else "")
          + f"; with both lookups free {m['both_free']:.2f} ms, so the ceiling is {step['ceiling_speedup']:.2f}x "
          f"(vLLM's lookups are {step['lookups_share_of_vllm']:.0%} of its schedule(); the rest, e.g. "
          "allocate_slots touching every hit block, is vLLM's own and O(N) per request)")


def scheduler_and_full_verdicts(sched: list[dict[str, Any]], full: dict[str, Any],
                                cost: dict[str, Any]) -> dict[str, Any]:
    """The targets of the scheduler rows and the full-attention rows, with
    what bounds a miss (the cost model's probe, the free-lookups floor)."""
    cost_pp = cost["per_probe_ns"]["ours"]
    a = full["all_cached"]
    out: dict[str, Any] = {}
    worst = min(sched, key=lambda s: s["speedup"]) if sched else None
    out["scheduler>=15x"] = _verdict(
        "scheduler>=15x", bool(sched) and all(s["target"]["ok"] for s in sched),
        "(" + "; ".join(f"{s['groups']}, window {s['window_tokens']}: {s['speedup']:.1f}x "
                        f"(ceiling {s['ceiling_speedup']:.1f}x, {s['share_of_ceiling']:.0%} of it)"
                        for s in sched)
        + f"; want >= {SCHED_SPEEDUP:.0f}x or >= {SCHED_CEILING_SHARE:.0%} of the ceiling)"
        + (f"; bound: ours {worst['median_ms']['ours']:.2f} ms against {worst['median_ms']['both_free']:.2f} ms "
           f"with both lookups free, i.e. {worst['lookup_ns_per_block']['ours']:.0f} ns per distinct block of the "
           f"batch; {SCHED_SPEEDUP:.0f}x needs <= "
           f"{(worst['median_ms']['vllm'] / SCHED_SPEEDUP - worst['median_ms']['both_free']) * 1e6 / (worst['requests'] * worst['context_tokens'] // BS):.0f} ns "
           "(ours' sliding-window probe in the cost model above, warm caches, same run: "
           f"{cost_pp['hit']:.0f} ns on a hit)"
           if worst and not worst["target"]["ok"] else ""))
    costs = [s["memory_cost"] for s in sched if s.get("memory_cost") is not None]
    if costs:
        out["memory-first-lookups<=1.03x"] = _verdict(
            "memory-first-lookups<=1.03x", max(costs) <= MEMO_COST_MAX,
            "(the scheduler rows' batches with the lookup memory on against off: "
            + ", ".join(f"{c:.3f}x" for c in costs) + f"; want <= {MEMO_COST_MAX:.2f}x)")
    per_block = a["median_us"] * 1000 / a["n_blocks"]
    out["full-attention>=6x"] = _verdict(
        "full-attention>=6x", a["target"]["ok"],
        f"({a['n_blocks']:,} cached blocks: {a['speedup']:.1f}x; want >= {FULL_SPEEDUP:.0f}x)"
        + ("" if a["target"]["ok"] else
           f"; bound: ours {per_block:.0f} ns per cached block (probe + answer lists), {FULL_SPEEDUP:.0f}x "
           f"needs <= {a['vllm_median_us'] * 1000 / FULL_SPEEDUP / a['n_blocks']:.0f} ns; ours' "
           f"sliding-window probe costs {cost_pp['hit']:.0f} ns on a hit in the same run's cost model"))
    _never_slower(out, "full-never-slower-small-N", "full_sweep_cells", full["sweep"], with_mode=False)
    return out


def build_receipt(args: argparse.Namespace, inputs: dict[str, Any], lookup: LookupCode, impls: Impls,
            filler: int, summary: dict[str, Any], measured: Measured, wall: float) -> dict[str, Any]:
    """The run's JSON receipt: what ran where, the targets, every row."""
    return {
        "benchmark": "vLLM SlidingWindowManager.find_longest_cache_hit vs the stride search, "
                     "FullAttentionManager.find_longest_cache_hit vs full_hit, the scheduler's "
                     "get_computed_blocks and Scheduler.schedule(), real BlockPool "
                     "(benchmarks/bench_vllm.py)",
        "quick": args.quick,
        "args": vars(args),
        "inputs": inputs,
        "environment": {"python": platform.python_version(), "machine": platform.platform(),
                        "cpus": os.cpu_count(), "torch": torch.__version__,
                        "vllm": getattr(vllm, "__version__", "unknown")},
        "vllm_version": lookup.version,
        "vllm_fingerprint": {"known": lookup.known, "version": lookup.version, "variant": lookup.variant},
        "core": impls.backend,
        "other_core": impls.other,
        "other_error": impls.other_error,
        "native_error": impls.native_error,
        "implementations": list(impls.table),
        "baseline": f"benchmarks/results/{BASELINE.name}",
        "pool_entries": filler,
        "targets": summary,
        "cost_model": measured.cost_model,
        "cells": measured.cells,
        "sweep": measured.sweep,
        "scheduler": measured.scheduler,
        "full_attention": measured.full_attention,
        "scheduler_step": measured.scheduler_step,
        "wall_s": wall,
    }


def write_receipt(receipt: dict[str, Any], stem: str) -> Path:
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{stem}.json"
    receipts.write(out, receipt)
    return out
