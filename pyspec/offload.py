"""What the KV-offload store should keep of a sliding-window group: the
offload variant of ``pyspec.reachable.correct_mask``.

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
  ``pyspec.reachable`` (``promised_lengths``): dense (``retention_interval``
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

from pyspec.params import cdiv


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
) -> Iterator[Query]:
    """The promised queries whose shared prefix lies in ``[lo, hi)`` tokens
    (named ones whatever their position; ``_reads_near`` picks the window).

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
        k = max(1, (lo - span) // r)
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
        for junction in reachable_boundaries[1:]:
            for length in _lengths(junction, chunks, True):
                yield Query(junction, length, True)


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
    all-stored lookup reads, ``(chunk, first token it must hold)`` (the
    window of the latest hit that reads the chunk starts there; earlier
    tokens of the chunk may be absent). ``None``: keep every chunk (no
    alignment, as vLLM).

    Local: a chunk's answer does not depend on ``start_chunk`` /
    ``end_chunk`` (every query whose reads can meet the range is looked at).
    """
    if alignment_tokens is None:
        return None
    g = groups[target]
    assert g.window_chunks is not None
    c = g.chunk
    chunks = [x.chunk for x in groups]
    margin = g.reach + 3 * alignment_tokens + sum(x.chunk for x in groups if x.eagle) + 4 * max(chunks) + c
    lo = max(0, start_chunk * c - 2 * max(chunks))
    hi = end_chunk * c + margin
    need: dict[int, int] = {}
    r = retention_interval
    for query in promised_queries(groups, lo, hi, alignment_tokens, r, reachable_boundaries):
        for chunk, first_token in _target_reads(tuple(groups), target, query.shared, query.length, query.always, r):
            if start_chunk <= chunk < end_chunk:
                need[chunk] = min(need.get(chunk, first_token), first_token)
    return sorted(need.items())


@lru_cache(maxsize=1 << 16)
def _target_reads(
    groups: tuple[OffloadGroup, ...],
    target: int,
    shared: int,
    length: int,
    always: bool,
    retention_interval: int | None,
) -> tuple[tuple[int, int], ...]:
    """``(chunk, first token needed)`` of the target group's reads for one
    query, if its hit is promised."""
    found = all_stored_lookup(groups, length, [shared // x.chunk for x in groups])
    if found.hit <= 0:
        return ()
    if not always and not (retention_interval and found.hit % retention_interval == 0):
        return ()
    g = groups[target]
    out: list[tuple[int, int]] = []
    for a, e in found.reads[target]:
        # The latest hit this run can serve ends at its right edge (one chunk
        # before it for an EAGLE peek); its window reaches ``reach`` back.
        first_token = max(0, (e - 1) * g.chunk - g.reach)
        # Every chunk of the run must be stored (the scan needs its key), so
        # at least its last token is asked for.
        out.extend((i, min(max(first_token, i * g.chunk), (i + 1) * g.chunk - 1)) for i in range(a, e))
    return tuple(out)
