"""Fix of L3: without EAGLE, keep the longer sibling's boundary too.

``replay_boundaries`` documents two reachable positions, the resend (capped
at ``N - 1``) and the longer sibling (the final aligned block, ``N``), but
without EAGLE returns only ``N - 1``. On a block-aligned prompt the two
differ and the sibling's tail is dropped under sparse retention. Return
both, as the docstring says (the mask aligns each down to the scheduler
block, so on an unaligned prompt they give the same tail). Mamba groups,
which keep one state per boundary, then also keep the longer sibling's
state of a prompt ending on a scheduler block (vLLM's partial-hit test is
updated for that).

Replacement source for vLLM 0.33.0 (Apache-2.0), written by swa-prefix-cache;
check.py splices it into the installed vLLM by ``ast`` and generates the diff.
"""

TARGETS = {
    "vllm/v1/core/kv_cache_coordinator.py": ["replay_boundaries"],
    # vLLM's tests that pinned the single boundary, updated (and extended
    # with the longer sibling's hit).
    "tests/v1/core/test_prefix_caching.py": [
        "test_hybrid_local_kv_retention_latest_only_reuses_replay_boundary",
        "test_pure_swa_retention_latest_only",
    ],
    "tests/v1/core/prefix_cache/test_partial_prefix_cache_hits.py": [
        "test_dcp_fine_hit_retention_uses_hash_alignment",
    ],
}
BASE = {
    "replay_boundaries": "52b5b29e1460f179e80a7085d2922c494821cb9e8b63a63eb50b78249037c435",
    "test_hybrid_local_kv_retention_latest_only_reuses_replay_boundary": "ef922281755370f1f48e146157ebc1629b79f9f71db8b59e1aa789bb4824d01c",
    "test_pure_swa_retention_latest_only": "b99d5b63c3285ecba5685db883c05d9391e58b4693a3dd560bfb054270568758",
    "test_dcp_fine_hit_retention_uses_hash_alignment": "1a2ea7207ae65be21a0fe9cc1cab2cb8974a8bb0693608cc4914e626eb857265",
}
# The releases whose definitions hash to BASE (byte-identical in each).
RELEASES = ("0.33.0", "0.34.0")


def replay_boundaries(
    num_prompt_tokens: int, scheduler_block_size: int, use_eagle: bool
) -> tuple[int, ...]:
    """Positions a later request replaying a prompt can resume at.

    A hit is the shortest across all groups, so every group retains state
    at each position; EAGLE groups also keep the block above, which they
    match and drop back from (see ``reachable_block_mask``).

    Two positions are reachable: a resend of the identical prompt is capped
    at ``num_tokens - 1`` (its last token is recomputed for logits), a
    longer sibling matches the final aligned block. They differ only on a
    block-aligned prompt, where retaining just the higher one collapses the
    resend's hit to 0. The alignment is the scheduler block size, not the
    finer hash granularity, which would over-estimate the reach.
    """
    if not use_eagle:
        # Both positions: on a block-aligned prompt the resend's aligned
        # boundary is one block below the longer sibling's.
        return (num_prompt_tokens - 1, num_prompt_tokens)
    block = scheduler_block_size
    resend = (num_prompt_tokens - 1) // block * block
    extension = num_prompt_tokens // block * block
    return tuple(sorted({max(resend - block, 0), max(extension - block, 0)}))


# ---- vLLM's tests, updated -------------------------------------------------------


def test_hybrid_local_kv_retention_latest_only_reuses_replay_boundary():
    """Verify latest-only retention reuses only the replayable prompt boundary."""
    block_size = 8
    kv_cache_config = KVCacheConfig(
        num_blocks=100,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer1"],
                FullAttentionSpec(
                    block_size=4 * block_size,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float16,
                ),
            ),
            KVCacheGroupSpec(
                ["layer2"],
                SlidingWindowSpec(
                    block_size=block_size,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float32,
                    sliding_window=block_size,
                ),
            ),
        ],
    )
    manager = make_kv_cache_manager(
        kv_cache_config=kv_cache_config,
        max_model_len=8192,
        enable_caching=True,
        hash_block_size=block_size,
        retention_interval=0,
    )

    token_ids = [i for i in range(16) for _ in range(block_size)]
    req0 = make_request("0", token_ids, block_size, sha256)
    computed_blocks, _, _ = manager.get_computed_blocks(req0)
    blocks = manager.allocate_slots(
        req0,
        len(token_ids),
        len(computed_blocks.blocks[0]) * block_size,
        computed_blocks,
    )
    assert blocks is not None

    pool = manager.block_pool
    # The resend's replay tail (block 11) and the longer sibling's (block 15).
    expected_swa_cached = {11, 15}
    for i in range(16):
        cached = pool.get_cached_block(req0.block_hashes[i], kv_cache_group_ids=[1])
        if i in expected_swa_cached:
            assert cached is not None, f"SWA hash {i} should be cached"
        else:
            assert cached is None, f"SWA hash {i} should not be cached"

    manager.free(req0)
    retained_swa_block = pool.get_cached_block(req0.block_hashes[11], [1])
    assert retained_swa_block is not None
    assert retained_swa_block[0].ref_cnt == 0

    req1 = make_request("1", token_ids, block_size, sha256)
    computed_blocks, num_computed_tokens, _ = manager.get_computed_blocks(req1)
    # Full prompt hits intentionally recompute the final block for logits, so
    # the longest usable hit is the previous LCM boundary: 96 tokens.
    assert num_computed_tokens == 12 * block_size
    assert len(computed_blocks.blocks[1]) == 12

    shorter_req = make_request("2", token_ids[: 12 * block_size], block_size, sha256)
    computed_blocks, num_computed_tokens, _ = manager.get_computed_blocks(shorter_req)
    assert num_computed_tokens == 0
    assert len(computed_blocks.blocks[1]) == 0

    longer_req = make_request(
        "3", token_ids + [16] * block_size, block_size, sha256
    )
    computed_blocks, num_computed_tokens, _ = manager.get_computed_blocks(longer_req)
    assert num_computed_tokens == 16 * block_size


def test_pure_swa_retention_latest_only():
    """`=0` on a pure-SWA model keeps only the latest replay tails: the
    resend's and the longer sibling's."""
    block_size = 16
    manager = _make_pure_swa_manager(
        block_size, sliding_window=block_size, retention_interval=0
    )

    token_ids = [i for i in range(16) for _ in range(block_size)]
    req = make_request("0", token_ids, block_size, sha256)
    computed_blocks, _, _ = manager.get_computed_blocks(req)
    blocks = manager.allocate_slots(
        req,
        len(token_ids),
        len(computed_blocks.blocks[0]) * block_size,
        computed_blocks,
    )
    assert blocks is not None

    pool = manager.block_pool
    cached = {
        i
        for i in range(16)
        if pool.get_cached_block(req.block_hashes[i], kv_cache_group_ids=[0])
        is not None
    }
    # No segment tails (interval 0); only the latest replay tails: block 14
    # for a resend (capped at 255 tokens), block 15 for a longer sibling.
    assert cached == {14, 15}

    replay = make_request("1", token_ids, block_size, sha256)
    _, num_computed, _ = manager.get_computed_blocks(replay)
    assert num_computed == 240

    longer = make_request("2", token_ids + [16] * block_size, block_size, sha256)
    _, num_computed, _ = manager.get_computed_blocks(longer)
    assert num_computed == 256


@pytest.mark.parametrize(
    "dcp_world_size,hash_block_size,block_size,prompt_tokens,checkpoint_blocks",
    [
        (4, 2, 2, 7, 0),
        (8, 16, 16, 512, 1),
        (8, 16, 16, 513, 1),
        *[(8, 128, 896, p, 1) for p in (127, 128, 129, 7040, 7168, 7296, 7449)],
    ],
)
@pytest.mark.parametrize("use_eagle", [False, True])
@pytest.mark.parametrize("extension_tokens", [0, 32])
def test_dcp_fine_hit_retention_uses_hash_alignment(
    dcp_world_size,
    hash_block_size,
    block_size,
    prompt_tokens,
    checkpoint_blocks,
    use_eagle,
    extension_tokens,
):
    """Resends and extensions reuse the retained hash-aligned checkpoint."""
    manager = make_full_mamba_manager(
        dcp_world_size=dcp_world_size,
        hash_block_size=hash_block_size,
        full_block_size=block_size,
        mamba_block_size=block_size,
        num_blocks=128,
        use_eagle=use_eagle,
        num_speculative_blocks=4 if use_eagle else 0,
        num_prefill_checkpoint_blocks=checkpoint_blocks,
    )
    manager.coordinator.retention_interval = 0
    assert manager.coordinator.enable_partial_hash_hits
    scheduler = SimpleNamespace(
        block_size=block_size * dcp_world_size,
        cache_config=SimpleNamespace(block_size=block_size),
        hash_block_size=hash_block_size,
        max_num_scheduled_tokens=8192,
        scheduler_config=SimpleNamespace(long_prefill_token_threshold=0),
        use_eagle_block_drop=use_eagle,
        num_hash_lookahead_tokens=0,
        mamba_partial_cache_hit=True,
        mamba_shared_prefix_checkpoint=False,
        mamba_has_prefill_checkpoint_blocks=bool(checkpoint_blocks),
        mamba_prefill_checkpoint_alignment=16,
    )
    producer = make_request(
        "producer", list(range(prompt_tokens)), hash_block_size, sha256
    )
    while producer.num_computed_tokens < prompt_tokens:
        scheduled = Scheduler._mamba_block_aligned_split(
            scheduler, producer, prompt_tokens - producer.num_computed_tokens
        )
        assert scheduled > 0
        manager.new_step_starts()
        assert manager.allocate_slots(producer, scheduled) is not None
        producer.num_computed_tokens += scheduled
    manager.free(producer)
    manager.new_step_starts()

    replay = make_request(
        "replay", list(range(prompt_tokens + extension_tokens)), hash_block_size, sha256
    )
    _, hit, _ = manager.get_computed_blocks(replay)
    resend = (
        max((prompt_tokens // hash_block_size - 1) * hash_block_size, 0)
        if use_eagle
        else ((prompt_tokens - 1) // hash_block_size * hash_block_size)
    )
    # Without EAGLE a longer sibling of a prompt ending on a scheduler block
    # matches its final block: replay_boundaries keeps N as well as N - 1.
    scheduler_block = lcm(block_size * dcp_world_size, block_size)
    sibling = (
        prompt_tokens
        if not use_eagle and prompt_tokens % scheduler_block == 0
        else None
    )
    expected = sibling if extension_tokens and sibling else resend
    assert hit == expected
    cached_states = {
        end
        for end in range(hash_block_size, prompt_tokens + 1, hash_block_size)
        if manager.block_pool.get_cached_block(
            producer.block_hashes[end // hash_block_size - 1], [1]
        )
        is not None
    }
    assert cached_states == ({resend} if resend else set()) | (
        {sibling} if sibling else set()
    )
