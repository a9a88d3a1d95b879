"""The native full-attention lookup against vLLM's own
``FullAttentionManager.find_longest_cache_hit`` on a real ``BlockPool``.

With the plugin installed (native core), ``FullAttentionManager.
find_longest_cache_hit`` is the extension's ``Lookup`` of kind
``full_attention``: the proved ``full_hit_probe`` with the pool probe and
vLLM's lists in C. Every answer must be vLLM's: the same token count and,
per group, the very same block objects, with the path asserted taken (the
extension answered, nothing delegated). The pools are the ones
tests/test_full_attention.py builds (``Case``: coarse blocks under the
block-size view's hashes, fine partial tails under the raw hashes, 1-3
groups, fine-grained and plain, EAGLE, alignment other than the block).

Also: subclasses that inherit the method (``RSWAManager``) are served the
same way; inputs the extension does not model (DCP > 1, a patched probe)
get vLLM's own answer through vLLM's own method; the python core leaves
vLLM's full-attention lookup alone; no reference leaks.
"""

from __future__ import annotations

import os
import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("vllm")

from conftest import CASE_COUNTS, cpu_has_avx2  # noqa: E402
from test_full_attention import (  # noqa: E402
    EXHAUSTIVE_CONFIGS,
    ORIGINAL_FULL_LOOKUP,
    Case,
    full_block_masks,
    random_combined,
    random_config,
    view_scale,
)
from vllm.v1.core.single_type_kv_cache_manager import (  # noqa: E402
    FullAttentionManager,
    RSWAManager,
)
from vllm_support import (  # noqa: E402, F401 (unpatched: autouse fixture)
    assert_same_answer,
    count_native,
    unpatched,
)

from swa_prefix_cache import vllm_adapter  # noqa: E402
from swa_prefix_cache.vllm_adapter import Mode  # noqa: E402

VLLM = ORIGINAL_FULL_LOOKUP.__get__(None, FullAttentionManager)
# Smaller counts for the sanitizer run (make ffi-test-asan).
QUICK = os.environ.get("PREFIX_CACHE_GLUE_QUICK") == "1"


def _args(case: Case, max_length: int, eagle: bool) -> dict:
    return dict(
        block_hashes=list(case.hashes),
        max_length=max_length,
        kv_cache_group_ids=list(case.group_ids),
        block_pool=case.cache.block_pool,
        kv_cache_spec=case.spec,
        drop_eagle_block=eagle,
        alignment_tokens=case.alignment_tokens,
    )


@pytest.fixture
def native(monkeypatch) -> None:
    monkeypatch.setenv(vllm_adapter.CORE_ENV, "native")
    assert vllm_adapter.install(Mode.ON)
    status = vllm_adapter.status()
    assert status["backend"] == "native"
    assert status["full_attention"]["installed"], status["full_attention"]
    assert "find_longest_cache_hit" in FullAttentionManager.__dict__
    assert FullAttentionManager.__dict__["find_longest_cache_hit"] is not ORIGINAL_FULL_LOOKUP


def _same(case: Case, max_length: int, eagle: bool, manager: type = FullAttentionManager) -> None:
    args = _args(case, max_length, eagle)
    ours = manager.find_longest_cache_hit(**args)
    theirs = ORIGINAL_FULL_LOOKUP.__get__(None, manager)(**args)
    assert_same_answer(ours, theirs, (case.block_size, case.hash_block_size,
                                      case.alignment_tokens, case.cached, case.fine,
                                      max_length, eagle))


def test_exhaustive_small_answered_in_c(native) -> None:
    """Every config of test_full_attention's exhaustive list, every mask of
    up to 5 full blocks and every interior mask, max_length up to one block
    past the hashes, EAGLE on and off: vLLM's answer, answered in C."""
    count = 0
    with count_native() as path:
        for block_size, hash_block_size, alignment, _ in EXHAUSTIVE_CONFIGS:
            s = view_scale(block_size, hash_block_size, alignment)
            fine = alignment < block_size and block_size % alignment == 0
            interiors = ([tuple(bool(b >> k & 1) for k in range(s - 1)) for b in range(2 ** (s - 1))]
                         if fine else [(True,) * (s - 1)])
            for nblocks in range(4 if QUICK else 6):
                for bits in full_block_masks(nblocks):
                    for interior in interiors[:16]:
                        mask: list[bool] = []
                        for b in list(bits) + [None]:
                            mask.extend(interior)
                            if b is not None:
                                mask.append(b)
                        mask = mask[: nblocks * s + (s - 1)]
                        case = Case({0: mask}, block_size, hash_block_size, alignment)
                        for max_length in range(0, (nblocks + 1) * block_size + 2):
                            for eagle in (False, True):
                                _same(case, max_length, eagle)
                                count += 1
    assert path["native"] == count and path["delegated"] == 0, (path, count)
    CASE_COUNTS["full attention, native vs vLLM, exhaustive"] += count


def test_random_answered_in_c(native) -> None:
    """Random pools up to 2,000 hashes, 1-3 groups (a hash in only some
    groups is a miss), fine-grained scales 2-16, plain, coarser and odd
    alignments, EAGLE."""
    rng = random.Random(20261201)
    count = 0
    with count_native() as path:
        for trial in range(100 if QUICK else 400):
            bs, hbs, align = random_config(rng)
            s = view_scale(bs, hbs, align)
            length = rng.randrange(0, (2000 if trial % 4 == 0 else 80) + 1)
            combined = random_combined(rng, length, s)
            groups = sorted(rng.sample(range(4), rng.randint(1, 3)))
            masks: dict[int, list[bool]] = {g: [] for g in groups}
            for hit in combined:
                present = set(groups) if hit else {g for g in groups if rng.random() < 0.5}
                if not hit and present == set(groups):
                    present.discard(groups[0])
                for g in groups:
                    masks[g].append(g in present)
            case = Case(masks, bs, hbs, align, salt=trial.to_bytes(4, "big"))
            tokens = length * hbs
            for _ in range(4):
                max_length = rng.choice(
                    (tokens, tokens + bs, max(tokens - 1, 0), rng.randrange(tokens + 2 * bs + 1))
                )
                _same(case, max_length, rng.random() < 0.5)
                count += 1
    assert path["native"] == count and path["delegated"] == 0, (path, count)
    CASE_COUNTS["full attention, native vs vLLM, random"] += count


def test_inherited_by_subclasses(native) -> None:
    """RSWAManager inherits vLLM's method; ours serves it the same way."""
    assert "find_longest_cache_hit" not in RSWAManager.__dict__
    case = Case({0: [True] * 12 + [False] + [True] * 3}, 4, 2, 2)
    with count_native() as path:
        for max_length in range(0, 40, 3):
            _same(case, max_length, max_length % 2 == 0, manager=RSWAManager)
    assert path["native"] > 0 and path["delegated"] == 0


def test_unmodelled_inputs_get_vllms_own_answer(native) -> None:
    """DCP > 1 (vLLM scales the block size) and a patched probe go to
    vLLM's own method: the same answer, nothing answered in C."""
    case = Case({0: [True] * 16, 1: [True] * 10 + [False] * 6}, 4, 4, 4)
    args = _args(case, 64, False)
    with count_native() as path:
        ours = FullAttentionManager.find_longest_cache_hit(**dict(args, dcp_world_size=2))
    assert_same_answer(ours, VLLM(**dict(args, dcp_world_size=2)), "dcp 2")
    assert path == {"native": 0, "delegated": 1}, path
    pool = case.cache.block_pool
    get_cached_block_own = pool.get_cached_block
    # An instance attribute shadows the class's: a wrapper, as a profiler's
    # (the very bound method put back on the instance calls the class's own).
    pool.get_cached_block = lambda *args, **kwargs: get_cached_block_own(*args, **kwargs)
    try:
        with count_native() as path:
            ours = FullAttentionManager.find_longest_cache_hit(**args)
        assert_same_answer(ours, VLLM(**args), "patched probe")
        assert path == {"native": 0, "delegated": 1}, path
    finally:
        del pool.get_cached_block


def test_python_core_leaves_vllms_full_lookup(monkeypatch) -> None:
    monkeypatch.setenv(vllm_adapter.CORE_ENV, "python")
    assert vllm_adapter.install(Mode.ON)
    assert FullAttentionManager.__dict__["find_longest_cache_hit"] is ORIGINAL_FULL_LOOKUP
    assert not vllm_adapter.status()["full_attention"]["installed"]


def test_shadow_compares_full_lookups(monkeypatch) -> None:
    monkeypatch.setenv(vllm_adapter.CORE_ENV, "native")
    assert vllm_adapter.install(Mode.SHADOW)
    before = vllm_adapter.stats()
    compared, mismatches = before.shadow_compared, before.shadow_mismatches
    case = Case({0: [True] * 20 + [False] * 4, 2: [True] * 24}, 8, 2, 2)
    for max_length in range(0, 60, 5):
        args = _args(case, max_length, max_length % 3 == 0)
        assert_same_answer(FullAttentionManager.find_longest_cache_hit(**args), VLLM(**args), "")
    assert vllm_adapter.stats().shadow_compared - compared == 12
    assert vllm_adapter.stats().shadow_mismatches == mismatches


def test_no_reference_leak(native) -> None:
    """Many lookups (hits, partial tails, misses, several groups): every
    planted block's and the null block's reference count unchanged."""
    rng = random.Random(5)
    cases = [
        Case({0: [True] * 40}, 4, 2, 2),
        Case({0: [True] * 30 + [False] * 10, 1: [True] * 40}, 8, 2, 2),
        Case({0: [True] * 16}, 4, 4, 4),
        Case({0: [rng.random() < 0.8 for _ in range(48)]}, 16, 4, 4),
    ]
    calls = [(case, rng.randrange(0, 200), rng.random() < 0.5) for case in cases for _ in range(8)]
    for case, max_length, eagle in calls:  # warm up every path once
        _same(case, max_length, eagle)
    blocks = [b for case in cases for b in case.cache.planted.values()]
    nulls = [case.cache.block_pool.null_block for case in cases]
    before = [sys.getrefcount(b) for b in blocks + nulls]
    for _ in range(200 if QUICK else 1000):
        for case, max_length, eagle in calls:
            FullAttentionManager.find_longest_cache_hit(**_args(case, max_length, eagle))
    assert [sys.getrefcount(b) for b in blocks + nulls] == before
    CASE_COUNTS["full attention, native lookups without a leak"] += (200 if QUICK else 1000) * len(calls)


@pytest.mark.parametrize("ahead", [False, True])
def test_read_ahead_changes_no_answer(native, ahead) -> None:
    """The pool probe's read-ahead (prefetches, and key hashes kept for the
    reads ahead; swa_prefix_cache/core/glue/hotpath_pool.c) changes the time only: long
    cached runs read with it off and on give vLLM's answer, answered in C.
    On CPython 3.11-3.13 its dict-layout self-test passes, so it is on by
    default; elsewhere it is off and asking for it reports off."""
    from swa_prefix_cache.core import hotpath

    module = hotpath.load()
    was_on = module.read_ahead(True)
    assert was_on == (sys.version_info[:2] in READ_AHEAD_VERSIONS), was_on
    module.read_ahead(ahead)
    try:
        rng = random.Random(20261202)
        count = 0
        with count_native() as path:
            for trial in range(6 if QUICK else 24):
                length = rng.randrange(200, 3000)
                # Mostly cached, a few misses: long consecutive runs.
                combined = [rng.random() < 0.995 for _ in range(length)]
                groups = [0] if trial % 3 else sorted(rng.sample(range(4), 2))
                masks = {g: list(combined) for g in groups}
                case = Case(masks, 16, 16, 16, salt=trial.to_bytes(4, "big"))
                for max_length in (length * 16, rng.randrange(length * 16 + 1)):
                    _same(case, max_length, rng.random() < 0.5)
                    count += 1
        assert path["native"] == count and path["delegated"] == 0, (path, count)
    finally:
        module.read_ahead(was_on)
    CASE_COUNTS[f"full attention, native vs vLLM, read-ahead {'on' if ahead else 'off'}"] += count



# The CPythons whose dict layout (and hash of bytes) the read-ahead reads
# (swa_prefix_cache/core/glue/hotpath_dict.h); compiled out elsewhere.
READ_AHEAD_VERSIONS = ((3, 11), (3, 12), (3, 13))


@settings(max_examples=300 if not QUICK else 60, deadline=None)
@given(length=st.integers(1, 64), count=st.integers(0, 40), seed=st.integers(0, 2**32 - 1))
def test_read_ahead_hashes_keys_as_cpython_does(length: int, count: int, seed: int) -> None:
    """The read-ahead hashes its keys itself, eight at a time in AVX2
    registers (swa_prefix_cache/core/glue/hotpath_siphash.h), where its import self-test
    passes: on CPython 3.11-3.13 on an x86-64 CPU with AVX2 (this machine
    and CI's) it must be in use, and every hash it gives must be
    ``hash(key)``, for every key length it takes (the rest of a batch, not
    a multiple of eight, is hashed by CPython's ``_Py_HashBytes``). A wrong
    hash would only make the read-ahead find nothing (then CPython's read
    answers), so this is what keeps it fast, not correct."""
    from swa_prefix_cache.core import hotpath

    module = hotpath.load()
    rng = random.Random(seed)
    keys = [rng.randbytes(length) for _ in range(count)]
    got = module.key_hashes(keys)
    in_use = sys.version_info[:2] in READ_AHEAD_VERSIONS and cpu_has_avx2()
    if os.uname().machine != "x86_64":
        in_use = False
    assert (got is not None) == in_use, (got is not None, in_use)
    if got is not None:
        assert got == [hash(k) for k in keys]


@pytest.mark.parametrize("keys, error", [
    ((b"ab",), TypeError),
    ([b"ab", "cd"], TypeError),
    ([b"ab", bytearray(b"cd")], TypeError),
    ([b"ab", b"c"], ValueError),
    ([b""], ValueError),
    ([bytes(65)], ValueError),
])
def test_key_hashes_rejects_bad_input(keys, error) -> None:
    """Bad input to the test hook is a clear error, never a crash."""
    from swa_prefix_cache.core import hotpath

    module = hotpath.load()
    if module.key_hashes([b"x"]) is None:
        pytest.skip("the read-ahead leaves its hashes to CPython here")
    with pytest.raises(error, match="keys"):
        module.key_hashes(keys)


class _OtherId(int):
    """A block id stored as an int subclass (the id layout, vLLM 0.34+):
    the read-ahead leaves it to vLLM's get_one_block."""


class _OtherBytes(bytes):
    """A stored key CPython's dict finds for equal bytes (same hash, equal);
    not exactly bytes, so the read-ahead leaves it to CPython."""


class _Unequal(bytes):
    """A stored key with the bytes and hash of a key that CPython's dict
    does not find: it is never equal."""

    __hash__ = bytes.__hash__

    def __eq__(self, other: object) -> bool:
        return False


class _Spoof(bytes):
    """A stored key of other bytes with the hash of a key: CPython's dict
    compares it and does not find the key."""

    def __new__(cls, content: bytes, spoofed: int) -> "_Spoof":
        self = super().__new__(cls, content)
        self.spoofed = spoofed
        return self

    def __hash__(self) -> int:
        return self.spoofed

    __eq__ = bytes.__eq__


@pytest.mark.parametrize("trial", range(4))
def test_read_ahead_leaves_what_it_cannot_certify_to_cpython(native, trial) -> None:
    """The read-ahead certifies a block only from an entry whose key is
    exactly bytes equal to the key and whose value is exactly vLLM's block
    class (swa_prefix_cache/core/glue/hotpath_pool.c, pool_batch). Long cached runs with,
    mid-run, what it must leave to CPython's own read: a key stored as a
    bytes subclass (a hit for CPython), or as one never equal (a miss), a
    stored key of other bytes under the key's hash (a miss), several blocks
    under one key (vLLM's get_one_block), a hash of another length in the
    request, deleted entries (dummy slots on probe sequences) and a block
    evicted: every answer is vLLM's, answered in C."""
    from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id

    rng = random.Random(20261203 + trial)
    count = 0
    with count_native() as path:
        for _ in range(3 if QUICK else 8):
            length = rng.randrange(60, 400)
            groups = [0] if trial % 2 == 0 else [0, 2]
            case = Case({g: [True] * length for g in groups}, 16, 16, 16,
                        salt=bytes([trial, rng.randrange(256)]))
            hashes = list(case.hashes)
            cache = case.cache.block_pool.cached_block_hash_to_block._cache
            for _ in range(6):
                at = rng.randrange(length)
                key = make_block_hash_with_group_id(hashes[at], rng.choice(groups))
                kind = rng.randrange(7)
                if kind == 0 and key in cache:  # the same key, stored as a subclass
                    cache[_OtherBytes(key)] = cache.pop(key)
                elif kind == 5 and key in cache:  # stored, never equal
                    cache[_Unequal(key)] = cache.pop(key)
                elif kind == 6 and key in cache:  # other bytes under its hash
                    cache[_Spoof(rng.randbytes(len(key)), hash(key))] = cache.pop(key)
                elif kind == 1 and key in cache:  # several blocks under the key
                    block = cache[key]
                    if type(block) is int:  # the id layout: an id that is not exactly int
                        cache[key] = _OtherId(block)
                    elif not isinstance(block, dict):
                        cache[key] = {block.block_id: block}
                elif kind == 2:  # a hash of another length, cached
                    longer = hashes[at] + b"+"
                    if key in cache:
                        for g in groups:
                            old = cache.get(make_block_hash_with_group_id(hashes[at], g))
                            if old is not None:
                                cache[make_block_hash_with_group_id(longer, g)] = old
                    hashes[at] = longer
                elif kind == 3:  # entries put in and deleted: dummy slots
                    others = [rng.randbytes(36) for _ in range(rng.randrange(1, 60))]
                    for other in others:
                        cache[other] = None
                    for other in others:
                        del cache[other]
                elif key in cache and rng.random() < 0.3:  # evicted
                    del cache[key]
            for max_length in (length * 16, rng.randrange(1, length * 16 + 1)):
                args = {**_args(case, max_length, rng.random() < 0.5), "block_hashes": hashes}
                want = VLLM(**args)
                got = FullAttentionManager.find_longest_cache_hit(**args)
                assert_same_answer(got, want, (trial, length, max_length))
                count += 1
    assert path["native"] == count and path["delegated"] == 0, (path, count)
    CASE_COUNTS["full attention, native vs vLLM, read-ahead over odd entries"] += count


class _Coarse(FullAttentionManager):
    """Inherits vLLM's lookup but not its fine-grained hash mode, which
    vLLM's method reads as ``cls.supports_fine_grained_hash_lookup``."""

    supports_fine_grained_hash_lookup = False


def test_a_subclass_gets_the_answer_vllm_gives_it(native, monkeypatch) -> None:
    """On an input where the two classes part (fine-grained alignment: the
    base class answers, vLLM's method rejects it for ``_Coarse``), a call
    on the subclass gets what vLLM gives the subclass, natively and in
    shadow mode (where vLLM's own answer is served)."""
    case = Case({0: [True] * 24}, 8, 2, 2)
    args = _args(case, 46, False)
    assert VLLM(**args)[1] > 0
    with pytest.raises(AssertionError):
        ORIGINAL_FULL_LOOKUP.__get__(None, _Coarse)(**args)
    with pytest.raises(AssertionError):
        _Coarse.find_longest_cache_hit(**args)
    monkeypatch.setenv(vllm_adapter.CORE_ENV, "native")
    assert vllm_adapter.install(Mode.SHADOW)
    with pytest.raises(AssertionError):
        _Coarse.find_longest_cache_hit(**args)
    _same(case, 46, False)
