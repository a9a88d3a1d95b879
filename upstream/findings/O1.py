"""O1: the KV-offload store keeps one chunk less than its lookup asks for.

The offload store filter (``OffloadingConnectorScheduler.
_reachable_store_block_mask``) reuses the local cache's
``reachable_block_mask``, whose tails are ``cdiv(W - 1, block)`` blocks: the
``W - 1`` tokens before a hit. The offload lookup
(``_lookup_complete_chunks`` -> ``_sliding_window_lookup``) asks for
``get_sliding_window_size_in_chunks`` = ``cdiv(W, chunk)`` stored chunks in
a row. When ``W - 1`` is a multiple of the chunk, that is one chunk more than
the store keeps, so no stored tail is ever long enough: every hit that needs
the sparse tails is lost, dense or sparse, with or without EAGLE.

Run on a stock vLLM 0.33.0: exits 1 while the bug is there.
"""

import _repro


def body() -> None:
    r = _repro.Report("O1", "KV offload: the store keeps cdiv(W - 1, c) chunks per tail, the lookup asks cdiv(W, c)")
    # Smallest input: full attention chunk 2 + SWA chunk 1, window 2, dense, prompt 2.
    m = _repro.Offload([(2, None, False), (1, 2, False)], hash_block_size=1)
    r.case("smallest", f"{m.describe()}; prompt 2 tokens", _repro.named_rows(m, 2))
    # The case: window 129 at block 16 under a 256-token full-attention chunk.
    m = _repro.Offload([(256, None, False), (16, 129, False)], hash_block_size=16)
    r.case("realistic", f"{m.describe()}; prompt 2000 tokens", _repro.named_rows(m, 2000, only=("resend",)))
    # Window 128 (W - 1 not a multiple of the chunk) agrees: shown for contrast.
    m = _repro.Offload([(256, None, False), (16, 128, False)], hash_block_size=16)
    r.case("contrast, window 128", f"{m.describe()}; prompt 2000 tokens", _repro.named_rows(m, 2000, only=("resend",)))
    r.finish()


if __name__ == "__main__":
    _repro.main(body)
