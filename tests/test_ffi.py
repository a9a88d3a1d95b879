"""Randomized differential tests of the C library against pyspec.

Masks of up to 16,384 blocks drawn as sparse, dense, long runs, uniform,
and adversarial (runs of ``need - 1``). The C ``find_hit`` must return what
``swa_prefix_cache.pyspec.find_hit`` and the transcribed vLLM loop return, with the same
probe count as the Python stride search; the C ``legacy_scan`` must agree
too. ``PREFIX_CACHE_FFI_CASES`` sets the number of examples (default 1200).
"""

import os
import random
import re

from conftest import CASE_COUNTS, require_native
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks import cffi_core as native
from masks import MASK_KINDS, make_mask
from swa_prefix_cache.pyspec import CountingMask, SearchParams, find_hit, legacy_scan

FFI_CASES = int(os.environ.get("PREFIX_CACHE_FFI_CASES", "1200"))
MAX_N = 16384

sizes = st.one_of(
    st.integers(0, 64), st.integers(0, 2048), st.integers(MAX_N - 64, MAX_N)
)


@settings(
    max_examples=FFI_CASES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    n=sizes,
    kind=st.sampled_from(MASK_KINDS),
    need=st.one_of(st.integers(-2, 8), st.integers(9, 300)),
    period=st.one_of(st.just(1), st.integers(2, 8)),
    eagle=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_c_matches_spec(n: int, kind: str, need: int, period: int, eagle: bool, seed: int) -> None:
    require_native()
    mask = make_mask(random.Random(seed), n, kind, max(need, 1))
    # With block_size 1 the vLLM arguments map one to one onto (need, period):
    # need = sliding_window - 1 + eagle, period = alignment_tokens.
    raw = (n, 1, need + 1 - int(eagle), period, eagle)
    p = SearchParams.from_vllm(*raw)
    spec_mask = CountingMask(mask)
    expected = find_hit(spec_mask, p)
    fast = native.find_hit(mask, n, need, period, eagle)
    assert fast.hit == expected
    assert fast.probes == spec_mask.probes
    # Each block is probed at most once by the stride search, and the prefix
    # fallback reads at most need - 1 more.
    assert fast.probes <= n + max(need - 1, 0)
    reads: list[int] = []
    probed = native.find_hit_probe(lambda i: reads.append(i) or mask[i] != 0, n, need, period, eagle)
    assert probed == expected
    # The probe instance reads exactly as often as the mask instance does.
    assert len(reads) == fast.probes
    assert all(0 <= i < n for i in reads)
    assert legacy_scan(mask, *raw) == expected
    slow = native.legacy_scan(mask, n, need, period, eagle)
    assert slow.hit == expected
    CASE_COUNTS["ffi hypothesis (C vs pyspec)"] += 1


def test_cdef_matches_header() -> None:
    """The loader's declarations are the header's prototypes, token for token."""
    header = (native.PROVED_DIR / "prefix_cache.h").read_text()
    header = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
    header = re.sub(r"//[^\n]*", " ", header)

    def normalize(text: str) -> str:
        return " ".join(re.findall(r"\w+|[^\w\s]", text))

    flat_header = normalize(header)
    for decl in native.CDEF.strip().split(";"):
        decl = normalize(decl)
        if decl:
            assert decl in flat_header, decl
