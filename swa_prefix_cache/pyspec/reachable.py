"""Which sliding-window blocks the store keeps, and whether the lookup agrees.

vLLM 0.33.0 decides at store time which blocks of a sliding-window (SWA)
group are worth caching: ``SlidingWindowManager.reachable_block_mask``
(vllm/v1/core/single_type_kv_cache_manager.py), used by the local prefix
cache (``SingleTypeKVCacheManager.cache_blocks``) and by the KV-offload store
filter (``OffloadingConnectorScheduler._build_store_jobs`` via
``_reachable_store_block_mask``). A block the store drops can never serve a
hit; a block the lookup needs but the store never keeps makes the cache
useless for that hit. This module states the mask from its meaning
(``reachable_mask``), the lookups that read the stored blocks
(``local_lookup``, ``offload_lookup``), and the **agreement property**
between them (``agreement``), all on plain integers and boolean lists.

The mask, from its meaning
--------------------------

A hit of ``L`` tokens (``L`` a multiple of ``alignment_tokens``, ``b = L /
block_size`` blocks) is served by one run of cached blocks, its *tail*:

* without EAGLE: ``need = cdiv(W - 1, bs)`` blocks ending at block ``b``
  (the window of token ``L``: ``W - 1`` tokens back), i.e. blocks
  ``[b - need, b)``;
* with EAGLE: the lookup matches one block more and drops it, so
  ``need = cdiv(W - 1, bs) + 1`` blocks ending one block later (the *peek*),
  ``[b + 1 - need, b + 1)``.

Clipped at block 0, the tail is also exactly what the prefix fallback reads
when ``b < need``. The store keeps the union of the tails of the hit lengths
it wants to keep servable, intersected with ``[start_block, end_block)``:

1. *segment boundaries*: every positive multiple of the segment,
   ``alignment_tokens`` (``retention_interval`` None: dense),
   ``retention_interval`` (> 0), or none (0);
2. the *final segment* (only when ``final_segment_end_block`` is given, only
   without EAGLE, only with segments): the non-EAGLE tail of the hit at
   ``final_segment_end_block`` itself, cut to that final partial segment;
3. *reachable boundaries* (only with a retention interval, 0 included): for
   every token position ``p`` given, the tail of the hit at ``p`` rounded
   down to ``alignment_tokens``.

Every block is kept (``None``) when there is no alignment, when
``alignment_tokens`` is not a multiple of the block size (a block mask cannot
represent a sub-block alignment), or when with segments a tail is at least a
segment long (tails would overlap, everything is reachable).

The agreement property
----------------------

What vLLM intends, from ``reachable_block_mask``'s docstring ("skip blocks
that can never serve a hit at any alignment-aligned prefix length"), the
comments on the segment and reachable-boundary tails, ``replay_boundaries``
("Two positions are reachable: a resend of the identical prompt is capped at
num_tokens - 1, a longer sibling matches the final aligned block"), the
junction comment in ``cache_blocks``, and the KV-offload PR in the seeds
("every converged hit is serviceable by the sparse store"):

A prompt of ``N`` tokens stores blocks ``[0, E)`` of the SWA group through
the mask ``S`` (``E`` as ``cache_blocks`` computes it). A later request
sharing the first ``p`` tokens matches the blocks wholly inside them. The
group's own lookup only depends on ``S`` through ``b``, the number of leading
blocks it may read: ``look(S, b)`` (``local_lookup``). ``look(ALL, b)`` is the
same with every block of ``[0, E)`` cached. The store promises the hit
lengths ``P``: every length when dense (``retention_interval`` None); the
multiples of ``r`` plus the reachable boundaries (each rounded down to the
alignment) when ``r > 0``; only the reachable boundaries when ``r = 0``.

* **No hit lost (group-local)**: for every ``b`` in ``[0, E]``,
  ``look(S, b)`` is at least the largest ``look(ALL, b')``, ``b' <= b``,
  that is in ``P``. Dense: ``look(S, b) == look(ALL, b)``.
* **Reachable queries served (whole coordinator)**: the hit
  ``get_computed_blocks`` gives -- through the unitary coordinator or the
  hybrid fixed point (``swa_prefix_cache.pyspec.joint``), other groups stored densely -- is
  the same with ``S`` as with every block, for a *resend* of the prompt
  (``max_length = N - 1``), a *longer sibling* that continues it, and a
  sibling diverging right after the *junction*
  (``Request.shared_prefix_boundary``).
* **No waste**: every kept block is used: removing it lowers ``look(S, b)``
  for some ``b`` in ``[0, E]``. Exempt: blocks of tails that reach past
  ``E`` (the request may go on and store the rest, e.g. an EAGLE peek).

``agreement`` checks the group-local parts on any mask and lookup;
``LocalScenario`` runs the whole property for one stored prompt
(``check_vllm``: vLLM's mask and boundaries; ``check_correct``: the correct
mask) and names the documented disagreement that can explain each violation
(``findings``, docs/store-lookup-agreement.md). ``correct_mask`` is the
correct mask: the union of ``hit_reads`` of every promised hit, where the
promised hits of the reachable queries are what those queries get with every
block stored. tests/test_reachable.py checks all of it against vLLM's own
store and lookup, on the local path and on the KV-offload path
(``offload_lookup``, ``offload_window_chunks``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from swa_prefix_cache.pyspec.params import SearchParams, alignment_period, cdiv, contiguous_blocks_for_hit, search_need
from swa_prefix_cache.pyspec.search import HitResult, find_hit


def tail(boundary_block: int, need: int, eagle: bool) -> range:
    """The run of blocks a hit of ``boundary_block`` blocks reads: ``need``
    blocks ending at the boundary, one block later with EAGLE (the peek),
    clipped at block 0. Empty when ``need <= 0``."""
    end = boundary_block + int(eagle)
    return range(max(end - need, 0), max(end, 0))


def reachable_mask(
    start_block: int,
    end_block: int,
    alignment_tokens: int | None,
    block_size: int,
    sliding_window: int,
    use_eagle: bool,
    retention_interval: int | None = None,
    reachable_boundaries: Sequence[int] = (),
    final_segment_end_block: int | None = None,
) -> list[bool] | None:
    """vLLM's ``SlidingWindowManager.reachable_block_mask`` (with
    ``dcp_world_size == 1``), from its meaning (module docstring): entry
    ``i - start_block`` says whether block ``i`` is kept; ``None`` keeps all.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if sliding_window < 0:
        raise ValueError(f"sliding_window must be >= 0, got {sliding_window}")
    if alignment_tokens is None or alignment_tokens % block_size != 0:
        return None
    need = contiguous_blocks_for_hit(sliding_window, block_size, use_eagle)
    segment = (
        alignment_tokens
        if retention_interval is None
        else (retention_interval if retention_interval else None)
    )
    keep: set[int] = set()
    if segment is not None:
        per_segment = segment // block_size
        if need >= per_segment:
            return None
        # Segment boundaries whose tails meet [start_block, end_block).
        first = max(1, (start_block - int(use_eagle)) // per_segment)
        last = (end_block - int(use_eagle) + need) // per_segment + 1
        for k in range(first, last + 1):
            keep.update(tail(k * per_segment, need, use_eagle))
        if final_segment_end_block is not None and not use_eagle:
            final_end = final_segment_end_block
            final_start = final_end - final_end % per_segment
            if final_end != final_start:
                keep.update(i for i in tail(final_end, need, False) if i >= final_start)
    if retention_interval is not None:
        for boundary_tokens in reachable_boundaries:
            aligned = boundary_tokens // alignment_tokens * alignment_tokens
            keep.update(tail(aligned // block_size, need, use_eagle))
    return [i in keep for i in range(start_block, end_block)]


def kept(mask: list[bool] | None, end_block: int, start_block: int = 0) -> list[bool]:
    """The stored blocks ``[0, end_block)`` as a full list (``None``: all).
    Blocks before ``start_block`` count as stored."""
    if mask is None:
        return [True] * end_block
    assert len(mask) == end_block - start_block
    return [True] * start_block + list(mask)


# ---- the lookups that read what was stored --------------------------------------


def local_lookup(
    stored: Sequence[bool],
    b: int,
    block_size: int,
    sliding_window: int,
    alignment_tokens: int,
    eagle: bool,
) -> HitResult:
    """``SlidingWindowManager.find_longest_cache_hit`` (= ``swa_prefix_cache.pyspec.find_hit``)
    for a request that may read the first ``b`` blocks: ``stored[:b]`` with
    ``max_length = b * block_size``."""
    mask = list(stored[:b]) + [False] * max(0, b - len(stored))
    params = SearchParams.from_vllm(
        b * block_size, block_size, sliding_window, alignment_tokens, eagle
    )
    return find_hit(mask, params)


def offload_window_chunks(sliding_window: int, tokens_per_chunk: int) -> int:
    """The offload lookup's run (chunks) at a chunk-aligned hit:
    ``get_sliding_window_size_in_chunks`` = ``cdiv(W, tokens_per_chunk)``
    (no extra retained tokens). Note: ``cdiv(W, c)``, one more than the
    local ``cdiv(W - 1, c)`` when ``W - 1`` is a multiple of ``c``."""
    return cdiv(sliding_window, tokens_per_chunk)


def offload_lookup(
    stored_chunks: Sequence[bool],
    b: int,
    window_chunks: int,
    eagle: bool,
) -> HitResult:
    """``OffloadingConnectorScheduler._sliding_window_lookup`` plus the EAGLE
    pop, for a chunk-aligned candidate of ``b`` chunks: the rightmost run of
    ``window_chunks`` (+1 with EAGLE) stored chunks ending at or before ``b``,
    minus the EAGLE chunk; else the stored run from chunk 0, minus the EAGLE
    chunk. No alignment gate (period 1), which is ``find_hit`` with
    ``need = window (+1)``, ``period = 1``."""
    mask = list(stored_chunks[:b]) + [False] * max(0, b - len(stored_chunks))
    need = max(window_chunks + int(eagle), 1)
    return find_hit(mask, SearchParams(n=b, need=need, period=1, eagle=eagle))


# ---- the agreement property ------------------------------------------------------


def promised_lengths(
    alignment_tokens: int,
    retention_interval: int | None,
    reachable_boundaries: Sequence[int],
) -> Callable[[int], bool]:
    """Membership in ``P`` (module docstring), for hit lengths in tokens."""
    boundaries = {p // alignment_tokens * alignment_tokens for p in reachable_boundaries}
    if retention_interval is None:
        return lambda length: True
    if retention_interval == 0:
        return lambda length: length in boundaries
    return lambda length: length % retention_interval == 0 or length in boundaries


@dataclass(frozen=True)
class Agreement:
    """What ``agreement`` found: ``lost`` = ``(b, stored hit, promised hit)``
    (tokens) for every query below its promise; ``replay_lost`` = the same for
    the named replay queries; ``wasted`` = kept blocks no lookup uses."""

    lost: tuple[tuple[int, int, int], ...] = ()
    replay_lost: tuple[tuple[int, int, int], ...] = ()
    wasted: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.lost or self.replay_lost or self.wasted)


Lookup = Callable[[Sequence[bool], int], int]
"""``lookup(stored, b) -> hit length in tokens``."""


def agreement(
    stored: Sequence[bool],
    lookup: Lookup,
    is_promised: Callable[[int], bool],
    replay_queries: Sequence[int] = (),
    exempt: Sequence[int] = (),
) -> Agreement:
    """Check the agreement property of ``stored`` (blocks ``[0, E)``) under
    ``lookup``: no hit lost for any ``b`` in ``[0, E]``, the ``replay_queries``
    served exactly, no kept block unused (except ``exempt`` ones)."""
    end = len(stored)
    everything = [True] * end
    lost = []
    best_promised = 0
    for b in range(end + 1):
        full = lookup(everything, b)
        if is_promised(full):
            best_promised = max(best_promised, full)
        got = lookup(stored, b)
        if got < best_promised:
            lost.append((b, got, best_promised))
    replay_lost = []
    for b in replay_queries:
        b = min(b, end)
        full, got = lookup(everything, b), lookup(stored, b)
        if got != full:
            replay_lost.append((b, got, full))
    answers = [lookup(stored, b) for b in range(end + 1)]
    wasted = []
    for j in range(end):
        if not stored[j] or j in exempt:
            continue
        without = list(stored)
        without[j] = False
        if all(lookup(without, b) == answers[b] for b in range(end + 1)):
            wasted.append(j)
    return Agreement(tuple(lost), tuple(replay_lost), tuple(wasted))


def pending_segment_blocks(
    end_block: int,
    alignment_tokens: int,
    block_size: int,
    sliding_window: int,
    use_eagle: bool,
    retention_interval: int | None,
    reachable_boundaries: Sequence[int] = (),
) -> list[int]:
    """Blocks below ``end_block`` kept for a tail (segment boundary or
    reachable boundary) that reaches ``end_block`` or past it: the hit needs
    blocks the request has not stored yet (e.g. the EAGLE peek after the
    prompt). Not waste: the request may go on and store them."""
    if alignment_tokens % block_size:
        return []
    need = contiguous_blocks_for_hit(sliding_window, block_size, use_eagle)
    out: set[int] = set()
    segment = alignment_tokens if retention_interval is None else retention_interval
    per = segment // block_size if segment else 0
    if per > 0:
        k = (end_block - int(use_eagle)) // per + 1  # first boundary whose tail passes end
        while k * per + int(use_eagle) - need < end_block:
            out.update(i for i in tail(k * per, need, use_eagle) if i < end_block)
            k += 1
    if retention_interval is not None:
        for p in reachable_boundaries:
            run = tail(p // alignment_tokens * alignment_tokens // block_size, need, use_eagle)
            if run.stop > end_block:
                out.update(i for i in run if i < end_block)
    return sorted(out)


def replay_boundaries(num_prompt_tokens: int, scheduler_block_size: int, use_eagle: bool) -> tuple[int, ...]:
    """vLLM's ``replay_boundaries`` (kv_cache_coordinator.py): ``N - 1``;
    with EAGLE the resend's and the extension's aligned blocks, one block
    lower."""
    if not use_eagle:
        return (num_prompt_tokens - 1,)
    block = scheduler_block_size
    resend = (num_prompt_tokens - 1) // block * block
    extension = num_prompt_tokens // block * block
    return tuple(sorted({max(resend - block, 0), max(extension - block, 0)}))


def hit_reads(
    length_tokens: int,
    block_size: int,
    sliding_window: int,
    alignment_tokens: int,
    eagle: bool,
) -> range | None:
    """The blocks the lookup must find cached to answer ``length_tokens``: the
    run read by the all-cached lookup with the fewest leading blocks ``b``
    that answers exactly that (window: ``[end - need, end)``, peek included;
    prefix fallback: ``[0, b)``). ``None`` when no ``b`` answers it (the
    length is not a possible answer); ``range(0)`` for 0."""
    if length_tokens == 0:
        return range(0)
    if length_tokens % block_size:
        return None
    blocks = length_tokens // block_size
    need = search_need(sliding_window, block_size, eagle)
    period = alignment_period(block_size, alignment_tokens)
    for b in range(blocks, blocks + period + need + 2):
        hit = local_lookup([True] * b, b, block_size, sliding_window, alignment_tokens, eagle)
        if hit.length == blocks:
            return range(hit.first_real, b)
        if hit.length > blocks:
            return None
    return None


def correct_mask(
    start_block: int,
    end_block: int,
    alignment_tokens: int | None,
    block_size: int,
    sliding_window: int,
    use_eagle: bool,
    retention_interval: int | None = None,
    promised_hits: Sequence[int] = (),
) -> list[bool] | None:
    """What the local store should keep: the union of ``hit_reads`` of every
    hit it promises -- every positive multiple of the segment
    (``alignment_tokens`` dense, ``retention_interval`` sparse, none for 0)
    and the ``promised_hits`` (token lengths: what the named reachable
    queries get with everything cached; see ``agreement``) -- intersected
    with ``[start_block, end_block)``. Same ``None`` cases as vLLM for a
    missing or sub-block alignment.

    It differs from ``reachable_mask`` only where vLLM's mask disagrees with
    vLLM's lookup: a window of at most one token (the lookup still needs one
    block), the EAGLE prefix fallback under a sub-block period (it needs
    ``period`` more blocks than the tail), the EAGLE peek of an empty hit and
    block 0 when an EAGLE tail is exactly one segment long (never read).
    """
    if alignment_tokens is None or alignment_tokens % block_size != 0:
        return None
    segment = (
        alignment_tokens
        if retention_interval is None
        else (retention_interval if retention_interval else None)
    )
    need = search_need(sliding_window, block_size, use_eagle)
    period = alignment_period(block_size, alignment_tokens)
    hits: set[int] = {h for h in promised_hits if h > 0}
    if segment is not None:
        k = max(1, (start_block - need - period - 2) * block_size // segment)
        while (k * segment) // block_size - need - period - 2 < end_block:
            hits.add(k * segment)
            k += 1
    keep: set[int] = set()
    for length in hits:
        reads = hit_reads(length, block_size, sliding_window, alignment_tokens, use_eagle)
        if reads is not None:
            keep.update(reads)
    return [i in keep for i in range(start_block, end_block)]


# ---- the local path, end to end --------------------------------------------------


def cacheable_tokens(
    num_tokens: int, scheduler_block_size: int, block_size: int, eagle: bool
) -> int:
    """``KVCacheCoordinator.get_num_cacheable_tokens`` (no partial hash hits,
    no re-prefillable tokens): round down to the scheduler block; an EAGLE
    group keeps one more of its own blocks (the peek it matches and drops)."""
    aligned = num_tokens // scheduler_block_size * scheduler_block_size
    if eagle and aligned > 0:
        return min(num_tokens, aligned + block_size)
    return aligned


@dataclass(frozen=True)
class LocalScenario:
    """One sliding-window group of a prompt stored by the local prefix cache
    and read back by later requests.

    ``full_block_size`` None: a unitary coordinator (the SWA group alone;
    hash block = block size = alignment; no EAGLE margin). Otherwise a hybrid
    one: a full-attention group (block ``full_block_size``, dropping the
    EAGLE block when ``full_eagle``) and the SWA group (dropping when
    ``eagle``), alignment = lcm of the block sizes and the hash block size,
    looked up by ``swa_prefix_cache.pyspec.joint.joint_lookup``. The prompt has
    ``num_prompt_tokens`` tokens; ``shared_prefix_boundary`` is
    ``Request.shared_prefix_boundary`` at store time.

    The store follows ``SingleTypeKVCacheManager.cache_blocks``: the group
    stores blocks ``[0, stored_blocks)`` through the mask with
    ``reachable_boundaries`` = ``replay_boundaries(N, A, any group drops)``
    plus the junction (and the junction minus one block when this group
    drops). Full attention stores its blocks densely.
    """

    window: int
    block_size: int
    eagle: bool
    retention_interval: int | None
    num_prompt_tokens: int
    full_block_size: int | None = None
    full_eagle: bool = False
    hash_block_size: int | None = None
    shared_prefix_boundary: int = 0

    @property
    def h(self) -> int:
        return self.block_size if self.hash_block_size is None else self.hash_block_size

    @property
    def alignment(self) -> int:
        if self.full_block_size is None:
            return self.block_size
        return math.lcm(self.h, self.block_size, self.full_block_size)

    @property
    def model_eagle(self) -> bool:
        return self.eagle or (self.full_block_size is not None and self.full_eagle)

    def stored_blocks(self, block_size: int | None = None, eagle: bool | None = None) -> int:
        bs = self.block_size if block_size is None else block_size
        e = self.eagle if eagle is None else eagle
        n = self.num_prompt_tokens
        tokens = cacheable_tokens(n, self.alignment, bs, e)
        return min(tokens, n // self.h * self.h) // bs

    def boundaries(self) -> list[int]:
        out = list(replay_boundaries(self.num_prompt_tokens, self.alignment, self.model_eagle))
        if self.shared_prefix_boundary:
            out.append(self.shared_prefix_boundary)
            if self.eagle:
                out.append(self.shared_prefix_boundary - self.block_size)
        return out

    def vllm_mask(self) -> list[bool]:
        """What vLLM stores (``reachable_mask``), as a full list."""
        end = self.stored_blocks()
        return kept(
            reachable_mask(
                0, end, self.alignment, self.block_size, self.window, self.eagle,
                self.retention_interval, self.boundaries(),
            ),
            end,
        )

    def named_queries(self) -> list[tuple[str, int, int]]:
        """``(name, shared tokens, prompt length)`` of the reachable queries:
        a resend of the prompt, a longer sibling continuing it, and (when set)
        a sibling diverging right after the junction."""
        n = self.num_prompt_tokens
        longer = n + 2 * self.alignment + 1
        out = [("resend", n, n), ("extension", n, longer)]
        if self.shared_prefix_boundary:
            out.append(("junction", self.shared_prefix_boundary, longer))
        return out

    def sibling_queries(self) -> list[tuple[int, int]]:
        """Siblings diverging after every prefix ``p`` of the prompt."""
        longer = self.num_prompt_tokens + 2 * self.alignment + 1
        return [(p, longer) for p in range(self.num_prompt_tokens + 1)]

    def query(self, swa_stored: Sequence[bool], shared: int, prompt_len: int) -> int:
        """The hit (tokens) ``get_computed_blocks`` gives a request of
        ``prompt_len`` tokens sharing the first ``shared`` with the prompt,
        when the SWA group holds ``swa_stored``."""
        h, bs = self.h, self.block_size
        num_hash = prompt_len // h
        k = min(shared // bs, len(swa_stored))
        swa = [i < k and bool(swa_stored[i]) for i in range(num_hash * h // bs)]
        if self.full_block_size is None:
            b = min(k, (prompt_len - 1) // bs) if prompt_len else 0
            return local_lookup(swa, b, bs, self.window, bs, self.eagle).length * bs
        from swa_prefix_cache.pyspec.joint import Group, joint_lookup

        bf = self.full_block_size
        kf = min(shared // bf, self.stored_blocks(bf, self.full_eagle))
        full = [i < kf for i in range(num_hash * h // bf)]
        groups = [Group(bf, None, self.full_eagle, tuple(full)), Group(bs, self.window, self.eagle, tuple(swa))]
        return joint_lookup(groups, max(prompt_len - 1, 0), self.alignment, h, num_hash).hit_length

    def promised_hits(self) -> list[int]:
        """What the named queries get when every block is stored."""
        everything = [True] * self.stored_blocks()
        return [self.query(everything, p, n) for _, p, n in self.named_queries()]

    def correct_mask(self) -> list[bool]:
        """``correct_mask`` with the named queries' hits as promised hits."""
        end = self.stored_blocks()
        return kept(
            correct_mask(
                0, end, self.alignment, self.block_size, self.window, self.eagle,
                self.retention_interval, self.promised_hits(),
            ),
            end,
        )

    def check(self, stored: Sequence[bool], promised: Callable[[int], bool]) -> list[tuple[str, object]]:
        """The agreement property for ``stored``: group-local (``agreement``:
        ``lost`` and ``waste``) and the named queries (``resend``,
        ``extension``, ``junction``: equal to the all-stored hit). Returns
        the violations, ``[]`` when it holds."""
        end = self.stored_blocks()
        bs, a, w, e = self.block_size, self.alignment, self.window, self.eagle
        found = agreement(
            stored,
            lambda s, b: local_lookup(s, b, bs, w, a, e).length * bs,
            promised,
            (),
            pending_segment_blocks(end, a, bs, w, e, self.retention_interval, self.boundaries()),
        )
        out: list[tuple[str, object]] = [("lost", x) for x in found.lost]
        out += [("waste", x) for x in found.wasted]
        everything = [True] * end
        for name, p, n in self.named_queries():
            want, got = self.query(everything, p, n), self.query(stored, p, n)
            if got != want:
                out.append((name, (p, n, got, want)))
        return out

    def check_vllm(self) -> list[tuple[str, object]]:
        """The agreement property of vLLM's mask, with vLLM's promise."""
        return self.check(
            self.vllm_mask(),
            promised_lengths(self.alignment, self.retention_interval, self.boundaries()),
        )

    def check_correct(self) -> list[tuple[str, object]]:
        """The agreement property of ``correct_mask``."""
        hits = self.promised_hits()
        r = self.retention_interval
        return self.check(
            self.correct_mask(),
            (lambda length: True) if r is None else (lambda length: (r > 0 and length % r == 0) or length in hits),
        )

    def findings(self) -> set[str]:
        """Which documented disagreement can show on this scenario
        (docs/store-lookup-agreement.md): the exact preconditions."""
        out = set()
        a, bs = self.alignment, self.block_size
        period = alignment_period(bs, a)
        if contiguous_blocks_for_hit(self.window, bs, self.eagle) <= 0:
            out.add("L1")  # window of <= 1 token: mask keeps nothing
        if self.eagle and period > 1:
            out.add("L2")  # EAGLE prefix fallback needs `period` more blocks
        if not self.model_eagle and self.num_prompt_tokens % a == 0:
            out.add("L3")  # non-EAGLE: longer sibling of an aligned prompt
        if self.full_block_size is not None and (
            (self.eagle and bs < a) or (self.full_eagle and self.full_block_size < a)
        ):
            out.add("L4")  # EAGLE drop smaller than the scheduler block
        if (
            self.shared_prefix_boundary
            and self.full_block_size is not None
            and self.full_eagle
            and not self.eagle
        ):
            out.add("L5")  # junction: another group's EAGLE drop
        if self.eagle:
            need = contiguous_blocks_for_hit(self.window, bs, True)
            r = self.retention_interval
            segment = a if r is None else r
            empty_hit = r is not None and any(p // a * a == 0 for p in self.boundaries())
            if empty_hit or (segment and need == segment // bs):
                out.add("W")  # EAGLE peek of an empty hit / block 0 when need == segment
        return out
