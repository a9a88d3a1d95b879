"""The C multi-group lookup and store mask (swa_prefix_cache/core/proved/joint.c,
swa_prefix_cache/core/proved/reachable.c) against pyspec.

* ``reachable_mask``: exhaustively on small parameters (block sizes 1..3,
  every alignment kind, windows 0..3*bs+2, EAGLE, dense / no / sparse
  retention, start/end up to 8 blocks, several boundary sets and final
  segments), then by hypothesis on large values.
* ``group_hit``: every mask of up to 5 blocks, every max length, window,
  EAGLE drop, full attention and sliding window.
* ``joint_lookup``: the exhaustive sets of tests/test_joint.py (two groups
  of block size 1 with every pair of masks of up to 4 blocks; full + two
  sliding-window groups of mixed block sizes), then hypothesis: the hit
  length, every group's answer, ``num_uncached_common_prefix_tokens``
  and the number of rounds must equal pyspec's.

Bad input gets a ValueError naming the argument (the same checks run under
ASan + UBSan, ``make ffi-test-asan``). ``PREFIX_CACHE_FFI_JOINT_CASES`` sets
the hypothesis examples (default 600).
"""

from __future__ import annotations

import itertools
import os
import re

import pytest
from conftest import CASE_COUNTS, require_native
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks import cffi_core as native
from swa_prefix_cache.pyspec.joint import (
    Group,
    attention_groups,
    group_hit,
    joint_lookup,
    max_rounds_bound,
    scheduler_block_size,
)
from swa_prefix_cache.pyspec.reachable import reachable_mask

CASES = int(os.environ.get("PREFIX_CACHE_FFI_JOINT_CASES", "600"))
SETTINGS = settings(
    max_examples=CASES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_cdef_matches_headers() -> None:
    """The loader's declarations are the headers' prototypes, token for token."""
    here = native.PROVED_DIR
    text = ""
    for name in ("joint.h", "reachable.h"):
        header = (here / name).read_text()
        header = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
        text += re.sub(r"//[^\n]*", " ", header)

    def normalize(s: str) -> str:
        return " ".join(re.findall(r"\w+|[^\w\s]", s))

    flat = normalize(text)
    for decl in native.CDEF_JOINT.strip().split(";"):
        decl = normalize(decl)
        if decl:
            assert decl in flat, decl


# ---- reachable_mask ----------------------------------------------------------


def _check_mask(*args: object) -> None:
    want = reachable_mask(*args)  # type: ignore[arg-type]
    got = native.reachable_mask(*args)  # type: ignore[arg-type]
    assert got == want, args


def test_reachable_mask_examples(lib: None) -> None:
    """Fixed answers, so that a C and a pyspec that drift together fail."""
    mask = native.reachable_mask(0, 34, 256, 16, 129, True)
    assert mask is not None
    assert [i for i, k in enumerate(mask) if k] == list(range(8, 17)) + list(range(24, 33))
    assert native.reachable_mask(0, 8, 32, 16, 129, False) is None  # tail >= segment
    assert native.reachable_mask(0, 8, None, 16, 129, False) is None  # no alignment
    assert native.reachable_mask(0, 8, 24, 16, 129, False) is None  # sub-block alignment
    assert native.reachable_mask(0, 6, 2, 1, 6, True, 0, [2]) == [True, True, True, False, False, False]
    assert native.reachable_mask(5, 5, 64, 16, 33, False) == []
    # A negative boundary has no tail; a boundary's tail is cut to [start, end).
    assert native.reachable_mask(0, 4, 1, 1, 3, True, 0, [-1]) == [False] * 4
    assert native.reachable_mask(2, 6, 1, 1, 3, False, 0, [4]) == [True, True, False, False]
    # Final segment (no EAGLE): the tail [5, 7) of the partial segment
    # ending at block 7 is kept besides the segment tail [6, 8).
    assert native.reachable_mask(0, 7, 4, 1, 3, False, 8, (), 7) == [False] * 5 + [True, True]
    assert native.reachable_mask(0, 7, 4, 1, 3, False, 8, (), None) == [False] * 6 + [True]
    CASE_COUNTS["reachable_mask C examples"] += 10


def test_reachable_mask_exhaustive_small(lib: None) -> None:
    done = 0
    for bs in (1, 2, 3):
        for align in (None, bs, 2 * bs, 3 * bs, bs + 1):
            for w, eagle in itertools.product(range(0, 3 * bs + 3), (False, True)):
                for ret in (None, 0, 1, 2):
                    retention = None if ret is None or align is None else ret * align
                    for end in range(0, 9):
                        for start in sorted({0, end // 2, end}):
                            for bounds in ((), (end * bs - 1,), (3, 7 * bs), (0, -bs, -1)):
                                for final in (None, end, end + 1, 5):
                                    _check_mask(start, end, align, bs, w, eagle, retention, bounds, final)
                                    done += 1
    CASE_COUNTS["reachable_mask C vs pyspec (exhaustive small)"] += done


@SETTINGS
@given(
    bs=st.one_of(st.sampled_from((1, 2, 16, 32)), st.integers(1, 64)),
    align_mult=st.one_of(st.none(), st.integers(1, 64), st.just(0)),
    w=st.one_of(st.integers(0, 300), st.integers(0, 8192)),
    eagle=st.booleans(),
    ret_mult=st.one_of(st.none(), st.just(0), st.integers(1, 32)),
    start=st.integers(0, 700),
    length=st.integers(0, 600),
    bounds=st.lists(st.integers(-100, 20000), max_size=4),
    final=st.one_of(st.none(), st.integers(0, 1400)),
    offset=st.sampled_from((0, 1 << 40)),
)
def test_reachable_mask_random(bs, align_mult, w, eagle, ret_mult, start, length, bounds, final, offset) -> None:  # type: ignore[no-untyped-def]
    require_native()
    # align_mult 0: an alignment that is not a multiple of the block size.
    align = None if align_mult is None else (bs * align_mult if align_mult else bs + 1)
    retention = None if ret_mult is None else (align or bs) * ret_mult
    # offset: the same shapes far from block 0 (large block numbers).
    start += offset
    final = None if final is None else final + offset
    bounds = [b + offset * bs if b >= 0 else b for b in bounds]
    _check_mask(start, start + length, align, bs, w, eagle, retention, bounds, final)
    CASE_COUNTS["reachable_mask C vs pyspec (hypothesis)"] += 1


# ---- group_hit -----------------------------------------------------------------


def test_group_hit_exhaustive_small(lib: None) -> None:
    done = 0
    for bs, align in ((1, 1), (1, 2), (2, 2), (1, 3), (2, 4)):
        for n in range(0, 6):
            for mask in itertools.product((False, True), repeat=n):
                for window in (None, -1, 0, 1, 2, 3, 5):
                    for eagle, drop in ((False, False), (True, False), (True, True)):
                        g = Group(bs, window, eagle, mask)
                        for mx in range(0, n * bs + 1):
                            assert native.group_hit(g, mx, align, drop) == group_hit(g, mx, align, drop), (
                                g, mask, mx, align, drop)
                            done += 1
    CASE_COUNTS["group_hit C vs pyspec (exhaustive small)"] += done


# ---- joint_lookup ----------------------------------------------------------------


def _check_joint(groups: list[Group], max_len: int, align: int, h: int, num_hash: int) -> bool:
    """C == pyspec; False (C still run, within the proved bounds) where
    pyspec raises because a lookup asks past a sliding-window mask."""
    got = native.joint_lookup(groups, max_len, align, h, num_hash)
    ctx = (groups, [g.cached for g in groups], max_len, align, h, num_hash)
    assert 1 <= got.rounds <= max_rounds_bound(max_len, align), ctx
    try:
        want = joint_lookup(groups, max_len, align, h, num_hash)
    except ValueError as exc:
        assert "cached" in str(exc), exc
        return False
    assert got.hit_length == want.hit_length, ctx
    assert got.groups == want.groups, ctx
    assert got.num_uncached_common_prefix_tokens == want.num_uncached_common_prefix_tokens, ctx
    assert got.rounds == want.rounds, ctx
    # What the proof says, checked on the running library too.
    assert 0 <= got.hit_length <= max_len and got.hit_length % align == 0, ctx
    return True


def _small_group(kind: int, e: bool, mask: tuple[bool, ...]) -> Group:
    return Group(1, (None, 2, 3, 4, 1, 0)[kind], e, mask)


def test_joint_exhaustive_two_groups(lib: None) -> None:
    """Every pair of groups (full, windows 0..4, EAGLE on/off) with every
    pair of masks of up to 4 blocks and every max length."""
    done = 0
    for n in range(0, 5):
        masks = list(itertools.product((False, True), repeat=n))
        for k0, k1 in itertools.product(range(6), repeat=2):
            for e0, e1 in itertools.product((False, True), repeat=2):
                for m0 in masks:
                    for m1 in masks:
                        groups = [_small_group(k0, e0, m0), _small_group(k1, e1, m1)]
                        for mx in range(0, n + 1):
                            assert _check_joint(groups, mx, 1, 1, n)
                            done += 1
    CASE_COUNTS["joint_lookup C vs pyspec (exhaustive, 2 groups)"] += done


def test_joint_exhaustive_three_groups(lib: None) -> None:
    """Full (bs 2) + SWA bs 1 + SWA bs 2 on hash size 1 (alignment 2),
    every mask of up to 4 hash blocks, EAGLE subsets, max up to n + 1."""
    done = 0
    for n in range(0, 5):
        m1s = list(itertools.product((False, True), repeat=n))
        m2s = list(itertools.product((False, True), repeat=n // 2))
        for w1, w2 in ((2, 3), (3, 5), (1, 2)):
            for eagle in itertools.product((False, True), repeat=3):
                for mf in m2s:
                    for m1 in m1s:
                        for m2 in m2s:
                            groups = [
                                Group(2, None, eagle[0], mf),
                                Group(1, w1, eagle[1], m1),
                                Group(2, w2, eagle[2], m2),
                            ]
                            for mx in range(0, n + 2):
                                done += _check_joint(groups, mx, 2, 1, n)
    CASE_COUNTS["joint_lookup C vs pyspec (exhaustive, 3 groups)"] += done


@st.composite
def joint_inputs(draw):  # type: ignore[no-untyped-def]
    h = draw(st.sampled_from((1, 2, 16)))
    num_groups = draw(st.integers(2, 5))
    specs = []
    for _ in range(num_groups):
        bs = h * draw(st.sampled_from((1, 1, 2, 3)))
        full = draw(st.booleans()) and draw(st.booleans())
        window = None if full else draw(st.integers(0, 4 * bs + 1))
        specs.append((bs, window, draw(st.booleans())))
    if draw(st.booleans()):  # groups sharing one spec (merged into one)
        specs.append(specs[0])
    num_hash = draw(st.integers(0, 40))
    groups = []
    for bs, window, eagle in specs:
        n = num_hash * h // bs
        rate = draw(st.sampled_from((0.5, 0.8, 0.95, 1.0)))
        bits = draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
        groups.append(Group(bs, window, eagle, tuple(b < rate for b in bits)))
    align = scheduler_block_size([g.block_size for g in groups], h)
    max_len = draw(st.integers(0, num_hash * h + h - 1))
    return groups, max_len, align, h, num_hash


@SETTINGS
@given(joint_inputs())
def test_joint_random(args) -> None:  # type: ignore[no-untyped-def]
    require_native()
    if _check_joint(*args):
        CASE_COUNTS["joint_lookup C vs pyspec (hypothesis)"] += 1
    else:
        CASE_COUNTS["joint_lookup C only, pyspec raises (hypothesis)"] += 1


def test_joint_rounds_grow_linearly(lib: None) -> None:
    """Interleaved groups take one round per alignment step: the C follows
    pyspec all the way down (and stays within max_rounds_bound)."""
    n = 12
    accepts_4k = tuple(i % 2 == 1 for i in range(n))
    accepts_4k_2 = tuple(i % 2 == 0 for i in range(n))
    groups = [Group(2, 2, False, accepts_4k), Group(2, 3, False, accepts_4k_2)]
    got = native.joint_lookup(groups, 2 * n, 2, 2, n)
    assert got.hit_length == 0
    assert got.rounds == 8 <= max_rounds_bound(2 * n, 2)
    assert _check_joint(groups, 2 * n, 2, 2, n)


# ---- bad input ---------------------------------------------------------------------

GOOD_MASK = dict(
    start_block=0, end_block=8, alignment_tokens=16, block_size=16,
    sliding_window=33, use_eagle=False, retention_interval=None,
    reachable_boundaries=(), final_segment_end_block=None,
)
BIG = native.SIZE_LIMIT + 1


@pytest.mark.parametrize(
    "name, value",
    [
        ("start_block", -1), ("start_block", 1.0), ("start_block", BIG),
        ("end_block", -1), ("end_block", None), ("end_block", BIG),
        ("alignment_tokens", 0), ("alignment_tokens", -2), ("alignment_tokens", "16"),
        ("block_size", 0), ("block_size", None), ("block_size", BIG),
        ("sliding_window", -1), ("sliding_window", None), ("sliding_window", BIG),
        ("use_eagle", 1), ("use_eagle", None),
        ("retention_interval", -1), ("retention_interval", 2.5), ("retention_interval", BIG),
        ("final_segment_end_block", -2), ("final_segment_end_block", BIG),
        ("reachable_boundaries", None), ("reachable_boundaries", "12"), ("reachable_boundaries", 5),
    ],
)
def test_reachable_mask_rejects(name: str, value: object, lib: None) -> None:
    args = {**GOOD_MASK, name: value}
    with pytest.raises(ValueError, match=rf"^{re.escape(name)}"):
        native.reachable_mask(**args)


@pytest.mark.parametrize("bounds", [[1.5], [None], [BIG], [-(1 << 64)], [True]])
def test_reachable_mask_rejects_bad_boundaries(bounds: list[object], lib: None) -> None:
    with pytest.raises(ValueError, match=r"^reachable_boundaries\[0\]"):
        native.reachable_mask(**{**GOOD_MASK, "reachable_boundaries": bounds})


def test_reachable_mask_end_before_start(lib: None) -> None:
    with pytest.raises(ValueError, match="^end_block"):
        native.reachable_mask(**{**GOOD_MASK, "start_block": 5, "end_block": 4})


GOOD_GROUPS = [Group(2, None, False, (True, True)), Group(1, 3, True, (True, False, True, True))]
GOOD_JOINT = dict(groups=GOOD_GROUPS, max_cache_hit_length=4, alignment_tokens=2,
                  hash_block_size=1, num_hash_blocks=4)


@pytest.mark.parametrize(
    "name, value",
    [
        ("max_cache_hit_length", -1), ("max_cache_hit_length", 2.0), ("max_cache_hit_length", BIG),
        ("alignment_tokens", 0), ("alignment_tokens", None), ("alignment_tokens", 3),
        ("hash_block_size", 0), ("hash_block_size", True), ("hash_block_size", 2),
        ("num_hash_blocks", -1), ("num_hash_blocks", 5), ("num_hash_blocks", BIG),
        ("groups", None), ("groups", "ab"), ("groups", 3), ("groups", GOOD_GROUPS[:1]),
    ],
)
def test_joint_lookup_rejects(name: str, value: object, lib: None) -> None:
    args = {**GOOD_JOINT, name: value}
    # A bad alignment / hash size / hash count shows up as a group that
    # does not fit it; the message names the group or the argument.
    with pytest.raises(ValueError, match=rf"^({re.escape(name)}|groups\[)"):
        native.joint_lookup(**args)


@pytest.mark.parametrize(
    "group, message",
    [
        (Group(0, None, False, (True,) * 4), r"groups\[1\]\.block_size"),
        (Group(1, BIG, False, (True,) * 4), r"groups\[1\]\.sliding_window"),
        (Group(1, 3, 1, (True,) * 4), r"groups\[1\]\.eagle"),  # type: ignore[arg-type]
        (Group(1, 3, False, None), r"groups\[1\]\.cached"),  # type: ignore[arg-type]
        (Group(1, 3, False, "1111"), r"groups\[1\]\.cached"),  # type: ignore[arg-type]
        (Group(1, 3, False, (True,) * 3), r"groups\[1\]\.cached"),
        ((1, 3, False, (True,) * 4), r"groups\[1\]"),
    ],
)
def test_joint_lookup_rejects_bad_groups(group: object, message: str, lib: None) -> None:
    args = {**GOOD_JOINT, "groups": [GOOD_GROUPS[0], group]}
    with pytest.raises(ValueError, match=rf"^{message}"):
        native.joint_lookup(**args)


def test_joint_lookup_many_rounds(lib: None) -> None:
    """A long interleaved walk-down (about max / alignment rounds) ends."""
    n = 2000
    a = tuple(i % 2 == 1 for i in range(n))
    b = tuple(i % 2 == 0 for i in range(n))
    groups = [Group(2, 2, False, a), Group(2, 3, False, b)]
    got = native.joint_lookup(groups, 2 * n, 2, 2, n)
    assert got.hit_length == 0
    assert n // 2 <= got.rounds <= max_rounds_bound(2 * n, 2)
    assert _check_joint(groups, 2 * n, 2, 2, n)


def test_group_hit_rejects(lib: None) -> None:
    g = Group(2, 3, False, (True, True))
    with pytest.raises(ValueError, match="^alignment_tokens"):
        native.group_hit(g, 4, 3, False)
    with pytest.raises(ValueError, match="^max_length"):
        native.group_hit(g, -1, 2, False)
    with pytest.raises(ValueError, match="^drop_eagle_block"):
        native.group_hit(g, 4, 2, 1)
    with pytest.raises(ValueError, match="^group "):
        native.group_hit((2, 3), 4, 2, False)


def test_attention_groups_are_merged(lib: None) -> None:
    """Two groups with one spec are one attention group: a block counts as
    cached only when both have it, and both get the same answer."""
    a = Group(1, 2, False, (True, True, True, True))
    b = Group(1, 2, False, (True, True, False, True))
    full = Group(1, None, False, (True,) * 4)
    assert len(attention_groups([full, a, b])) == 2
    got = native.joint_lookup([full, a, b], 4, 1, 1, 4)
    assert got.hit_length == joint_lookup([full, a, b], 4, 1, 1, 4).hit_length
    assert got.groups[1] == got.groups[2]
