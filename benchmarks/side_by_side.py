"""How every row of bench_vllm.py compares vLLM's lookups with ours.

A row first checks each implementation's answer against vLLM's (the same
hit length and, per group, the very same block objects; the native core
must have answered in C, not handed the call to its Python fallback), then
times the implementations interleaved on vLLM's classes, so the drift and
noise of a busy machine hit every column alike, and reduces the samples to
the row's columns: medians, quartiles, and each core's speedup over vLLM.
Ratios are only ever taken between samples of one run.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.harness import CORES, VLLM_PATCH, Impls, call_checked, same_result, use
from benchmarks.timing import interleaved, reps_for

Job = tuple[Any, Callable[[], object]]  # (what to put on vLLM's classes, the call)

# The column of ours with the native pool probe's read-ahead off
# (swa_prefix_cache/core/glue/hotpath_pool.c): what the prefetching is worth in a row.
NO_AHEAD = "ours, read-ahead off"


def lookup_call(manager: type, kwargs: dict[str, Any]) -> Callable[[], Any]:
    """``manager.find_longest_cache_hit`` called by keyword, as vLLM's
    coordinators call it: whatever implementation is on the class at the
    time of the call."""

    def call() -> Any:
        return manager.find_longest_cache_hit(**kwargs)

    return call


def check_against_vllm(impls: Impls, names: Sequence[str], call: Callable[[], Any], what: str,
                       want_tokens: int | None = None) -> Any:
    """vLLM's answer to ``call``; every name's answer must be the same (hit
    length and block identity), the native core's answered in C. With
    ``want_tokens``, vLLM's hit must be that long (the row's setup is what
    it claims to be)."""
    ref = call_checked(VLLM_PATCH, None, call)
    if want_tokens is not None and ref[1] != want_tokens:
        raise AssertionError(f"{what}: vLLM hits {ref[1]} tokens, the setup wants {want_tokens}")
    for name in names:
        got = call_checked(impls.table[name], impls.core_of(name), call)
        if not same_result(got, ref):
            raise AssertionError(f"{what}: {name} disagrees with vLLM ({got[1]} vs {ref[1]} tokens "
                                 "or different block objects)")
    return ref


def time_interleaved(groups: list[dict[str, Job]], rounds: int,
                     target_ns: float) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Samples (ns per call) per name, and the calls per sample
    (benchmarks/timing.py), each name timed with its implementation on
    vLLM's classes (``use``)."""
    impls = {name: impl for group in groups for name, (impl, _) in group.items()}
    calls = [{name: fn for name, (_, fn) in group.items()} for group in groups]
    reps: dict[str, int] = {}
    for group in calls:
        for name, fn in group.items():
            if name not in reps:
                with use(impls[name]):
                    reps[name] = reps_for(fn, target_ns)
    return interleaved(calls, rounds, reps, lambda name: use(impls[name])), reps


def medians_us(samples: dict[str, list[float]]) -> dict[str, float]:
    return {k: statistics.median(v) / 1000 for k, v in samples.items()}


def quartiles_us(samples: dict[str, list[float]]) -> dict[str, list[float]]:
    """p25 and p75 per series (the spread the medians hide)."""
    out = {}
    for k, v in samples.items():
        q = statistics.quantiles(v, n=4) if len(v) > 1 else [v[0]] * 3
        out[k] = [round(q[0] / 1000, 4), round(q[2] / 1000, 4)]
    return out


def ours_vs_vllm(med: dict[str, float]) -> dict[str, float]:
    """The columns every row leads with: vLLM's median, ours, the speedup."""
    return {"vllm_median_us": med["vllm"], "median_us": med["ours"],
            "speedup": med["vllm"] / med["ours"]}


def other_keys(impls: Impls, med: dict[str, float]) -> dict[str, Any]:
    """The other column's median and speedup (null without one), and each
    core's, whichever column it is in."""
    other = impls.other
    by_core = {impls.backend: med["ours"], **({other: med[other]} if other else {})}
    out: dict[str, Any] = {
        "other_core": other,
        "other_median_us": med[other] if other else None,
        "other_speedup": med["vllm"] / med[other] if other else None,
    }
    for core in CORES:
        t = by_core.get(core)
        out[f"{core}_median_us"] = t
        out[f"{core}_speedup"] = med["vllm"] / t if t is not None else None
    return out


def read_ahead_off(impls: Impls, fn: Callable[[], Any]) -> Callable[[], Any] | None:
    """``fn`` run with the native pool probe's read-ahead off, or None when
    ours is not native or the read-ahead is not on (another CPython, or its
    dict-layout self-test failed)."""
    if impls.core_of("ours") != "native":
        return None
    from swa_prefix_cache.core import hotpath

    module = hotpath.load()
    if not module.read_ahead(True):
        return None

    def off() -> Any:
        module.read_ahead(False)
        try:
            return fn()
        finally:
            module.read_ahead(True)

    return off
