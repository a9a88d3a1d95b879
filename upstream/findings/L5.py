"""L5: the junction sibling loses its hit when another group drops the EAGLE block.

``cache_blocks`` keeps, under sparse retention, the tail of the junction
(``Request.shared_prefix_boundary``, a shared prefix another request started
to reuse) and, when *this* group drops the EAGLE block, the tail one block
lower. A sibling that diverges right after the junction has no EAGLE peek
past it, so the joint hit lands one scheduler block lower whenever *any*
group drops (e.g. an EAGLE draft model's full-attention group). A
sliding-window group that does not drop keeps only the junction's tail,
which that hit never reads.

Run on a stock vLLM 0.33.0: exits 1 while the bug is there.
"""

import _repro


def body() -> None:
    r = _repro.Report("L5", "junction sibling: another group's EAGLE drop lowers the hit, this SWA group keeps only the junction's tail")
    # Smallest input: full attention at block 1 (EAGLE) + SWA 2 tokens at block 1,
    # retention 0, prompt 4, junction 2.
    m = _repro.Local(window=2, block_size=1, full_block_size=1, full_eagle=True, hash_block_size=1, retention=0)
    r.case("smallest", f"{m.describe()}; prompt 4 tokens, junction at 2", _repro.named_rows(m, 4, junction=2))
    # Realistic: an EAGLE draft full-attention group + SWA 128 (both block 16),
    # retention 4096, a 1,000-token prompt whose first 160 tokens are shared.
    m = _repro.Local(window=128, block_size=16, full_block_size=16, full_eagle=True, hash_block_size=16, retention=4096)
    r.case("realistic", f"{m.describe()}; prompt 1000 tokens, junction at 160",
           _repro.named_rows(m, 1000, junction=160, only=("junction sibling",)))
    r.finish()


if __name__ == "__main__":
    _repro.main(body)
