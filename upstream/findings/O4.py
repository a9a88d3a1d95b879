"""O4: KV offload, a sliding-window chunk that does not divide the
full-attention chunk: hits land where no tail was kept.

The store filter targets tails at multiples of the full-attention chunk (its
``alignment_tokens``), but the offload lookup's sliding-window hits end on
multiples of the sliding-window chunk; when that chunk does not divide the
full-attention one (e.g. a sliding-window group with a larger block), a hit
lands between the kept tails.

Run on a stock vLLM 0.33.0: exits 1 while the bug is there. (The finding
gives no realistic size: it needs a sliding-window block larger than the
full-attention block, or chunk sizes that are not multiples of each other.)
"""

import _repro


def body() -> None:
    r = _repro.Report("O4", "KV offload: the SWA chunk does not divide the full-attention chunk")
    # Smallest input: full attention at block 1 + SWA window 2 at block 2,
    # 2 blocks per chunk (chunks 2 and 4 tokens), retention 0, prompt 7.
    m = _repro.Offload([(1, None, False), (2, 2, False)], hash_block_size=1, blocks_per_chunk=2, retention=0)
    r.case("smallest", f"{m.describe()}; prompt 7 tokens", _repro.named_rows(m, 7))
    r.finish()


if __name__ == "__main__":
    _repro.main(body)
