"""Unit facts about pyspec that the proofs and the C code rely on."""

import math

import pytest

from swa_prefix_cache.pyspec import (
    CountingMask,
    SearchParams,
    alignment_period,
    cdiv,
    contiguous_blocks_for_hit,
    find_hit,
    legacy_scan,
    realign,
)


def test_cdiv_matches_vllm_on_negatives() -> None:
    # vLLM's cdiv is -(a // -b): cdiv(-1, 16) == 0, cdiv(-17, 16) == -1.
    assert [cdiv(a, 16) for a in (-17, -16, -1, 0, 1, 16, 17)] == [-1, -1, 0, 0, 1, 1, 2]


def test_contiguous_blocks_for_hit_examples() -> None:
    # A 2,048-token window at block size 16 needs 128 blocks (2047 / 16, rounded up).
    assert contiguous_blocks_for_hit(2048, 16, False) == 128
    assert contiguous_blocks_for_hit(2048, 16, True) == 129
    assert contiguous_blocks_for_hit(129, 16, False) == 8
    assert contiguous_blocks_for_hit(1, 16, False) == 0
    assert contiguous_blocks_for_hit(0, 16, False) == 0


@pytest.mark.parametrize("block_size", range(1, 13))
@pytest.mark.parametrize("alignment_tokens", range(1, 40))
def test_alignment_period_is_vllms_gate(block_size: int, alignment_tokens: int) -> None:
    """(k * block_size) % alignment_tokens == 0  <=>  k % period == 0."""
    period = alignment_period(block_size, alignment_tokens)
    for k in range(0, 3 * alignment_tokens + 2):
        assert ((k * block_size) % alignment_tokens == 0) == (k % period == 0)
    if block_size == alignment_tokens:
        assert period == 1
    assert period == alignment_tokens // math.gcd(alignment_tokens, block_size)


@pytest.mark.parametrize("period", range(1, 7))
def test_realign_is_vllms_pop_loop(period: int) -> None:
    for length in range(0, 40):
        popped = length
        while popped % period != 0:
            popped -= 1
        assert realign(length, period) == popped


def test_vllm_docstring_example() -> None:
    """vLLM's docstring: block size 4, window 8 -> [NULL, NULL, 7, 8]."""
    cached = [False, False, True, True]
    p = SearchParams.from_vllm(16, 4, 8, 4, False)
    hit = find_hit(cached, p)
    assert (hit.length, hit.first_real) == (4, 2)
    assert legacy_scan(cached, 16, 4, 8, 4, False) == hit


def test_stride_skips_a_window_per_miss() -> None:
    """An empty cache costs about n / need probes, not n."""
    n, need = 2048, 128
    mask = CountingMask([False] * n)
    hit = find_hit(mask, SearchParams(n=n, need=need, period=1, eagle=False))
    assert hit.length == 0
    # 16 anchors (ends 2048, 1920, ..., 128) and block 0 for the fallback.
    assert mask.probes == n // need + 1
    legacy = CountingMask([False] * n)
    legacy_scan(legacy, n, 1, need + 1, 1, False)
    assert legacy.probes == n
