"""pyspec against the REAL vLLM 0.33.0 ``SlidingWindowManager.find_longest_cache_hit``.

The lookup runs on a real ``BlockPool`` with blocks planted for a mask
(tests/vllm_support.py); its answer is converted to a ``HitResult`` (with
every returned block checked) and must equal both ``swa_prefix_cache.pyspec.legacy_scan`` and
``swa_prefix_cache.pyspec.find_hit``. vLLM's ``get_cached_block`` call count must equal the
probes ``legacy_scan`` makes through ``swa_prefix_cache.pyspec.CountingMask``.

* exhaustive: every mask of up to 8 blocks, block sizes 1 and 4, windows
  giving every run length from 0 to n + 1 (both ends of each window range,
  plus window 0), alignment 1-4 x block size, EAGLE on/off, ``max_length``
  a multiple of the block size and one token short of it;
* random: ``PREFIX_CACHE_VLLM_CASES`` seeded cases (default 3000): block
  sizes 1-64, up to 600 blocks, run lengths 0-70, aligned and unaligned
  alignments, 1-3 groups (some blocks cached in only some groups), EAGLE
  on/off, sparse / dense / run / need-1-run masks;
* chained: vLLM's own chained sha256_cbor block hashes instead of synthetic
  ones, on a smaller random sample;
* finer hashes: hashes computed every ``hash_block_size`` tokens (a proper
  divisor of the block size, as in hybrid models): vLLM looks blocks up by
  their block-size view, so its answer must equal pyspec's on the mask of
  that view, whatever the alignment (sliding-window groups never use
  fine-grained partial hits);
* rejected inputs: where vLLM raises, pinned (pyspec does not model these).

Skipped as a whole when vLLM is not installed (requirements/vllm*.txt).
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Sequence

import pytest

pytest.importorskip("vllm")
pytest.importorskip("torch")

from conftest import CASE_COUNTS  # noqa: E402
from masks import random_alignment, random_mask, random_window  # noqa: E402
from vllm_support import (  # noqa: E402
    REFUSALS,
    PlantedCache,
    build_planted_cache,
    chained_block_hashes,
    coarse_block_hashes,
    count_get_cached_block,
    make_block_hashes,
    make_spec,
    refusal,
    split_mask_across_groups,
    to_hit_result,
    vllm_find_longest_cache_hit,
)

from swa_prefix_cache.pyspec import (  # noqa: E402
    CountingMask,
    HitResult,
    SearchParams,
    find_hit,
    legacy_scan,
)

EXHAUSTIVE_MAX_BLOCKS = 8
EXHAUSTIVE_BLOCK_SIZES = (1, 4)
RANDOM_CASES = int(os.environ.get("PREFIX_CACHE_VLLM_CASES", "3000"))
RANDOM_SEED = 20260330

# Totals for the final summary (also reported through conftest.CASE_COUNTS).
PROBES: Counter[str] = Counter()


def check_case(
    cache: PlantedCache,
    cached: Sequence[bool],
    group_ids: Sequence[int],
    max_length: int,
    block_size: int,
    sliding_window: int,
    alignment_tokens: int,
    eagle: bool,
    spec_cache: dict[tuple[int, int], object] | None = None,
    vllm_block_hashes: Sequence[bytes] | None = None,
) -> HitResult | None:
    """Run vLLM, legacy_scan and find_hit on one input; assert they agree
    (result and probe count) and return the common result; None when vLLM
    refused the input (0.28/0.29 on a fine-grained alignment, see
    ``vllm_support.Refused``: pyspec models the releases that answer it)."""
    key = (block_size, sliding_window)
    if spec_cache is not None and key in spec_cache:
        spec = spec_cache[key]
    else:
        spec = make_spec(block_size, sliding_window)
        if spec_cache is not None:
            spec_cache[key] = spec
    try:
        with count_get_cached_block(cache.block_pool) as calls:
            raw = vllm_find_longest_cache_hit(
                cache, group_ids, max_length, spec, eagle, alignment_tokens,  # type: ignore[arg-type]
                block_hashes=vllm_block_hashes,  # type: ignore[arg-type]
            )
    except AssertionError as exc:
        refusal(exc, alignment_tokens, block_size)
        return None
    got = to_hit_result(raw, cache, group_ids, block_size)

    legacy_mask = CountingMask(cached)
    legacy = legacy_scan(
        legacy_mask, max_length, block_size, sliding_window, alignment_tokens, eagle
    )
    fast_mask = CountingMask(cached)
    fast = find_hit(
        fast_mask,
        SearchParams.from_vllm(
            max_length, block_size, sliding_window, alignment_tokens, eagle
        ),
    )
    where = (
        f"mask={''.join('1' if c else '0' for c in cached)} groups={list(group_ids)} "
        f"max_length={max_length} block_size={block_size} "
        f"sliding_window={sliding_window} alignment_tokens={alignment_tokens} "
        f"eagle={eagle}"
    )
    assert legacy == got, f"legacy_scan {legacy} != vLLM {got}: {where}"
    assert fast == got, f"find_hit {fast} != vLLM {got}: {where}"
    assert calls[0] == legacy_mask.probes, (
        f"vLLM made {calls[0]} get_cached_block calls, legacy_scan "
        f"{legacy_mask.probes} probes: {where}"
    )
    PROBES["vllm"] += calls[0]
    PROBES["find_hit"] += fast_mask.probes
    return got


def exhaustive_windows(n: int, block_size: int) -> list[int]:
    """Windows (tokens) giving every raw run length cdiv(W - 1, bs) from 0 to
    n + 1: window 0 and 1, then for each k >= 1 the smallest and the largest
    window with that run length."""
    windows = {0, 1}
    for k in range(1, n + 2):
        windows.add((k - 1) * block_size + 2)
        windows.add(k * block_size + 1)
    return sorted(windows)


@pytest.mark.parametrize("block_size", EXHAUSTIVE_BLOCK_SIZES)
@pytest.mark.parametrize("n", range(EXHAUSTIVE_MAX_BLOCKS + 1))
def test_exhaustive_small(n: int, block_size: int) -> None:
    """Every mask of n blocks against every parameter combination."""
    spec_cache: dict[tuple[int, int], object] = {}
    windows = exhaustive_windows(n, block_size)
    max_lengths = [n * block_size] + ([n * block_size - 1] if n * block_size >= 1 else [])
    cases = 0
    for bits in range(1 << n):
        cached = [bool(bits >> i & 1) for i in range(n)]
        cache = build_planted_cache({0: cached}, block_size, salt=bits.to_bytes(2, "big"))
        for sliding_window in windows:
            for ratio in (1, 2, 3, 4):
                for eagle in (False, True):
                    for max_length in max_lengths:
                        check_case(
                            cache, cached, [0], max_length, block_size,
                            sliding_window, ratio * block_size, eagle, spec_cache,
                        )
                        cases += 1
    CASE_COUNTS["vllm_reference exhaustive"] += cases








def random_case(rng: random.Random, chained: bool = False) -> int:
    """Draw and check one random case; returns the number of blocks n."""
    block_size = rng.choice((rng.randint(1, 64), rng.choice((1, 2, 16, 32, 64))))
    n = rng.choice((rng.randint(0, 24), rng.randint(0, 600)))
    need = rng.choice((rng.randint(0, 8), rng.randint(0, 70)))
    sliding_window = random_window(rng, block_size, need)
    alignment_tokens = random_alignment(rng, block_size)
    eagle = rng.random() < 0.5
    max_length = n * block_size + rng.randint(0, block_size - 1)
    extra = rng.randint(0, 3)  # hashes past max_length // block_size
    group_ids = rng.sample(range(6), rng.randint(1, 3))
    cached = random_mask(rng, n + extra, need + int(eagle))
    group_masks = split_mask_across_groups(cached, group_ids, rng, partial_prob=0.3)
    hashes = (
        chained_block_hashes(n + extra, block_size, seed=rng.randrange(1 << 30))
        if chained
        else None
    )
    cache = build_planted_cache(
        group_masks, block_size, block_hashes=hashes,
        salt=rng.randbytes(8),
    )
    check_case(
        cache, cached, group_ids, max_length, block_size,
        sliding_window, alignment_tokens, eagle,
    )
    return n


def test_random() -> None:
    """PREFIX_CACHE_VLLM_CASES seeded cases; each case reseeds from its index
    so a failure names a seed that reproduces it alone."""
    total_blocks = 0
    before = PROBES.copy()
    refused_before = REFUSALS[0]
    for case in range(RANDOM_CASES):
        seed = RANDOM_SEED + case
        try:
            total_blocks += random_case(random.Random(seed))
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from exc
    refused = REFUSALS[0] - refused_before
    assert refused <= RANDOM_CASES // 2, f"vLLM refused {refused} of {RANDOM_CASES} cases"
    CASE_COUNTS["vllm_reference random"] += RANDOM_CASES
    print(
        f"\nvllm_reference random: {RANDOM_CASES} cases, {total_blocks} blocks, "
        f"get_cached_block calls {PROBES['vllm'] - before['vllm']}, "
        f"find_hit probes {PROBES['find_hit'] - before['find_hit']}"
    )


def test_random_chained_hashes() -> None:
    """A smaller sample with vLLM's chained sha256_cbor block hashes."""
    cases = max(RANDOM_CASES // 20, 20)
    for case in range(cases):
        seed = RANDOM_SEED + 10_000_000 + case
        try:
            random_case(random.Random(seed), chained=True)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from exc
    CASE_COUNTS["vllm_reference chained"] += cases


def test_partial_groups_are_misses() -> None:
    """A block held by every group but one is a miss: with the window's
    blocks missing from group 1 only, vLLM falls back to the prefix."""
    block_size, n = 4, 6
    group_masks = {0: [True] * n, 1: [True, True, False, True, True, True]}
    cache = build_planted_cache(group_masks, block_size)
    cached = [all(m[i] for m in group_masks.values()) for i in range(n)]
    tokens = n * block_size
    # need 3: the window [3, 6) is cached in both groups.
    got = check_case(cache, cached, [0, 1], tokens, block_size, 13, block_size, False)
    assert got == HitResult(length=6, first_real=3)
    # need 4: no window, so the cached prefix [0, 2) is the hit.
    got = check_case(cache, cached, [1, 0], tokens, block_size, 17, block_size, False)
    assert got == HitResult(length=2, first_real=0)
    # Group 0 alone sees every block cached: need 5 ends at block 6.
    got = check_case(cache, [True] * n, [0], tokens, block_size, 21, block_size, False)
    assert got == HitResult(length=6, first_real=1)


def test_finer_hash_block_size() -> None:
    """hash_block_size a proper divisor of block_size: plant the block-size
    view (coarse_block_hashes), hand vLLM the fine hashes."""
    cases = max(RANDOM_CASES // 10, 20)
    for case in range(cases):
        seed = RANDOM_SEED + 20_000_000 + case
        rng = random.Random(seed)
        hash_block_size = rng.choice((1, 2, 4, 8, 16))
        block_size = hash_block_size * rng.randint(2, 4)
        n = rng.randint(0, 80)
        need = rng.randint(0, 12)
        eagle = rng.random() < 0.5
        fine = make_block_hashes(
            n * (block_size // hash_block_size) + rng.randint(0, 3), rng.randbytes(8)
        )
        coarse = coarse_block_hashes(fine, hash_block_size, block_size)
        cached = random_mask(rng, len(coarse), need + int(eagle))
        group_ids = rng.sample(range(4), rng.randint(1, 2))
        group_masks = split_mask_across_groups(cached, group_ids, rng, 0.3)
        cache = build_planted_cache(
            group_masks, block_size, block_hashes=coarse, hash_block_size=hash_block_size
        )
        alignment_tokens = rng.choice(
            (hash_block_size, block_size, random_alignment(rng, block_size))
        )
        try:
            check_case(
                cache, cached, group_ids, n * block_size + rng.randint(0, block_size - 1),
                block_size, random_window(rng, block_size, need), alignment_tokens,
                eagle, vllm_block_hashes=fine,
            )
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}: {exc}") from exc
    CASE_COUNTS["vllm_reference finer hashes"] += cases


# (label, vLLM keyword overrides, exception vLLM raises). Base input: one
# group, block size 4, window 5, alignment 4, no EAGLE, 2 blocks all cached.
REJECTED = [
    ("hashes shorter than max_length // bs", {"max_length": 12}, IndexError),
    ("alignment_tokens 0", {"alignment_tokens": 0}, ZeroDivisionError),
    ("dcp_world_size 2", {"dcp_world_size": 2}, AssertionError),
    ("pcp_world_size 2", {"pcp_world_size": 2}, AssertionError),
    ("no kv_cache_group_ids", {"kv_cache_group_ids": []}, IndexError),
    ("hash_block_size not a divisor", {"hash_block_size": 3}, AssertionError),
    ("hash_block_size above block size", {"hash_block_size": 8}, AssertionError),
]


@pytest.mark.parametrize(
    ("overrides", "error"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED]
)
def test_vllm_raises_outside_the_model(overrides: dict[str, object], error: type) -> None:
    """Inputs on which the real method raises (a replacement must too, or
    hand them to the original)."""
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    overrides = dict(overrides)
    block_size = 4
    cache = build_planted_cache(
        {0: [True, True]}, block_size,
        hash_block_size=overrides.pop("hash_block_size", block_size),  # type: ignore[arg-type]
    )
    kwargs: dict[str, object] = {
        "block_hashes": cache.block_hashes,
        "max_length": 2 * block_size,
        "kv_cache_group_ids": [0],
        "block_pool": cache.block_pool,
        "kv_cache_spec": make_spec(block_size, 5),
        "drop_eagle_block": False,
        "alignment_tokens": block_size,
    }
    kwargs.update(overrides)
    with pytest.raises(error):
        SlidingWindowManager.find_longest_cache_hit(**kwargs)  # type: ignore[arg-type]
