"""``vllm_adapter.fast_search`` makes pyspec's probes, in pyspec's order.

The specialization inlines the pool read into a copy of pyspec's
``stride_search`` + ``prefix_fallback``; nothing proves the copy, so these
tests compare it with pyspec itself, probe by probe:

* every mask of up to 12 blocks x need -1 .. n + 1 (below 1 acts as 1, as
  in the adapter) x period 1-4 x EAGLE: the hit, the sequence of blocks read
  (recorded by the ``read`` the specialization is given, and by a recording
  mask given to pyspec) and the blocks returned for the hit;
* the several-group version on every mask of up to 10 blocks, split over
  two groups three ways (each group's reads recorded: vLLM's group order,
  stopping at the first group that misses);
* hypothesis: masks of up to 3,000 blocks, 1-3 groups, keys that hold
  something other than one block (answered by ``read_one``, sometimes
  falsy: a miss).

The adapter's use of it against vLLM's real method is in
tests/test_hot_path.py, tests/test_adapter.py and tests/test_coordinators.py.
"""

import itertools
import random
from collections.abc import Sequence
from typing import Any

import pytest
from conftest import CASE_COUNTS
from hypothesis import given, settings
from hypothesis import strategies as st
from masks import random_mask

from pyspec import SearchParams, find_hit
from vllm_adapter.fast_search import find_hit_groups, find_hit_one_group

MAX_BLOCKS = 12
MAX_GROUP_BLOCKS = 10
SUFFIXES = [g.to_bytes(4, "big") for g in range(3)]


class Block:
    """Stands for vLLM's KVCacheBlock: the class the read expects."""

    __slots__ = ("index", "group")

    def __init__(self, index: int, group: int) -> None:
        self.index = index
        self.group = group


class Several:
    """Something else stored under a key (vLLM: a dict of several blocks);
    ``read_one`` answers it with ``answer`` (a Block, or None: a miss)."""

    __slots__ = ("answer",)

    def __init__(self, answer: Block | None) -> None:
        self.answer = answer


class RecordingMask(Sequence[bool]):
    """pyspec's view of the same cache: ``cached[i]`` records ``i``."""

    def __init__(self, bits: Sequence[bool]) -> None:
        self.bits = bits
        self.reads: list[int] = []

    def __len__(self) -> int:
        return len(self.bits)

    def __getitem__(self, i: int) -> bool:  # type: ignore[override]
        self.reads.append(i)
        return bool(self.bits[i])


class Store:
    """A hash map as the specialization reads it, recording every read as
    ``(block index, group)``."""

    def __init__(self, n: int, salt: bytes = b"") -> None:
        self.hashes = [salt + i.to_bytes(4, "big") + b"h" for i in range(n)]
        self.index = {h: i for i, h in enumerate(self.hashes)}
        self.map: dict[bytes, Any] = {}
        self.reads: list[tuple[int, int]] = []
        self.last_key: bytes | None = None

    def key(self, i: int, group: int) -> bytes:
        return self.hashes[i] + SUFFIXES[group]

    def put(self, i: int, group: int, value: Any) -> None:
        self.map[self.key(i, group)] = value

    def read(self, key: bytes) -> Any:
        self.reads.append((self.index[key[:-4]], int.from_bytes(key[-4:], "big")))
        self.last_key = key
        return self.map.get(key)

    def read_one(self, key: bytes) -> Block | None:
        """vLLM's get_one_block: only ever asked about the key just read."""
        assert key == self.last_key
        value = self.map[key]
        assert isinstance(value, Several)
        return value.answer


def _check_one_group(bits: Sequence[bool], store: Store, p: SearchParams) -> None:
    """One group: same hit, same reads in the same order, same blocks."""
    mask = RecordingMask(bits)
    hit = find_hit(mask, p)
    store.reads.clear()
    length, first_real, found = find_hit_one_group(
        store.read, store.read_one, store.hashes, SUFFIXES[0], Block, p)
    assert (length, first_real) == (hit.length, hit.first_real), p
    assert [i for i, _ in store.reads] == mask.reads, p
    for i in range(first_real, length):
        assert found[i].index == i, p


def _expected_group_reads(probes: list[int], groups: list[list[bool]]) -> list[tuple[int, int]]:
    """Per probed block, the groups vLLM reads: in order, up to and
    including the first that misses."""
    reads = []
    for i in probes:
        for g, group in enumerate(groups):
            reads.append((i, g))
            if not group[i]:
                break
    return reads


def _check_groups(groups: list[list[bool]], store: Store, p: SearchParams) -> None:
    """Several groups: a block is cached when every group has it."""
    combined = [all(bits) for bits in zip(*groups)]
    mask = RecordingMask(combined)
    hit = find_hit(mask, p)
    store.reads.clear()
    length, first_real, found = find_hit_groups(
        store.read, store.read_one, store.hashes, SUFFIXES[: len(groups)], Block, p)
    assert (length, first_real) == (hit.length, hit.first_real), p
    assert store.reads == _expected_group_reads(mask.reads, groups), p
    for i in range(first_real, length):
        assert [(b.index, b.group) for b in found[i]] == [(i, g) for g in range(len(groups))], p


def _all_params(n: int) -> list[SearchParams]:
    """need -1 .. n + 1 (the adapter passes max(need, 1)), period 1-4, EAGLE."""
    return [
        SearchParams(n=n, need=max(need, 1), period=period, eagle=eagle)
        for need in range(-1, n + 2)
        for period in range(1, 5)
        for eagle in (False, True)
    ]


@pytest.mark.parametrize("n", range(MAX_BLOCKS + 1))
def test_one_group_every_mask(n: int) -> None:
    cases = 0
    params = _all_params(n)
    for bits in itertools.product((False, True), repeat=n):
        store = Store(n)
        for i, cached in enumerate(bits):
            if cached:
                store.put(i, 0, Block(i, 0))
        for p in params:
            _check_one_group(bits, store, p)
            cases += 1
    CASE_COUNTS["fast_search one group = pyspec probe by probe (every mask)"] += cases


@pytest.mark.parametrize("n", range(MAX_GROUP_BLOCKS + 1))
def test_groups_every_mask(n: int) -> None:
    """Each mask split over two groups: all in group 0 with group 1 full,
    the reverse, and the misses alternating between the groups."""
    cases = 0
    params = _all_params(n)
    for bits in itertools.product((False, True), repeat=n):
        misses = [i for i in range(n) if not bits[i]]
        alternate = ([i not in misses[0::2] for i in range(n)],
                     [i not in misses[1::2] for i in range(n)])
        for groups in (
            [list(bits), [True] * n],
            [[True] * n, list(bits)],
            list(alternate),
        ):
            store = Store(n)
            for g, group in enumerate(groups):
                for i, cached in enumerate(group):
                    if cached:
                        store.put(i, g, Block(i, g))
            for p in params:
                _check_groups(groups, store, p)
                cases += 1
    CASE_COUNTS["fast_search groups = pyspec probe by probe (every mask)"] += cases


@settings(max_examples=400, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.one_of(st.integers(0, 64), st.integers(0, 3000)),
    need=st.one_of(st.integers(1, 16), st.integers(1, 300)),
    period=st.integers(1, 8),
    eagle=st.booleans(),
    num_groups=st.integers(1, 3),
    several=st.sampled_from((0.0, 0.1, 0.5)),
)
def test_random_large_masks(
    seed: int, n: int, need: int, period: int, eagle: bool, num_groups: int, several: float
) -> None:
    """Realistic masks (tests/masks.random_mask: sparse, dense, runs, runs
    of need - 1, prefixes, ...) per group; a share ``several`` of the
    stored keys hold something else, which ``read_one`` answers (a tenth
    of those answers are falsy: a miss for vLLM's ``if not block``)."""
    rng = random.Random(seed)
    p = SearchParams(n=n, need=need, period=period, eagle=eagle)
    store = Store(n, salt=rng.randbytes(4))
    groups = []
    for g in range(num_groups):
        shape = random_mask(rng, n, need) if g == 0 or rng.random() < 0.3 else [True] * n
        truth = []
        for i, stored in enumerate(shape):
            cached = stored
            if stored:
                block = Block(i, g)
                if rng.random() < several:
                    answer = block if rng.random() < 0.9 else None
                    cached = answer is not None
                    store.put(i, g, Several(answer))
                else:
                    store.put(i, g, block)
            truth.append(cached)
        groups.append(truth)
    if num_groups == 1:
        _check_one_group(groups[0], store, p)
    _check_groups(groups, store, p)
    CASE_COUNTS["fast_search = pyspec probe by probe (hypothesis, <= 3000 blocks)"] += 1
