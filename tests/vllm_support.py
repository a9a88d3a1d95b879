"""Helpers that drive vLLM 0.33.0's real sliding-window lookup from a mask.

Everything here uses vLLM's own objects: a real ``BlockPool``, real
``SlidingWindowSpec``s, 32-byte ``BlockHash`` values, and cached blocks
planted the way vLLM's unit tests plant them
(``block_pool.cached_block_hash_to_block.insert(
make_block_hash_with_group_id(hash, group), block)``, see
tests/v1/core/test_single_type_kv_cache_manager.py upstream).

A block index is *cached* for the lookup only when every queried group has a
block under that index's hash (``BlockPool.get_cached_block`` returns
``None`` as soon as one group misses), so per-group masks are combined with
``all``. ``to_hit_result`` turns vLLM's ``(tuple_of_lists, hit_tokens)``
answer into pyspec's ``HitResult`` and checks every block in it.

Importing this module imports vLLM and torch; test modules guard it with
``pytest.importorskip("vllm")`` first.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from swa_prefix_cache.pyspec import HitResult
from vllm.v1.core.block_pool import BlockPool
from vllm.v1.core.kv_cache_utils import (
    BlockHash,
    KVCacheBlock,
    hash_block_tokens,
    init_none_hash,
    make_block_hash_with_group_id,
)
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
from vllm.v1.kv_cache_interface import SlidingWindowSpec

from swa_prefix_cache import vllm_adapter

HASH_BYTES = 32

# vLLM's own method, taken before anything can patch it.
ORIGINAL_LOOKUP = SlidingWindowManager.__dict__["find_longest_cache_hit"]


@pytest.fixture(autouse=True)
def unpatched() -> Iterator[None]:
    """Every test starts and ends with vLLM's own method in place
    (autouse in each test module that imports it)."""
    vllm_adapter.uninstall()
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is ORIGINAL_LOOKUP
    yield
    vllm_adapter.uninstall()
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is ORIGINAL_LOOKUP

GroupMasks = Mapping[int, Sequence[bool]]


@dataclass(frozen=True)
class Refused:
    """A lookup vLLM refuses with an ``AssertionError``: vLLM 0.28/0.29
    assert that a sliding-window lookup's ``alignment_tokens`` is a
    multiple of the block size (0.30+ answer fine-grained alignments)."""

    message: str


# Lookup outcomes that were refusals, so far (a test can check that most of
# its lookups were answered).
REFUSALS: list[int] = [0]


def lookup_outcome(call: Callable[..., Any], **args: Any) -> Any:
    """``call(**args)`` (a sliding-window ``find_longest_cache_hit``), or
    ``Refused`` when it raises an ``AssertionError`` on an alignment that is
    not a multiple of the block size, the one input a release may refuse;
    any other ``AssertionError`` propagates."""
    try:
        return call(**args)
    except AssertionError as exc:
        return refusal(exc, args["alignment_tokens"], args["kv_cache_spec"].block_size)


def refusal(exc: AssertionError, alignment_tokens: int, block_size: int) -> Refused:
    """``exc`` as a ``Refused`` (counted in ``REFUSALS``) when the lookup
    it came from had an alignment that is not a multiple of the block
    size; otherwise it is a failure, re-raised."""
    if alignment_tokens % block_size == 0:
        raise exc
    REFUSALS[0] += 1
    return Refused(str(exc))


def assert_same_answer(ours: Any, theirs: Any, context: object) -> None:
    """Same lookup answer: equal hit tokens and, per group, the very same
    block objects (identity, not equality); or both refused, with the same
    message (``lookup_outcome``)."""
    if isinstance(ours, Refused) or isinstance(theirs, Refused):
        assert ours == theirs, (ours, theirs, context)
        return
    (blocks_ours, tokens_ours), (blocks_theirs, tokens_theirs) = ours, theirs
    assert tokens_ours == tokens_theirs, context
    assert len(blocks_ours) == len(blocks_theirs), context
    for mine, vllms in zip(blocks_ours, blocks_theirs):
        assert len(mine) == len(vllms), context
        assert all(a is b for a, b in zip(mine, vllms)), context


def make_block_hash(index: int, salt: bytes = b"") -> BlockHash:
    """A 32-byte ``BlockHash`` for block ``index``: sha256 of salt and index.

    Distinct salts give disjoint hash sets, so several requests can share
    one pool without colliding.
    """
    digest = hashlib.sha256(salt + index.to_bytes(8, "big")).digest()
    return BlockHash(digest)


def make_block_hashes(num_blocks: int, salt: bytes = b"") -> list[BlockHash]:
    """``num_blocks`` distinct 32-byte block hashes (see ``make_block_hash``)."""
    return [make_block_hash(i, salt) for i in range(num_blocks)]


def chained_block_hashes(
    num_blocks: int, block_size: int, seed: int = 0
) -> list[BlockHash]:
    """Block hashes as vLLM computes them for a request: each block's hash
    chains its parent's hash with the block's token ids
    (``hash_block_tokens`` with ``sha256_cbor``, vLLM's default), over
    random token ids drawn from ``seed``. Slower than ``make_block_hashes``.
    """
    from vllm.utils.hashing import sha256_cbor

    init_none_hash(sha256_cbor)
    rng = random.Random(seed)
    hashes: list[BlockHash] = []
    parent: BlockHash | None = None
    for _ in range(num_blocks):
        tokens = [rng.randrange(32_000) for _ in range(block_size)]
        parent = hash_block_tokens(sha256_cbor, parent, tokens)
        hashes.append(parent)
    return hashes


def coarse_block_hashes(
    fine_hashes: Sequence[BlockHash], hash_block_size: int, block_size: int
) -> list[BlockHash]:
    """The block-size view of hashes computed every ``hash_block_size``
    tokens, as ``resolve_block_hashes`` builds it for a sliding-window group
    (``BlockHashListWithBlockSize``): block ``i`` is keyed by the last fine
    hash inside it, ``fine_hashes[(i + 1) * scale - 1]``; a trailing partial
    block is dropped. Plant under these, pass the fine list to vLLM.
    """
    if block_size % hash_block_size != 0:
        raise ValueError("block_size must be a multiple of hash_block_size")
    scale = block_size // hash_block_size
    return [fine_hashes[(i + 1) * scale - 1] for i in range(len(fine_hashes) // scale)]


def make_spec(block_size: int, sliding_window: int) -> SlidingWindowSpec:
    """A real ``SlidingWindowSpec`` (one tiny fp32 head; only ``block_size``
    and ``sliding_window`` matter to the lookup)."""
    return SlidingWindowSpec(
        block_size=block_size,
        num_kv_heads=1,
        head_size=1,
        dtype=torch.float32,
        sliding_window=sliding_window,
    )


def make_block_pool(num_blocks: int, hash_block_size: int) -> BlockPool:
    """A real ``BlockPool`` with prefix caching on and ``num_blocks`` blocks
    (block 0 becomes ``null_block``, so at most ``num_blocks - 1`` can be
    planted)."""
    return BlockPool(
        num_gpu_blocks=max(num_blocks, 1),
        enable_caching=True,
        hash_block_size=hash_block_size,
    )


def combine_masks(group_masks: GroupMasks, group_ids: Sequence[int]) -> list[bool]:
    """The mask the lookup sees: block ``i`` is cached only when every group
    in ``group_ids`` has it. Masks are cut to the shortest one."""
    if not group_ids:
        raise ValueError("combine_masks needs at least one group id")
    length = min(len(group_masks[g]) for g in group_ids)
    return [all(group_masks[g][i] for g in group_ids) for i in range(length)]


def split_mask_across_groups(
    cached: Sequence[bool],
    group_ids: Sequence[int],
    rng: random.Random,
    partial_prob: float = 0.5,
) -> dict[int, list[bool]]:
    """Per-group masks whose combination is exactly ``cached``.

    A cached block is present in every group. An uncached block is, with
    probability ``partial_prob`` (and only when there are two or more
    groups), present in a random non-empty strict subset of the groups, so
    the lookup must still treat it as a miss.
    """
    masks: dict[int, list[bool]] = {g: [] for g in group_ids}
    for hit in cached:
        if hit:
            present = set(group_ids)
        elif len(group_ids) > 1 and rng.random() < partial_prob:
            k = rng.randrange(1, len(group_ids))
            present = set(rng.sample(list(group_ids), k))
        else:
            present = set()
        for g in group_ids:
            masks[g].append(g in present)
    return masks


@dataclass
class PlantedCache:
    """A pool with blocks planted for some (block index, group) pairs.

    ``planted[(i, g)]`` is the exact ``KVCacheBlock`` object stored under
    ``make_block_hash_with_group_id(block_hashes[i], g)``.
    """

    block_pool: BlockPool
    block_hashes: list[BlockHash]
    planted: dict[tuple[int, int], KVCacheBlock] = field(default_factory=dict)


def plant_blocks(
    block_pool: BlockPool,
    block_hashes: Sequence[BlockHash],
    group_masks: GroupMasks,
) -> dict[tuple[int, int], KVCacheBlock]:
    """Insert one distinct pool block for every ``(i, g)`` with
    ``group_masks[g][i]`` true, keyed by ``(block_hashes[i], g)``.

    Blocks are taken from ``block_pool.blocks`` in order, skipping the null
    block, and never reused, so identity checks can tell them apart. The
    pool must hold enough blocks (see ``blocks_needed``).
    """
    planted: dict[tuple[int, int], KVCacheBlock] = {}
    free = (b for b in block_pool.blocks if b is not block_pool.null_block)
    for g, mask in group_masks.items():
        if len(mask) > len(block_hashes):
            raise ValueError(f"group {g}: mask longer than block_hashes")
        for i, present in enumerate(mask):
            if not present:
                continue
            block = next(free, None)
            if block is None:
                raise ValueError("block pool too small for the planted blocks")
            block_pool.cached_block_hash_to_block.insert(
                make_block_hash_with_group_id(block_hashes[i], g), block
            )
            planted[(i, g)] = block
    return planted


def blocks_needed(group_masks: GroupMasks) -> int:
    """Pool size that ``plant_blocks`` needs: planted blocks plus the null
    block."""
    return 1 + sum(sum(1 for x in m if x) for m in group_masks.values())


def build_planted_cache(
    group_masks: GroupMasks,
    block_size: int,
    block_hashes: Sequence[BlockHash] | None = None,
    hash_block_size: int | None = None,
    salt: bytes = b"",
) -> PlantedCache:
    """A fresh real ``BlockPool`` with ``group_masks`` planted.

    ``block_hashes`` defaults to ``make_block_hashes`` over the longest mask;
    ``hash_block_size`` defaults to ``block_size``.
    """
    length = max((len(m) for m in group_masks.values()), default=0)
    hashes = (
        list(block_hashes)
        if block_hashes is not None
        else make_block_hashes(length, salt)
    )
    pool = make_block_pool(
        blocks_needed(group_masks),
        hash_block_size if hash_block_size is not None else block_size,
    )
    planted = plant_blocks(pool, hashes, group_masks)
    return PlantedCache(block_pool=pool, block_hashes=hashes, planted=planted)


@contextmanager
def count_get_cached_block(block_pool: BlockPool) -> Iterator[list[int]]:
    """Count ``block_pool.get_cached_block`` calls inside the ``with`` block.

    Wraps the bound method on this instance only (vLLM looks it up on the
    instance at call time); yields a one-element list holding the count.
    """
    counter = [0]
    original: Callable[..., object] = block_pool.get_cached_block

    def counting(*args: object, **kwargs: object) -> object:
        counter[0] += 1
        return original(*args, **kwargs)

    block_pool.get_cached_block = counting  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        del block_pool.get_cached_block


@contextmanager
def count_native() -> Iterator[dict[str, int]]:
    """Count, inside the ``with`` block, the lookups the extension answered
    in C (``native``) and handed to the Python lookup (``delegated``), over
    every install in between (``_hotpath.totals()``), so a test can assert
    that the path it compares against vLLM is really taken."""
    from swa_prefix_cache.core import hotpath

    module = hotpath.load()
    before = module.totals()
    counts = {"native": 0, "delegated": 0}
    try:
        yield counts
    finally:
        after = module.totals()
        for key in counts:
            counts[key] = after[key] - before[key]


def vllm_find_longest_cache_hit(
    cache: PlantedCache,
    group_ids: Sequence[int],
    max_length: int,
    spec: SlidingWindowSpec,
    drop_eagle_block: bool,
    alignment_tokens: int,
    block_hashes: Sequence[BlockHash] | None = None,
) -> tuple[tuple[list[KVCacheBlock], ...], int]:
    """Call vLLM's own ``SlidingWindowManager.find_longest_cache_hit``
    classmethod (never a patched one) on ``cache``'s pool, with ``cache.block_hashes`` unless
    ``block_hashes`` (e.g. finer hashes whose block-size view was planted)
    is given."""
    return ORIGINAL_LOOKUP.__get__(None, SlidingWindowManager)(
        block_hashes=list(cache.block_hashes if block_hashes is None else block_hashes),
        max_length=max_length,
        kv_cache_group_ids=list(group_ids),
        block_pool=cache.block_pool,
        kv_cache_spec=spec,
        drop_eagle_block=drop_eagle_block,
        alignment_tokens=alignment_tokens,
    )


def to_hit_result(
    result: tuple[tuple[list[KVCacheBlock], ...], int],
    cache: PlantedCache,
    group_ids: Sequence[int],
    block_size: int,
) -> HitResult:
    """Convert vLLM's ``(tuple_of_lists, hit_tokens)`` to a ``HitResult``,
    asserting its structure on the way:

    * one list per group id, all of the same length ``length``;
    * ``hit_tokens == length * block_size``;
    * entries ``0 .. first_real - 1`` are ``block_pool.null_block``;
    * entry ``i >= first_real`` of group ``group_ids[k]`` is the very block
      planted for ``(i, group_ids[k])`` (identity, not ``==``: vLLM's
      ``KVCacheBlock`` dataclass compares by value).

    ``first_real`` is taken from the first group and checked in all.
    """
    lists, hit_tokens = result
    assert isinstance(lists, tuple), f"expected a tuple, got {type(lists).__name__}"
    assert len(lists) == len(group_ids), (len(lists), len(group_ids))
    assert lists, "no groups: nothing to convert"
    length = len(lists[0])
    assert all(len(blocks) == length for blocks in lists), [len(b) for b in lists]
    assert hit_tokens == length * block_size, (hit_tokens, length, block_size)
    null = cache.block_pool.null_block
    first_real = next(
        (i for i, block in enumerate(lists[0]) if block is not null), length
    )
    for g, blocks in zip(group_ids, lists):
        for i, block in enumerate(blocks):
            if i < first_real:
                assert block is null, f"group {g} index {i}: expected null block"
            else:
                expected = cache.planted.get((i, g))
                assert expected is not None and block is expected, (
                    f"group {g} index {i}: got block {block.block_id}, "
                    f"planted {None if expected is None else expected.block_id}"
                )
    return HitResult(length=length, first_real=first_real)
