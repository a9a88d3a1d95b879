"""The adapter's hot path, both cores, against vLLM's own method on real
vLLM objects: the inline pool read, its guards, its error path, and the
cached search parameters.

* ``python_search`` is ``swa_prefix_cache.pyspec.find_hit`` (every small mask);
* one-group and multi-group lookups read vLLM's hash map inline and return
  vLLM's answer, also when several blocks share a key (vLLM's own
  ``get_one_block`` answers those): with the native core in C (the
  extension ``swa_prefix_cache.core._hotpath``, nothing delegated), with the python
  core through the mask objects ``OneGroupMask`` / ``GroupsMask``;
* the inline read is not used when its fingerprint is unknown, when the
  pool's probe, the map's read or vLLM's key function is overridden, when a
  group id is not a plain 4-byte int or a hash not exactly bytes, or when
  vLLM's block class has a truth value: the native core hands those calls
  to the Python lookup (``delegated``), which probes through
  ``get_cached_block``; vLLM's answers and errors come out unchanged;
* a failure inside our lookup is reported once and vLLM's method answers;
* the cached search parameters survive being emptied.
"""

import collections
import inspect
import itertools
import logging
import random
import sys

import pytest

pytest.importorskip("vllm")

from conftest import CASE_COUNTS, require_hotpath  # noqa: E402
from masks import random_alignment, random_mask, random_window  # noqa: E402
from vllm.v1.core import block_pool as block_pool_module  # noqa: E402
from vllm.v1.core.block_pool import BlockHashToBlockMap, BlockPool  # noqa: E402
from vllm.v1.core.kv_cache_utils import KVCacheBlock, make_block_hash_with_group_id  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager  # noqa: E402
from vllm_support import (  # noqa: E402, F401 (unpatched: autouse fixture)
    ORIGINAL_LOOKUP,
    REFUSALS,
    assert_same_answer,
    build_planted_cache,
    count_get_cached_block,
    count_native,
    lookup_outcome,
    make_spec,
    split_mask_across_groups,
    unpatched,
)

from swa_prefix_cache import vllm_adapter  # noqa: E402
from swa_prefix_cache.pyspec import SearchParams, find_hit  # noqa: E402
from swa_prefix_cache.vllm_adapter import Mode, fingerprint, patch, swa_lookup  # noqa: E402

CORES = ("native", "python")


def _vllm(**args):
    return ORIGINAL_LOOKUP.__get__(None, SlidingWindowManager)(**args)


def _ours(**args):
    return SlidingWindowManager.find_longest_cache_hit(**args)


@pytest.fixture(params=CORES)
def core(request, monkeypatch) -> str:
    """The core ``swa_prefix_cache.vllm_adapter.install()`` is asked for; each test installs
    after its own patches (some of them are read at install time)."""
    if request.param == "native":
        require_hotpath()
    monkeypatch.setenv(vllm_adapter.CORE_ENV, request.param)
    return request.param


def _install(core: str) -> None:
    assert vllm_adapter.install(Mode.ON)
    assert vllm_adapter.status()["backend"] == core


@pytest.fixture
def masks_built(monkeypatch) -> dict[str, int]:
    """Count which mask class each Python lookup builds; the lookup finds
    them in its module at call time."""
    built = {"one": 0, "groups": 0, "pool": 0}

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

    class OneIds(swa_lookup.OneGroupIdMask):
        __slots__ = ()

        def __init__(self, *args) -> None:
            built["one"] += 1
            super().__init__(*args)

    class GroupsIds(swa_lookup.GroupsIdMask):
        __slots__ = ()

        def __init__(self, *args) -> None:
            built["groups"] += 1
            super().__init__(*args)

    monkeypatch.setattr(swa_lookup, "OneGroupMask", One)
    monkeypatch.setattr(swa_lookup, "GroupsMask", Groups)
    monkeypatch.setattr(swa_lookup, "OneGroupIdMask", OneIds)
    monkeypatch.setattr(swa_lookup, "GroupsIdMask", GroupsIds)
    monkeypatch.setattr(swa_lookup, "PoolMask", Pool)
    return built


def _assert_inline_path(core: str, built: dict[str, int], path: dict[str, int]) -> None:
    """One- and several-group lookups took ``core``'s inline read: in C
    with nothing delegated, or through the mask objects."""
    assert built["pool"] == 0, built
    if core == "native":
        assert path["native"] > 0 and path["delegated"] == 0, path
        assert built["one"] == built["groups"] == 0, built
    else:
        assert path == {"native": 0, "delegated": 0}, path
        assert built["one"] > 0 and built["groups"] > 0, built


def _assert_refused(core: str, built: dict[str, int], path: dict[str, int]) -> None:
    """The inline read was not used: the native core delegated every call,
    and no Python lookup read the hash map directly."""
    if core == "native":
        assert path["native"] == 0 and path["delegated"] > 0, path
    else:
        assert path == {"native": 0, "delegated": 0}, path
    assert built["one"] == built["groups"] == 0, built


def _lookups(rng: random.Random, cases: int, duplicates: float = 0.0,
             max_groups: int = 3) -> int:
    """``cases`` random lookups, ours vs vLLM's. With ``duplicates`` > 0,
    that share of planted keys gets a second block (vLLM keeps a dict under
    the key and answers its first block). Returns the number vLLM answered
    (the others it refused, and so must the plugin: ``lookup_outcome``)."""
    done = 0
    refused_before = REFUSALS[0]
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
            _add_second_blocks(rng, cache, duplicates)
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
            assert_same_answer(lookup_outcome(_ours, **args), lookup_outcome(_vllm, **args),
                               {k: v for k, v in args.items() if k != "block_hashes"})
            done += 1
    refused = (REFUSALS[0] - refused_before) // 2  # once for vLLM, once for ours
    assert refused <= done // 2, f"vLLM refused {refused} of {done} lookups"
    return done - refused


def _add_second_blocks(rng: random.Random, cache, share: float) -> None:
    """Insert a second block under ``share`` of the planted keys. The second
    blocks come from another pool: distinct objects, so an identity check
    tells which one a lookup returned."""
    extra = iter(BlockPool(num_gpu_blocks=len(cache.planted) + 1, enable_caching=True,
                           hash_block_size=cache.block_pool.hash_block_size).blocks[1:])
    for i, g in list(cache.planted):
        if rng.random() < share:
            cache.block_pool.cached_block_hash_to_block.insert(
                make_block_hash_with_group_id(cache.block_hashes[i], g), next(extra))


def _small_lookup(group_ids=(0,), max_length=32) -> dict:
    cache = build_planted_cache({g: [True] * 8 for g in group_ids}, 4)
    return dict(
        block_hashes=cache.block_hashes, max_length=max_length,
        kv_cache_group_ids=list(group_ids), block_pool=cache.block_pool,
        kv_cache_spec=make_spec(4, 9), drop_eagle_block=False, alignment_tokens=4,
    )


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
    CASE_COUNTS["hot path: python_search = swa_prefix_cache.pyspec.find_hit"] += checked


def test_inline_read_serves_one_and_many_groups(core, masks_built) -> None:
    _install(core)
    with count_native() as path:
        done = _lookups(random.Random(3), 6000)
    _assert_inline_path(core, masks_built, path)
    CASE_COUNTS[f"hot path: inline read vs vLLM ({core})"] += done


def test_inline_read_with_several_blocks_under_a_key(core, masks_built) -> None:
    """vLLM's map holds a dict under a key cached twice; the inline read
    hands those to vLLM's own get_one_block and must pick the same block
    (the native core still answers those calls itself)."""
    _install(core)
    with count_native() as path:
        done = _lookups(random.Random(5), 3000, duplicates=0.4)
    _assert_inline_path(core, masks_built, path)
    CASE_COUNTS[f"hot path: inline read, duplicate keys ({core})"] += done


class FlakyBlocks(dict):
    """What vLLM keeps under a key cached twice (a dict of blocks), whose
    ``values()`` raises the next ``failures`` times it is read: a failure
    inside our lookup on an input vLLM answers (it reads the key again)."""

    failures = 0

    def values(self):  # type: ignore[override]
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("injected failure in get_one_block")
        return super().values()


# vLLM 0.34+: the map's ``_cache`` holds block ids, the blocks are ``_blocks``.
ID_LAYOUT = "blocks" in inspect.signature(BlockHashToBlockMap.__init__).parameters


class FlakyId:
    """The id layout's ``FlakyBlocks``: a block id whose ``__index__`` (read
    by vLLM's ``_blocks[block_id]``) raises the next ``failures`` times, or
    ``error`` every time when it is set."""

    def __init__(self, block_id: int, error: type[BaseException] | None = None) -> None:
        self.block_id = block_id
        self.error = error
        self.failures = 0

    def __index__(self) -> int:
        if self.error is not None:
            raise self.error
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("injected failure in get_one_block")
        return self.block_id


def _cached_block(hash_map, key) -> KVCacheBlock:
    """The one block stored under ``key``, in either layout."""
    value = hash_map._cache[key]
    block = hash_map._blocks[value] if ID_LAYOUT else value
    assert type(block) is KVCacheBlock
    return block


def _plant_flaky(args: dict, index: int) -> FlakyBlocks | FlakyId:
    """Put the block planted at ``index`` (group 0) under its key again as
    a ``FlakyBlocks`` (a ``FlakyId`` in the id layout); vLLM's get_one_block
    answers that same block."""
    hash_map = args["block_pool"].cached_block_hash_to_block
    key = make_block_hash_with_group_id(args["block_hashes"][index], 0)
    block = _cached_block(hash_map, key)
    flaky: FlakyBlocks | FlakyId
    flaky = FlakyId(block.block_id) if ID_LAYOUT else FlakyBlocks({block.block_id: block})
    hash_map._cache[key] = flaky
    return flaky


def test_an_error_in_our_lookup_goes_to_vllm(core, monkeypatch, caplog) -> None:
    """A failure inside our lookup (here: vLLM's own get_one_block raising
    once) is told to on_error, logged once, and vLLM's method answers."""
    monkeypatch.setattr(patch._state, "stats", patch.Stats())  # errors from 0
    _install(core)
    args = _small_lookup()
    flaky = _plant_flaky(args, 7)  # the first block the search probes
    expected = _vllm(**args)
    assert expected[1] == 32
    with caplog.at_level(logging.ERROR, logger="swa_prefix_cache"), count_native() as path:
        for _ in range(3):
            flaky.failures = 1
            assert_same_answer(_ours(**args), expected, "get_one_block raised")
            assert flaky.failures == 0  # it did fail inside ours
    assert vllm_adapter.stats().errors == 3
    # Neither answered by the C search nor handed to the Python lookup.
    assert path == {"native": 0, "delegated": 0}, path
    assert caplog.text.count("lookup failed") == 1
    assert "injected failure in get_one_block" in caplog.text


class _WiderWindow(SlidingWindowManager):
    """Inherits vLLM's lookup, overrides the window rule it reads
    (``cls._contiguous_blocks_for_hit``): one more contiguous block."""

    @classmethod
    def _contiguous_blocks_for_hit(cls, window_size: int, block_size: int, use_eagle: bool) -> int:
        return super()._contiguous_blocks_for_hit(window_size, block_size, use_eagle) + 1


class _Inherits(SlidingWindowManager):
    """Inherits everything from vLLM's class."""


@pytest.mark.parametrize("mode", [Mode.ON, Mode.SHADOW])
def test_a_subclass_gets_the_answer_vllm_gives_it(core, mode) -> None:
    """A subclass with its own window rule gets vLLM's method's answer for
    that subclass (not the search's, which bakes in the base class's rule);
    one that inherits everything gets ours, which equals vLLM's. Calls on a
    subclass are not answered by the C search (``home``)."""
    assert vllm_adapter.install(mode)
    cache = build_planted_cache({0: [True] * 5 + [False] + [True] * 2}, 4)
    args = dict(
        block_hashes=cache.block_hashes, max_length=32, kv_cache_group_ids=[0],
        block_pool=cache.block_pool, kv_cache_spec=make_spec(4, 9), drop_eagle_block=False,
        alignment_tokens=4,
    )
    wider = ORIGINAL_LOOKUP.__get__(None, _WiderWindow)(**args)
    assert (_vllm(**args)[1], wider[1]) == (32, 20)  # the rules part here
    mismatches = vllm_adapter.stats().shadow_mismatches
    with count_native() as path:
        assert_same_answer(_WiderWindow.find_longest_cache_hit(**args), wider, "own window rule")
        assert_same_answer(_Inherits.find_longest_cache_hit(**args), _vllm(**args), "inherited")
    assert path["native"] == 0, path
    assert vllm_adapter.stats().shadow_mismatches == mismatches


class Untruthy:
    """A drop_eagle_block whose truth test raises (vLLM's first use of it)."""

    def __bool__(self) -> bool:
        raise ZeroDivisionError("no truth value")


def test_inputs_vllm_rejects_are_not_our_errors(core, monkeypatch) -> None:
    """An argument vLLM rejects while the lookup reads it (resolve's assert
    on a block size that is no multiple of the hash block size, a truth
    test that raises) gets vLLM's exception, and is not counted or logged
    as a failure of ours."""
    monkeypatch.setattr(patch._state, "stats", patch.Stats())
    _install(core)
    fine = build_planted_cache({0: [True] * 8}, 4, hash_block_size=2)
    rejected = [
        (dict(_small_lookup(), drop_eagle_block=Untruthy()), ZeroDivisionError),
        (dict(_small_lookup(), block_pool=fine.block_pool, kv_cache_spec=make_spec(5, 9)),
         AssertionError),
    ]
    for args, error in rejected:
        with pytest.raises(error):
            _vllm(**args)
        with pytest.raises(error):
            _ours(**args)
    assert vllm_adapter.stats().errors == 0


def test_keyboard_interrupt_is_not_swallowed(core, monkeypatch) -> None:
    """A KeyboardInterrupt inside the lookup propagates (it is no failure
    for vLLM's method to paper over), and is not counted as one."""
    monkeypatch.setattr(patch._state, "stats", patch.Stats())
    _install(core)
    args = _small_lookup()
    hash_map = args["block_pool"].cached_block_hash_to_block
    key = make_block_hash_with_group_id(args["block_hashes"][7], 0)

    class Interrupting(dict):
        def values(self):  # type: ignore[override]
            raise KeyboardInterrupt

    block = _cached_block(hash_map, key)
    hash_map._cache[key] = (FlakyId(block.block_id, KeyboardInterrupt) if ID_LAYOUT
                            else Interrupting({block.block_id: block}))
    with pytest.raises(KeyboardInterrupt):
        _ours(**args)
    assert vllm_adapter.stats().errors == 0


def test_unknown_pool_read_fingerprint_probes_through_vllm(
    core, monkeypatch, masks_built, caplog
) -> None:
    from swa_prefix_cache.vllm_adapter import known_sources

    monkeypatch.setitem(known_sources.VARIANTS, "pool_read", [])
    with caplog.at_level(logging.INFO, logger="swa_prefix_cache"):
        _install(core)
    assert "probing through get_cached_block" in caplog.text
    with count_native() as path:
        done = _lookups(random.Random(9), 1500)
    _assert_refused(core, masks_built, path)
    assert masks_built["pool"] > 0
    CASE_COUNTS[f"hot path: generic probe, fingerprint mismatch ({core})"] += done


def test_a_block_class_with_a_truth_value_disables_the_inline_read(
    core, monkeypatch, masks_built
) -> None:
    """vLLM tests ``if not block``; the inline read assumes a stored block
    is true, so a KVCacheBlock that defines its truth value turns it off."""
    monkeypatch.setattr(KVCacheBlock, "__bool__", lambda self: self.block_id % 3 != 0,
                        raising=False)
    _install(core)
    with count_native() as path:
        _lookups(random.Random(13), 300)
    _assert_refused(core, masks_built, path)
    assert masks_built["pool"] > 0


def test_an_overridden_probe_is_called(core, monkeypatch, masks_built) -> None:
    """A wrapped or overridden get_cached_block (a test's counter, a
    subclass, a patched class) is called for every probe, as vLLM would."""
    _install(core)
    args = _small_lookup()
    with count_native() as path:
        with count_get_cached_block(args["block_pool"]) as ours_count:
            ours = _ours(**args)
    with count_get_cached_block(args["block_pool"]) as vllm_count:
        theirs = _vllm(**args)
    assert_same_answer(ours, theirs, "instance override")
    assert ours_count[0] > 0 and vllm_count[0] > 0
    assert masks_built["pool"] == 1
    _assert_refused(core, masks_built, path)

    class NothingCached(BlockPool):
        def get_cached_block(self, block_hash, kv_cache_group_ids):
            return None

    pool = NothingCached(num_gpu_blocks=4, enable_caching=True, hash_block_size=4)
    odd = dict(args, block_pool=pool)
    with count_native() as path:
        ours = _ours(**odd)
    assert_same_answer(ours, _vllm(**odd), "subclass override")
    assert ours[1] == 0
    _assert_refused(core, masks_built, path)

    calls = []
    real = BlockPool.get_cached_block

    def spy(self, block_hash, kv_cache_group_ids):
        calls.append(block_hash)
        return real(self, block_hash, kv_cache_group_ids)

    monkeypatch.setattr(BlockPool, "get_cached_block", spy)
    with count_native() as path:
        ours = _ours(**args)
    assert calls
    assert_same_answer(ours, _vllm(**args), "class patch")
    _assert_refused(core, masks_built, path)


@pytest.mark.parametrize("where", ["instance", "class", "key function"])
def test_an_overridden_map_read_is_called(core, where, monkeypatch, masks_built) -> None:
    """A patched get_one_block (on the map or its class) or a replaced
    make_block_hash_with_group_id is what vLLM's probe calls; ours calls it
    too (through get_cached_block), and answers what vLLM answers with it."""
    _install(core)
    args = _small_lookup(group_ids=(0, 1))
    hash_map = args["block_pool"].cached_block_hash_to_block
    seen: list[bytes] = []
    if where == "key function":
        real_key = block_pool_module.make_block_hash_with_group_id

        def key(block_hash, group_id):
            seen.append(block_hash)
            return real_key(block_hash, group_id)

        monkeypatch.setattr(block_pool_module, "make_block_hash_with_group_id", key)
    else:
        real_read = BlockHashToBlockMap.get_one_block

        def read(self, key):
            seen.append(key)
            # Every other block reads as missing: the answer differs from
            # what the unpatched map would give.
            block = real_read(self, key)
            return block if block is not None and block.block_id % 2 else None

        if where == "class":
            monkeypatch.setattr(BlockHashToBlockMap, "get_one_block", read)
        else:
            hash_map.get_one_block = read.__get__(hash_map)
    with count_native() as path:
        ours = _ours(**args)
    assert seen
    assert_same_answer(ours, _vllm(**args), where)
    _assert_refused(core, masks_built, path)


@pytest.mark.parametrize("group_id", [-1, 1 << 32, True, 1.0])
def test_odd_group_ids_go_through_vllms_probe(core, group_id, masks_built) -> None:
    """Only a plain int in [0, 2**32) is encoded inline; anything else is
    probed by vLLM's own code, which raises (or not) as vLLM does."""
    _install(core)
    args = dict(_small_lookup(), kv_cache_group_ids=[group_id])
    with count_native() as path:
        try:
            theirs = _vllm(**args)
        except Exception as exc:
            with pytest.raises(type(exc)):
                _ours(**args)
        else:
            assert_same_answer(_ours(**args), theirs, group_id)
    _assert_refused(core, masks_built, path)
    empty = dict(args, max_length=0)  # no probe at all: no error either
    assert_same_answer(_ours(**empty), _vllm(**empty), group_id)


def test_group_ids_not_a_list_and_hashes_not_bytes(core, masks_built) -> None:
    """A tuple of group ids, and hashes of a bytes subclass whose ``+``
    builds another key, are outside the native core's model: delegated, and
    answered as vLLM answers them (the subclass makes vLLM miss)."""
    _install(core)
    args = _small_lookup(group_ids=(0, 1))

    class OtherKey(bytes):
        def __add__(self, other: bytes) -> bytes:
            return bytes(self) + b"!" + other

    cases = [
        dict(args, kv_cache_group_ids=(0, 1)),
        dict(args, block_hashes=[OtherKey(h) for h in args["block_hashes"]]),
    ]
    with count_native() as path:
        answers = [_ours(**case) for case in cases]
    for case, ours in zip(cases, answers):
        assert_same_answer(ours, _vllm(**case), type(case["kv_cache_group_ids"]))
    assert answers[0][1] == 32 and answers[1][1] == 0
    if core == "native":
        assert path == {"native": 0, "delegated": 2}, path


def test_params_cache_survives_being_emptied(monkeypatch) -> None:
    """The python core's SearchParams cache (the native core has none)."""
    monkeypatch.setenv(vllm_adapter.CORE_ENV, "python")
    monkeypatch.setattr(swa_lookup, "_PARAMS_CACHE_LIMIT", 3)
    _install("python")
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
        assert_same_answer(lookup_outcome(_ours, **args), lookup_outcome(_vllm, **args),
                           args["max_length"])


def test_calls_are_counted_once_per_lookup(core) -> None:
    _install(core)
    before = vllm_adapter.stats().calls
    args = _small_lookup()
    for _ in range(5):
        _ours(**args)
    _ours(**dict(args, kv_cache_group_ids=[True]))  # delegated: still one call
    assert vllm_adapter.stats().calls == before + 6


@pytest.mark.skipif(not ID_LAYOUT, reason="the map stores blocks, not ids (vLLM <= 0.33)")
def test_a_mutant_of_the_id_layout_read_is_caught(monkeypatch) -> None:
    """A planted mutant of the id layout's read (the last of ``_dup_ids``
    instead of ``_cache``'s id) makes the differential lookups disagree:
    they exercise the duplicates vLLM resolves through ``_cache``."""
    monkeypatch.setenv(vllm_adapter.CORE_ENV, "python")

    def last_dup(mask, key):
        dup_ids = mask._hash_map._dup_ids.get(key)
        block_id = mask._read(key)
        if block_id is None:
            return None
        return mask._blocks[list(dup_ids)[-1] if dup_ids else block_id]

    class OneMutant(swa_lookup.OneGroupIdMask):
        __slots__ = ()

        def __getitem__(self, i: int) -> bool:  # type: ignore[override]
            block = last_dup(self, self._hashes[i] + self._suffix)
            if block is None:
                return False
            self.found[i] = block
            return True

    class GroupsMutant(swa_lookup.GroupsIdMask):
        __slots__ = ()

        def __getitem__(self, i: int) -> bool:  # type: ignore[override]
            blocks = [last_dup(self, self._hashes[i] + suffix) for suffix in self._suffixes]
            if any(block is None for block in blocks):
                return False
            self.found[i] = blocks
            return True

    monkeypatch.setattr(swa_lookup, "OneGroupIdMask", OneMutant)
    monkeypatch.setattr(swa_lookup, "GroupsIdMask", GroupsMutant)
    _install("python")
    with pytest.raises(AssertionError):
        _lookups(random.Random(5), 3000, duplicates=0.4)


def test_the_native_read_calls_no_python(core, monkeypatch) -> None:
    """On either layout of the map (a block, or a block id), the native
    read answers plain entries itself: no call of vLLM's get_one_block or
    get_cached_block (a silent fall back to them would show here)."""
    if core != "native":
        pytest.skip("the Python core calls nothing either; the native read is the one checked")
    _install(core)
    calls = collections.Counter()

    def profile(frame, event, arg) -> None:
        if event == "call":
            calls[frame.f_code.co_name] += 1

    plain = _ours

    def profiled(**args):
        """Our lookup alone under the profiler (vLLM's own is the reference)."""
        sys.setprofile(profile)
        try:
            return plain(**args)
        finally:
            sys.setprofile(None)

    monkeypatch.setitem(globals(), "_ours", profiled)
    with count_native() as path:
        done = _lookups(random.Random(11), 400)
    assert done > 0 and path["native"] > 0 and path["delegated"] == 0, path
    assert calls["get_one_block"] == 0 and calls["get_cached_block"] == 0, calls
