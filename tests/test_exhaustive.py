"""Every mask of up to 12 blocks, against every parameter that matters.

For each mask: sliding windows giving every run length ``need`` from 0 to
``n + 1`` (and a negative one), alignment ratios 1-4 (a period of 1-4 blocks) and one alignment that is
not a multiple of the block size,
EAGLE on and off, and ``max_length`` both a multiple of the block size and
one token short of it. Four answers must agree: the transcribed vLLM loop
(``swa_prefix_cache.pyspec.legacy_scan``), the stride search (``swa_prefix_cache.pyspec.find_hit``) and their
C twins (mask and probe instances of find_hit, and legacy_scan); probe
counts must agree between each Python/C pair.
"""

import pytest
from conftest import CASE_COUNTS

from benchmarks import cffi_core as native
from swa_prefix_cache.pyspec import CountingMask, SearchParams, contiguous_blocks_for_hit, find_hit, legacy_scan

BLOCK_SIZE = 2
MAX_BLOCKS = 12


def _windows(n: int) -> list[int]:
    """Sliding windows (tokens) giving need = -1, 0, 1, ..., n + 1 blocks."""
    return [-2 * BLOCK_SIZE, 0, 1] + [k * BLOCK_SIZE + 1 for k in range(1, n + 2)]


@pytest.mark.parametrize("n", range(MAX_BLOCKS + 1))
def test_all_masks_of_length(n: int, lib: None) -> None:
    cases = 0
    for bits in range(1 << n):
        mask = bytes((bits >> i) & 1 for i in range(n))
        for max_length in {n * BLOCK_SIZE, max(n * BLOCK_SIZE - 1, 0)}:
            # Ratios 1-4 of the block size, plus 3 tokens (not a multiple).
            for alignment in (2, 4, 6, 8, 3):
                for window in _windows(n):
                    for eagle in (False, True):
                        raw = (max_length, BLOCK_SIZE, window, alignment, eagle)
                        p = SearchParams.from_vllm(*raw)
                        legacy_mask = CountingMask(mask)
                        expected = legacy_scan(legacy_mask, *raw)
                        spec_mask = CountingMask(mask)
                        assert find_hit(spec_mask, p) == expected, raw
                        raw_need = contiguous_blocks_for_hit(window, BLOCK_SIZE, eagle)
                        fast = native.find_hit(mask, p.n, raw_need, p.period, eagle)
                        assert fast.hit == expected, raw
                        assert fast.probes == spec_mask.probes, raw
                        reads: list[int] = []
                        probed = native.find_hit_probe(
                            lambda i: reads.append(i) or mask[i] != 0,
                            p.n, raw_need, p.period, eagle,
                        )
                        assert probed == expected, raw
                        assert len(reads) == fast.probes, raw
                        slow = native.legacy_scan(mask, p.n, raw_need, p.period, eagle)
                        assert slow.hit == expected, raw
                        assert slow.probes == legacy_mask.probes, raw
                        cases += 1
    CASE_COUNTS["exhaustive (mask x parameters)"] += cases
