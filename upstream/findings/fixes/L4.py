"""Fix of L4: with the coordinator's EAGLE margin, a hit lands back on the
boundary; do not lower the boundary by a whole scheduler block there.

``replay_boundaries`` lowers the resend's and the longer sibling's boundary
``c`` by one scheduler block ``B`` whenever a group drops the EAGLE block.
That is what a ``UnitaryKVCacheCoordinator`` does (no margin: the drop
lowers the hit by the group's block, which is ``B``). But
``HybridKVCacheCoordinator.find_longest_cache_hit`` looks an EAGLE group up
at ``c + margin`` (one of the group's own blocks), so the drop lands back on
``c`` whenever that block is in the prompt's hashed tokens and the group
finds its window run there: the sliding-window store then keeps the tail for
``c - B``, and the hit at ``c`` is lost (with a draft full-attention group at
block 16 and a sliding window at block 32, every resend loses 32 tokens).

The hybrid coordinator now computes the two positions as its own loop lands
on them with every block stored: ``c`` when every dropping group lands back
on it (its block past ``c`` is hashed), ``c - B`` for a group whose block past
``c`` is not hashed, and one ``B`` lower still for a sliding-window group
below its window when ``B`` spans several of its blocks (its prefix fallback
trims, drops and trims again; see L2). Any dropping group it does not model
(not full attention or a sliding window), and fine-grained partial hash
hits, keep ``replay_boundaries``' answer.

Replacement source for vLLM 0.33.0 (Apache-2.0), written by swa-prefix-cache;
check.py splices it into the installed vLLM by ``ast`` and generates the diff.
"""

TARGETS = {
    "vllm/v1/core/kv_cache_coordinator.py": [
        "KVCacheCoordinator.cache_blocks",
        "KVCacheCoordinator._replay_boundaries",
        "HybridKVCacheCoordinator._replay_boundaries",
        "HybridKVCacheCoordinator._eagle_replay_hit",
    ],
    # vLLM's test that pinned the lowered boundary (a resend of 127 tokens
    # hit 64 instead of 96), updated.
    "tests/v1/core/test_prefix_caching.py": [
        "test_hybrid_local_kv_retention_mtp_reuses_latest_boundary",
    ],
}
BASE = {
    "KVCacheCoordinator.cache_blocks": "e3e02a290b355aba6c6f12e1cb135ba371ca7dddcb050c97d1f424485a318957",
    "test_hybrid_local_kv_retention_mtp_reuses_latest_boundary": "5d85f655f503e08a0bc08c458a4cc1d7aacf598e2f15b1fcebb2aa34b43b47c8",
}
# The releases whose definitions hash to BASE (byte-identical in each).
RELEASES = ("0.33.0", "0.34.0")
# New methods, each placed after an existing definition.
AFTER = {
    "KVCacheCoordinator._replay_boundaries": "KVCacheCoordinator.cache_blocks",
    "HybridKVCacheCoordinator._replay_boundaries": "HybridKVCacheCoordinator.get_num_cacheable_tokens",
    "HybridKVCacheCoordinator._eagle_replay_hit": "HybridKVCacheCoordinator.get_num_cacheable_tokens",
}


class KVCacheCoordinator:
    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Cache the blocks for the request.

        Args:
            request: The request.
            num_computed_tokens: The total number of tokens
                that need to be cached
                (including tokens that are already cached).

        """
        boundaries = self._replay_boundaries(request)
        for group_id, manager in enumerate(self.single_type_managers):
            if not manager.enable_caching:
                continue
            manager.cache_blocks(
                request,
                self.get_num_cacheable_tokens(num_computed_tokens, group_id),
                retention_interval=self.retention_interval,
                replay_boundaries=boundaries,
            )

    def _replay_boundaries(self, request: Request) -> tuple[int, ...]:
        """Where a resend of the request's prompt and a longer sibling hit
        (see ``replay_boundaries``)."""
        return replay_boundaries(
            request.num_prompt_tokens,
            self.scheduler_block_size,
            use_eagle=bool(self.drop_eagle_group_ids),
        )


class HybridKVCacheCoordinator:
    def _replay_boundaries(self, request: Request) -> tuple[int, ...]:
        """Where a resend of the request's prompt and a longer sibling hit.

        ``replay_boundaries`` lowers each position by a scheduler block when
        a group drops the EAGLE block, as a unitary coordinator's lookup
        does. Here an EAGLE group is looked up one of its blocks past the
        candidate (``eagle_proof_margin``) and drops it: the hit is where
        that lands (``_eagle_replay_hit``).
        """
        if not self.drop_eagle_group_ids or self.enable_partial_hash_hits:
            return super()._replay_boundaries(request)
        block = self.scheduler_block_size
        num_tokens = request.num_prompt_tokens
        hashed = num_tokens // self.hash_block_size * self.hash_block_size
        hits = set()
        for boundary in ((num_tokens - 1) // block * block, num_tokens // block * block):
            hit = self._eagle_replay_hit(boundary, hashed)
            if hit is None:
                return super()._replay_boundaries(request)
            hits.add(hit)
        return tuple(sorted(hits))

    def _eagle_replay_hit(self, boundary: int, hashed_tokens: int) -> int | None:
        """The hit of ``find_longest_cache_hit`` at the aligned candidate
        ``boundary`` when the prompt's first ``hashed_tokens`` are all cached
        (in every group, as far as the group stores them): each dropping
        group matches one of its blocks past the boundary if it is hashed
        (the peek) and drops it, landing back on the boundary, else one
        scheduler block lower; a sliding-window group below its window
        answers from its prefix fallback, which trims, drops and trims again,
        one more scheduler block lower when the alignment spans several of
        its blocks. ``None`` for a dropping group this does not model."""
        alignment = self._cache_hit_alignment_tokens
        hit = boundary
        for spec, group_ids, manager_cls, use_eagle in self.attention_groups:
            if not use_eagle or boundary <= 0:
                continue
            block_size = self.single_type_managers[group_ids[0]].block_size
            peek = boundary + block_size <= hashed_tokens
            if isinstance(spec, FullAttentionSpec):
                group_hit = boundary if peek else boundary - alignment
            elif isinstance(spec, SlidingWindowSpec) and hasattr(
                manager_cls, "_contiguous_blocks_for_hit"
            ):
                period = alignment // block_size
                need = manager_cls._contiguous_blocks_for_hit(
                    spec.sliding_window, block_size, True
                )
                # The matched run ends on the peek block, or one alignment
                # step lower (the last aligned block) without a peek.
                last = boundary // block_size - (0 if peek else period)
                group_hit = last * block_size
                if period > 1 and last + 1 < need:
                    group_hit -= alignment
            else:
                return None
            hit = min(hit, max(group_hit, 0))
        return hit


# ---- vLLM's test, updated -------------------------------------------------------


def test_hybrid_local_kv_retention_mtp_reuses_latest_boundary():
    """Verify MTP/EAGLE SWA retention keeps the extra proof block.

    EAGLE/MTP lookup matches one additional local block after the returned
    prefix and then drops it. Sparse retention must therefore cache the normal
    local tail at the latest replay boundary plus one extra SWA block. The
    coordinator looks the EAGLE group up one of its own blocks past the
    candidate, so the boundary is lowered only when that block is not hashed.
    """
    block_size = 8
    kv_cache_config = KVCacheConfig(
        num_blocks=100,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["full"],
                FullAttentionSpec(
                    block_size=4 * block_size,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float16,
                ),
            ),
            KVCacheGroupSpec(
                ["swa_mtp"],
                SlidingWindowSpec(
                    block_size=block_size,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float32,
                    sliding_window=block_size,
                ),
                is_eagle_group=True,
            ),
        ],
    )
    manager = make_kv_cache_manager(
        kv_cache_config=kv_cache_config,
        max_model_len=8192,
        enable_caching=True,
        hash_block_size=block_size,
        retention_interval=0,
        use_eagle=True,
    )

    # 127 tokens: eagle proves a boundary if one of its 8-token blocks past
    # it is hashed, so the resend's boundary floor(126 / 32) * 32 = 96 stays
    # (hashes reach 120). The SWA tail plus its proof block then ends at 104,
    # two 8-token blocks wide: hashes 11 and 12.
    token_ids = [i for i in range(15) for _ in range(block_size)] + [15] * 7
    req0 = make_request("0", token_ids, block_size, sha256)
    computed_blocks, num_computed_tokens, _ = manager.get_computed_blocks(req0)
    assert num_computed_tokens == 0
    blocks = manager.allocate_slots(
        req0,
        len(token_ids),
        num_computed_tokens,
        computed_blocks,
    )
    assert blocks is not None

    pool = manager.block_pool
    expected_swa_cached = {11, 12}
    for i in range(15):
        cached = pool.get_cached_block(req0.block_hashes[i], kv_cache_group_ids=[1])
        if i in expected_swa_cached:
            assert cached is not None, f"SWA hash {i} should be cached"
        else:
            assert cached is None, f"SWA hash {i} should not be cached"

    manager.free(req0)

    req1 = make_request("1", token_ids, block_size, sha256)
    computed_blocks, num_computed_tokens, _ = manager.get_computed_blocks(req1)
    assert num_computed_tokens == 12 * block_size
    assert [len(blocks) for blocks in computed_blocks.blocks] == [3, 12]

