"""What the KV-offload store should keep of a sliding-window group: the
offload variant of ``swa_prefix_cache.pyspec.reachable.correct_mask``.

vLLM 0.33.0's KV-offload store filter (``OffloadingConnectorScheduler.
_reachable_store_block_mask``) reuses the *local* cache's mask
(``reachable_block_mask``) at the full-attention chunk alignment, but the
offload *lookup* (``_lookup_complete_chunks`` -> ``_sliding_window_lookup``)
reads different runs: ``cdiv(W, c)`` chunks instead of ``cdiv(W - 1, c)``
(O1), one chunk past the hit for an EAGLE group and hits lowered by every
EAGLE group's pop (O2), the partial last chunk of a resend (O3), caps that
are not multiples of the SWA chunk (O4), the longer sibling of an aligned
prompt (O5); docs/store-lookup-agreement.md.

The correction here has the same definition as ``correct_mask``: **keep the
union of the chunks that the all-stored lookup reads for every promised
hit**, with the offload lookup instead of the local one. Nothing else needs
to agree: a store that holds every run the all-stored lookup reads makes the
lookup take the same steps (each sliding-window scan meets the same misses
right of the run and stops at the same place), so it returns the same hit.

* ``all_stored_lookup`` transcribes ``_lookup_complete_chunks`` (the
  multi-group fixed point: full-attention prefix lookups, then sliding-window
  groups by decreasing window, the EAGLE extra chunk and its pop, the
  re-checks) for a request that shares a prefix with one stored prompt, no
  local hit, no deferral; it returns the hit and the chunk runs each group
  read.
* ``promised_queries`` are the queries whose hits the store promises, as in
  ``swa_prefix_cache.pyspec.reachable`` (``promised_lengths``): dense (``retention_interval``
  None) every request sharing any prefix of the prompt (siblings that go on
  with their own tokens, and requests that end there); with a retention
  interval ``r > 0`` those whose hit is a positive multiple of ``r``; with a
  retention interval (``0`` included) the resend of the prompt, a longer
  sibling and a sibling diverging at the junction
  (``Request.shared_prefix_boundary``).
* ``offload_store_chunks`` is the union of the reads of the target group,
  restricted to a chunk range, computed locally (a chunk's answer does not
  depend on the range asked, so storing step by step keeps the same chunks).

No vLLM or torch import: plain integers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from swa_prefix_cache.pyspec.params import cdiv


@dataclass(frozen=True)
class OffloadGroup:
    """One KV-cache group as the offload scheduler sees it.

    ``chunk``: tokens per offload chunk (``tokens_per_block *
    blocks_per_chunk``). ``window_chunks``: ``sliding_window_size_in_chunks``
    (None: full attention, a prefix lookup). ``reach``: the tokens before a
    hit its window needs, ``sliding_window - 1 + extra_retained_tokens``
    (sliding window only). ``eagle``: an EAGLE/MTP draft group (queries one
    extra chunk and pops it)."""

    chunk: int
    window_chunks: int | None = None
    reach: int = 0
    eagle: bool = False


def load_window_chunks(group: OffloadGroup, num_tokens: int) -> int:
    """``GroupOffloadConfig.load_window_size_in_chunks`` for a sliding-window
    group: the lookup window, widened for an unaligned right edge."""
    assert group.window_chunks is not None
    padding = -num_tokens % group.chunk
    return max(group.window_chunks, cdiv(group.reach + padding, group.chunk))


def lookup_order(groups: Sequence[OffloadGroup]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(full-attention groups, sliding-window groups by decreasing window), as
    ``OffloadingConnectorScheduler.__init__`` orders them (a stable sort)."""
    full = [i for i, g in enumerate(groups) if g.window_chunks is None]
    swa = [i for i, g in enumerate(groups) if g.window_chunks is not None]
    swa.sort(key=lambda i: groups[i].window_chunks or 0, reverse=True)
    return tuple(full), tuple(swa)


@dataclass(frozen=True)
class OffloadHit:
    """``hit``: tokens the lookup returns. ``reads[g]``: the chunk runs
    ``[a, e)`` group ``g`` found stored to give its answer (the prefix for
    full attention; the run the sliding-window scan stopped on)."""

    hit: int
    reads: tuple[tuple[tuple[int, int], ...], ...]


def all_stored_lookup(
    groups: Sequence[OffloadGroup], query_len: int, shared_chunks: Sequence[int]
) -> OffloadHit:
    """``_lookup_complete_chunks`` for a request of ``query_len`` tokens (no
    local hit, no load cap, no deferral) when group ``g`` finds its first
    ``shared_chunks[g]`` chunks stored and no other (a prefix shared with one
    prompt whose chunks were all stored). Its keys are ``query_len // chunk``
    chunks per group."""
    full, swa = lookup_order(groups)
    reads: list[list[tuple[int, int]]] = [[] for _ in groups]

    def done(hit: int) -> OffloadHit:
        return OffloadHit(hit, tuple(tuple(r) for r in reads))

    max_hit = query_len - (1 if swa else 0)
    num_hit = 0
    verified: set[int] = set()
    pending: tuple[int, ...] = full + swa
    while pending:
        looked_up_swa = False
        batch, pending = pending, ()
        for gi in batch:
            g = groups[gi]
            c = g.chunk
            keys = query_len // c
            unverified = g.eagle and gi not in verified
            max_hit = min(max_hit, keys * c)
            if max_hit < c:
                return done(0)
            query_max = min(max_hit + c, keys * c) if unverified else max_hit
            n = min(cdiv(query_max, c), keys)
            s = min(shared_chunks[gi], n)
            if g.window_chunks is None:
                reads[gi].append((0, s))
            else:
                required = g.window_chunks + int(unverified)
                candidate_end = min(max_hit, (n - int(unverified)) * c)
                initial = load_window_chunks(g, candidate_end) + int(unverified)
                # Right to left: chunks [s, n) miss (they reset the window to
                # ``required``); the run is found ending at s, or the scan
                # reaches chunk 0 and returns the run from there.
                first = n - initial if s == n else s - required
                reads[gi].append((max(first, 0), s))
            hits = s
            if hits == 0:
                return done(0)
            if unverified:
                hits -= 1
                verified.add(gi)
            max_hit = min(max_hit, c * hits)
            if max_hit < c:
                return done(0)
            if max_hit < num_hit:
                if not g.eagle:
                    verified.clear()
                if looked_up_swa and not pending:
                    pending = swa
            looked_up_swa |= g.window_chunks is not None
            num_hit = max_hit
    return done(num_hit)


# ---- the promised queries ---------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """A request of ``length`` tokens sharing the prompt's first ``shared``
    tokens; ``always``: its all-stored hit is promised whatever it is (else
    only a hit that is a positive multiple of the retention interval)."""

    shared: int
    length: int
    always: bool


def _lengths(p: int, chunks: Sequence[int], longer_only: bool) -> list[int]:
    """Request lengths that make every distinct lookup for a shared prefix
    of ``p`` tokens: the lookup depends on the length only through each
    group's key count ``length // chunk`` (is the chunk after the shared
    ones the request's own, or past its end) and, for the request that ends
    at ``p``, the unaligned cap ``p - 1``."""
    out = {p + 3 * max(chunks) + 1}
    out.update((p // c + 1) * c for c in chunks)
    if not longer_only:
        out.add(p)
    return sorted(x for x in out if x > 0 and (x > p or not longer_only))


def promised_queries(
    groups: Sequence[OffloadGroup],
    lo: int,
    hi: int,
    alignment_tokens: int,
    retention_interval: int | None,
    reachable_boundaries: Sequence[int],
    anchors_only: bool = False,
) -> Iterator[Query]:
    """The promised queries whose shared prefix lies in ``[lo, hi)`` tokens
    (named ones whatever their position; with ``anchors_only``, the sparse
    anchors in ``[lo, hi)`` and no named queries).

    * dense: every shared prefix on the grid of the chunk sizes (a lookup
      depends on the shared prefix only through ``shared // chunk``), plus
      the one-token-longer prefix (a request ending one token past a chunk
      edge caps at that edge, not one token before it);
    * ``r > 0``: the same near every multiple of ``r`` (up to two
      alignments and three chunks above it: where a hit of that multiple
      can come from after EAGLE pops), kept only when the hit is a
      multiple of ``r`` (``always`` False);
    * named (with a retention interval): ``reachable_boundaries`` as
      ``_build_store_jobs`` passes them, ``(N - 1, junction?)``: the resend
      (``N`` tokens), longer siblings of the prompt and of the junction.
      With EAGLE groups a junction may have been pinned after their pop
      (vLLM 0.34's ``_maybe_register_shared_prefix_junction`` pins the
      popped hit) or before it (the shared run): the siblings sharing one
      EAGLE chunk more than the junction are promised too.
    """
    chunks = sorted({g.chunk for g in groups})
    grid = math.gcd(*chunks)
    eagle_drop = sum(g.chunk for g in groups if g.eagle)
    if retention_interval is None:
        start = max(0, lo - lo % grid)
        for p in range(start, hi, grid):
            for q in (p, p + 1):
                for length in _lengths(q, chunks, False):
                    yield Query(q, length, True)
        return
    if retention_interval > 0:
        span = 2 * alignment_tokens + eagle_drop + 3 * max(chunks)
        r = retention_interval
        k = max(1, (lo if anchors_only else lo - span) // r)
        if anchors_only and k * r < lo:
            k += 1
        while k * r < hi:
            base = k * r
            for p in range(base, base + span + grid, grid):
                for q in (p, p + 1):
                    for length in _lengths(q, chunks, False):
                        yield Query(q, length, False)
            k += 1
    if reachable_boundaries:
        n = reachable_boundaries[0] + 1
        yield Query(n, n, True)  # the resend
        for length in _lengths(n, chunks, True):
            yield Query(n, length, True)  # longer siblings
        popped = sorted({g.chunk for g in groups if g.eagle})
        for junction in reachable_boundaries[1:]:
            for shared in [junction] + [junction + c for c in popped]:
                for length in _lengths(shared, chunks, True):
                    yield Query(shared, length, True)


def query_reads(
    groups: Sequence[OffloadGroup], query: Query, prompt_len: int | None = None
) -> OffloadHit:
    """The all-stored lookup of ``query`` against a prompt whose chunks were
    all stored (``prompt_len`` None: at least as long as the shared prefix)."""
    shared = query.shared if prompt_len is None else min(query.shared, prompt_len)
    return all_stored_lookup(groups, query.length, [shared // g.chunk for g in groups])


def offload_store_chunks(
    groups: Sequence[OffloadGroup],
    target: int,
    start_chunk: int,
    end_chunk: int,
    alignment_tokens: int | None,
    retention_interval: int | None,
    reachable_boundaries: Sequence[int] = (),
) -> list[tuple[int, int]] | None:
    """The corrected store filter for sliding-window group ``target``: for
    each chunk of ``[start_chunk, end_chunk)`` that some promised query's
    all-stored lookup reads, ``(chunk, first token it must hold)``: the
    first token of the chunk that the window of a hit reading it needs
    (earlier tokens of the chunk may be absent), or the chunk's last token
    when no hit needs its tokens (the scan only needs its key, e.g. the
    first chunk of a widened window). ``None``: keep every chunk (no
    alignment, as vLLM).

    Local: a chunk's answer does not depend on ``start_chunk`` /
    ``end_chunk`` (every query whose reads can meet the range is looked at).
    """
    if alignment_tokens is None:
        return None
    g = groups[target]
    assert g.window_chunks is not None
    c = g.chunk
    runs = store_runs(groups, target, start_chunk, end_chunk, alignment_tokens, retention_interval, reachable_boundaries)
    kept = _merge((max(a, start_chunk), min(e, end_chunk)) for a, e, _ in runs)
    needed = _merge((max(t0, a * c), e * c) for a, e, t0 in runs)
    out: list[tuple[int, int]] = []
    j = 0
    for lo, hi in kept:
        for i in range(lo, hi):
            while j < len(needed) and needed[j][1] <= i * c:
                j += 1
            if j < len(needed) and needed[j][0] < (i + 1) * c:
                out.append((i, max(needed[j][0], i * c)))
            else:
                out.append((i, (i + 1) * c - 1))
    return out


def _merge(intervals: Iterator[tuple[int, int]] | list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted disjoint union of half-open intervals (empty ones dropped)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(x for x in intervals if x[0] < x[1]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def store_runs(
    groups: Sequence[OffloadGroup],
    target: int,
    start_chunk: int,
    end_chunk: int,
    alignment_tokens: int,
    retention_interval: int | None,
    reachable_boundaries: Sequence[int] = (),
) -> set[tuple[int, int, int]]:
    """The distinct runs ``(a, e, T0)`` of the target group read by the
    all-stored lookup of a promised query (chunks ``[a, e)``; the hits it
    serves need tokens from ``T0`` on), for every query whose reads can
    meet ``[start_chunk, end_chunk)`` (and possibly a few more promised
    ones: extra runs of promised queries are part of the answer anyway).

    Same queries as ``promised_queries``; far from token 0 the union over
    one period of shared prefixes (``_period``) is computed once and moved
    (``_target_runs`` explains why moving is exact)."""
    groups = tuple(groups)
    c = groups[target].chunk
    chunks = [x.chunk for x in groups]
    margin = groups[target].reach + 3 * alignment_tokens + sum(x.chunk for x in groups if x.eagle) + 4 * max(chunks) + c
    lo = max(0, start_chunk * c - 2 * max(chunks))
    hi = end_chunk * c + margin
    r = retention_interval
    period, base = _period(groups)
    runs: set[tuple[int, int, int]] = set()

    def moved(found: frozenset[tuple[int, int, int]], shift: int) -> None:
        d = shift // c
        runs.update((a + d, e + d, t0 + shift) for a, e, t0 in found)

    if r is None:
        for k in range(lo // period, min(hi, base + period) // period):
            runs.update(_promised_runs(groups, target, alignment_tokens, None, k * period, (k + 1) * period))
        if hi > base + period:
            one = _promised_runs(groups, target, alignment_tokens, None, base + period, base + 2 * period)
            for k in range(max(0, (lo - base - period) // period), (hi - base - period) // period + 1):
                moved(one, k * period)
    elif r > 0:
        cycle = math.lcm(r, period)
        span = _anchor_span(groups, alignment_tokens)
        for k in range(max(1, (lo - span) // r), (hi - 1) // r + 1):
            anchor = k * r
            m = max(0, (anchor - base - period) // cycle)
            moved(_promised_runs(groups, target, alignment_tokens, r, anchor - m * cycle, anchor - m * cycle + 1), m * cycle)
    named = (
        Query(q.shared, q.length, True)
        for q in promised_queries(groups, 0, 0, alignment_tokens, 0, reachable_boundaries)
    )
    for query in named:
        hit, found = _target_runs(groups, target, query.shared, query.length)
        if hit > 0:
            runs.update(found)
    return runs


def _period(groups: tuple[OffloadGroup, ...]) -> tuple[int, int]:
    """(P, base): a common multiple of the chunk sizes, and a multiple of it
    past which no lookup of a shared prefix reaches chunk 0."""
    period = math.lcm(*(x.chunk for x in groups))
    reach = max(x.reach for x in groups) + 8 * max(x.chunk for x in groups) + sum(x.chunk for x in groups if x.eagle)
    return period, period * (2 + reach // period)


def _anchor_span(groups: tuple[OffloadGroup, ...], alignment_tokens: int) -> int:
    return 2 * alignment_tokens + sum(g.chunk for g in groups if g.eagle) + 3 * max(g.chunk for g in groups)


@lru_cache(maxsize=1 << 12)
def _promised_runs(
    groups: tuple[OffloadGroup, ...],
    target: int,
    alignment_tokens: int,
    retention_interval: int | None,
    lo: int,
    hi: int,
) -> frozenset[tuple[int, int, int]]:
    """The runs of the promised queries of ``promised_queries`` (dense:
    ``retention_interval`` None; or the sparse anchors) with shared prefix
    positions in ``[lo, hi)`` (dense) / anchors in ``[lo, hi)`` (sparse)."""
    r = retention_interval
    out: set[tuple[int, int, int]] = set()
    for query in promised_queries(groups, lo, hi, alignment_tokens, r, (), anchors_only=True):
        hit, found = _target_runs(groups, target, query.shared, query.length)
        if hit > 0 and (query.always or (r and hit % r == 0)):
            out.update(found)
    return frozenset(out)


def _target_runs(
    groups: tuple[OffloadGroup, ...], target: int, shared: int, length: int
) -> tuple[int, tuple[tuple[int, int, int], ...]]:
    """(hit, the target group's runs ``(a, e, T0)``) of one query.

    The lookup only counts chunks, so moving the shared prefix and the
    request length by a common multiple ``P`` of the chunk sizes moves every
    chunk index by ``P / chunk``, as long as nothing reaches chunk 0: far
    from 0 the answer is computed once per position modulo ``P`` and
    moved (``_canonical_runs``)."""
    period, base = _period(groups)
    if shared < base + period:
        return _canonical_runs(groups, target, shared, length)
    k = (shared - base) // period
    hit, runs = _canonical_runs(groups, target, shared - k * period, length - k * period)
    shift = k * period
    d = shift // groups[target].chunk
    return hit + shift, tuple((a + d, e + d, t0 + shift) for a, e, t0 in runs)


@lru_cache(maxsize=1 << 16)
def _canonical_runs(
    groups: tuple[OffloadGroup, ...], target: int, shared: int, length: int
) -> tuple[int, tuple[tuple[int, int, int], ...]]:
    """``_target_runs`` computed directly."""
    found = all_stored_lookup(groups, length, [shared // x.chunk for x in groups])
    if found.hit <= 0:
        return found.hit, ()
    g = groups[target]
    # The latest hit a run serves ends at its right edge (one chunk before
    # it for an EAGLE peek, or an unaligned cap inside the last chunk); its
    # window reaches ``reach`` tokens back from there.
    return found.hit, tuple(
        (a, e, max(0, (e - 1) * g.chunk - g.reach)) for a, e in found.reads[target] if a < e
    )
