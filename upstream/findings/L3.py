"""L3: without EAGLE, the longer sibling of a block-aligned prompt loses a block.

``replay_boundaries`` (vllm/v1/core/kv_cache_coordinator.py) says two
positions are reachable, "a resend of the identical prompt is capped at
num_tokens - 1, a longer sibling matches the final aligned block", but
without EAGLE it returns only ``(N - 1,)``. With sparse retention
(``prefix_cache_retention_interval`` 0 or > 0) the store keeps the tail for
``N - 1`` only; on a prompt that is a multiple of the scheduler block, that
tail serves ``N - B``, while a longer request continuing the prompt would
hit all ``N`` tokens with every block stored.

Run on a stock vLLM 0.33.0: exits 1 while the bug is there.
"""

import _repro


def body() -> None:
    r = _repro.Report("L3", "no EAGLE, sparse retention: replay_boundaries keeps only N - 1, the longer sibling needs N")
    # Smallest input: one SWA group, block 1, window 2, retention 0, prompt of 1.
    m = _repro.Local(window=2, block_size=1, retention=0)
    r.case("smallest", f"{m.describe()}; prompt 1 token", _repro.named_rows(m, 1))
    # Realistic: window 128, block 16, retention 4096, an aligned 2,048-token prompt.
    m = _repro.Local(window=128, block_size=16, retention=4096)
    r.case("realistic", f"{m.describe()}; prompt 2048 tokens", _repro.named_rows(m, 2048))
    r.finish()


if __name__ == "__main__":
    _repro.main(body)
