"""Executable specification of vLLM's sliding-window prefix-cache lookup.

Pure Python, standard library only. Every name here has a twin in Lean/
(camelCase) and in swa_prefix_cache/core/proved/ (snake_case), so a theorem, a C contract and
a Python test can be read side by side.

The model: block ``i`` of a request is *cached* when ``cached[i]`` is true
(``BlockPool.get_cached_block`` returned blocks for every group). Each read
of ``cached[i]`` is one *probe*.
"""

from swa_prefix_cache.pyspec.legacy import legacy_scan
from swa_prefix_cache.pyspec.params import (
    SearchParams,
    alignment_period,
    cdiv,
    contiguous_blocks_for_hit,
)
from swa_prefix_cache.pyspec.counting_mask import CountingMask
from swa_prefix_cache.pyspec.search import (
    HitResult,
    aligned_end,
    find_hit,
    prefix_fallback,
    realign,
    stride_search,
    valid_window,
)

__all__ = [
    "CountingMask",
    "HitResult",
    "SearchParams",
    "aligned_end",
    "alignment_period",
    "cdiv",
    "contiguous_blocks_for_hit",
    "find_hit",
    "legacy_scan",
    "prefix_fallback",
    "realign",
    "stride_search",
    "valid_window",
]
