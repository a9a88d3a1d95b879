# The replacement for vLLM 0.33.0's SlidingWindowManager.find_longest_cache_hit,
# written in vLLM's own style for an upstream pull request (docs/upstream.md).
#
# Only the method BODY below is ours: upstream/make_patch.py finds the method
# in the installed vLLM by its AST, checks that the decorator and signature
# here are vLLM's, token for token, and puts this body in place of vLLM's (plus
# `import math`). The class around it is a stub so that this file is valid
# Python; it is never imported. The body is pyspec's stride_search followed by
# prefix_fallback (swa_prefix_cache/pyspec/search.py, proved equal to vLLM's scan in
# swa_prefix_cache/core/proved/prefix_cache.c and Lean/PrefixCache), with vLLM's names and its
# BlockPool.get_cached_block probe.
import math

from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import (
    BlockHashList,
    KVCacheBlock,
    resolve_block_hashes,
)
from vllm.v1.kv_cache_interface import KVCacheSpec, SlidingWindowSpec


class SlidingWindowManager:
    supports_fine_grained_hash_lookup = False

    @classmethod
    def _contiguous_blocks_for_hit(
        cls, window_size: int, block_size: int, use_eagle: bool
    ) -> int:
        raise NotImplementedError  # vLLM's own; not part of the patch

    @classmethod
    def find_longest_cache_hit(
        cls,
        block_hashes: BlockHashList,
        max_length: int,
        kv_cache_group_ids: list[int],
        block_pool: BlockPool,
        kv_cache_spec: KVCacheSpec,
        drop_eagle_block: bool,
        alignment_tokens: int,
        dcp_world_size: int = 1,
        pcp_world_size: int = 1,
    ) -> tuple[tuple[list[KVCacheBlock], ...], int]:
        assert isinstance(kv_cache_spec, SlidingWindowSpec), (
            "SlidingWindowManager can only be used for sliding window groups"
        )
        assert dcp_world_size == 1, "DCP not support sliding window attn now."
        assert pcp_world_size == 1, "PCP not support sliding window attn now."
        # Sliding-window cache hits must stay at the group's physical block
        # granularity. resolve_block_hashes() converts finer-grained hashes to
        # that view when the hybrid-cache alignment is smaller than block_size.
        block_hashes = resolve_block_hashes(
            block_hashes,
            block_pool.hash_block_size,
            kv_cache_spec.block_size,
            supports_fine_grained_hash_lookup=cls.supports_fine_grained_hash_lookup,
            alignment_tokens=alignment_tokens,
        )

        # The number of contiguous blocks needed for a prefix cache hit. A
        # window of 0 or 1 token gives 0 or less: one cached block is enough
        # then, as it is for a right-to-left scan.
        sliding_window_contiguous_blocks = max(
            cls._contiguous_blocks_for_hit(
                kv_cache_spec.sliding_window, kv_cache_spec.block_size, drop_eagle_block
            ),
            1,
        )
        block_size = kv_cache_spec.block_size
        max_num_blocks = max_length // block_size
        # A hit of `n` blocks is kept only if `n * block_size` is a multiple of
        # `alignment_tokens`, i.e. if `n` is a multiple of `alignment_blocks`.
        alignment_blocks = alignment_tokens // math.gcd(alignment_tokens, block_size)
        # With EAGLE the last matched block is dropped: a run of cached blocks
        # ending before block `end` is a hit of `end - num_eagle_blocks` blocks.
        num_eagle_blocks = 1 if drop_eagle_block else 0

        # The hit is the rightmost run of `sliding_window_contiguous_blocks`
        # cached blocks whose hit length passes the alignment check, the run a
        # right-to-left scan meets first. Each candidate run [start, end) is
        # checked from its left end, so that a cache miss at block `i` rules
        # out every candidate containing `i` at once: the next one ends at or
        # before `i`. This takes O(max_num_blocks /
        # sliding_window_contiguous_blocks + sliding_window_contiguous_blocks)
        # lookups instead of O(max_num_blocks) at a low hit rate; the loop
        # looks up every block at most once. Loop invariants:
        #   * no run ending in (end_bound, max_num_blocks] whose hit length
        #     passes the alignment check is fully cached;
        #   * blocks [known_cached_start, end_bound) are cached, and their
        #     blocks are in `cached_blocks`.
        # Block index -> the cached block of each group in kv_cache_group_ids.
        cached_blocks: dict[int, list[KVCacheBlock]] = {}
        end_bound = max_num_blocks
        known_cached_start = max_num_blocks
        match_end = -1
        while True:
            # The largest end <= end_bound whose hit length is aligned.
            end = end_bound - (end_bound - num_eagle_blocks) % alignment_blocks
            start = end - sliding_window_contiguous_blocks
            if start < 0:
                break
            # [scan_end, end) is known to be cached already.
            scan_end = min(end, known_cached_start)
            i = start
            while i < scan_end and (
                cached_block := block_pool.get_cached_block(
                    block_hashes[i], kv_cache_group_ids
                )
            ):
                cached_blocks[i] = cached_block
                i += 1
            if i == scan_end:
                match_end = end
                break
            # Block i is a miss: every run ending in (i, end] contains it, and
            # no run ending in (end, end_bound] passes the alignment check.
            end_bound = i
            known_cached_start = start

        if match_end >= 0:
            # The blocks before the window are not needed.
            # E.g., [NULL, NULL, 8, 3] when sliding_window_contiguous_blocks=2.
            num_null_blocks = match_end - sliding_window_contiguous_blocks
            num_computed_blocks = match_end - num_eagle_blocks
        else:
            # The cached blocks from block 0 are a cache hit even if there are
            # fewer than `sliding_window_contiguous_blocks` of them. Only the
            # first `sliding_window_contiguous_blocks - 1` can matter: a longer
            # hit from block 0 would end with a run found above.
            num_null_blocks = 0
            num_prefix_blocks = 0
            while num_prefix_blocks < min(
                sliding_window_contiguous_blocks - 1, max_num_blocks
            ) and (
                cached_block := cached_blocks.get(num_prefix_blocks)
                or block_pool.get_cached_block(
                    block_hashes[num_prefix_blocks], kv_cache_group_ids
                )
            ):
                cached_blocks[num_prefix_blocks] = cached_block
                num_prefix_blocks += 1
            # As the right-to-left scan does: the run starts at the last block
            # whose hit length passes the alignment check, is cut back to the
            # alignment, then the EAGLE block is dropped and it is cut back
            # again (hybrid models with different page sizes, e.g. Gemma4).
            num_computed_blocks = max(
                num_prefix_blocks
                - (num_prefix_blocks - num_eagle_blocks) % alignment_blocks,
                0,
            )
            num_computed_blocks -= num_computed_blocks % alignment_blocks
            if drop_eagle_block and num_computed_blocks > 0:
                num_computed_blocks -= 1
                num_computed_blocks -= num_computed_blocks % alignment_blocks

        computed_blocks: tuple[list[KVCacheBlock], ...] = tuple(
            [block_pool.null_block] * num_computed_blocks
            for _ in range(len(kv_cache_group_ids))
        )
        for group, computed in enumerate(computed_blocks):
            computed[num_null_blocks:] = [
                cached_blocks[i][group]
                for i in range(num_null_blocks, num_computed_blocks)
            ]
        hit_length = len(computed_blocks[0]) * block_size
        return computed_blocks, hit_length
