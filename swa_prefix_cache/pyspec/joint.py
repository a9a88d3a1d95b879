"""The joint (multi-group) prefix-cache lookup of a hybrid model, as a spec.

vLLM 0.33.0 reconciles the hits of its KV-cache groups (full attention,
sliding window, several block sizes, EAGLE/MTP) in
``HybridKVCacheCoordinator.find_longest_cache_hit``
(vllm/v1/core/kv_cache_coordinator.py). ``joint_lookup`` computes the same
thing on abstract inputs: one boolean *cached* mask per group at the group's
own block granularity, instead of a ``BlockPool``.

What is modelled, read from vLLM 0.33.0 (no fine-grained partial hash hits:
those need a Mamba "align" group, which is outside this model):

* **Spec groups.** Groups whose specs are equal (here: same kind, block size
  and window) are looked up together, as one *attention group*: a block is
  cached for it only when it is cached in every member (``get_cached_block``
  over all group ids), and it drops the EAGLE block when any member is an
  EAGLE group (``SpecGroup.use_eagle``). Full-attention attention groups are
  moved first (a stable sort).
* **Alignment.** Every lookup gets ``alignment_tokens`` = the coordinator's
  ``_cache_hit_alignment_tokens`` = ``scheduler_block_size`` (the lcm of the
  group block sizes), not the group's own block size.
* **Hash vs group block size.** The request has ``num_hash_blocks`` hashes
  of ``hash_block_size`` tokens; a group with block size ``bs`` sees block
  ``i`` keyed by hash ``(i + 1) * bs / h - 1`` (``BlockHashListWithBlockSize``),
  so its mask has ``num_hash_blocks * h // bs`` entries. The EAGLE margin is
  capped at ``num_hash_blocks * h`` tokens, as vLLM caps it at
  ``len(block_hashes) * hash_block_size``.
* **The loop.** ``hit_length`` starts at ``max_cache_hit_length``. A round
  walks the attention groups with a running candidate ``curr``:
  - a full-attention group is looked up only in the first round; later rounds
    just take ``min(curr, its first hit)`` (it is downward closed);
  - an EAGLE group not yet *verified* at the current candidate is called with
    ``drop_eagle_block=True`` and ``max_length = min(curr + bs, cap)`` (it
    matches one block past the candidate and drops it, landing back at the
    candidate), and becomes verified; a verified EAGLE group, and every
    non-EAGLE group, is called with ``drop_eagle_block=False`` and
    ``max_length = curr``;
  - a non-dropping call that shrinks the candidate clears the verified set
    (vllm-project/vllm#32802: each EAGLE group drops at most once per candidate length);
  - ``curr`` becomes the group's answer.
  The loop stops when a round leaves ``curr == hit_length``, or after one
  round for a *simple hybrid* (exactly two attention groups, the first full
  attention). Full-attention block lists are then cut to
  ``cdiv(hit_length, bs)`` blocks; other groups keep the list of their last
  lookup. ``num_uncached_common_prefix_tokens`` is the longest running
  candidate seen after a lookup, minus ``hit_length``.

Properties (stated precisely, checked in tests/test_joint.py, exhaustively
on small inputs and by hypothesis):

* **Monotone.** The candidate never grows: ``trace`` (``hit_length`` at the
  start of every round, then the answer) is non-increasing, and so is
  ``curr`` inside a round. Every acceptor returns at most its
  ``max_length`` (EAGLE: at most ``curr``, since it drops the block it
  matched past ``curr``).
* **Terminates.** After the first round the candidate is a multiple of
  ``alignment_tokens`` (every acceptor answers aligned lengths), and every
  further round but the last lowers it by at least ``alignment_tokens``; so
  ``rounds <= max_rounds_bound(...) = 2 + max_cache_hit_length //
  alignment_tokens``. Rounds grow linearly only for groups whose accepted
  lengths interleave (``test_rounds_grow_linearly_with_interleaved_groups``);
  no EAGLE "spiral" (one block shaved per round because of the drop alone)
  is possible, because an EAGLE group drops at most once per candidate.
* **Accepted by every group.** Write ``accepts(g, L)`` for "group ``g``'s own
  lookup, called as the convergence loop calls it at candidate ``L``
  (EAGLE: ``drop_eagle_block=True``, ``max_length = min(L + bs, cap)``;
  otherwise ``max_length = L``), returns exactly ``L``" and ``accepts(g, L,
  plain=True)`` for the same without the drop (``max_length = L``). vLLM's
  answer ``R`` is ``accepts``-ed by every non-EAGLE group and every
  full-attention group. An EAGLE sliding-window group accepts it with its
  drop or, when it was verified (matched its extra block) at a higher
  candidate and another EAGLE group then lowered the candidate, only plainly
  (#32802: one drop per candidate); ``eagle_unproven_groups`` names the
  latter. Example: ``tests/test_joint.py::test_eagle_unproven_example``.
* **Maximal, for windows of at least 2 tokens.** No ``L`` with ``R < L <=
  max_cache_hit_length`` is ``accepts``-ed by every group
  (``greatest_common_accepted``): each acceptor is monotone in
  ``max_length`` and answers at least every length it accepts below it, so
  by induction the candidate never falls below the greatest commonly
  accepted length. The induction needs "plain at the drop's answer accepts
  it", which fails for an EAGLE window of 1 token or less: its EAGLE run is
  ``cdiv(W - 1, bs) + 1 = 1`` block, the same one block vLLM's loop reads
  plainly (it treats 0 as 1), one block to the left. Then vLLM's loop can
  stop below a commonly accepted length; the smallest case (two groups of
  window 1 and block 1, one EAGLE, blocks ``[miss, hit]``, max 2: vLLM 0,
  accepted 1) is ``test_window_one_eagle_counterexample`` and, on the real
  coordinator, a strict xfail in tests/test_joint.py.

Looking a full-attention group up only in the first round is observationally
the same as looking it up every round (it is downward closed); the tests
cannot tell the two apart, and this spec follows vLLM's code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from swa_prefix_cache.pyspec.params import SearchParams, cdiv
from swa_prefix_cache.pyspec.search import HitResult, find_hit


@dataclass(frozen=True)
class Group:
    """One KV-cache group.

    ``sliding_window`` None means full attention. ``eagle`` means the group
    drops the EAGLE block, i.e. its id is in the coordinator's
    ``drop_eagle_group_ids`` (see ``drop_flags``). ``cached[i]`` says whether
    block ``i`` (tokens ``[i * bs, (i + 1) * bs)``) has a cached block under
    this group's id.
    """

    block_size: int
    sliding_window: int | None
    eagle: bool
    cached: tuple[bool, ...] = field(repr=False)

    @property
    def is_full(self) -> bool:
        return self.sliding_window is None

    def spec_key(self) -> tuple[int, int | None]:
        """Groups with equal keys are one vLLM ``SpecGroup``."""
        return (self.block_size, self.sliding_window)


def drop_flags(is_eagle_group: Sequence[bool], use_eagle: bool) -> list[bool]:
    """vLLM's ``drop_eagle_group_ids`` as flags: the groups flagged
    ``is_eagle_group``, or every group when ``use_eagle`` is set and none is
    flagged; nothing when ``use_eagle`` is off."""
    if not use_eagle:
        return [False] * len(is_eagle_group)
    if not any(is_eagle_group):
        return [True] * len(is_eagle_group)
    return [bool(x) for x in is_eagle_group]


@dataclass(frozen=True)
class AttentionGroup:
    """A vLLM ``SpecGroup``: the members looked up together."""

    block_size: int
    sliding_window: int | None
    eagle: bool
    members: tuple[int, ...]
    cached: tuple[bool, ...] = field(repr=False)

    @property
    def is_full(self) -> bool:
        return self.sliding_window is None


def attention_groups(groups: Sequence[Group]) -> list[AttentionGroup]:
    """Merge groups with equal specs (mask: all members cached; EAGLE: any
    member), in first-appearance order, then put full attention first
    (stable), as ``verify_and_split_kv_cache_groups`` does."""
    merged: list[list[int]] = []
    keys: list[tuple[int, int | None]] = []
    for gid, g in enumerate(groups):
        if g.spec_key() in keys:
            merged[keys.index(g.spec_key())].append(gid)
        else:
            keys.append(g.spec_key())
            merged.append([gid])
    out = []
    for members in merged:
        first = groups[members[0]]
        if len(members) == 1:
            cached = tuple(first.cached)
        else:
            length = min(len(groups[m].cached) for m in members)
            cached = tuple(all(groups[m].cached[i] for m in members) for i in range(length))
        out.append(
            AttentionGroup(
                block_size=first.block_size,
                sliding_window=first.sliding_window,
                eagle=any(groups[m].eagle for m in members),
                members=tuple(members),
                cached=cached,
            )
        )
    out.sort(key=lambda a: not a.is_full)
    return out


def full_attention_hit(
    cached: Sequence[bool],
    max_length: int,
    block_size: int,
    alignment_tokens: int,
    drop_eagle_block: bool,
) -> int:
    """``FullAttentionManager.find_longest_cache_hit`` (block-aligned mode),
    in tokens: the longest run of cached blocks from block 0 within
    ``max_length // block_size`` blocks; EAGLE drops
    ``min(alignment_tokens, block_size)`` tokens of a non-empty hit; the
    result is rounded down to ``alignment_tokens``. The hit's blocks are the
    first ``cdiv(hit, block_size)`` cached blocks.

    Fine-grained mode (``alignment_tokens < block_size`` dividing it, only
    with partial hash hits) is out of scope and rejected.
    """
    if block_size < 1 or alignment_tokens < 1 or max_length < 0:
        raise ValueError("block_size, alignment_tokens >= 1 and max_length >= 0")
    if alignment_tokens < block_size and block_size % alignment_tokens == 0:
        raise ValueError("fine-grained full-attention lookup is not modelled")
    limit = min(max_length // block_size, len(cached))
    prefix = 0
    while prefix < limit and cached[prefix]:
        prefix += 1
    hit = prefix * block_size
    if drop_eagle_block and hit > 0:
        hit -= min(alignment_tokens, block_size)
    return hit - hit % alignment_tokens


def swa_hit(
    cached: Sequence[bool],
    max_length: int,
    block_size: int,
    sliding_window: int,
    alignment_tokens: int,
    drop_eagle_block: bool,
) -> HitResult:
    """``SlidingWindowManager.find_longest_cache_hit`` = ``swa_prefix_cache.pyspec.find_hit``
    (length in blocks; the hit is ``length * block_size`` tokens)."""
    params = SearchParams.from_vllm(
        max_length, block_size, sliding_window, alignment_tokens, drop_eagle_block
    )
    return find_hit(cached, params)


def group_hit(
    group: AttentionGroup | Group,
    max_length: int,
    alignment_tokens: int,
    drop_eagle_block: bool,
) -> tuple[int, int]:
    """One lookup of one (attention) group: ``(hit tokens, first_real)``."""
    if group.sliding_window is None:
        tokens = full_attention_hit(
            group.cached, max_length, group.block_size, alignment_tokens, drop_eagle_block
        )
        return tokens, 0
    hit = swa_hit(
        group.cached,
        max_length,
        group.block_size,
        group.sliding_window,
        alignment_tokens,
        drop_eagle_block,
    )
    return hit.length * group.block_size, hit.first_real


@dataclass(frozen=True)
class GroupAnswer:
    """What vLLM returns for one group: ``length`` blocks, the first
    ``first_real`` of them the null block."""

    length: int
    first_real: int


@dataclass(frozen=True)
class JointResult:
    """``hit_length`` (tokens), per-group answers (in group order),
    ``num_uncached_common_prefix_tokens``, and how the loop got there:
    ``rounds`` (passes over the attention groups), ``trace`` (``hit_length``
    at the start of each round, then the answer), ``lookups``
    (``(attention group index, max_length, drop_eagle_block, answer)`` in call
    order), and ``eagle_unproven_groups`` (group ids of EAGLE sliding-window
    groups that do not accept the answer with their EAGLE drop, see the
    module docstring)."""

    hit_length: int
    groups: tuple[GroupAnswer, ...]
    num_uncached_common_prefix_tokens: int
    rounds: int
    trace: tuple[int, ...]
    lookups: tuple[tuple[int, int, bool, int], ...]
    eagle_unproven_groups: tuple[int, ...]


def _check_inputs(
    groups: Sequence[Group],
    max_cache_hit_length: int,
    alignment_tokens: int,
    hash_block_size: int,
    num_hash_blocks: int,
) -> None:
    if len(groups) < 2:
        raise ValueError("a hybrid coordinator has at least two groups")
    for name, v in (("alignment_tokens", alignment_tokens), ("hash_block_size", hash_block_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int")
    if max_cache_hit_length < 0 or num_hash_blocks < 0:
        raise ValueError("max_cache_hit_length and num_hash_blocks must be >= 0")
    for gid, g in enumerate(groups):
        if g.block_size % hash_block_size or alignment_tokens % g.block_size:
            raise ValueError(
                f"group {gid}: block size {g.block_size} must be a multiple of the hash "
                f"block size and divide alignment_tokens (scheduler block size)"
            )
        need = num_hash_blocks * hash_block_size // g.block_size
        if len(g.cached) < need:
            raise ValueError(f"group {gid}: mask has {len(g.cached)} < {need} entries")


def max_rounds_bound(max_cache_hit_length: int, alignment_tokens: int) -> int:
    """Rounds the loop can take at most (see the module docstring)."""
    return 2 + max_cache_hit_length // alignment_tokens


def accepts(
    group: AttentionGroup | Group,
    length: int,
    alignment_tokens: int,
    cap_tokens: int,
    *,
    plain: bool = False,
) -> bool:
    """Does ``group`` accept candidate ``length`` the way the convergence loop
    asks it (EAGLE: with the drop, from one block past; ``plain``: without)?"""
    if group.eagle and not plain:
        mx = min(length + group.block_size, cap_tokens)
        return group_hit(group, mx, alignment_tokens, True)[0] == length
    return group_hit(group, length, alignment_tokens, False)[0] == length


def greatest_common_accepted(
    groups: Sequence[Group],
    max_cache_hit_length: int,
    alignment_tokens: int,
    hash_block_size: int,
    num_hash_blocks: int,
) -> int:
    """The largest ``L <= max_cache_hit_length`` that every attention group
    ``accepts``, by brute force (0 when none; 0 is not always accepted)."""
    _check_inputs(groups, max_cache_hit_length, alignment_tokens, hash_block_size, num_hash_blocks)
    cap = num_hash_blocks * hash_block_size
    agroups = attention_groups(groups)
    for length in range(max_cache_hit_length, 0, -1):
        if all(accepts(a, length, alignment_tokens, cap) for a in agroups):
            return length
    return 0


def joint_lookup(
    groups: Sequence[Group],
    max_cache_hit_length: int,
    alignment_tokens: int,
    hash_block_size: int,
    num_hash_blocks: int,
) -> JointResult:
    """``HybridKVCacheCoordinator.find_longest_cache_hit`` on masks.

    ``alignment_tokens`` is the scheduler block size (lcm of the group block
    sizes, a multiple of ``hash_block_size``); ``num_hash_blocks`` is
    ``len(request.block_hashes)``.
    """
    _check_inputs(groups, max_cache_hit_length, alignment_tokens, hash_block_size, num_hash_blocks)
    cap = num_hash_blocks * hash_block_size
    agroups = attention_groups(groups)
    is_simple_hybrid = len(agroups) == 2 and agroups[0].is_full

    answers: list[tuple[int, int] | None] = [None] * len(agroups)  # (tokens, first_real)
    hit_length = max_cache_hit_length
    longest = 0
    eagle_verified: set[int] = set()
    trace: list[int] = []
    lookups: list[tuple[int, int, bool, int]] = []
    rounds = 0
    while True:
        rounds += 1
        trace.append(hit_length)
        curr = hit_length
        for idx, a in enumerate(agroups):
            if a.is_full and answers[idx] is not None:
                curr = min(curr, answers[idx][0])  # type: ignore[index]
                continue
            drop = a.eagle and idx not in eagle_verified
            max_length = curr
            if drop:
                max_length = min(curr + a.block_size, cap)
            tokens, first_real = group_hit(a, max_length, alignment_tokens, drop)
            lookups.append((idx, max_length, drop, tokens))
            if drop:
                eagle_verified.add(idx)
            elif tokens < curr:
                eagle_verified.clear()
            curr = tokens
            answers[idx] = (tokens, first_real)
            longest = max(longest, curr)
        if curr >= hit_length:
            break
        hit_length = curr
        if is_simple_hybrid:
            break
    trace.append(hit_length)

    per_group: list[GroupAnswer | None] = [None] * len(groups)
    for idx, a in enumerate(agroups):
        tokens, first_real = answers[idx]  # type: ignore[misc]
        if a.is_full:
            length = cdiv(hit_length, a.block_size)
        else:
            length = tokens // a.block_size
        for gid in a.members:
            per_group[gid] = GroupAnswer(length=length, first_real=first_real)
    unproven = tuple(
        sorted(
            gid
            for a in agroups
            if a.eagle and not a.is_full and not accepts(a, hit_length, alignment_tokens, cap)
            for gid in a.members
        )
    )
    return JointResult(
        hit_length=hit_length,
        groups=tuple(per_group),  # type: ignore[arg-type]
        num_uncached_common_prefix_tokens=longest - hit_length,
        rounds=rounds,
        trace=tuple(trace),
        lookups=tuple(lookups),
        eagle_unproven_groups=unproven,
    )


def scheduler_block_size(block_sizes: Sequence[int], hash_block_size: int) -> int:
    """The coordinator's scheduler block size: lcm of the hash block size and
    every group block size."""
    return math.lcm(hash_block_size, *block_sizes)
