"""W: with EAGLE the sliding-window store keeps a block that no lookup reads.

Waste, not loss: ``reachable_block_mask`` keeps blocks no request can use.

(a) A reachable boundary that aligns down to 0 (retention 0, a prompt
    shorter than two scheduler blocks, or the EAGLE-lowered resend of a
    one-block prompt): its EAGLE tail is ``[0, 1)``, the *peek* of an empty
    hit; a hit of 0 tokens reads nothing.
(b) Dense, EAGLE, a tail exactly one segment long (``need == segment /
    block_size``): ``need >= per_segment`` returns ``None`` ("every block is
    reachable"), but with EAGLE the tails ``[k * per_segment + 1 - need,
    k * per_segment + 1)`` cover every block except block 0.

Run on a stock vLLM 0.33.0: exits 1 while the bug is there.
"""

import _repro


def waste(r: "_repro.Report", label: str, m: "_repro.Local", n: int, block: int) -> None:
    """Is sliding-window block ``block`` kept although no request sharing a
    prefix of the prompt gets a different hit without it?"""
    kept = m.kept_blocks(n)
    queries = m.every_query(n)
    with_it = m.hits(n, queries)
    without = m.hits(n, queries, drop=[block])
    used = [q for q, a, b in zip(queries, with_it, without) if a != b]
    print()
    print(f"[{label}] {m.describe()}; prompt {_repro.tokens(n)}")
    print(f"    sliding-window blocks vLLM caches: {kept}")
    if block in kept:
        print(f"    block {block} kept; requests whose hit changes without it: {len(used)} of {len(queries)}"
              + ("  <-- WASTED" if not used else f" (e.g. {used[0]})"))
    else:
        print(f"    block {block} not kept")
    r.flag(block in kept and not used, reached=any(with_it))


def body() -> None:
    r = _repro.Report("W", "EAGLE: the store keeps a sliding-window block that no lookup reads (waste)")
    # (a) smallest: one SWA group (EAGLE), block 1, window 2, retention 0, a 1-token prompt.
    waste(r, "(a) smallest: boundary aligning to 0", _repro.Local(window=2, block_size=1, eagle=True, retention=0), 1, 0)
    # (a) realistic: SWA 128 at block 16 (EAGLE), retention 4096, a 20-token prompt.
    waste(r, "(a) realistic", _repro.Local(window=128, block_size=16, eagle=True, retention=4096), 20, 0)
    # (b) realistic: full attention at 32 + SWA 16 tokens at block 16 (EAGLE),
    # dense: need 2 == 2 blocks per 32-token segment.
    waste(r, "(b) need == segment",
          _repro.Local(window=16, block_size=16, eagle=True, full_block_size=32, hash_block_size=16), 96, 0)
    r.finish()


if __name__ == "__main__":
    _repro.main(body)
