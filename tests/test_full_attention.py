"""swa_prefix_cache.pyspec.full against the REAL vLLM 0.33.0 ``FullAttentionManager.find_longest_cache_hit``.

The lookup runs on a real ``BlockPool`` with blocks planted under real
32-byte hashes. One mask ``M`` per group over the raw hash list
``block_hashes`` (one hash every ``hash_block_size`` tokens) says which
hashes have a block in that group; a hash counts for the lookup only when
every queried group has it (``get_cached_block``). The two masks pyspec
reads are what vLLM's probes see:

* ``cached[i]`` = ``M[(i + 1) * s - 1]`` for ``i < len(M) // s``: the
  block-size view (``BlockHashListWithBlockSize``: with ``s = block_size //
  alignment_tokens`` in fine-grained mode, else ``block_size //
  hash_block_size``);
* ``fine_cached`` = ``M`` itself (phase 2 reads ``block_hashes[j]``), as
  vLLM's ``_cache_partial_tail_block`` plants partial tails: under the
  prefix-chain hash at the boundary, ``block_hashes[j]``.

vLLM's answer must be pyspec's ``legacy_full_scan`` and ``full_hit``: the
same token count, per group the very same block objects (identity), and as
many ``get_cached_block`` calls as pyspec's probes.

* exhaustive: every mask of full blocks up to 7-8 blocks x every interior
  mask of the partial block x EAGLE x max_length (every value up to one
  block past the hashes) for several (block_size, hash_block_size,
  alignment_tokens), fine-grained and not;
* random (hypothesis): up to ~2000 hashes, 1-3 groups (some hashes present
  in only some groups), fine-grained with scales 2-16, plain, unaligned
  alignments, EAGLE.

Skipped as a whole when vLLM is not installed.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Sequence

import pytest

pytest.importorskip("vllm")
pytest.importorskip("torch")

import torch  # noqa: E402
from conftest import CASE_COUNTS  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec  # noqa: E402
from vllm_support import (  # noqa: E402
    build_planted_cache,
    count_get_cached_block,
    make_block_hashes,
)

from swa_prefix_cache.pyspec.full import FullHit, full_hit, is_fine_grained, legacy_full_scan  # noqa: E402

ORIGINAL_FULL_LOOKUP = FullAttentionManager.__dict__["find_longest_cache_hit"]
RANDOM_CASES = int(os.environ.get("PREFIX_CACHE_FULL_CASES", "1500"))


def view_scale(block_size: int, hash_block_size: int, alignment_tokens: int) -> int:
    """How many raw hashes one full block spans in vLLM's block-size view."""
    if is_fine_grained(block_size, alignment_tokens):
        return block_size // alignment_tokens
    return block_size // hash_block_size


def spec_masks(
    combined: Sequence[bool], block_size: int, hash_block_size: int, alignment_tokens: int
) -> tuple[list[bool], list[bool]]:
    """(cached, fine_cached) as vLLM's probes see them (module docstring)."""
    s = view_scale(block_size, hash_block_size, alignment_tokens)
    coarse = [combined[(i + 1) * s - 1] for i in range(len(combined) // s)]
    return coarse, list(combined)


class Case:
    """One planted pool, looked up with several (max_length, eagle)."""

    def __init__(
        self,
        group_masks: dict[int, list[bool]],
        block_size: int,
        hash_block_size: int,
        alignment_tokens: int,
        salt: bytes = b"",
    ) -> None:
        length = len(next(iter(group_masks.values())))
        self.hashes = make_block_hashes(length, salt)
        self.cache = build_planted_cache(
            group_masks, block_size, block_hashes=self.hashes, hash_block_size=hash_block_size
        )
        self.group_ids = sorted(group_masks)
        self.block_size = block_size
        self.hash_block_size = hash_block_size
        self.alignment_tokens = alignment_tokens
        combined = [all(group_masks[g][j] for g in self.group_ids) for j in range(length)]
        self.cached, self.fine = spec_masks(
            combined, block_size, hash_block_size, alignment_tokens
        )
        self.spec = FullAttentionSpec(
            block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
        )

    def check(self, max_length: int, eagle: bool) -> FullHit:
        pool = self.cache.block_pool
        with count_get_cached_block(pool) as calls:
            blocks, tokens = ORIGINAL_FULL_LOOKUP.__get__(None, FullAttentionManager)(
                block_hashes=list(self.hashes),
                max_length=max_length,
                kv_cache_group_ids=list(self.group_ids),
                block_pool=pool,
                kv_cache_spec=self.spec,
                drop_eagle_block=eagle,
                alignment_tokens=self.alignment_tokens,
            )
        args = (self.cached, self.fine, max_length, self.block_size, self.alignment_tokens, eagle)
        legacy = legacy_full_scan(*args)
        ours = full_hit(*args)
        context = (args, self.hash_block_size, self.group_ids, legacy, ours)
        assert ours == legacy, context
        assert tokens == ours.hit_tokens, context
        assert calls[0] == ours.probes, context
        s = view_scale(self.block_size, self.hash_block_size, self.alignment_tokens)
        assert len(blocks) == len(self.group_ids), context
        for g, got in zip(self.group_ids, blocks):
            expected = [self.cache.planted[((i + 1) * s - 1, g)] for i in range(ours.prefix)]
            if ours.tail is not None:
                expected.append(self.cache.planted[(ours.tail, g)])
            assert ours.num_blocks <= len(expected), context
            expected = expected[: ours.num_blocks]
            assert len(got) == len(expected), context
            assert all(a is b for a, b in zip(got, expected)), context
        return ours


# (block_size, hash_block_size, alignment_tokens, max full blocks)
EXHAUSTIVE_CONFIGS = [
    # fine-grained (alignment_tokens < block_size, a divisor of it)
    (2, 1, 1, 8),
    (4, 1, 1, 7),
    (4, 2, 2, 8),
    (6, 2, 2, 7),
    (4, 4, 1, 6),  # block_size == hash_block_size: vLLM views the raw list at scale 4
    (8, 2, 4, 7),  # alignment_tokens a multiple of hash_block_size
    # not fine-grained
    (1, 1, 1, 8),
    (4, 4, 4, 8),
    (4, 1, 4, 8),
    (4, 2, 8, 8),
    (4, 4, 3, 8),  # alignment below the block size, not a divisor
    (4, 2, 6, 8),
    (2, 2, 6, 8),
]


def full_block_masks(nblocks: int) -> list[tuple[bool, ...]]:
    """Every mask of up to 6 blocks; beyond that, every mask up to its first
    miss (phase 1 never reads past it; the blocks after it are cached, so a
    read past the miss would show in the answer or the call count)."""
    if nblocks <= 6:
        return list(itertools.product([False, True], repeat=nblocks))
    runs = [(True,) * k + (False,) + (True,) * (nblocks - k - 1) for k in range(nblocks)]
    return runs + [(True,) * nblocks]


@pytest.mark.parametrize("block_size,hash_block_size,alignment_tokens,max_blocks", EXHAUSTIVE_CONFIGS)
def test_exhaustive_small(
    block_size: int, hash_block_size: int, alignment_tokens: int, max_blocks: int
) -> None:
    """Every full-block mask of up to max_blocks blocks, every interior mask
    of the partial block (the same pattern inside every block, so whatever
    phase 1 stops at, phase 2 sees it), with 0 or scale - 1 trailing raw
    hashes, every max_length up to one block past the hashes, EAGLE on/off."""
    fine = is_fine_grained(block_size, alignment_tokens)
    s = view_scale(block_size, hash_block_size, alignment_tokens)
    interiors = list(itertools.product([False, True], repeat=s - 1)) if fine else [(True,) * (s - 1)]
    count = 0
    for nblocks in range(max_blocks + 1):
        for bits in full_block_masks(nblocks):
            for interior in interiors:
                for extra in sorted({0, s - 1}):
                    mask: list[bool] = []
                    for b in list(bits) + [None] * (1 if extra else 0):
                        mask.extend(interior)
                        if b is not None:
                            mask.append(b)
                    mask = mask[: nblocks * s + extra]
                    case = Case({0: mask}, block_size, hash_block_size, alignment_tokens)
                    top = (nblocks + 1) * block_size + 1
                    for max_length in range(top + 1):
                        for eagle in (False, True):
                            case.check(max_length, eagle)
                            count += 1
    CASE_COUNTS["full attention vs vLLM, exhaustive"] += count
    assert count > 0


def random_config(rng: random.Random) -> tuple[int, int, int]:
    """(block_size, hash_block_size, alignment_tokens)."""
    kind = rng.choice(("fine", "fine", "plain", "coarser", "odd"))
    if kind == "fine":
        hbs = rng.choice((1, 2, 4, 16))
        scale = rng.choice((2, 3, 4, 8, 16))
        return hbs * scale, hbs, hbs
    if kind == "plain":
        bs = rng.choice((1, 4, 16))
        return bs, rng.choice([d for d in (1, 2, 4, 16) if bs % d == 0]), bs
    if kind == "coarser":
        bs = rng.choice((2, 4, 16))
        return bs, bs, bs * rng.choice((2, 3, 4))
    bs = rng.choice((4, 6, 16))
    return bs, bs, rng.choice([a for a in (3, 5, 7, 10, 12) if bs % a != 0 or a > bs])


def random_combined(rng: random.Random, length: int, s: int) -> list[bool]:
    """A raw-hash mask whose block-size view has a cached prefix (vLLM's
    chained hashes make a run from block 0 the interesting shape) followed
    by noise."""
    kind = rng.choice(("prefix", "prefix", "noise", "all", "none"))
    if kind == "all":
        return [True] * length
    if kind == "none":
        return [False] * length
    density = rng.random()
    mask = [rng.random() < density for _ in range(length)]
    if kind == "prefix":
        run = rng.randrange(length // s + 1)
        for i in range(run):
            mask[(i + 1) * s - 1] = True
    return mask


@settings(
    max_examples=RANDOM_CASES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32 - 1), groups=st.integers(1, 3), big=st.booleans())
def test_random_against_vllm(seed: int, groups: int, big: bool) -> None:
    rng = random.Random(seed)
    bs, hbs, align = random_config(rng)
    s = view_scale(bs, hbs, align)
    length = rng.randrange(0, (2000 if big else 60) + 1)
    combined = random_combined(rng, length, s)
    group_ids = sorted(rng.sample(range(4), groups))
    masks: dict[int, list[bool]] = {g: [] for g in group_ids}
    for hit in combined:
        present = set(group_ids)
        if not hit:
            present = set(g for g in group_ids if rng.random() < 0.5) if groups > 1 else set()
            if present == set(group_ids):
                present.discard(group_ids[0])
        for g in group_ids:
            masks[g].append(g in present)
    case = Case(masks, bs, hbs, align, salt=seed.to_bytes(8, "big"))
    assert case.cached == spec_masks(combined, bs, hbs, align)[0]
    tokens = length * hbs
    for _ in range(4):
        max_length = rng.choice(
            (tokens, tokens + bs, max(tokens - 1, 0), rng.randrange(tokens + 2 * bs + 1))
        )
        case.check(max_length, rng.random() < 0.5)
        CASE_COUNTS["full attention vs vLLM, random"] += 1


def test_eagle_drop_is_one_hash_unit_when_fine() -> None:
    """The fine-grained EAGLE drop is alignment_tokens, not a block: a hit
    on the interior boundary j keeps block p and drops one hash unit."""
    # block_size 8, hash unit 2: blocks 0, 1 cached, block 2's boundary at
    # 2 hash units (index 10, tokens 22) cached.
    mask = [False] * 16
    for i in range(2):
        mask[(i + 1) * 4 - 1] = True
    mask[10] = True
    case = Case({0: mask}, 8, 2, 2)
    plain = case.check(32, False)
    assert (plain.hit_tokens, plain.num_blocks, plain.prefix, plain.tail) == (22, 3, 2, 10)
    eagle = case.check(32, True)
    assert (eagle.hit_tokens, eagle.num_blocks) == (20, 3)


def test_rejects_bad_arguments() -> None:
    for kwargs, name in [
        (dict(max_length=-1), "max_length"),
        (dict(block_size=0), "block_size"),
        (dict(alignment_tokens=0), "alignment_tokens"),
        (dict(drop_eagle_block=1), "drop_eagle_block"),
        (dict(cached="ab"), "cached"),
        (dict(fine_cached=3), "fine_cached"),
        (dict(max_length=True), "max_length"),
    ]:
        args = dict(cached=[True], fine_cached=[], max_length=4, block_size=4,
                    alignment_tokens=4, drop_eagle_block=False)
        args.update(kwargs)
        for fn in (full_hit, legacy_full_scan):
            with pytest.raises(ValueError, match=name):
                fn(**args)
