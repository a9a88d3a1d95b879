"""O5: KV offload, no EAGLE: the longer sibling of an aligned prompt (L3 for
the offload tier).

Under sparse retention the store filter keeps the tail of ``N - 1`` only; on
a prompt that is a multiple of the full-attention chunk that tail serves
``N - B``, while a longer request continuing the prompt would hit all ``N``
tokens with every chunk stored.

Run on a stock vLLM 0.33.0: exits 1 while the bug is there.
"""

import _repro


def body() -> None:
    r = _repro.Report("O5", "KV offload, no EAGLE: the longer sibling of an aligned prompt needs the tail ending at N")
    # Smallest input: full attention chunk 2 + SWA chunk 2 (window 2), retention 0, prompt 2.
    m = _repro.Offload([(2, None, False), (2, 2, False)], hash_block_size=1, retention=0)
    r.case("smallest", f"{m.describe()}; prompt 2 tokens", _repro.named_rows(m, 2, only=("longer sibling",)))
    # Realistic: full-attention chunk 256 + SWA 128 at block 16, retention 4096, 2,048 tokens.
    m = _repro.Offload([(256, None, False), (16, 128, False)], hash_block_size=16, retention=4096)
    r.case("realistic", f"{m.describe()}; prompt 2048 tokens", _repro.named_rows(m, 2048, only=("longer sibling",)))
    r.finish()


if __name__ == "__main__":
    _repro.main(body)
