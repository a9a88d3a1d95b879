"""L2: an EAGLE sliding-window group with a block smaller than the scheduler
block loses hits below its window.

A hit shorter than the window is served by ``find_longest_cache_hit``'s
prefix fallback: the cached run from block 0 is trimmed to the alignment, the
EAGLE block is dropped, and the rest is trimmed to the alignment again. With
a scheduler block of ``period > 1`` of the group's blocks, a hit of ``L``
blocks therefore needs ``L + period + 1`` cached blocks from block 0, but
``reachable_block_mask`` keeps the EAGLE tail of ``L + 1``: the lookup finds
one alignment step less, and re-aligns twice again.

Run on a stock vLLM 0.33.0: exits 1 while the bug is there.
"""

import _repro


def body() -> None:
    r = _repro.Report("L2", "EAGLE SWA block smaller than the scheduler block: the prefix fallback needs period more blocks")
    # Smallest input: full attention at block 2 + SWA 6 tokens at block 1 (EAGLE),
    # retention 0, prompt of 5.
    m = _repro.Local(window=6, block_size=1, eagle=True, full_block_size=2, hash_block_size=1, retention=0)
    r.case("smallest", f"{m.describe()}; prompt 5 tokens", _repro.named_rows(m, 5))
    # Realistic: SWA 512 at block 16 (EAGLE) under full attention at block 32,
    # retention 4096, a 144-token prompt resent.
    m = _repro.Local(window=512, block_size=16, eagle=True, full_block_size=32, hash_block_size=16, retention=4096)
    r.case("realistic", f"{m.describe()}; prompt 144 tokens", _repro.named_rows(m, 144))
    r.finish()


if __name__ == "__main__":
    _repro.main(body)
