"""L4: a hybrid model with an EAGLE group whose block is smaller than the
scheduler block loses a block on every resend.

``replay_boundaries`` lowers the resend's boundary (and the longer
sibling's) by one whole scheduler block ``B`` whenever any group drops the
EAGLE block, and the sliding-window store keeps only the tail there. But the
hybrid coordinator looks an EAGLE group up one of *its own* blocks past the
candidate and drops that block, landing back on the candidate: the hit with
every block stored is one ``B`` higher than the tail the store kept, and the
lookup, finding no window run there, falls a whole window lower.

Run on a stock vLLM 0.33.0: exits 1 while the bug is there.
"""

import _repro


def body() -> None:
    r = _repro.Report("L4", "EAGLE group with a block smaller than the scheduler block: replay_boundaries lowers by a whole block")
    # Smallest input: full attention at block 1 (EAGLE) + SWA 2 tokens at block 2,
    # retention 0, prompt of 3.
    m = _repro.Local(window=2, block_size=2, full_block_size=1, full_eagle=True, hash_block_size=1, retention=0)
    r.case("smallest", f"{m.describe()}; prompt 3 tokens", _repro.named_rows(m, 3))
    # Realistic: an EAGLE draft full-attention group at block 16 + SWA 128 at
    # block 32, retention 4096, a 1,010-token prompt.
    m = _repro.Local(window=128, block_size=32, full_block_size=16, full_eagle=True, hash_block_size=16, retention=4096)
    r.case("realistic", f"{m.describe()}; prompt 1010 tokens", _repro.named_rows(m, 1010))
    r.finish()


if __name__ == "__main__":
    _repro.main(body)
