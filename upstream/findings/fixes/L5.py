"""Fix of L5: the junction sibling's boundary, when another group drops.

``SingleTypeKVCacheManager.cache_blocks`` keeps the tail of the junction
(``Request.shared_prefix_boundary``) and, only when *this* group drops the
EAGLE block, the tail one block lower. But a sibling diverging right after
the junction cannot use the block past it as *any* EAGLE group's peek, so the
joint hit lands one scheduler block lower for every group, also for a
sliding-window group that does not drop. Pass ``junction - scheduler block``
as a replay boundary to every group whenever any group drops (as
``replay_boundaries`` already lowers the resend and the longer sibling).

Replacement source for vLLM 0.33.0 (Apache-2.0), written by swa-prefix-cache;
check.py splices it into the installed vLLM by ``ast`` and generates the diff.
"""

TARGETS = {
    "vllm/v1/core/kv_cache_coordinator.py": ["KVCacheCoordinator.cache_blocks"],
}
BASE = {
    "KVCacheCoordinator.cache_blocks": "e3e02a290b355aba6c6f12e1cb135ba371ca7dddcb050c97d1f424485a318957",
}
# The releases whose definitions hash to BASE (byte-identical in each).
RELEASES = ("0.33.0", "0.34.0")


class KVCacheCoordinator:
    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Cache the blocks for the request.

        Args:
            request: The request.
            num_computed_tokens: The total number of tokens
                that need to be cached
                (including tokens that are already cached).

        """
        boundaries = replay_boundaries(
            request.num_prompt_tokens,
            self.scheduler_block_size,
            use_eagle=bool(self.drop_eagle_group_ids),
        )
        if self.drop_eagle_group_ids and request.shared_prefix_boundary:
            # A sibling diverging right after the junction has no EAGLE peek
            # past it, so the joint hit lands one scheduler block lower for
            # every group, not only for the groups that drop.
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
