"""Fix of W: with EAGLE, the store keeps a block that no lookup reads.

(a) A reachable boundary aligning down to 0 is an empty hit: it reads
    nothing, but its EAGLE tail keeps block 0 (the peek). Skip it.
(b) Dense, EAGLE, a tail exactly one segment long: ``need >= per_segment``
    keeps every block, but with EAGLE the tails (shifted one block right)
    cover every block except block 0. Keep everything only when the tails
    really cover block 0 (``need >= per_segment + shift``); otherwise the
    per-block rule below keeps exactly blocks >= 1.

Replacement source for vLLM 0.33.0 (Apache-2.0), written by swa-prefix-cache;
check.py splices it into the installed vLLM by ``ast`` and generates the diff.
"""

TARGETS = {
    "vllm/v1/core/single_type_kv_cache_manager.py": ["SlidingWindowManager.reachable_block_mask"],
}
BASE = {
    "SlidingWindowManager.reachable_block_mask": "d6a6091bdc3f7e8b085c2acac7deec8a130b078a5850727b1d17131836605e7e",
}
# The releases whose definitions hash to BASE (byte-identical in each).
RELEASES = ("0.33.0", "0.34.0")


class SlidingWindowManager:
    @classmethod
    def reachable_block_mask(
        cls,
        start_block: int,
        end_block: int,
        alignment_tokens: int | None,
        kv_cache_spec: KVCacheSpec,
        use_eagle: bool,
        retention_interval: int | None = None,
        reachable_boundaries: Sequence[int] = (),
        dcp_world_size: int = 1,
        final_segment_end_block: int | None = None,
    ) -> list[bool] | None:
        assert isinstance(kv_cache_spec, SlidingWindowSpec)
        if alignment_tokens is None:
            # Fast path: when the coordinator imposes no alignment constraint.
            return None
        block_size = kv_cache_spec.block_size * dcp_world_size
        if alignment_tokens % block_size != 0:
            # The mask is block-granular, so a sub-block alignment cannot be
            # represented exactly. This happens for hybrid offloading, where
            # ``alignment_tokens`` is the full-attention chunk size and need not
            # be a multiple of this SWA group's (DCP-scaled) block size (e.g.
            # Gemma). Fall back to dense: every block is reachable, which never
            # drops a block that could serve a hit.
            return None

        # Contiguous blocks a hit needs at a boundary (incl. the EAGLE peek).
        need = cls._contiguous_blocks_for_hit(
            window_size=kv_cache_spec.sliding_window,
            block_size=block_size,
            use_eagle=use_eagle,
        )
        # The matched run's right edge sits on the aligned boundary block when
        # EAGLE peeks one block past it (shift=1), otherwise on the last block
        # before the boundary (shift=0).
        shift = 1 if use_eagle else 0

        mask = [False] * (end_block - start_block)

        # (1) Segment-boundary tails. ``retention_interval``:
        #   None -> dense (a tail at every ``alignment_tokens`` boundary);
        #   0    -> no dense tails (only the replay boundary below);
        #   >0   -> a tail once per ``retention_interval``-sized segment.
        segment_tokens = (
            alignment_tokens
            if retention_interval is None
            else (None if retention_interval == 0 else retention_interval)
        )
        if segment_tokens is not None:
            per_segment = segment_tokens // block_size
            if need >= per_segment + shift:
                # Every block is reachable; cache them all. (With EAGLE, tails
                # exactly one segment long leave block 0 out: it is in none.)
                return None
            for i in range(start_block, end_block):
                if i >= shift and (i - shift) % per_segment >= per_segment - need:
                    mask[i - start_block] = True

            if final_segment_end_block is not None and not use_eagle:
                final_segment_size = final_segment_end_block % per_segment
                if final_segment_size:
                    final_segment_start = final_segment_end_block - final_segment_size
                    final_tail_start = max(
                        final_segment_start, final_segment_end_block - need
                    )
                    final_tail_end = min(end_block, final_segment_end_block)
                    for i in range(max(start_block, final_tail_start), final_tail_end):
                        mask[i - start_block] = True

        # (2) Reachable-boundary tails: the replay boundary (``num_prompt - 1``,
        # capped by ``get_computed_blocks``) and any shared-prefix junction. Both
        # land before segments would cover them under sparse retention, so keep
        # the ``need``-block tail ending on each boundary explicitly.
        if retention_interval is not None:
            for boundary_tokens in reachable_boundaries:
                aligned = boundary_tokens // alignment_tokens * alignment_tokens
                if aligned <= 0:
                    # A hit of 0 tokens reads nothing (with EAGLE the tail
                    # would be the peek block of an empty hit).
                    continue
                end = aligned // block_size + shift
                for j in range(max(start_block, end - need), min(end_block, end)):
                    mask[j - start_block] = True

        return mask
