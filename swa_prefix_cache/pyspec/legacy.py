"""vLLM 0.33.0's O(N) sliding-window scan, transcribed onto a boolean mask.

Source: ``SlidingWindowManager.find_longest_cache_hit`` in
``vllm/v1/core/single_type_kv_cache_manager.py`` (0.33.0 wheel). The loop
and the list operations are kept line for line; ``get_cached_block``
becomes ``cached[i]`` and a cached block is represented by its index, a
null block by ``None``. This is the reference the fast search is tested
against; it is deliberately not clever.
"""

from collections.abc import Sequence

from swa_prefix_cache.pyspec.params import SearchParams, contiguous_blocks_for_hit
from swa_prefix_cache.pyspec.search import HitResult


def legacy_scan(
    cached: Sequence[bool],
    max_length: int,
    block_size: int,
    sliding_window: int,
    alignment_tokens: int,
    drop_eagle_block: bool,
) -> HitResult:
    """Right-to-left scan exactly as vLLM does it; returns the same HitResult
    as ``find_hit`` would, derived from the literal output list."""
    # Same argument checks as the fast path, so both reject the same inputs.
    SearchParams.from_vllm(
        max_length, block_size, sliding_window, alignment_tokens, drop_eagle_block
    )
    sliding_window_contiguous_blocks = contiguous_blocks_for_hit(
        sliding_window, block_size, drop_eagle_block
    )
    max_num_blocks = max_length // block_size
    if len(cached) < max_num_blocks:
        raise ValueError(
            f"cached has {len(cached)} entries, fewer than n = {max_num_blocks}"
        )
    computed: list[int | None] = [None] * max_num_blocks
    num_contiguous_blocks = 0
    match_found = False
    for i in range(max_num_blocks - 1, -1, -1):
        if cached[i]:
            if num_contiguous_blocks == 0 and block_size != alignment_tokens:
                post_pop_blocks = i if drop_eagle_block else i + 1
                if (post_pop_blocks * block_size) % alignment_tokens != 0:
                    continue
            computed[i] = i
            num_contiguous_blocks += 1
            if num_contiguous_blocks >= sliding_window_contiguous_blocks:
                del computed[i + num_contiguous_blocks :]
                match_found = True
                break
        else:
            num_contiguous_blocks = 0
    if not match_found:
        del computed[num_contiguous_blocks:]
        while (
            block_size != alignment_tokens
            and len(computed) * block_size % alignment_tokens != 0
        ):
            computed.pop()
    if drop_eagle_block and computed:
        computed.pop()
        while (
            block_size != alignment_tokens
            and len(computed) * block_size % alignment_tokens != 0
        ):
            computed.pop()
    first_real = next(
        (k for k, block in enumerate(computed) if block is not None), len(computed)
    )
    # Every entry from first_real on is a real block: vLLM never leaves a
    # null hole inside the hit. Check it, so a transcription slip shows.
    assert all(block is not None for block in computed[first_real:])
    return HitResult(length=len(computed), first_real=first_real)
