"""Where a replay's hits fall short of the reference store's, request by
request, and the cause each shortfall has.

Standard library only. The replay gives, per request in arrival order, its
prompt's chained block keys (``swa_prefix_cache.pyspec.tier_reference.chained_keys``), the
hit tokens vLLM admitted it with (GPU pool plus host tier) and the
reference store's hit tokens (``reference_hits``). A request is short when
vLLM's hit is below the reference's; each short request gets one cause:

* ``tier_junction``: the reference's hit point ``p`` (in blocks) is a
  junction that an earlier prompt found only below the GPU pool: two earlier
  prompts ``i < j`` share the first ``p`` blocks with this one and diverge
  at ``p`` (one of them ends there, or their next blocks differ), and ``j``
  was admitted with fewer than ``p`` blocks of hit. The reference pins that
  junction at ``j`` (its hit stopped below the shared prefix); vLLM 0.33.0
  pins a junction only from the GPU pool's lookup
  (``KVCacheManager.get_computed_blocks``), so a prefix that ``j`` found in
  the tier gets no window kept at ``p``, and this request misses it.
* ``unattributed``: anything else.

With the EAGLE drop (``eagle_drop``: the full-attention hit loses its last
block) the reference lands one block below the shared run, so the junction
is looked for where the prompts part, at ``p`` or ``p + 1``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

CAUSES = ("tier_junction", "unattributed")


def _diverge_at(a: Sequence[Hashable], b: Sequence[Hashable], p: int) -> bool:
    """Two prompts that share their first ``p`` blocks part there."""
    return len(a) == p or len(b) == p or a[p] != b[p]


def _junction_missed(keys: Sequence[Sequence[Hashable]], measured: Sequence[int],
                     holders: dict[Hashable, list[int]], k: int, q: int, hit: int) -> bool:
    """Two earlier prompts share prompt ``k``'s first ``q`` blocks and part
    there, and the later one was admitted with less than ``hit`` tokens."""
    sharers = [j for j in holders[keys[k][q - 1]] if j < k]
    return any(measured[j] < hit and any(_diverge_at(keys[i], keys[j], q) for i in sharers[:n])
               for n, j in enumerate(sharers))


def shortfalls(keys: Sequence[Sequence[Hashable]], measured: Sequence[int],
               reference: Sequence[int], block: int, eagle_drop: bool = False) -> dict[str, Any]:
    """The requests whose ``measured`` hit is below ``reference``'s, by cause
    (module docstring); the ones above it are counted too (the reference
    is meant to bound vLLM, so any is worth a look)."""
    if not len(keys) == len(measured) == len(reference):
        raise ValueError(f"keys, measured and reference must be equally long, got "
                         f"{len(keys)}, {len(measured)}, {len(reference)}")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive int, got {block!r}")
    holders: dict[Hashable, list[int]] = {}  # a prefix's chained key -> the prompts that have it
    for k, prompt in enumerate(keys):
        for key in prompt:
            holders.setdefault(key, []).append(k)
    out: dict[str, Any] = {cause: {"requests": 0, "tokens": 0} for cause in CAUSES}
    above = {"requests": 0, "tokens": 0}
    for k, (got, want) in enumerate(zip(measured, reference)):
        if got > want:
            above["requests"] += 1
            above["tokens"] += got - want
        if got >= want:
            continue
        p = want // block
        cause = "unattributed"
        for q in (p, p + 1) if eagle_drop else (p,):
            if (cause == "unattributed" and 0 < q <= len(keys[k])
                    and _junction_missed(keys, measured, holders, k, q, p * block)):
                cause = "tier_junction"
        out[cause]["requests"] += 1
        out[cause]["tokens"] += want - got
    return {
        "requests": sum(out[c]["requests"] for c in CAUSES),
        "tokens": sum(out[c]["tokens"] for c in CAUSES),
        "by_cause": out,
        "above_reference": above,
    }
