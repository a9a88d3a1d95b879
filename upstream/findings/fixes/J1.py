"""Fix of J1: an EAGLE window of <= 1 token needs its window block too.

``_contiguous_blocks_for_hit`` gives ``cdiv(W - 1, block_size)`` blocks, +1
for the EAGLE drop. For ``W <= 1`` the window part is 0 blocks, which the
plain lookup treats as 1 (a run is only found from a cached block), but the
EAGLE lookup then needs just ``0 + 1`` block: the peek alone, one block to
the right of the block the plain lookup reads. The coordinator's fixed point
verifies a candidate with the EAGLE lookup, re-checks it plainly, and can
stop below a length every group accepts. Clamp the window part to 1 block
before adding the EAGLE block, so the EAGLE run is the plain run plus the
peek, as for every wider window.

The plain lookup does not change (0 and 1 block behave the same there); the
store mask, which uses the same count, keeps one block per tail for a
window of <= 1 token, which also fixes L1.

Replacement source for vLLM 0.33.0 (Apache-2.0), written by swa-prefix-cache;
check.py splices it into the installed vLLM by ``ast`` and generates the diff.
"""

TARGETS = {
    "vllm/v1/core/single_type_kv_cache_manager.py": ["SlidingWindowManager._contiguous_blocks_for_hit"],
}
BASE = {
    "SlidingWindowManager._contiguous_blocks_for_hit": "5a05f445d609f4b75097f0b6de36f7c53d365d2b8a85dc650b36d627a695a73f",
}
# The releases whose definitions hash to BASE (byte-identical in each).
RELEASES = ("0.33.0", "0.34.0")
ALSO_FIXES = ("L1",)


class SlidingWindowManager:
    @classmethod
    def _contiguous_blocks_for_hit(
        cls, window_size: int, block_size: int, use_eagle: bool
    ) -> int:
        # At least one block: a run of 0 blocks is never found (the first
        # cached block ends the scan), so a window of <= 1 token needs one.
        blocks = max(cdiv(window_size - 1, block_size), 1)
        if use_eagle:
            # Need to drop the last matched block if eagle is enabled. For
            # sliding window layer, we achieve this by increasing the number of
            # contiguous blocks needed for prefix cache hit by one and dropping
            # the last matched block.
            blocks += 1
        return blocks
