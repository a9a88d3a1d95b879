"""The stride search, the prefix fallback, and their composition ``find_hit``.

Definitions (the same in Lean/Spec and swa_prefix_cache/core/proved/prefix_cache.h):

* a *window* is a half-open block range ``[end - need, end)``;
* it is *valid* when every block in it is cached (``valid_window``);
* its end is *aligned* when ``(end - eagle) % period == 0``
  (``aligned_end``): vLLM's alignment gate, which looks at the hit length
  after the EAGLE drop;
* vLLM's answer is the valid window with the largest aligned end
  (``stride_search``), or, when there is none, the cached prefix from block 0
  cut back to the alignment (``prefix_fallback``).
"""

from collections.abc import Sequence
from dataclasses import dataclass

from swa_prefix_cache.pyspec.params import SearchParams


@dataclass(frozen=True)
class HitResult:
    """Everything vLLM's output lists depend on.

    vLLM returns, per group, ``length`` blocks: ``first_real`` null blocks
    followed by the cached blocks ``first_real .. length - 1``; the hit is
    ``length * block_size`` tokens. ``0 <= first_real <= length``.
    """

    length: int
    first_real: int


def valid_window(cached: Sequence[bool], start: int, end: int, need: int) -> bool:
    """ValidWindow: ``[start, end)`` lies in the mask, spans at least ``need``
    blocks, and every block in it is cached."""
    if start < 0 or end > len(cached) or end - start < need:
        return False
    return all(cached[i] for i in range(start, end))


def aligned_end(end: int, period: int, eagle: bool) -> bool:
    """The alignment gate: a window ending at ``end`` leaves ``end - eagle``
    blocks after the EAGLE drop, and that count must be a multiple of
    ``period``."""
    return (end - int(eagle)) % period == 0


def realign(length: int, period: int) -> int:
    """vLLM's re-alignment loop (pop until aligned) in closed form: the
    largest multiple of ``period`` that is at most ``length``."""
    return length - length % period


def last_aligned_end(bound: int, period: int, eagle: bool) -> int:
    """The largest ``end <= bound`` with ``aligned_end(end)``; ``-1`` when
    ``bound < eagle`` (no non-negative candidate)."""
    if bound < int(eagle):
        return -1
    return bound - (bound - int(eagle)) % period


def stride_search(cached: Sequence[bool], p: SearchParams) -> int | None:
    """The largest aligned ``end`` whose window ``[end - need, end)`` is valid,
    or ``None``.

    Each candidate window is probed from its left edge (the anchor) rightward.
    A miss at ``j`` rules out every window containing ``j``, so the next
    candidate ends at or before ``j``; the blocks ``[start, j)`` just seen
    cached are remembered (``known_lo``) and not probed again. Every block
    is probed at most once, and a mask with no hits costs about
    ``n / need`` probes.
    """
    bound = p.n  # no valid aligned window ends in (bound, n]
    known_lo = p.n  # [known_lo, bound) is known to be all cached
    while True:
        end = last_aligned_end(bound, p.period, p.eagle)
        if end < p.need:
            return None
        start = end - p.need
        scan_to = min(end, known_lo)
        j = start
        while j < scan_to and cached[j]:
            j += 1
        if j == scan_to:
            return end
        bound = j
        known_lo = start


def prefix_fallback(cached: Sequence[bool], p: SearchParams) -> int:
    """Hit length in blocks when no full window is found: vLLM keeps the run
    of cached blocks from block 0, then re-aligns, drops the EAGLE block and
    re-aligns again.

    Only the first ``need - 1`` blocks can matter (a longer cached prefix
    would hold a valid window), so at most ``need`` probes are made.
    """
    limit = min(p.need - 1, p.n)
    prefix = 0
    while prefix < limit and cached[prefix]:
        prefix += 1
    # vLLM's run from block 0 starts at the highest block that passes the
    # alignment gate, i.e. it ends at the last aligned end within the prefix.
    length = max(last_aligned_end(prefix, p.period, p.eagle), 0)
    length = realign(length, p.period)
    if p.eagle and length > 0:
        length = realign(length - 1, p.period)
    return length


def find_hit(cached: Sequence[bool], p: SearchParams) -> HitResult:
    """vLLM's SWA cache hit, from the stride search or the prefix fallback."""
    if len(cached) < p.n:
        raise ValueError(f"cached has {len(cached)} entries, fewer than n = {p.n}")
    end = stride_search(cached, p)
    if end is not None:
        return HitResult(length=end - int(p.eagle), first_real=end - p.need)
    return HitResult(length=prefix_fallback(cached, p), first_real=0)
