"""Fix of O1 for vLLM 0.34.0: store the sliding-window tails one token wider
for the KV-offload lookup.

The same change as ``fixes/O1.py`` (see there) on 0.34.0's
``_reachable_store_block_mask``, which differs from 0.33.0's only in
``use_eagle`` (off with lookahead block hashes); that line is kept as 0.34.0
has it. The lookup still asks ``get_sliding_window_size_in_chunks`` =
``max(cdiv(W, c), cdiv(W - 1 + extra, c))`` stored chunks in a row, so the
store mask's window is ``max(W + 1, W + extra)`` tokens.

Replacement source for vLLM 0.34.0 (Apache-2.0), written by swa-prefix-cache;
check.py splices it into that vLLM by ``ast`` and generates the diff.
"""

TARGETS = {
    "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py": [
        "OffloadingConnectorScheduler._reachable_store_block_mask",
    ],
}
BASE = {
    "OffloadingConnectorScheduler._reachable_store_block_mask": "c446d0712bd26844685c5f7a36330c3115d42775723abbee0b5b6bdbe6c2c0da",
}
# The release whose definition hashes to BASE.
RELEASES = ("0.34.0",)


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
        blocks_per_chunk = self.config.blocks_per_chunk
        kv_cache_spec = group_config.kv_cache_spec
        if isinstance(kv_cache_spec, SlidingWindowSpec):
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
            use_eagle=(
                group_config.is_eagle_group and not self.use_lookahead_block_hashes
            ),
            retention_interval=self.config.retention_interval,
            reachable_boundaries=reachable_boundaries,
            dcp_world_size=self.config.dcp_world_size,
            final_segment_end_block=(
                final_segment_end_chunk_idx * blocks_per_chunk
                if final_segment_end_chunk_idx is not None
                else None
            ),
        )
