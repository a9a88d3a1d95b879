# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""SlidingWindowManager.find_longest_cache_hit against a right-to-left scan.

The reference below is the straightforward scan: walk the blocks from the
right, keep the first run of enough cached blocks whose hit length passes the
alignment check, else the cached blocks from block 0, then drop the EAGLE
block. The manager must return the same hit length and the very same blocks.
"""

import random

import pytest
import torch

from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
from vllm.v1.kv_cache_interface import SlidingWindowSpec

pytestmark = pytest.mark.cpu_test


def reference_cache_hit(
    is_cached: list[bool],
    num_contiguous_blocks: int,
    block_size: int,
    alignment_tokens: int,
    use_eagle: bool,
) -> tuple[int, int]:
    """Returns (number of leading null blocks, number of blocks in the hit)."""

    def aligned(num_blocks: int) -> bool:
        return num_blocks * block_size % alignment_tokens == 0

    num_blocks = len(is_cached)
    run = 0
    for i in range(num_blocks - 1, -1, -1):
        if not is_cached[i]:
            run = 0
            continue
        # The run must start (from the right) where the hit length, after
        # the EAGLE drop, is aligned.
        if run == 0 and not aligned(i if use_eagle else i + 1):
            continue
        run += 1
        if run >= num_contiguous_blocks:
            # The run [i, i + run) is the window; EAGLE drops its last block.
            return i, i + run - (1 if use_eagle else 0)
    # No full window: the cached blocks from block 0.
    hit = run
    while not aligned(hit):
        hit -= 1
    if use_eagle and hit > 0:
        hit -= 1
        while not aligned(hit):
            hit -= 1
    return 0, hit


def random_mask(rng: random.Random, num_blocks: int, window_blocks: int) -> list[bool]:
    kind = rng.choice(["sparse", "dense", "runs", "prefix"])
    if kind == "sparse":
        return [rng.random() < 0.1 for _ in range(num_blocks)]
    if kind == "dense":
        return [rng.random() < 0.9 for _ in range(num_blocks)]
    if kind == "prefix":
        cut = rng.randint(0, num_blocks)
        return [i < cut for i in range(num_blocks)]
    mask: list[bool] = []
    while len(mask) < num_blocks:
        # Runs around the window length, the hardest case for a skipping search.
        mask += [True] * rng.randint(max(window_blocks - 2, 0), window_blocks + 1)
        mask += [False] * rng.randint(1, 2)
    return mask[:num_blocks]


@pytest.mark.parametrize("block_size", [1, 2, 16])
@pytest.mark.parametrize("use_eagle", [False, True])
@pytest.mark.parametrize("num_groups", [1, 2])
def test_sliding_window_cache_hit_matches_right_to_left_scan(
    block_size: int, use_eagle: bool, num_groups: int
):
    rng = random.Random(block_size * 4 + use_eagle * 2 + num_groups)
    group_ids = list(range(num_groups))
    for _ in range(300):
        num_blocks = rng.randint(0, 64)
        # Windows of 0 and 1 token need one block, like any window <= block.
        sliding_window = rng.choice([0, 1, rng.randint(2, 20 * block_size)])
        alignment_tokens = block_size * rng.choice([1, 1, 2, 3, 4])
        spec = SlidingWindowSpec(
            block_size=block_size,
            num_kv_heads=1,
            head_size=1,
            dtype=torch.float32,
            sliding_window=sliding_window,
        )
        num_contiguous_blocks = max(
            SlidingWindowManager._contiguous_blocks_for_hit(
                sliding_window, block_size, use_eagle
            ),
            1,
        )
        is_cached = random_mask(rng, num_blocks, num_contiguous_blocks)
        block_pool = BlockPool(
            num_gpu_blocks=num_groups * num_blocks + 1,
            enable_caching=True,
            hash_block_size=block_size,
        )
        block_hashes = [BlockHash(rng.randbytes(32)) for _ in range(num_blocks)]
        free_blocks = iter(block_pool.blocks[1:])
        planted = {}
        for i, block_hash in enumerate(block_hashes):
            # A block missing from one group only is still a cache miss.
            partial = not is_cached[i] and num_groups > 1 and rng.random() < 0.5
            for group_id in group_ids[:1] if partial else group_ids:
                if is_cached[i] or partial:
                    block = next(free_blocks)
                    block_pool.cached_block_hash_to_block.insert(
                        make_block_hash_with_group_id(block_hash, group_id), block
                    )
                    planted[i, group_id] = block

        computed_blocks, hit_length = SlidingWindowManager.find_longest_cache_hit(
            block_hashes=block_hashes,
            max_length=num_blocks * block_size + rng.randint(0, block_size - 1),
            kv_cache_group_ids=group_ids,
            block_pool=block_pool,
            kv_cache_spec=spec,
            drop_eagle_block=use_eagle,
            alignment_tokens=alignment_tokens,
        )

        num_null, num_hit = reference_cache_hit(
            is_cached, num_contiguous_blocks, block_size, alignment_tokens, use_eagle
        )
        assert hit_length == num_hit * block_size
        assert len(computed_blocks) == num_groups
        for group_id, blocks in zip(group_ids, computed_blocks):
            assert blocks[:num_null] == [block_pool.null_block] * num_null
            assert len(blocks) == num_hit
            for i in range(num_null, num_hit):
                assert blocks[i] is planted[i, group_id]


@pytest.mark.parametrize("sliding_window", [64, 128, 1024])
def test_sliding_window_cache_miss_lookups(sliding_window: int):
    """A cache miss costs about max_num_blocks / window blocks lookups."""
    block_size = 16
    num_blocks = 2048
    spec = SlidingWindowSpec(
        block_size=block_size,
        num_kv_heads=1,
        head_size=1,
        dtype=torch.float32,
        sliding_window=sliding_window,
    )
    block_pool = BlockPool(
        num_gpu_blocks=10, enable_caching=True, hash_block_size=block_size
    )
    block_hashes = [BlockHash(str(i).encode()) for i in range(num_blocks)]
    num_lookups = 0
    get_cached_block = block_pool.get_cached_block

    def counting_get_cached_block(*args, **kwargs):
        nonlocal num_lookups
        num_lookups += 1
        return get_cached_block(*args, **kwargs)

    block_pool.get_cached_block = counting_get_cached_block
    computed_blocks, hit_length = SlidingWindowManager.find_longest_cache_hit(
        block_hashes=block_hashes,
        max_length=num_blocks * block_size,
        kv_cache_group_ids=[0],
        block_pool=block_pool,
        kv_cache_spec=spec,
        drop_eagle_block=False,
        alignment_tokens=block_size,
    )
    assert hit_length == 0 and computed_blocks == ([],)
    num_contiguous_blocks = SlidingWindowManager._contiguous_blocks_for_hit(
        sliding_window, block_size, False
    )
    assert num_lookups <= num_blocks // num_contiguous_blocks + 1
