"""The corrected KV-offload store filter, in vLLM's code: the fix of O2, O3,
O4 and O5 (and of O1).

vLLM 0.33.0's offload store filter reuses the local prefix cache's
``reachable_block_mask``, but its offload lookup reads other runs (O1: one
chunk more; O2: EAGLE pops and unlowered boundaries; O3: the partial last
chunk of a resend; O4: a sliding-window chunk that does not divide the
full-attention chunk; O5: the longer sibling of an aligned prompt). The
filter keeps, for a sliding-window group, exactly the chunks that the offload
lookup reads, with every chunk stored, for every hit the cache promises (a
new module, ``offloading/store_filter.py``: the logic of swa-prefix-cache's
opt-in ``SWA_PREFIX_CACHE_OFFLOAD_FILTER=corrected``, swa_prefix_cache/pyspec/offload.py and
swa_prefix_cache/vllm_adapter/offload_filter.py, with nothing of the project). No lookup
change is needed: every finding is a chunk the lookup reads and the store
dropped. Configurations the filter does not model (decode context
parallelism, partial-tail offloading, Mamba alignment, copy-on-write
sources, other group kinds) keep the previous mask, widened by one token as
O1's fix does.

Replacement source for vLLM 0.33.0 (Apache-2.0), written by swa-prefix-cache;
check.py splices it into the installed vLLM by ``ast`` and generates the diff.
"""

TARGETS = {
    "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py": [
        "OffloadingConnectorScheduler._reachable_store_block_mask",
    ],
    # vLLM's tests that pinned the previous chunk sets, updated to the chunks
    # the lookup reads (each comment says which request reads what).
    "tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py": [
        "test_swa_alignment_skip",
        "TestEagle.test_chunked_prefill_uses_final_swa_store_horizon",
        "test_retention_interval_sparsifies_swa_stores",
        "test_retention_interval_zero_stores_only_replay_boundary",
    ],
}
BASE = {
    "OffloadingConnectorScheduler._reachable_store_block_mask": "b865c481657578fb2c989d83ddb57a163168121806c5458dd86caa837d3f53d5",
    "test_swa_alignment_skip": "388679afb96c4b56fe669dc37ec2668f0310c7face742a7ac3559e2c1dbda536",
    "TestEagle.test_chunked_prefill_uses_final_swa_store_horizon": "ad54822a37c690b8229d9dcacd3ebe69cac5a86a620e55b5698c5982a93e95fe",
    "test_retention_interval_sparsifies_swa_stores": "341f85a53b71966be960bfb41c0c8b9f795363f50a84951d4751959052080590",
    "test_retention_interval_zero_stores_only_replay_boundary": "2d6950043ed5ac1b4897412b8bf374ec8759b1764e4f36e18345f5f3b98970c6",
}
# The release whose definitions hash to BASE.
RELEASES = ("0.33.0",)
# Releases without this fix, and why (check.py refuses it there).
REFUSED = {
    "0.34.0": (
        "OffloadingConnectorScheduler._reachable_store_block_mask changed in 0.34.0 "
        "(use_eagle off with lookahead block hashes, a second call for the final tail) "
        "and so did the tests this patch updates; no upstream patch is written for "
        "0.34.0's code (the plugin's opt-in filter applies there: "
        "docs/store-lookup-agreement.md, On vLLM 0.34.0)"
    ),
}
NEW_FILES = {
    "vllm/distributed/kv_transfer/kv_connector/v1/offloading/store_filter.py": "offload_store_filter.py",
}
ALSO_FIXES = ("O1", "O2", "O3", "O4", "O5")


class OffloadingConnectorScheduler:
    def _reachable_store_block_mask(
        self,
        group_config: GroupOffloadConfig,
        start_chunk_idx: int,
        end_chunk_idx: int,
        final_segment_end_chunk_idx: int | None,
        reachable_boundaries: tuple[int, ...],
    ) -> list[bool] | None:
        """Build the block mask for a range of candidate offload chunks."""
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.store_filter import (
            NOT_MODELLED,
            offload_store_block_mask,
        )

        blocks_per_chunk = self.config.blocks_per_chunk
        kv_cache_spec = group_config.kv_cache_spec
        if isinstance(kv_cache_spec, SlidingWindowSpec):
            # Keep exactly the chunks the offload lookup reads for a hit the
            # cache promises (store_filter.py).
            mask = offload_store_block_mask(
                self, group_config, start_chunk_idx, end_chunk_idx, reachable_boundaries
            )
            if mask is not NOT_MODELLED:
                return mask
            # Offload restores all allocated history, including MTP re-prefill
            # tokens. Widen only the store mask, not the model's attention window.
            # The lookup reads get_sliding_window_size_in_chunks, which covers
            # max(W, W - 1 + extra) tokens before a hit (W: one more than the
            # local cache's W - 1), so the mask's window is one token wider.
            kv_cache_spec = replace(
                kv_cache_spec,
                sliding_window=max(
                    kv_cache_spec.sliding_window + 1,
                    kv_cache_spec.sliding_window + kv_cache_spec.extra_retained_tokens,
                ),
                extra_retained_tokens=0,
            )
        return group_config.manager_cls.reachable_block_mask(
            start_block=start_chunk_idx * blocks_per_chunk,
            end_block=end_chunk_idx * blocks_per_chunk,
            alignment_tokens=self.config.alignment_tokens,
            kv_cache_spec=kv_cache_spec,
            use_eagle=group_config.is_eagle_group,
            retention_interval=self.config.retention_interval,
            reachable_boundaries=reachable_boundaries,
            dcp_world_size=self.config.dcp_world_size,
            final_segment_end_block=(
                final_segment_end_chunk_idx * blocks_per_chunk
                if final_segment_end_chunk_idx is not None
                else None
            ),
        )


# ---- vLLM's tests, updated -------------------------------------------------------


@pytest.mark.parametrize("extra_retained", [0, 1, 3])
@pytest.mark.parametrize("async_scheduling", [True, False])
def test_swa_alignment_skip(request_runner, async_scheduling: bool, extra_retained):
    """Store the window a cold consumer must restore at each FA boundary.

    With FA blocks of 16 tokens and SWA blocks of 4 tokens, a window of 8
    needs the last two blocks per segment. Retaining three extra tokens for
    MTP requires one more block; retaining just one token does not, except
    for a request ending on a segment boundary: its lookup, capped one token
    earlier, widens its window by a chunk for the partial last one.
    """
    full_attn_block_size = 16
    swa_block_size = 4
    sliding_window = 8
    num_gpu_blocks = 200

    kv_cache_groups = [
        KVCacheGroupSpec(
            ["layer0"],
            FullAttentionSpec(
                block_size=full_attn_block_size,
                num_kv_heads=1,
                head_size=1,
                dtype=torch.float32,
            ),
        ),
        KVCacheGroupSpec(
            ["layer1"],
            SlidingWindowSpec(
                block_size=swa_block_size,
                num_kv_heads=1,
                head_size=1,
                dtype=torch.float32,
                sliding_window=sliding_window,
                extra_retained_tokens=extra_retained,
            ),
        ),
    ]

    runner = request_runner(
        block_size=swa_block_size,
        num_gpu_blocks=num_gpu_blocks,
        async_scheduling=async_scheduling,
        kv_cache_groups=kv_cache_groups,
    )

    # Verify config
    kv_group_configs = runner.connector_scheduler.config.kv_group_configs
    assert len(kv_group_configs) == 2
    # Group 0: full attention
    assert kv_group_configs[0].sliding_window_size_in_chunks is None
    assert kv_group_configs[0].tokens_per_chunk == full_attn_block_size
    # Group 1: SWA, including any additional retained blocks
    assert kv_group_configs[1].sliding_window_size_in_chunks == (
        3 if extra_retained > 1 else 2
    )
    assert kv_group_configs[1].tokens_per_chunk == swa_block_size
    # alignment_tokens = full_attn_block_size = 16
    assert runner.connector_scheduler.config.alignment_tokens == full_attn_block_size

    # Keep a partial last block so decoding does not reuse the producer's
    # freed blocks before the harness records its deferred stores.
    num_tokens = 33
    runner.new_request(token_ids=[0] * num_tokens)
    runner.manager.prepare_store.side_effect = lambda keys, req_context: (
        generate_store_output(keys)
    )
    runner.run(decoded_tokens=[0])

    # Decode 1 more token to complete the deferred stores from above.
    runner.manager.prepare_store.side_effect = lambda keys, req_context: (
        generate_store_output(keys)
    )
    runner.run(
        decoded_tokens=[EOS_TOKEN_ID],
        # Retain each segment's tail, including MTP history when needed.
        expected_stored=(
            (0, 0),
            (0, 1),
            (1, 2),
            (1, 3),
            (1, 6),
            (1, 7),
        )
        + (((1, 1), (1, 5)) if extra_retained > 1 else ())
        # A 32-token request hits 31 tokens: its window (8 - 1 + 1 retained +
        # 1 padding token) spans three chunks, 5 to 7.
        + (((1, 5),) if extra_retained == 1 else ()),
    )

    # Verify that loads still work correctly for the stored SWA blocks.
    runner.scheduler.reset_prefix_cache()
    runner.new_request(token_ids=[0] * num_tokens + [1])
    runner.manager.lookup.side_effect = lambda key, ctx: (
        LookupResult.HIT if (key, 0) in runner.offloaded else LookupResult.MISS
    )
    runner.run(
        decoded_tokens=[EOS_TOKEN_ID],
        # The consumer restores the full FA prefix and the final SWA tail.
        expected_loaded=(
            (0, 0),
            (0, 1),
            (1, 6),
            (1, 7),
        )
        + (((1, 5),) if extra_retained > 1 else ()),
    )


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_retention_interval_sparsifies_swa_stores(
    request_runner, async_scheduling: bool
):
    """retention_interval reduces the number of SWA chunks stored.

    Uses the same hybrid architecture as test_swa_alignment_skip but with
    retention_interval=32 (read from kv_connector_extra_config).  With
    alignment_tokens=16 the default stores a 2-block SWA tail per 16-token
    segment.  retention_interval=32 widens segments to 32 tokens (8 SWA
    blocks), so only the trailing 2 of each 8-block segment are stored.

    With 64 tokens (4 full-attn blocks, 16 SWA blocks):
      - Group 0 (full attn): stores all 4 blocks
      - Group 1 (SWA) without retention: 4 segments of 4 -> 8 stored
      - Group 1 (SWA) with retention_interval=32: 2 segments of 8 -> 4 stored
    """
    full_attn_block_size = 16
    swa_block_size = 4
    sliding_window = 8
    num_gpu_blocks = 200

    kv_cache_groups = [
        KVCacheGroupSpec(
            ["layer0"],
            FullAttentionSpec(
                block_size=full_attn_block_size,
                num_kv_heads=1,
                head_size=1,
                dtype=torch.float32,
            ),
        ),
        KVCacheGroupSpec(
            ["layer1"],
            SlidingWindowSpec(
                block_size=swa_block_size,
                num_kv_heads=1,
                head_size=1,
                dtype=torch.float32,
                sliding_window=sliding_window,
            ),
        ),
    ]

    runner = request_runner(
        block_size=swa_block_size,
        num_gpu_blocks=num_gpu_blocks,
        async_scheduling=async_scheduling,
        kv_cache_groups=kv_cache_groups,
        retention_interval=32,
    )

    assert runner.connector_scheduler.config.retention_interval == 32

    num_tokens = 64
    runner.new_request(token_ids=[0] * num_tokens)
    runner.manager.prepare_store.side_effect = lambda keys, req_context: (
        generate_store_output(keys)
    )
    runner.run(decoded_tokens=[0])

    runner.manager.prepare_store.side_effect = lambda keys, req_context: (
        generate_store_output(keys)
    )
    runner.run(
        decoded_tokens=[EOS_TOKEN_ID],
        # Group 0 (full attn, block_size=16): 4 blocks stored
        # Group 1 (SWA, block_size=4): 16 blocks total, retention_interval=32
        #   Dense segment tails (per_segment=32/4=8, need=2):
        #     blocks 6, 7 and 14, 15
        #   A resend (capped at num_prompt_tokens-1=63) hits 63 tokens from
        #     the window ending at 64, blocks 14, 15, as a longer sibling
        #     hits 64: no tail for 48 (blocks 10, 11) is needed.
        expected_stored=(
            (0, 0),
            (0, 1),
            (0, 2),
            (0, 3),
            (1, 6),
            (1, 7),
            (1, 14),
            (1, 15),
        ),
    )


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_retention_interval_zero_stores_only_replay_boundary(
    request_runner, async_scheduling: bool
):
    """retention_interval=0 stores only the replay boundary SWA blocks.

    Same hybrid architecture.  With retention_interval=0, no dense segment
    tails are stored — only blocks the replays read: a resend (capped at
    num_prompt_tokens - 1) and a longer sibling.
    """
    full_attn_block_size = 16
    swa_block_size = 4
    sliding_window = 8
    num_gpu_blocks = 200

    kv_cache_groups = [
        KVCacheGroupSpec(
            ["layer0"],
            FullAttentionSpec(
                block_size=full_attn_block_size,
                num_kv_heads=1,
                head_size=1,
                dtype=torch.float32,
            ),
        ),
        KVCacheGroupSpec(
            ["layer1"],
            SlidingWindowSpec(
                block_size=swa_block_size,
                num_kv_heads=1,
                head_size=1,
                dtype=torch.float32,
                sliding_window=sliding_window,
            ),
        ),
    ]

    runner = request_runner(
        block_size=swa_block_size,
        num_gpu_blocks=num_gpu_blocks,
        async_scheduling=async_scheduling,
        kv_cache_groups=kv_cache_groups,
        retention_interval=0,
    )

    assert runner.connector_scheduler.config.retention_interval == 0

    num_tokens = 64
    runner.new_request(token_ids=[0] * num_tokens)
    runner.manager.prepare_store.side_effect = lambda keys, req_context: (
        generate_store_output(keys)
    )
    runner.run(decoded_tokens=[0])

    runner.manager.prepare_store.side_effect = lambda keys, req_context: (
        generate_store_output(keys)
    )
    runner.run(
        decoded_tokens=[EOS_TOKEN_ID],
        # Group 0 (full attn): all 4 blocks stored
        # Group 1 (SWA): retention_interval=0 -> only the replays
        #   a resend hits num_prompt_tokens - 1 = 63 tokens, reading the
        #   2-block window that ends at 64 (partial last chunk), as a longer
        #   sibling hitting 64 does -> blocks 14, 15
        expected_stored=(
            (0, 0),
            (0, 1),
            (0, 2),
            (0, 3),
            (1, 14),
            (1, 15),
        ),
    )



class TestEagle:
    @pytest.mark.skip_global_cleanup
    @pytest.mark.parametrize(
        "abort_after_first_step,async_scheduling,store_horizon_tokens",
        [
            pytest.param(False, False, 1200, id="completed-prompt"),
            pytest.param(True, False, 1000, id="aborted-sync"),
            pytest.param(True, True, 1000, id="aborted-async"),
        ],
    )
    def test_chunked_prefill_uses_final_swa_store_horizon(
        self,
        request_runner,
        abort_after_first_step: bool,
        async_scheduling: bool,
        store_horizon_tokens: int,
    ):
        """SWA stores must use the completed or aborted request horizon: the
        windows ending on full-attention chunk boundaries, up to it (a tail at
        an unaligned horizon serves no offload hit: the full-attention group
        only hits whole chunks)."""
        full_attn_block_size = 36
        swa_block_size = 4
        sliding_window = 16
        num_tokens = 1200

        kv_cache_groups = [
            KVCacheGroupSpec(
                ["layer0"],
                FullAttentionSpec(
                    block_size=full_attn_block_size,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float32,
                ),
            ),
            KVCacheGroupSpec(
                ["layer1"],
                SlidingWindowSpec(
                    block_size=swa_block_size,
                    num_kv_heads=1,
                    head_size=1,
                    dtype=torch.float32,
                    sliding_window=sliding_window,
                ),
            ),
        ]
        runner = request_runner(
            block_size=swa_block_size,
            num_gpu_blocks=1000,
            async_scheduling=async_scheduling,
            kv_cache_groups=kv_cache_groups,
        )

        runner.new_request(token_ids=[0] * num_tokens)
        runner.manager.prepare_store.side_effect = lambda keys, req_context: (
            generate_store_output(keys)
        )

        def abort_after_prefill_step() -> None:
            if runner.scheduler.running:
                runner.scheduler.finish_requests(
                    (str(runner.req_id),), RequestStatus.FINISHED_ABORTED
                )

        runner._run(
            [1] if abort_after_first_step else [1, 1, EOS_TOKEN_ID],
            complete_transfers=True,
            post_step_fn=(abort_after_prefill_step if abort_after_first_step else None),
        )

        stored_swa_chunks = sorted(
            block.request_block_offset
            for transfer in runner.completed_stores
            for block in transfer.gpu_blocks
            if block.group_idx == 1
        )
        store_horizon_chunks = store_horizon_tokens // swa_block_size
        alignment_chunks = full_attn_block_size // swa_block_size
        sliding_window_chunks = sliding_window // swa_block_size
        expected_swa_chunks = [
            chunk
            for chunk in range(store_horizon_chunks)
            if chunk % alignment_chunks >= alignment_chunks - sliding_window_chunks
        ]
        assert stored_swa_chunks == expected_swa_chunks
