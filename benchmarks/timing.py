"""Timing the benches share: calls timed back to back, and samples of
several functions interleaved in one process, so the drift and noise of a
busy machine hit every function alike (ratios are taken side by side in
one run, never across runs)."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Callable
from typing import ContextManager


def time_calls(fn: Callable[[], object], reps: int) -> float:
    """Mean ns per call over ``reps`` back-to-back calls."""
    start = time.perf_counter_ns()
    for _ in range(reps):
        fn()
    return (time.perf_counter_ns() - start) / reps


def reps_for(fn: Callable[[], object], target_ns: float) -> int:
    """Calls per sample for a sample of about ``target_ns`` (at least 1)."""
    fn()  # warm
    one = max(min(time_calls(fn, 1), time_calls(fn, 1)), 1.0)
    return max(1, int(target_ns / one))


def interleaved(groups: list[dict[str, Callable[[], object]]], rounds: int, reps: dict[str, int],
                around: Callable[[str], ContextManager[object]] | None = None) -> dict[str, list[float]]:
    """Samples (ns per call, ``reps[name]`` calls each) per name. Every
    round runs every group and, in a group, every name once, in an order
    rotated by the round; ``around(name)`` (if given) is entered around
    each sample (e.g. to put an implementation in place). The collector is
    off while sampling."""
    samples: dict[str, list[float]] = {name: [] for group in groups for name in group}
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            for group in groups:
                keys = list(group)
                k = r % len(keys)
                for name in keys[k:] + keys[:k]:
                    with around(name) if around else contextlib.nullcontext():
                        samples[name].append(time_calls(group[name], reps[name]))
    finally:
        gc.enable()
    return samples
