"""L1: a sliding window of one token keeps no block at all.

``SlidingWindowManager.reachable_block_mask`` keeps, at each hit boundary,
a tail of ``need = cdiv(W - 1, block_size)`` blocks. For ``W <= 1`` (without
EAGLE) that is 0 blocks, so the store keeps nothing; but
``find_longest_cache_hit`` still needs one cached block to report a hit (a
run of 0 blocks is never "found": the first cached block ends the scan).
Every hit is lost, even with dense retention.

Run on a stock vLLM 0.33.0: exits 1 while the bug is there.
"""

import _repro


def body() -> None:
    r = _repro.Report("L1", "sliding window of <= 1 token: the store keeps tails of 0 blocks, the lookup needs 1")
    # Smallest input: one SWA group, block 1, window 1, dense, prompt of 2.
    m = _repro.Local(window=1, block_size=1)
    n = 2
    r.case("smallest", f"{m.describe()}; prompt {_repro.tokens(n)}", _repro.named_rows(m, n))
    # Realistic: block 16, window 1, dense, a 2,000-token prompt resent.
    m = _repro.Local(window=1, block_size=16)
    n = 2000
    r.case("realistic", f"{m.describe()}; prompt {_repro.tokens(n)}", _repro.named_rows(m, n))
    r.finish()


if __name__ == "__main__":
    _repro.main(body)
