"""O2: KV offload with an EAGLE group: the store keeps tails the lookup never reads.

The offload store filter passes the reachable boundaries unlowered
(``(N - 1, junction)``, not ``replay_boundaries``' EAGLE-lowered ones) and
the junction without ``- block``, while the offload lookup queries an EAGLE
group one chunk past the candidate and pops it, landing hits off the
full-attention chunk grid where the store keeps no tail. Dense or sparse, the
hits an EAGLE model should get from the offload tier are lost.

Run on a stock vLLM 0.33.0: exits 1 while the bug is there.
"""

import _repro


def body() -> None:
    r = _repro.Report("O2", "KV offload, EAGLE: unlowered boundaries and EAGLE pops off the stored tails")
    # Smallest input: full attention chunk 4 (block 2) + SWA chunk 2 (block 1,
    # 2 blocks per chunk, EAGLE), window 2, dense, prompt 4.
    m = _repro.Offload([(2, None, False), (1, 2, True)], hash_block_size=1, blocks_per_chunk=2)
    r.case("smallest", f"{m.describe()}; prompt 4 tokens", _repro.named_rows(m, 4))
    # Realistic: an EAGLE draft full-attention group (chunk 256) + SWA 128 at
    # block 16, retention 4096, a 2,000-token prompt resent.
    m = _repro.Offload([(256, None, True), (16, 128, False)], hash_block_size=16, retention=4096)
    r.case("realistic, resend", f"{m.describe()}; prompt 2000 tokens", _repro.named_rows(m, 2000, only=("resend",)))
    # Realistic: SWA EAGLE, a 3,000-token prompt whose first 1,024 tokens are shared.
    m = _repro.Offload([(256, None, False), (16, 128, True)], hash_block_size=16, retention=4096)
    r.case("realistic, junction", f"{m.describe()}; prompt 3000 tokens, junction at 1024",
           _repro.named_rows(m, 3000, junction=1024, only=("junction sibling",)))
    r.finish()


if __name__ == "__main__":
    _repro.main(body)
