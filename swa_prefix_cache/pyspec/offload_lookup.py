"""vLLM 0.33.0's KV-offload sliding-window lookup, as a three-valued chunk mask.

Source: ``OffloadingConnectorScheduler._sliding_window_lookup`` in
``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``
(0.33.0 wheel). It scans the chunk keys right to left, one
``manager.lookup(key)`` per chunk. For a manager whose lookup is pure and never
answers ``RETRY`` (``CPUOffloadingManager``), each answer is a function of the
chunk alone, so the whole lookup is a function of a mask
``chunks[i] in {MISS, HIT, HIT_PENDING}`` (0, 1, 2) and the two window sizes.

Three functions, with twins in ``Lean/PrefixCache/Spec/Offload.lean``
(camelCase) and ``swa_prefix_cache/core/proved/offload_lookup.{h,c}`` (snake_case):

* ``legacy_offload_scan``: vLLM's loop, transcribed line for line;
* ``offload_lookup``: the declarative answer (what the loop computes);
* ``offload_stride_search``: the same answer, reading each chunk at most once
  and skipping ``window`` chunks per miss.

One more, with no twin (it is tested against vLLM, not proved):
``offload_prefix_lookup``, the answer of the full-attention groups' lookup
(``_maximal_prefix_lookup``), which the adapter reads inline
(swa_prefix_cache/vllm_adapter/connector_lookup.py).

Preconditions (``check_offload_args``): ``n >= 0``, ``window >= 0``,
``initial_window`` is ``None`` or an ``int >= 0`` (``None`` and ``0`` act the
same: vLLM's ``initial_window_size or sliding_window_size``), every chunk is
0, 1 or 2. Anything else (negative sizes, ``RETRY``) is outside the model.

The answer, in words. Let ``R = initial_window or window`` (the window that the
run touching the right end needs) and ``m`` the rightmost MISS (``-1`` if none).

1. If ``R >= 1`` and the last ``R`` chunks are all non-miss: ``n``, or
   ``None`` if one of those ``R`` chunks is pending.
2. Else, if there is no miss at all (``n < R`` or ``R == 0``): ``n``, or
   ``None`` if any chunk is pending.
3. Else the largest end ``e <= m`` with ``window`` non-miss chunks
   ``[e - window, e)`` (such an ``e`` is a miss: the end of a run; with
   ``window == 0`` it is ``m`` itself): ``e``, or ``None`` if the window holds
   a pending chunk.
4. Else (no such window) the leading run ``p`` (chunks ``[0, p)`` non-miss,
   chunk ``p`` a miss, ``p < window``): ``p``, or ``None`` if it holds a
   pending chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

MISS = 0
HIT = 1
HIT_PENDING = 2

Answer = int | None


def check_offload_args(n: int, window: int, initial_window: int | None) -> None:
    """The preconditions shared by the three functions (and by the C core)."""
    for name, value in (("n", n), ("window", window)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if initial_window is not None:
        if isinstance(initial_window, bool) or not isinstance(initial_window, int):
            raise TypeError(
                f"initial_window must be None or an int, got {type(initial_window).__name__}"
            )
        if initial_window < 0:
            raise ValueError(f"initial_window must be None or >= 0, got {initial_window}")


def _check_mask(chunks: Sequence[int]) -> None:
    for i, v in enumerate(chunks):
        if v not in (MISS, HIT, HIT_PENDING) or isinstance(v, bool):
            raise ValueError(f"chunks[{i}] = {v!r} is not MISS/HIT/HIT_PENDING (0/1/2)")


def required_window(window: int, initial_window: int | None) -> int:
    """vLLM's ``initial_window_size or sliding_window_size``."""
    return initial_window or window


def non_miss(chunks: Sequence[int], s: int, e: int) -> bool:
    """Chunks [s, e) are all HIT or HIT_PENDING."""
    return all(chunks[i] != MISS for i in range(s, e))


def no_pending(chunks: Sequence[int], s: int, e: int) -> bool:
    """No chunk of [s, e) is HIT_PENDING."""
    return all(chunks[i] != HIT_PENDING for i in range(s, e))


def rightmost_miss(chunks: Sequence[int]) -> int:
    """The largest i with chunks[i] == MISS, or -1."""
    for i in range(len(chunks) - 1, -1, -1):
        if chunks[i] == MISS:
            return i
    return -1


def leading_run(chunks: Sequence[int]) -> int:
    """The number of non-miss chunks from chunk 0 on."""
    p = 0
    while p < len(chunks) and chunks[p] != MISS:
        p += 1
    return p


def _gate(chunks: Sequence[int], s: int, e: int) -> Answer:
    return e if no_pending(chunks, s, e) else None


def offload_lookup(chunks: Sequence[int], window: int, initial_window: int | None = None) -> Answer:
    """The declarative answer (module docstring, clauses 1-4)."""
    n = len(chunks)
    check_offload_args(n, window, initial_window)
    _check_mask(chunks)
    r = required_window(window, initial_window)
    if 1 <= r <= n and non_miss(chunks, n - r, n):
        return _gate(chunks, n - r, n)
    m = rightmost_miss(chunks)
    if m < 0:
        return _gate(chunks, 0, n)
    ends = [e for e in range(window, m + 1) if non_miss(chunks, e - window, e)]
    if ends:
        e = max(ends)
        return _gate(chunks, e - window, e)
    p = leading_run(chunks)
    return _gate(chunks, 0, p)


def offload_prefix_lookup(chunks: Sequence[int]) -> Answer:
    """vLLM's full-attention offload lookup (``_maximal_prefix_lookup``)
    for a manager that never answers ``RETRY``: the leading non-miss run,
    or ``None`` if that run holds a pending chunk."""
    _check_mask(chunks)
    return _gate(chunks, 0, leading_run(chunks))


def legacy_offload_scan(
    lookup: Callable[[int], int], n: int, window: int, initial_window: int | None = None
) -> Answer:
    """vLLM 0.33.0's ``_sliding_window_lookup``, line for line, with
    ``self.manager.lookup(keys[idx], req_context)`` as ``lookup(idx)`` (0/1/2;
    ``RETRY`` is not modelled)."""
    check_offload_args(n, window, initial_window)
    defer_lookup = False
    pending_in_window = False
    consecutive_hits = 0
    required = initial_window or window
    for idx in range(n - 1, -1, -1):
        result = lookup(idx)
        if result == HIT:
            consecutive_hits += 1
        elif result == HIT_PENDING:
            pending_in_window = True
            consecutive_hits += 1
        elif result == MISS:
            consecutive_hits = 0
            pending_in_window = False
            required = window
        else:
            raise ValueError(f"lookup({idx}) = {result!r} is not MISS/HIT/HIT_PENDING")
        if consecutive_hits == required:
            return None if defer_lookup or pending_in_window else idx + required
    return None if defer_lookup or pending_in_window else consecutive_hits


def offload_stride_search(
    lookup: Callable[[int], int], n: int, window: int, initial_window: int | None = None
) -> Answer:
    """The same answer as ``legacy_offload_scan``, reading each chunk at most once.

    Phase 1 reads from the right end until a miss or ``R`` non-miss chunks
    (as vLLM does). Phase 2 (``window >= 1``) looks for the rightmost window
    ``[bound - window, bound)`` left of the rightmost miss ``m``, reading each
    candidate left to right from its start: a miss at ``j`` rules out every
    window containing ``j`` (next ``bound = j``), and the chunks
    ``[start, j)`` just read are remembered (with whether one was pending),
    so no chunk is read twice. Phase 3 (no window) reads the leading run,
    reusing what phase 2 knows. Probe bound: see ``probe_bound``.
    """
    check_offload_args(n, window, initial_window)
    r = initial_window or window
    pend = False
    count = 0
    idx = n - 1
    while idx >= 0:
        v = lookup(idx)
        if v == MISS:
            break
        if v == HIT_PENDING:
            pend = True
        count += 1
        if count == r:
            return None if pend else n
        idx -= 1
    if idx < 0:
        return None if pend else n
    m = idx
    if window == 0:
        return m
    bound = m          # no valid window ends in (bound, m]; chunk bound is a miss
    known_lo = m       # [known_lo, bound) known non-miss
    known_pend = False  # ... and whether one of them is pending
    while bound >= window:
        start = bound - window
        j = start
        round_pend = False
        while j < known_lo:
            v = lookup(j)
            if v == MISS:
                break
            if v == HIT_PENDING:
                round_pend = True
            j += 1
        if j == known_lo:
            return None if round_pend or known_pend else bound
        bound = j
        known_lo = start
        known_pend = round_pend
    # No window: the leading run. Chunk `bound` is a miss and [known_lo, bound)
    # is known non-miss; [0, known_lo) has never been read.
    f = 0
    lead_pend = False
    while f < known_lo:
        v = lookup(f)
        if v == MISS:
            break
        if v == HIT_PENDING:
            lead_pend = True
        f += 1
    if f == known_lo:
        return None if lead_pend or known_pend else bound
    return None if lead_pend else f


def legacy_probes(chunks: Sequence[int], window: int, initial_window: int | None = None) -> int:
    """How many chunks vLLM's loop reads on this mask."""
    counter = CountingChunks(chunks)
    legacy_offload_scan(counter, len(chunks), window, initial_window)
    return counter.probes


def probe_bound(chunks: Sequence[int], window: int, initial_window: int | None = None) -> int:
    """The stride search's read bound on this mask (``window >= 1``):
    ``(n - m) + m // window + 1 + 2 * h`` where ``m`` is the rightmost miss
    (``m = -1``: ``n``) and ``h`` the number of non-miss chunks in ``[0, m)``.
    On an all-miss mask that is ``1 + (n - 1) // window + 1``. It also never
    exceeds ``n`` nor vLLM's own count (``legacy_probes``), tested separately.
    (No bound of the form ``n // window + O(window)`` holds for every mask:
    an adversary answering HIT until a window would complete forces about
    ``n / 2`` reads on any algorithm; see docs/offload-lookup.md.)"""
    n = len(chunks)
    m = rightmost_miss(chunks)
    if m < 0:
        return n
    h = sum(1 for i in range(m) if chunks[i] != MISS)
    return (n - m) + m // window + 1 + 2 * h


@dataclass
class CountingChunks:
    """A chunk mask that counts reads (and which chunks were read)."""

    chunks: Sequence[int]
    probes: int = 0

    def __post_init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, i: int) -> int:
        if not 0 <= i < len(self.chunks):
            raise IndexError(f"read of chunk {i} outside [0, {len(self.chunks)})")
        self.probes += 1
        self.seen.append(i)
        return self.chunks[i]
