"""Every fix at once: one combined patch per vLLM file.

check.py builds it from the per-finding fixes listed in ``COMBINE``. Where two
of them replace the same definition, this file gives the combined one
(``TARGETS`` / ``BASE`` here take precedence); check.py refuses a clash that
is not resolved here. The reproductions of every finding must pass on it,
vLLM's own tests too, and the agreement property must hold with no finding
left to explain a violation.

Overlaps resolved here:

* ``SlidingWindowManager.reachable_block_mask``: L1 (clamp ``need``), W
  (boundaries aligning to 0, ``need == per_segment`` with EAGLE) and L2
  (``period`` more leading blocks below the window, EAGLE). J1's
  ``_contiguous_blocks_for_hit`` already clamps, so L1's clamp is redundant
  here but harmless.
* ``KVCacheCoordinator.cache_blocks``: L4 (boundaries from
  ``self._replay_boundaries``) and L5 (``junction - B`` when any group
  drops).
* ``OffloadingConnectorScheduler._reachable_store_block_mask``: O1's fix
  (the one-token widening) and the corrected offload store filter
  (``store_filter.py``, the fix of O2-O5) both replace it; the filter is
  used, with O1's widening for the configurations it does not model (it
  fixes O1 too), so O1's file is not combined. On a release where the filter
  is refused (vLLM 0.34.0), O1's fix for that release takes its place
  (``FALLBACK``).
"""

COMBINE = ["L1", "L2", "L3", "L4", "L5", "W", "J1", "store_filter"]
# On a release where the corrected offload filter is refused (REFUSED in
# store_filter.py), O1's fix for that release takes its place.
FALLBACK = {"store_filter": "O1"}

TARGETS = {
    "vllm/v1/core/single_type_kv_cache_manager.py": ["SlidingWindowManager.reachable_block_mask"],
    "vllm/v1/core/kv_cache_coordinator.py": ["KVCacheCoordinator.cache_blocks"],
}
BASE = {
    "SlidingWindowManager.reachable_block_mask": "d6a6091bdc3f7e8b085c2acac7deec8a130b078a5850727b1d17131836605e7e",
    "KVCacheCoordinator.cache_blocks": "e3e02a290b355aba6c6f12e1cb135ba371ca7dddcb050c97d1f424485a318957",
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
        # A window of <= 1 token gives 0 blocks, but find_longest_cache_hit
        # only reports a hit from a cached block (a run of 0 blocks is never
        # found), so every tail keeps at least one block. (L1)
        need = max(
            cls._contiguous_blocks_for_hit(
                window_size=kv_cache_spec.sliding_window,
                block_size=block_size,
                use_eagle=use_eagle,
            ),
            1,
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
                # (W)
                first_read = 0
                if use_eagle and alignment_tokens > block_size and need < 2 * (
                    alignment_tokens // block_size
                ) + 2:
                    # Unless, with EAGLE and an alignment of several blocks,
                    # no hit below the window is positive (the prefix
                    # fallback trims a run of ``1 + k * period`` blocks to
                    # ``(k - 1) * period``): the lookup then reads only window
                    # runs ending on aligned peek blocks, which leave the
                    # first blocks out. (L2)
                    period = alignment_tokens // block_size
                    first_read = cdiv(need - 1, period) * period + 1 - need
                if first_read <= start_block:
                    return None
                return [i >= first_read for i in range(start_block, end_block)]
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
            # Blocks per alignment step.
            period = alignment_tokens // block_size
            for boundary_tokens in reachable_boundaries:
                aligned = boundary_tokens // alignment_tokens * alignment_tokens
                if aligned <= 0:
                    # A hit of 0 tokens reads nothing (with EAGLE the tail
                    # would be the peek block of an empty hit). (W)
                    continue
                end = aligned // block_size + shift
                if use_eagle and period > 1 and end < need:
                    # Below the window the lookup's prefix fallback trims the
                    # run to the alignment, drops the EAGLE block and trims
                    # again: a hit of ``aligned`` tokens needs ``period`` more
                    # leading blocks than the tail (the EAGLE-lowered boundary
                    # is already one alignment step below the candidate, so
                    # these are the blocks the all-stored lookup reads). (L2)
                    end += period
                for j in range(max(start_block, end - need), min(end_block, end)):
                    mask[j - start_block] = True

        return mask


class KVCacheCoordinator:
    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Cache the blocks for the request.

        Args:
            request: The request.
            num_computed_tokens: The total number of tokens
                that need to be cached
                (including tokens that are already cached).

        """
        boundaries = self._replay_boundaries(request)  # (L4)
        if self.drop_eagle_group_ids and request.shared_prefix_boundary:
            # A sibling diverging right after the junction has no EAGLE peek
            # past it, so the joint hit lands one scheduler block lower for
            # every group, not only for the groups that drop. (L5)
            boundaries = (
                *boundaries,
                max(request.shared_prefix_boundary - self.scheduler_block_size, 0),
            )
        for group_id, manager in enumerate(self.single_type_managers):
            if not manager.enable_caching:
                continue
            manager.cache_blocks(
                request,
                self.get_num_cacheable_tokens(num_computed_tokens, group_id),
                retention_interval=self.retention_interval,
                replay_boundaries=boundaries,
            )
