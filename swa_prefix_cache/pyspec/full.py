"""vLLM 0.33.0's full-attention prefix-cache lookup, on two masks.

Source: ``FullAttentionManager.find_longest_cache_hit`` in
``vllm/v1/core/single_type_kv_cache_manager.py`` (0.33.0 wheel), with
``resolve_block_hashes`` and ``BlockHashListWithBlockSize`` from
``vllm/v1/core/kv_cache_utils.py``. Same names in Lean
(``Lean/PrefixCache/Spec/Full.lean``: ``fullHit``, ``legacyFullScan``) and C
(``swa_prefix_cache/core/proved/full_attention.h``: ``full_hit``, ``legacy_full_scan``).

The model. vLLM probes two lists of hashes with ``get_cached_block``:

* ``cached[i]``: full block ``i`` (the block-size view of the hashes) is
  cached in every queried group (phase 1);
* ``fine_cached[j]``: the prefix of ``(j + 1) * alignment_tokens`` tokens,
  hash ``block_hashes[j]`` of the raw list, is cached in every group
  (phase 2, *fine-grained mode* only: ``alignment_tokens < block_size`` and
  ``block_size % alignment_tokens == 0``; vLLM's partial-tail entries,
  ``BlockPool.cache_partial_block``).

``len(cached)`` is the length of vLLM's block-size view and
``len(fine_cached)`` that of the raw list (``len(block_hashes)``); in
fine-grained mode ``cached[i]`` is the very lookup ``fine_cached[(i + 1) *
scale - 1]``, but phase 2 never probes such an index (its range stops one
short of the next block's boundary), so the two masks are independent
inputs here. vLLM with DCP > 1 (``block_size *= dcp_world_size``) is out of
scope: pass the multiplied block size, or let vLLM answer.

vLLM's answer, per group, is the list of the first ``num_blocks`` of
``[block for cached[0], ..., block for cached[prefix - 1]]`` followed by the
block found for ``fine_cached[tail]`` when ``tail`` is not ``None``; the
hit is ``hit_tokens`` tokens. ``num_blocks <= prefix + (tail is not None)``.
"""

from collections.abc import Sequence
from typing import NamedTuple

from swa_prefix_cache.pyspec.params import _require_int, cdiv


class FullHit(NamedTuple):
    """What vLLM's output depends on, and what the lookup cost.

    ``prefix`` is phase 1's run ``p`` of cached full blocks from block 0,
    ``tail`` the fine index phase 2 found (``None`` if none), before the
    EAGLE drop and the trim; ``probes`` the number of ``get_cached_block``
    calls."""

    hit_tokens: int
    num_blocks: int
    prefix: int
    tail: int | None
    probes: int


class FullParams(NamedTuple):
    """The numbers both functions derive from vLLM's arguments."""

    limit: int  # phase 1 looks at blocks [0, limit)
    fine: bool  # fine-grained mode
    scale: int  # block_size // alignment_tokens (1 when not fine)


def is_fine_grained(block_size: int, alignment_tokens: int) -> bool:
    """vLLM's ``fine_grained``: ``alignment_tokens < block_size`` and
    ``block_size % alignment_tokens == 0``."""
    return alignment_tokens < block_size and block_size % alignment_tokens == 0


def _check_mask(name: str, mask: object) -> Sequence[object]:
    if isinstance(mask, str) or not isinstance(mask, Sequence):
        raise ValueError(f"{name} must be a sequence of flags, got {type(mask).__name__}")
    return mask


def full_params(
    cached: object,
    fine_cached: object,
    max_length: object,
    block_size: object,
    alignment_tokens: object,
    drop_eagle_block: object,
) -> FullParams:
    """Check vLLM's arguments (``ValueError`` naming the argument) and derive
    the phase-1 limit and the mode."""
    c = _check_mask("cached", cached)
    _check_mask("fine_cached", fine_cached)
    _require_int("max_length", max_length, 0)
    _require_int("block_size", block_size, 1)
    _require_int("alignment_tokens", alignment_tokens, 1)
    if not isinstance(drop_eagle_block, bool):
        raise ValueError(
            f"drop_eagle_block must be a bool, got {type(drop_eagle_block).__name__}"
        )
    assert isinstance(max_length, int) and isinstance(block_size, int)
    assert isinstance(alignment_tokens, int)
    fine = is_fine_grained(block_size, alignment_tokens)
    return FullParams(
        limit=min(max_length // block_size, len(c)),
        fine=fine,
        scale=block_size // alignment_tokens if fine else 1,
    )


def fine_range(
    prefix: int, n_fine: int, max_length: int, block_size: int, alignment_tokens: int
) -> tuple[int, int]:
    """Phase 2's fine indices ``[lo, hi)``: vLLM's ``first_partial_idx`` and
    ``max_partial_idx`` (the interior boundaries of block ``prefix``, below
    ``max_length`` and inside the raw hash list). Fine-grained mode only."""
    scale = block_size // alignment_tokens
    lo = prefix * scale
    hi = min(lo + scale - 1, max_length // alignment_tokens, n_fine)
    return lo, hi


def finish(raw_tokens: int, block_size: int, alignment_tokens: int, eagle: bool) -> tuple[int, int]:
    """The last three steps on the raw hit: EAGLE drops
    ``min(alignment_tokens, block_size)`` tokens of a non-empty hit, the hit
    is rounded down to ``alignment_tokens``, and ``cdiv(hit, block_size)``
    blocks are kept. Returns ``(hit_tokens, num_blocks)``."""
    hit = raw_tokens
    if eagle and hit > 0:
        hit -= min(alignment_tokens, block_size)
    hit -= hit % alignment_tokens
    return hit, cdiv(hit, block_size)


def max_cached_prefix(cached: Sequence[object], limit: int) -> int:
    """The run of cached blocks from block 0, capped at ``limit``."""
    p = 0
    while p < limit and cached[p]:
        p += 1
    return p


def highest_fine_hit(fine_cached: Sequence[object], lo: int, hi: int) -> int | None:
    """The largest ``j`` in ``[lo, hi)`` with ``fine_cached[j]``, or ``None``."""
    hits = [j for j in range(lo, hi) if fine_cached[j]]
    return max(hits) if hits else None


def full_hit(
    cached: Sequence[object],
    fine_cached: Sequence[object],
    max_length: int,
    block_size: int,
    alignment_tokens: int,
    drop_eagle_block: bool,
) -> FullHit:
    """The declarative answer: the longest cached prefix ``p`` of full
    blocks (at most ``max_length // block_size``); in fine-grained mode the
    highest cached interior boundary of block ``p`` (``fine_range``); then
    EAGLE drop, round-down and trim (``finish``). ``probes`` in closed form:
    the ``p`` hits and the miss that stopped phase 1 (if it stopped before
    its limit), and phase 2's reads from the top of its range down to the
    hit (or the whole range)."""
    fp = full_params(
        cached, fine_cached, max_length, block_size, alignment_tokens, drop_eagle_block
    )
    p = max_cached_prefix(cached, fp.limit)
    probes = p + (1 if p < fp.limit else 0)
    tail = None
    if fp.fine:
        lo, hi = fine_range(p, len(fine_cached), max_length, block_size, alignment_tokens)
        tail = highest_fine_hit(fine_cached, lo, hi)
        probes += max(hi - lo, 0) if tail is None else hi - tail
    raw = p * block_size if tail is None else (tail + 1) * alignment_tokens
    hit, num_blocks = finish(raw, block_size, alignment_tokens, drop_eagle_block)
    return FullHit(hit, num_blocks, p, tail, probes)


def legacy_full_scan(
    cached: Sequence[object],
    fine_cached: Sequence[object],
    max_length: int,
    block_size: int,
    alignment_tokens: int,
    drop_eagle_block: bool,
) -> FullHit:
    """vLLM's ``FullAttentionManager.find_longest_cache_hit`` line for line,
    ``get_cached_block(full_block_hashes[i])`` read as ``cached[i]`` and
    ``get_cached_block(block_hashes[j])`` as ``fine_cached[j]``; a block is
    its index (``("full", i)`` or ``("fine", j)``). Deliberately not clever."""
    full_params(cached, fine_cached, max_length, block_size, alignment_tokens, drop_eagle_block)
    probes = 0
    fine_grained = alignment_tokens < block_size and block_size % alignment_tokens == 0
    computed: list[tuple[str, int]] = []
    # Phase 1: islice(full_block_hashes, max_length // block_size).
    for i in range(min(max_length // block_size, len(cached))):
        probes += 1
        if not cached[i]:
            break
        computed.append(("full", i))
    hit_length = len(computed) * block_size
    prefix = len(computed)
    tail = None
    if fine_grained:
        scale_factor = block_size // alignment_tokens
        first_partial_idx = len(computed) * scale_factor
        max_partial_idx = min(
            first_partial_idx + scale_factor - 1,
            max_length // alignment_tokens,
            len(fine_cached),
        )
        for fine_idx in range(max_partial_idx - 1, first_partial_idx - 1, -1):
            probes += 1
            if not fine_cached[fine_idx]:
                continue
            computed.append(("fine", fine_idx))
            tail = fine_idx
            hit_length = (fine_idx + 1) * alignment_tokens
            break
    if drop_eagle_block and hit_length > 0:
        hit_length -= min(alignment_tokens, block_size)
    hit_length -= hit_length % alignment_tokens
    num_blocks = cdiv(hit_length, block_size)
    del computed[num_blocks:]
    # The kept blocks are the prefix's, then the tail's: check it, so a
    # transcription slip shows.
    assert computed == ([("full", i) for i in range(prefix)]
                        + ([("fine", tail)] if tail is not None else []))[:num_blocks]
    return FullHit(hit_length, len(computed), prefix, tail, probes)
