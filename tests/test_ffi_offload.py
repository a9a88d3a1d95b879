"""The C KV-offload lookup (swa_prefix_cache/core/proved/offload_lookup.c, through
benchmarks/cffi_core.py) equals swa_prefix_cache/pyspec/offload_lookup.py.

Exhaustive on every three-valued mask of up to 7 chunks, every window
0..n+1 and initial window None/0..n+1; Hypothesis up to thousands of chunks.
For each case: C ``offload_stride_search`` == C ``legacy_offload_scan`` ==
the probe instance == pyspec (all three functions), with the same reads as
pyspec's stride search (mask and probe instance alike) and, for the legacy
loop, the same reads as pyspec's transcription of vLLM's loop.
"""

from __future__ import annotations

import itertools

import pytest
from conftest import CASE_COUNTS, require_native
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks import cffi_core as native
from swa_prefix_cache.pyspec.offload_lookup import (
    HIT,
    HIT_PENDING,
    MISS,
    CountingChunks,
    legacy_offload_scan,
    offload_lookup,
    offload_stride_search,
)


@pytest.fixture(autouse=True)
def _native() -> None:
    require_native()


def check(mask: list[int], window: int, initial: int | None) -> None:
    n = len(mask)
    buf = bytes(mask)
    py_stride = CountingChunks(mask)
    py_legacy = CountingChunks(mask)
    want = offload_stride_search(py_stride, n, window, initial)
    assert legacy_offload_scan(py_legacy, n, window, initial) == want
    assert offload_lookup(mask, window, initial) == want
    c_stride = native.offload_stride_search(buf, window, initial)
    c_legacy = native.legacy_offload_scan(buf, window, initial)
    seen: list[int] = []

    def probe(i: int) -> int:
        seen.append(i)
        return mask[i]

    c_probe = native.offload_stride_search_probe(probe, n, window, initial)
    assert c_stride == (want, py_stride.probes), (mask, window, initial)
    assert c_probe == (want, py_stride.probes), (mask, window, initial)
    assert seen == py_stride.seen, "the probe instance reads other chunks"
    assert c_legacy == (want, py_legacy.probes), (mask, window, initial)


def test_exhaustive_small() -> None:
    count = 0
    for n in range(8):
        for mask in itertools.product((MISS, HIT, HIT_PENDING), repeat=n):
            for window in range(n + 2):
                for initial in [None, *range(n + 2)]:
                    check(list(mask), window, initial)
                    count += 1
    CASE_COUNTS["ffi offload exhaustive"] += count
    assert count > 200_000


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mask=st.one_of(
        st.lists(st.sampled_from([HIT] * 30 + [HIT_PENDING, MISS]), max_size=4000),
        st.lists(st.sampled_from([MISS, HIT, HIT_PENDING]), max_size=4000),
        st.lists(st.sampled_from([MISS] * 8 + [HIT, HIT_PENDING]), max_size=4000),
    ),
    window=st.integers(0, 80),
    initial=st.one_of(st.none(), st.integers(0, 90)),
)
def test_hypothesis_large(mask: list[int], window: int, initial: int | None) -> None:
    check(mask, window, initial)
    CASE_COUNTS["ffi offload hypothesis"] += 1


def test_huge_sizes_accepted() -> None:
    """Windows up to 2^62 and None/0 initial windows (no overflow: WP -rte)."""
    big = native.SIZE_LIMIT
    assert native.offload_stride_search(bytes([1, 1, 0, 1]), big, None) == (2, 4)
    assert native.offload_stride_search(bytes([1, 1, 1]), 0, big) == (3, 3)
    assert native.legacy_offload_scan(bytes([1, 1, 1]), big, 0) == (3, 3)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"chunks": None}, "chunks"),
        ({"chunks": "abc"}, "chunks"),
        ({"chunks": [1, 2]}, "chunks"),
        ({"chunks": bytes([0, 3])}, "chunks"),
        ({"chunks": memoryview(bytes(8)).cast("I")}, "chunks"),
        ({"window": -1}, "window"),
        ({"window": True}, "window"),
        ({"window": 1.0}, "window"),
        ({"window": 1 << 63}, "window"),
        ({"initial_window": -1}, "initial_window"),
        ({"initial_window": False}, "initial_window"),
        ({"initial_window": 1 << 63}, "initial_window"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, name) -> None:  # type: ignore[no-untyped-def]
    args = {"chunks": bytes([1, 0, 1]), "window": 1, "initial_window": None, **kwargs}
    for fn in (native.offload_stride_search, native.legacy_offload_scan):
        with pytest.raises(ValueError, match=name):
            fn(args["chunks"], args["window"], args["initial_window"])


def test_probe_instance_arguments() -> None:
    with pytest.raises(ValueError, match="probe"):
        native.offload_stride_search_probe(None, 1, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n"):
        native.offload_stride_search_probe(lambda i: 1, -1, 1)
    with pytest.raises(ValueError, match="window"):
        native.offload_stride_search_probe(lambda i: 1, 1, -2)
    with pytest.raises(ValueError, match="not 0"):
        native.offload_stride_search_probe(lambda i: 7, 3, 1)

    def boom(i: int) -> int:
        raise KeyError(i)

    with pytest.raises(KeyError):
        native.offload_stride_search_probe(boom, 3, 1)
