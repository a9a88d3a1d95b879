"""The adapter's hot path: the inline pool read, its guards, and the cached
search parameters, each against vLLM's own method on real vLLM objects.

* ``python_search`` is ``pyspec.find_hit`` (every small mask);
* one-group and multi-group lookups read vLLM's hash map inline and return
  vLLM's answer, also when several blocks share a key (vLLM's own
  ``get_one_block`` answers those): with the python core through
  ``fast_search`` (the search with the read inlined), with any other core
  through the mask objects ``OneGroupMask`` / ``GroupsMask``;
* the inline read is not used, and ``get_cached_block`` answers instead,
  when its fingerprint is unknown, when the pool's probe is overridden
  (instance, subclass, class) or when a group id is not a plain 4-byte int;
  vLLM's own errors come out unchanged;
* the cached search parameters survive being emptied.
"""

import itertools
import logging
import random

import pytest

pytest.importorskip("vllm")

from conftest import CASE_COUNTS  # noqa: E402
from masks import random_alignment, random_mask, random_window  # noqa: E402
from vllm.v1.core.block_pool import BlockPool  # noqa: E402
from vllm.v1.core.kv_cache_utils import KVCacheBlock, make_block_hash_with_group_id  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager  # noqa: E402
from vllm_support import (  # noqa: E402, F401 (unpatched: autouse fixture)
    ORIGINAL_LOOKUP,
    assert_same_answer,
    build_planted_cache,
    count_get_cached_block,
    make_spec,
    split_mask_across_groups,
    unpatched,
)

import vllm_adapter  # noqa: E402
from pyspec import SearchParams, find_hit  # noqa: E402
from vllm_adapter import Mode, fingerprint, patch, swa_lookup  # noqa: E402


def _vllm(**args):
    return ORIGINAL_LOOKUP.__get__(None, SlidingWindowManager)(**args)


def _ours(**args):
    return SlidingWindowManager.find_longest_cache_hit(**args)


@pytest.fixture
def masks_built(monkeypatch) -> dict[str, int]:
    """Count which mask class each lookup builds, and the lookups answered
    by fast_search (``fast_one`` / ``fast_groups``); the adapter looks all
    of them up in its module at call time."""
    built = {"one": 0, "groups": 0, "pool": 0, "fast_one": 0, "fast_groups": 0}
    fast_one, fast_groups = swa_lookup.find_hit_one_group, swa_lookup.find_hit_groups

    def counting_one(*args):
        built["fast_one"] += 1
        return fast_one(*args)

    def counting_groups(*args):
        built["fast_groups"] += 1
        return fast_groups(*args)

    class One(swa_lookup.OneGroupMask):
        __slots__ = ()

        def __init__(self, *args) -> None:
            built["one"] += 1
            super().__init__(*args)

    class Groups(swa_lookup.GroupsMask):
        __slots__ = ()

        def __init__(self, *args) -> None:
            built["groups"] += 1
            super().__init__(*args)

    class Pool(swa_lookup.PoolMask):
        __slots__ = ()

        def __init__(self, *args) -> None:
            built["pool"] += 1
            super().__init__(*args)

    monkeypatch.setattr(swa_lookup, "OneGroupMask", One)
    monkeypatch.setattr(swa_lookup, "GroupsMask", Groups)
    monkeypatch.setattr(swa_lookup, "PoolMask", Pool)
    monkeypatch.setattr(swa_lookup, "find_hit_one_group", counting_one)
    monkeypatch.setattr(swa_lookup, "find_hit_groups", counting_groups)
    return built


@pytest.fixture(params=["fast", "mask"])
def inline_path(request, monkeypatch) -> str:
    """``fast``: the python core, answered by fast_search; ``mask``: the
    same search behind another name, so the adapter probes through the mask
    objects (as it does for the native core)."""
    if request.param == "mask":
        def wrapped(cached, params):
            return swa_lookup.python_search(cached, params)

        monkeypatch.setattr(patch, "_choose_search", lambda: (wrapped, "python"))
    return request.param


def _assert_inline_path(built: dict[str, int], path: str) -> None:
    """Both one- and several-group lookups took ``path``'s inline read."""
    assert built["pool"] == 0
    if path == "fast":
        assert built["fast_one"] > 0 and built["fast_groups"] > 0
        assert built["one"] == built["groups"] == 0
    else:
        assert built["one"] > 0 and built["groups"] > 0
        assert built["fast_one"] == built["fast_groups"] == 0


def _assert_no_inline_read(built: dict[str, int]) -> None:
    assert built["one"] == built["groups"] == 0
    assert built["fast_one"] == built["fast_groups"] == 0


def _lookups(rng: random.Random, cases: int, duplicates: float = 0.0,
             max_groups: int = 3) -> int:
    """``cases`` random lookups, ours vs vLLM's. With ``duplicates`` > 0,
    that share of planted keys gets a second block (vLLM keeps a dict under
    the key and answers its first block)."""
    done = 0
    while done < cases:
        block_size = rng.choice((1, 4, 16, rng.randint(1, 32)))
        n = rng.choice((rng.randint(0, 40), rng.randint(0, 400)))
        group_ids = rng.sample(range(5), rng.randint(1, max_groups))
        shape_need = rng.choice((rng.randint(0, 8), rng.randint(0, 60)))
        masks = split_mask_across_groups(
            random_mask(rng, n, shape_need), group_ids, rng, partial_prob=0.3)
        cache = build_planted_cache(masks, block_size, salt=rng.randbytes(8))
        pool = cache.block_pool
        if duplicates:
            # Second blocks come from another pool: distinct objects, so an
            # identity check tells which one a lookup returned.
            extra = iter(BlockPool(num_gpu_blocks=len(cache.planted) + 1, enable_caching=True,
                                   hash_block_size=block_size).blocks[1:])
            for i, g in list(cache.planted):
                if rng.random() < duplicates:
                    pool.cached_block_hash_to_block.insert(
                        make_block_hash_with_group_id(cache.block_hashes[i], g), next(extra))
        for _ in range(min(50, cases - done)):
            need = rng.choice((shape_need, rng.randint(0, 60)))
            args = dict(
                block_hashes=cache.block_hashes,
                max_length=rng.randint(0, n * block_size + block_size - 1),
                kv_cache_group_ids=rng.sample(group_ids, rng.randint(1, len(group_ids))),
                block_pool=pool,
                kv_cache_spec=make_spec(block_size, random_window(rng, block_size, need)),
                drop_eagle_block=rng.random() < 0.5,
                alignment_tokens=random_alignment(rng, block_size),
            )
            assert_same_answer(_ours(**args), _vllm(**args),
                         {k: v for k, v in args.items() if k != "block_hashes"})
            done += 1
    return done


def test_python_search_is_pyspec_find_hit() -> None:
    """Every mask of up to 9 blocks, every need/period/EAGLE in range."""
    checked = 0
    for n in range(10):
        for bits in itertools.product((False, True), repeat=n):
            for need, period, eagle in itertools.product(range(1, 6), range(1, 4), (False, True)):
                params = SearchParams(n=n, need=need, period=period, eagle=eagle)
                hit = find_hit(bits, params)
                assert swa_lookup.python_search(bits, params) == (hit.length, hit.first_real)
                checked += 1
    CASE_COUNTS["hot path: python_search = pyspec.find_hit"] += checked


def test_inline_read_serves_one_and_many_groups(masks_built, inline_path) -> None:
    assert vllm_adapter.install(Mode.ON)
    done = _lookups(random.Random(3), 6000)
    _assert_inline_path(masks_built, inline_path)
    CASE_COUNTS[f"hot path: inline read vs vLLM ({inline_path})"] += done


def test_inline_read_with_several_blocks_under_a_key(masks_built, inline_path) -> None:
    """vLLM's map holds a dict under a key cached twice; the inline read
    hands those to vLLM's own get_one_block and must pick the same block."""
    assert vllm_adapter.install(Mode.ON)
    done = _lookups(random.Random(5), 3000, duplicates=0.4)
    _assert_inline_path(masks_built, inline_path)
    CASE_COUNTS[f"hot path: inline read, duplicate keys ({inline_path})"] += done


def test_an_error_in_fast_search_goes_to_vllm(monkeypatch, caplog) -> None:
    """A failure inside the specialization is reported and vLLM answers."""
    def broken(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(swa_lookup, "find_hit_one_group", broken)
    assert vllm_adapter.install(Mode.ON)
    args = _small_lookup()
    errors = vllm_adapter.stats().errors
    with caplog.at_level(logging.ERROR, logger="vllm_adapter"):
        assert_same_answer(_ours(**args), _vllm(**args), "fast_search raised")
    assert vllm_adapter.stats().errors == errors + 1


def test_unknown_pool_read_fingerprint_probes_through_vllm(monkeypatch, masks_built, caplog) -> None:
    version = fingerprint.installed_version()
    monkeypatch.setattr(fingerprint, "POOL_READ_FINGERPRINTS", {version: "0" * 64})
    with caplog.at_level(logging.INFO, logger="vllm_adapter"):
        assert vllm_adapter.install(Mode.ON)
    assert "probing through get_cached_block" in caplog.text
    done = _lookups(random.Random(9), 1500)
    _assert_no_inline_read(masks_built)
    assert masks_built["pool"] > 0
    CASE_COUNTS["hot path: generic probe (fingerprint mismatch)"] += done


def test_a_block_class_with_a_truth_value_disables_the_inline_read(monkeypatch, masks_built) -> None:
    """vLLM tests ``if not block``; the inline read assumes a stored block
    is true, so a KVCacheBlock that defines its truth value turns it off."""
    monkeypatch.setattr(KVCacheBlock, "__bool__", lambda self: True, raising=False)
    assert vllm_adapter.install(Mode.ON)
    _lookups(random.Random(13), 200)
    _assert_no_inline_read(masks_built)


def _small_lookup(group_ids=(0,), max_length=32) -> dict:
    cache = build_planted_cache({g: [True] * 8 for g in group_ids}, 4)
    return dict(
        block_hashes=cache.block_hashes, max_length=max_length,
        kv_cache_group_ids=list(group_ids), block_pool=cache.block_pool,
        kv_cache_spec=make_spec(4, 9), drop_eagle_block=False, alignment_tokens=4,
    )


def test_an_overridden_probe_is_called(monkeypatch, masks_built) -> None:
    """A wrapped or overridden get_cached_block (a test's counter, a
    subclass, a patched class) is called for every probe, as vLLM would."""
    assert vllm_adapter.install(Mode.ON)
    args = _small_lookup()
    with count_get_cached_block(args["block_pool"]) as ours_count:
        ours = _ours(**args)
    with count_get_cached_block(args["block_pool"]) as vllm_count:
        theirs = _vllm(**args)
    assert_same_answer(ours, theirs, "instance override")
    assert ours_count[0] > 0 and vllm_count[0] > 0
    assert masks_built["pool"] == 1
    _assert_no_inline_read(masks_built)

    class NothingCached(BlockPool):
        def get_cached_block(self, block_hash, kv_cache_group_ids):
            return None

    pool = NothingCached(num_gpu_blocks=4, enable_caching=True, hash_block_size=4)
    odd = dict(args, block_pool=pool)
    assert_same_answer(_ours(**odd), _vllm(**odd), "subclass override")
    assert _ours(**odd)[1] == 0

    calls = []
    real = BlockPool.get_cached_block

    def spy(self, block_hash, kv_cache_group_ids):
        calls.append(block_hash)
        return real(self, block_hash, kv_cache_group_ids)

    monkeypatch.setattr(BlockPool, "get_cached_block", spy)
    assert_same_answer(_ours(**args), _vllm(**args), "class patch")
    assert calls
    _assert_no_inline_read(masks_built)


@pytest.mark.parametrize("group_id", [-1, 1 << 32, True, 1.0])
def test_odd_group_ids_go_through_vllms_probe(group_id, masks_built) -> None:
    """Only a plain int in [0, 2**32) is encoded inline; anything else is
    probed by vLLM's own code, which raises (or not) as vLLM does."""
    assert vllm_adapter.install(Mode.ON)
    args = dict(_small_lookup(), kv_cache_group_ids=[group_id])
    try:
        theirs = _vllm(**args)
    except Exception as exc:
        with pytest.raises(type(exc)):
            _ours(**args)
    else:
        assert_same_answer(_ours(**args), theirs, group_id)
    _assert_no_inline_read(masks_built)
    empty = dict(args, max_length=0)  # no probe at all: no error either
    assert_same_answer(_ours(**empty), _vllm(**empty), group_id)


def test_params_cache_survives_being_emptied(monkeypatch) -> None:
    monkeypatch.setattr(swa_lookup, "_PARAMS_CACHE_LIMIT", 3)
    assert vllm_adapter.install(Mode.ON)
    rng = random.Random(17)
    cache = build_planted_cache({0: [rng.random() < 0.7 for _ in range(64)]}, 4)
    for _ in range(300):
        args = dict(
            block_hashes=cache.block_hashes, max_length=rng.randint(0, 64 * 4),
            kv_cache_group_ids=[0], block_pool=cache.block_pool,
            kv_cache_spec=make_spec(4, rng.randint(0, 40)),
            drop_eagle_block=rng.random() < 0.5,
            alignment_tokens=rng.choice((4, 8, 2, 12)),
        )
        assert_same_answer(_ours(**args), _vllm(**args), args["max_length"])


def test_calls_are_counted_once_per_lookup() -> None:
    assert vllm_adapter.install(Mode.ON)
    before = vllm_adapter.stats().calls
    args = _small_lookup()
    for _ in range(5):
        _ours(**args)
    assert vllm_adapter.stats().calls == before + 5
