"""The upstream patch (upstream/make_patch.py) against vLLM's stock method.

The patched ``SlidingWindowManager.find_longest_cache_hit`` (the installed
vLLM release's module with our body, imported under another name next to the stock module)
and vLLM's own method are called on the same real ``BlockPool``, the same
block hashes and arguments; they must return the same hit tokens and, per
group, the very same block objects, or raise the same exception. The inputs
cover the corners: alignment (equal to, a multiple of, a divisor of, or
unrelated to the block size), EAGLE, one to three groups with blocks cached
in only some of them, hashes finer than the block size, ``max_length`` not a
multiple of the block size, extra hashes past it, windows of 0, 1 and
negative tokens, vLLM's chained hashes.

* ``SWA_STRIDE_PATCHED_FILE``: the patched module to test (``make
  upstream-patch`` passes the file of the vLLM copy it applied the diff to);
  default: built by make_patch from the installed vLLM into a temp folder.
* ``SWA_STRIDE_LOOKUPS``: random lookups compared (default 20,000; ``make
  upstream-patch`` runs 100,000).

The harness has teeth: deliberately broken bodies (``MUTANTS``) must each be
caught.
"""

from __future__ import annotations

import inspect
import itertools
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("vllm")
pytest.importorskip("torch")

from conftest import CASE_COUNTS  # noqa: E402
from masks import random_alignment, random_mask, random_window  # noqa: E402
from test_vllm_reference import REJECTED  # noqa: E402
from vllm_support import (  # noqa: E402
    ORIGINAL_LOOKUP,
    PlantedCache,
    build_planted_cache,
    chained_block_hashes,
    coarse_block_hashes,
    count_get_cached_block,
    make_block_hashes,
    make_spec,
    split_mask_across_groups,
)

from upstream import make_patch  # noqa: E402

if make_patch.installed_version() not in make_patch.STOCK_METHOD_SHA256:
    pytest.skip(
        f"the upstream patch is for vLLM {', '.join(make_patch.STOCK_METHOD_SHA256)}, "
        f"not {make_patch.installed_version()}",
        allow_module_level=True,
    )

LOOKUPS = int(os.environ.get("SWA_STRIDE_LOOKUPS", "20000"))
MUTANT_LOOKUPS = 20_000  # a mutant must be caught within this many lookups
LOOKUPS_PER_POOL = 8
SEED = 20261201

@dataclass
class Totals:
    lookups: int = 0
    raised: int = 0
    stock_probes: int = 0
    patched_probes: int = 0
    hit_blocks: int = 0


def stock_lookup() -> Any:
    """vLLM's own classmethod, bound to vLLM's own class."""
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    return ORIGINAL_LOOKUP.__get__(None, SlidingWindowManager)


def load_patched(path: Path, name: str) -> Any:
    """The patched module's ``find_longest_cache_hit``, bound to its class."""
    module: ModuleType = make_patch.load_module(path, name)
    return module.SlidingWindowManager.find_longest_cache_hit


def write_patched(replacement: str, folder: Path, name: str) -> Path:
    """vLLM's installed module with the body of ``replacement``, as a file."""
    stock = make_patch.installed_module_file().read_text()
    path = folder / f"{name}.py"
    path.write_text(make_patch.patched_source(stock, replacement))
    return path


@pytest.fixture(scope="module")
def patched(tmp_path_factory: pytest.TempPathFactory) -> Any:
    given = os.environ.get("SWA_STRIDE_PATCHED_FILE")
    if given:
        path = Path(given)
    else:
        path = write_patched(
            make_patch.REPLACEMENT.read_text(), tmp_path_factory.mktemp("patched"),
            "swa_stride_patched",
        )
    method = load_patched(path, "swa_stride_patched_module")
    source = inspect.getsource(method)
    assert "known_cached_start" in source and make_patch.STOCK_TODO not in source
    assert Path(inspect.getfile(method)).resolve() == path.resolve()
    return method


@dataclass
class Pool:
    """One planted pool and what the lookups on it may vary."""

    cache: PlantedCache
    group_ids: list[int]
    block_size: int
    num_blocks: int  # block-size hashes planted (the coarse view, if fine)
    vllm_hashes: list[Any]  # what vLLM is handed (finer hashes, if fine)
    hash_block_size: int


def draw_pool(rng: random.Random) -> Pool:
    block_size = rng.choice((1, 2, 4, 16, 64, rng.randint(1, 64)))
    fine = block_size > 1 and rng.random() < 0.2
    hash_block_size = (
        rng.choice([d for d in range(1, block_size) if block_size % d == 0])
        if fine else block_size
    )
    num_blocks = rng.choice((rng.randint(0, 24), rng.randint(0, 400))) + rng.randint(0, 3)
    need = rng.choice((rng.randint(0, 8), rng.randint(0, 60)))
    group_ids = rng.sample(range(6), rng.randint(1, 3))
    cached = random_mask(rng, num_blocks, need)
    group_masks = split_mask_across_groups(cached, group_ids, rng, partial_prob=0.3)
    if fine:
        scale = block_size // hash_block_size
        vllm_hashes = make_block_hashes(num_blocks * scale + rng.randint(0, scale - 1),
                                        rng.randbytes(8))
        hashes = coarse_block_hashes(vllm_hashes, hash_block_size, block_size)
    elif rng.random() < 0.03:
        hashes = vllm_hashes = chained_block_hashes(num_blocks, block_size,
                                                    seed=rng.randrange(1 << 30))
    else:
        hashes = vllm_hashes = make_block_hashes(num_blocks, rng.randbytes(8))
    cache = build_planted_cache(group_masks, block_size, block_hashes=hashes,
                                hash_block_size=hash_block_size)
    return Pool(cache, group_ids, block_size, num_blocks, vllm_hashes, hash_block_size)


def draw_lookup(rng: random.Random, pool: Pool) -> dict[str, Any]:
    """Keyword arguments of one lookup on ``pool``."""
    bs = pool.block_size
    need = rng.choice((0, 1, rng.randint(1, 8), rng.randint(1, 60)))
    groups = rng.sample(pool.group_ids, rng.randint(1, len(pool.group_ids)))
    alignment = rng.choice((bs, random_alignment(rng, bs), pool.hash_block_size))
    n = rng.choice((pool.num_blocks, rng.randint(0, pool.num_blocks)))
    return dict(
        block_hashes=list(pool.vllm_hashes),
        max_length=n * bs + rng.randint(0, bs - 1),
        kv_cache_group_ids=groups,
        block_pool=pool.cache.block_pool,
        kv_cache_spec=make_spec(bs, random_window(rng, bs, need)),
        drop_eagle_block=rng.random() < 0.5,
        alignment_tokens=alignment,
    )


def call(method: Any, kwargs: dict[str, Any]) -> tuple[Any, int]:
    """(the answer or the exception raised, get_cached_block calls)."""
    with count_get_cached_block(kwargs["block_pool"]) as calls:
        try:
            answer: Any = method(**kwargs)
        except Exception as exc:  # compared by type with the stock method's
            answer = exc
    return answer, calls[0]


def describe(kwargs: dict[str, Any]) -> str:
    spec = kwargs["kv_cache_spec"]
    return (
        f"max_length={kwargs['max_length']} block_size={spec.block_size} "
        f"sliding_window={spec.sliding_window} groups={kwargs['kv_cache_group_ids']} "
        f"eagle={kwargs['drop_eagle_block']} alignment={kwargs['alignment_tokens']} "
        f"hashes={len(kwargs['block_hashes'])} "
        f"hash_block_size={kwargs['block_pool'].hash_block_size}"
    )


def compare_one(patched: Any, kwargs: dict[str, Any], totals: Totals) -> None:
    """Stock and patched on one input: same tokens, same block objects, or
    the same exception type."""
    stock, stock_calls = call(stock_lookup(), kwargs)
    ours, our_calls = call(patched, kwargs)
    where = describe(kwargs)
    totals.lookups += 1
    if isinstance(stock, Exception) or isinstance(ours, Exception):
        assert type(ours) is type(stock), f"stock {stock!r}, patched {ours!r}: {where}"
        totals.raised += 1
        return
    (stock_blocks, stock_tokens), (our_blocks, our_tokens) = stock, ours
    assert our_tokens == stock_tokens, f"tokens {our_tokens} != {stock_tokens}: {where}"
    assert len(our_blocks) == len(stock_blocks), where
    for mine, theirs in zip(our_blocks, stock_blocks):
        assert len(mine) == len(theirs), where
        assert all(a is b for a, b in zip(mine, theirs)), f"other block objects: {where}"
    spec = kwargs["kv_cache_spec"]
    n = kwargs["max_length"] // spec.block_size
    need = max(stock_lookup().__self__._contiguous_blocks_for_hit(
        spec.sliding_window, spec.block_size, kwargs["drop_eagle_block"]), 1)
    # The search looks up every block at most once, the fallback at most
    # need - 1 blocks.
    assert our_calls <= n + need - 1, f"{our_calls} lookups for {n} blocks: {where}"
    totals.stock_probes += stock_calls
    totals.patched_probes += our_calls
    totals.hit_blocks += len(stock_blocks[0])


def random_lookups(seed: int) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    while True:
        pool = draw_pool(rng)
        for _ in range(LOOKUPS_PER_POOL):
            yield draw_lookup(rng, pool)


def exhaustive_lookups(max_blocks: int = 6) -> Iterator[dict[str, Any]]:
    """Every mask of up to ``max_blocks`` blocks (one group), block sizes 1
    and 4, windows giving every run length 0 .. n + 1, alignment 1-4 x and
    1/2 x the block size, EAGLE on/off, max_length a multiple of the block
    size and one token short of it."""
    for block_size in (1, 4):
        for n in range(max_blocks + 1):
            windows = {0, 1} | {k * block_size + 1 for k in range(n + 2)}
            alignments = {block_size * r for r in (1, 2, 3, 4)} | {max(block_size // 2, 1)}
            max_lengths = {n * block_size, max(n * block_size - 1, 0)}
            for bits in range(1 << n):
                cache = build_planted_cache(
                    {0: [bool(bits >> i & 1) for i in range(n)]}, block_size,
                    salt=bits.to_bytes(2, "big"),
                )
                for window in sorted(windows):
                    spec = make_spec(block_size, window)
                    for alignment in sorted(alignments):
                        for eagle in (False, True):
                            for max_length in sorted(max_lengths):
                                yield dict(
                                    block_hashes=cache.block_hashes, max_length=max_length,
                                    kv_cache_group_ids=[0], block_pool=cache.block_pool,
                                    kv_cache_spec=spec, drop_eagle_block=eagle,
                                    alignment_tokens=alignment,
                                )


def test_patched_equals_stock_exhaustive_small(patched: Any) -> None:
    totals = Totals()
    for kwargs in exhaustive_lookups():
        compare_one(patched, kwargs, totals)
    CASE_COUNTS["upstream patch exhaustive lookups"] += totals.lookups
    print(f"\nupstream patch, exhaustive small: {totals.lookups} lookups, 0 mismatches")


def test_patched_equals_stock_random(patched: Any) -> None:
    totals = Totals()
    lookups = random_lookups(SEED)
    for k in range(LOOKUPS):
        kwargs = next(lookups)
        try:
            compare_one(patched, kwargs, totals)
        except AssertionError as exc:
            raise AssertionError(f"lookup {k} (seed {SEED}): {exc}") from exc
    CASE_COUNTS["upstream patch random lookups"] += totals.lookups
    print(
        f"\nupstream patch, random: {totals.lookups} lookups compared, 0 mismatches "
        f"({totals.raised} raised the same exception type in both); get_cached_block "
        f"calls: stock {totals.stock_probes}, patched {totals.patched_probes} "
        f"({totals.stock_probes / max(totals.patched_probes, 1):.1f}x fewer); "
        f"hit blocks {totals.hit_blocks}"
    )


@pytest.mark.parametrize(
    ("overrides", "error"), [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED]
)
def test_patched_raises_like_stock(
    patched: Any, overrides: dict[str, object], error: type
) -> None:
    """Where vLLM's method raises (test_vllm_reference.REJECTED), the
    patched one raises the same exception type."""
    overrides = dict(overrides)
    block_size = 4
    cache = build_planted_cache(
        {0: [True, True]}, block_size,
        hash_block_size=overrides.pop("hash_block_size", block_size),  # type: ignore[arg-type]
    )
    kwargs: dict[str, Any] = {
        "block_hashes": cache.block_hashes, "max_length": 2 * block_size,
        "kv_cache_group_ids": [0], "block_pool": cache.block_pool,
        "kv_cache_spec": make_spec(block_size, 5), "drop_eagle_block": False,
        "alignment_tokens": block_size, **overrides,
    }
    with pytest.raises(error):
        stock_lookup()(**kwargs)
    with pytest.raises(error):
        patched(**kwargs)


# Deliberately broken bodies: (name, text in the replacement, what it
# becomes). Each must be caught by the harness above.
MUTANTS = [
    ("anchor one block right",
     "start = end - sliding_window_contiguous_blocks\n",
     "start = end - sliding_window_contiguous_blocks + 1\n"),
    ("no alignment check",
     "alignment_blocks = alignment_tokens // math.gcd(alignment_tokens, block_size)\n",
     "alignment_blocks = 1\n"),
    ("alignment check ignores EAGLE",
     "end = end_bound - (end_bound - num_eagle_blocks) % alignment_blocks\n",
     "end = end_bound - end_bound % alignment_blocks\n"),
    ("a miss does not rule out the window ending after it",
     "end_bound = i\n", "end_bound = i + 1\n"),
    ("window of 0 tokens not clamped to one block",
     "            1,\n        )\n        block_size", "            0,\n        )\n        block_size"),
    ("no EAGLE drop on a found window",
     "num_computed_blocks = match_end - num_eagle_blocks\n",
     "num_computed_blocks = match_end\n"),
    ("one null block too many",
     "num_null_blocks = match_end - sliding_window_contiguous_blocks\n",
     "num_null_blocks = match_end - sliding_window_contiguous_blocks + 1\n"),
    ("fallback not re-aligned after the EAGLE drop",
     "                num_computed_blocks -= 1\n"
     "                num_computed_blocks -= num_computed_blocks % alignment_blocks\n",
     "                num_computed_blocks -= 1\n"),
    ("first group's blocks in every group",
     "cached_blocks[i][group]\n", "cached_blocks[i][0]\n"),
    ("finer hashes not viewed at the block size",
     "block_hashes = resolve_block_hashes(", "_ = resolve_block_hashes("),
    ("max_length rounded up to a block",
     "max_num_blocks = max_length // block_size\n",
     "max_num_blocks = -(-max_length // block_size)\n"),
]


@pytest.mark.parametrize(("name", "old", "new"), MUTANTS, ids=[m[0] for m in MUTANTS])
def test_harness_catches_broken_body(
    name: str, old: str, new: str, tmp_path: Path
) -> None:
    replacement = make_patch.REPLACEMENT.read_text()
    assert replacement.count(old) == 1, f"mutant {name!r} does not apply once"
    module = f"swa_stride_mutant_{MUTANTS.index((name, old, new))}"
    mutant = load_patched(
        write_patched(replacement.replace(old, new), tmp_path, module), module
    )
    totals = Totals()
    inputs = itertools.chain(
        exhaustive_lookups(4), itertools.islice(random_lookups(SEED), MUTANT_LOOKUPS)
    )
    for kwargs in inputs:
        try:
            compare_one(mutant, kwargs, totals)
        except AssertionError:
            CASE_COUNTS["upstream patch mutants caught"] += 1
            print(f"\nmutant {name!r} caught after {totals.lookups + 1} lookups")
            return
    pytest.fail(f"mutant {name!r} not caught in {totals.lookups} lookups")


def test_make_patch_refuses_other_builds() -> None:
    """The patch is made only from a known release's method, with vLLM's own
    signature on our body."""
    stock = make_patch.installed_module_file().read_text()
    replacement = make_patch.REPLACEMENT.read_text()
    with pytest.raises(make_patch.PatchRefused, match="vLLM is 0.32.0, the patch is for 0.33.0"):
        make_patch.patched_source(stock, replacement, version="0.32.0")
    changed = stock.replace("        if not match_found:\n", "        if not (match_found):\n")
    assert changed != stock
    with pytest.raises(make_patch.PatchRefused, match="hashes to"):
        make_patch.patched_source(changed, replacement)
    other_signature = replacement.replace("pcp_world_size: int = 1,", "pcp_world_size: int = 2,")
    with pytest.raises(make_patch.PatchRefused, match="signature"):
        make_patch.patched_source(stock, other_signature)
    new = make_patch.patched_source(stock, replacement)
    assert make_patch.STOCK_TODO in stock and make_patch.STOCK_TODO not in new
