"""The lookup parameters: the proved C (swa_prefix_cache/core/proved/params.c through the
cffi library) against its one Python twin (swa_prefix_cache/pyspec/params.py) and against
vLLM's own ``SlidingWindowManager._contiguous_blocks_for_hit``.

* run length: every window -3..300 tokens, block sizes 1..64, EAGLE on
  and off, exhaustively; then random windows and block sizes up to 2**62;
* alignment period: block sizes 1..64 against alignments 1..256 and the
  multiples and divisors of the block size, exhaustively; then random
  values up to 2**62; the period is vLLM's gate in blocks: ``k`` blocks pass
  ``(k * block_size) % alignment_tokens == 0`` exactly when ``k`` is a
  multiple of it;
* the cffi declarations are params.h's prototypes, and bad input gets a
  ValueError naming the argument (in C and in Python).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from conftest import require_native

from benchmarks import cffi_core as native
from swa_prefix_cache.pyspec.params import alignment_period, contiguous_blocks_for_hit, search_need

LIMIT = native.SIZE_LIMIT
RANDOM_CASES = 20_000


@pytest.fixture(scope="module", autouse=True)
def _lib() -> None:
    require_native()


def _vllm_contiguous_blocks(window: int, block_size: int, eagle: bool) -> int:
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    return SlidingWindowManager._contiguous_blocks_for_hit(window, block_size, eagle)


def test_cdef_matches_header() -> None:
    """The loader's declarations are params.h's prototypes, token for token."""
    header = (Path(__file__).resolve().parent.parent / "swa_prefix_cache" / "core" / "proved" / "params.h").read_text()
    header = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
    header = re.sub(r"//[^\n]*", " ", header)

    def normalize(s: str) -> str:
        return " ".join(re.findall(r"\w+|[^\w\s]", s))

    flat = normalize(header)
    decls = [normalize(d) for d in native.CDEF_PARAMS.strip().split(";") if d.strip()]
    assert len(decls) == 3
    for decl in decls:
        assert decl in flat, decl


def test_run_length_exhaustive_small() -> None:
    """C == Python == vLLM on every small window, block size and EAGLE flag."""
    for block_size in range(1, 65):
        for window in range(-3, 301):
            for eagle in (False, True):
                want = _vllm_contiguous_blocks(window, block_size, eagle)
                assert contiguous_blocks_for_hit(window, block_size, eagle) == want
                assert native.contiguous_blocks_for_hit(window, block_size, eagle) == want, (
                    window, block_size, eagle)
                assert native.search_need(window, block_size, eagle) == max(want, 1)
                assert search_need(window, block_size, eagle) == max(want, 1)


def test_run_length_examples() -> None:
    """Hand-checked values: the -1, the ceiling, EAGLE, degenerate windows."""
    assert native.contiguous_blocks_for_hit(4096, 16, False) == 256  # 4095 / 16 rounded up
    assert native.contiguous_blocks_for_hit(4097, 16, False) == 256  # 4096 / 16 exactly
    assert native.contiguous_blocks_for_hit(4098, 16, False) == 257
    assert native.contiguous_blocks_for_hit(4097, 16, True) == 257
    assert native.contiguous_blocks_for_hit(1, 16, False) == 0
    assert native.contiguous_blocks_for_hit(0, 16, False) == 0  # cdiv(-1, 16)
    assert native.contiguous_blocks_for_hit(0, 1, False) == -1  # cdiv(-1, 1)
    assert native.contiguous_blocks_for_hit(-3, 2, False) == -2  # cdiv(-4, 2)
    assert native.search_need(0, 1, False) == 1
    assert native.search_need(1, 16, True) == 1


def test_run_length_random_large() -> None:
    rng = random.Random(20260)
    for _ in range(RANDOM_CASES):
        window = rng.randint(-LIMIT, LIMIT)
        block_size = rng.choice((rng.randint(1, 4096), rng.randint(1, LIMIT)))
        eagle = rng.random() < 0.5
        want = _vllm_contiguous_blocks(window, block_size, eagle)
        assert contiguous_blocks_for_hit(window, block_size, eagle) == want
        assert native.contiguous_blocks_for_hit(window, block_size, eagle) == want, (
            window, block_size, eagle)
        assert native.search_need(window, block_size, eagle) == max(want, 1)
    for window in (-LIMIT, -LIMIT + 1, LIMIT - 1, LIMIT):
        for block_size in (1, 2, 3, LIMIT - 1, LIMIT):
            for eagle in (False, True):
                want = _vllm_contiguous_blocks(window, block_size, eagle)
                assert native.contiguous_blocks_for_hit(window, block_size, eagle) == want


def _is_vllm_gate_period(period: int, block_size: int, alignment: int) -> bool:
    """``period`` is the least k >= 1 with (k * block_size) % alignment == 0,
    and every k passes vLLM's gate exactly when it is a multiple of it."""
    return all(
        ((k * block_size) % alignment == 0) == (k % period == 0)
        for k in range(0, 3 * period + 2)
    )


def test_alignment_period_exhaustive_small() -> None:
    for block_size in range(1, 65):
        alignments = set(range(1, 257))
        alignments.update(block_size * m for m in range(1, 17))
        alignments.update(d for d in range(1, block_size + 1) if block_size % d == 0)
        for alignment in sorted(alignments):
            got = native.alignment_period(block_size, alignment)
            assert got == alignment_period(block_size, alignment), (block_size, alignment)
            assert _is_vllm_gate_period(got, block_size, alignment), (block_size, alignment)


def test_alignment_period_examples() -> None:
    assert native.alignment_period(16, 16) == 1  # vLLM's common case
    assert native.alignment_period(16, 64) == 4  # hybrid: alignment a multiple
    assert native.alignment_period(64, 16) == 1  # fine-grained hashes
    assert native.alignment_period(12, 32) == 8  # neither: 32 / gcd(32, 12)
    assert native.alignment_period(7, 5) == 5


def test_alignment_period_random_large() -> None:
    rng = random.Random(20261)
    for _ in range(RANDOM_CASES):
        block_size = rng.choice((rng.randint(1, 4096), rng.randint(1, LIMIT)))
        kind = rng.randrange(3)
        if kind == 0:
            alignment = block_size * rng.randint(1, max(1, LIMIT // block_size))
        elif kind == 1:
            alignment = max(1, block_size // rng.randint(1, 64))
        else:
            alignment = rng.randint(1, LIMIT)
        got = native.alignment_period(block_size, alignment)
        assert got == alignment_period(block_size, alignment), (block_size, alignment)
        assert 1 <= got <= alignment
        assert (got * block_size) % alignment == 0
    for block_size in (1, 2, LIMIT - 1, LIMIT):
        for alignment in (1, 2, LIMIT - 1, LIMIT):
            assert native.alignment_period(block_size, alignment) == alignment_period(
                block_size, alignment)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda f: f.contiguous_blocks_for_hit(10, 0, False), "block_size"),
        (lambda f: f.contiguous_blocks_for_hit(10, -4, True), "block_size"),
        (lambda f: f.contiguous_blocks_for_hit(10.0, 4, True), "sliding_window"),
        (lambda f: f.contiguous_blocks_for_hit(True, 4, True), "sliding_window"),
        (lambda f: f.alignment_period(0, 16), "block_size"),
        (lambda f: f.alignment_period(16, 0), "alignment_tokens"),
        (lambda f: f.alignment_period(16, "16"), "alignment_tokens"),
    ],
)
def test_bad_input_names_the_argument(call: object, name: str) -> None:
    import swa_prefix_cache.pyspec.params as twin

    for module in (native, twin):
        with pytest.raises(ValueError, match=name):
            call(module)  # type: ignore[operator]


def test_native_bad_input_out_of_range() -> None:
    """Outside params.h's preconditions the C is never called."""
    with pytest.raises(ValueError, match="sliding_window"):
        native.contiguous_blocks_for_hit(LIMIT + 1, 16, False)
    with pytest.raises(ValueError, match="block_size"):
        native.search_need(16, LIMIT + 1, False)
    with pytest.raises(ValueError, match="eagle"):
        native.search_need(16, 16, 1)
    with pytest.raises(ValueError, match="alignment_tokens"):
        native.alignment_period(16, LIMIT + 1)


# ---- the Lean definitions (Lean/PrefixCache/Spec/Params.lean) ---------------


def _lean_cdiv_int(a: int, b: int) -> int:
    """``cdivInt``, transcribed: Nat division only."""
    if a > 0:
        return (a + b - 1) // b
    return -((-a) // b)


def _lean_search_need(w: int, bs: int, eagle: bool) -> int:
    """``searchNeed``: ``effNeed`` of ``toNat`` (negative -> 0 -> 1)."""
    need = max(_lean_cdiv_int(w - 1, bs) + (1 if eagle else 0), 0)
    return 1 if need == 0 else need


def test_params_transcription_matches_pyspec() -> None:
    """The Lean definitions equal pyspec's on every small input."""
    from math import gcd

    for bs in range(1, 33):
        for w in range(-3, 200):
            for eagle in (False, True):
                lean = _lean_cdiv_int(w - 1, bs) + (1 if eagle else 0)
                assert lean == contiguous_blocks_for_hit(w, bs, eagle)
                assert _lean_search_need(w, bs, eagle) == search_need(w, bs, eagle)
        for align in range(1, 200):
            assert align // gcd(align, bs) == alignment_period(bs, align)


def test_lean_theorems_as_properties() -> None:
    """``cdivNat_ceiling``, ``contiguousBlocksForHit_eagle``,
    ``searchNeed_pos``, ``alignmentPeriod_coarse`` on small inputs."""
    for bs in range(1, 33):
        for n in range(0, 200):
            q = (n + bs - 1) // bs
            assert n <= bs * q < n + bs
        for w in range(-3, 200):
            with_eagle = contiguous_blocks_for_hit(w, bs, True)
            assert with_eagle == contiguous_blocks_for_hit(w, bs, False) + 1
            assert search_need(w, bs, False) >= 1 and search_need(w, bs, True) >= 1
        for m in range(1, 20):
            assert alignment_period(bs, bs * m) == m
