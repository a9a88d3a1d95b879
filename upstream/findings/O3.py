"""O3: KV offload, a chunk-aligned prompt: the resend loses its partial last chunk.

With every chunk stored, a resend of a prompt that is a multiple of the
sliding-window chunk hits ``N - 1`` tokens from the offload tier (the lookup
caps at ``N - 1`` and counts the partial last chunk), which needs the tail
ending at ``N``; under sparse retention the store keeps the tail for the
aligned ``N - 1``, i.e. ``N - B``, so the resend loses up to a full-attention
chunk.

Run on a stock vLLM 0.33.0: exits 1 while the bug is there.
"""

import _repro


def body() -> None:
    r = _repro.Report("O3", "KV offload, chunk-aligned prompt: the resend's hit needs the tail ending at N")
    # Smallest input: full attention chunk 2 + SWA chunk 2 (window 2), retention 0, prompt 4.
    m = _repro.Offload([(2, None, False), (2, 2, False)], hash_block_size=1, retention=0)
    r.case("smallest", f"{m.describe()}; prompt 4 tokens", _repro.named_rows(m, 4, only=("resend",)))
    # Realistic: full-attention chunk 256 + SWA 128 at block 16, retention 4096, 2,048 tokens.
    m = _repro.Offload([(256, None, False), (16, 128, False)], hash_block_size=16, retention=4096)
    r.case("realistic", f"{m.describe()}; prompt 2048 tokens", _repro.named_rows(m, 2048, only=("resend",)))
    r.finish()


if __name__ == "__main__":
    _repro.main(body)
