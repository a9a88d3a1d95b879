"""Lean/PrefixCache/Thm/Memo.lean's theorems as executable properties.

The Lean definitions of Spec/Memo.lean transcribed (a pool's map as the
set of cached ``(hash, group)`` keys, writes, the request's hashes read at
each group's block size), and every theorem checked on random inputs with
pyspec's ``joint_lookup`` as the lookup. The statement that matters,
``memo_sound``, is also shown to need its hypothesis: a write of a watched
key changes some answers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from conftest import CASE_COUNTS

from swa_prefix_cache.pyspec.joint import Group, joint_lookup

CASES = 3000


@dataclass(frozen=True)
class MapWrite:
    """``MapWrite``: after it, key ``(hash, group)`` is ``present``."""

    hash: int
    group: int
    present: bool


def apply_writes(cached: frozenset, writes: list[MapWrite]) -> frozenset:
    """``applyWrites``: the map (the set of cached keys) after the writes."""
    keys = set(cached)
    for w in writes:
        if w.present:
            keys.add((w.hash, w.group))
        else:
            keys.discard((w.hash, w.group))
    return frozenset(keys)


def coarse_view(hashes: list[int], scale: int, i: int) -> int | None:
    """``coarseView``: the hash a group of ``scale`` hash blocks per block
    reads for its block ``i`` (None past the request's end)."""
    k = (i + 1) * scale - 1
    return hashes[k] if k < len(hashes) else None


def lookup_on(cached: frozenset, hashes: list[int], layout: list[tuple[int, int | None]],
              h: int, max_length: int) -> int:
    """``lookupOn``: pyspec's joint lookup over the masks the map gives
    (group ``g`` of block size ``bs`` reads ``coarse_view(hashes, bs // h, i)``)."""
    align = 1
    for bs, _ in layout:
        align = align * bs // _gcd(align, bs)
    groups = []
    for gid, (bs, window) in enumerate(layout):
        scale = bs // h
        n = len(hashes) // scale
        mask = tuple((coarse_view(hashes, scale, i), gid) in cached for i in range(n))
        groups.append(Group(bs, window, False, mask))
    return joint_lookup(groups, max_length, align, h, len(hashes)).hit_length


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def random_case(rng: random.Random) -> tuple:
    h = rng.choice([1, 2, 4])
    layout = [(h * rng.choice([1, 2]), None)] + [
        (h * rng.choice([1, 2, 4]), rng.randint(1, 12)) for _ in range(rng.randint(1, 3))]
    hashes = rng.sample(range(1000), rng.randint(0, 24))
    others = [x for x in range(1000, 1040)]
    keys = {(x, g) for x in hashes + others for g in range(len(layout)) if rng.random() < 0.6}
    return h, layout, hashes, others, frozenset(keys)


def test_memo_sound() -> None:
    """``memo_sound``: ``WritesUnwatched watch ws → ReadsWatched watch rs →
    lookupOn (applyWrites m ws) rs … = lookupOn m rs …``, the watch being
    the request's hashes (``coarseView_watched``)."""
    rng = random.Random(5)
    changed_by_watched = 0
    for _ in range(CASES):
        h, layout, hashes, others, cached = random_case(rng)
        max_length = rng.randint(0, len(hashes) * h)
        before = lookup_on(cached, hashes, layout, h, max_length)
        unwatched = [MapWrite(rng.choice(others), rng.randrange(len(layout)), rng.random() < 0.5)
                     for _ in range(rng.randint(1, 30))]
        assert lookup_on(apply_writes(cached, unwatched), hashes, layout, h, max_length) == before
        if hashes:
            # The hypothesis is needed: writes of watched keys may change it.
            watched = [MapWrite(rng.choice(hashes), rng.randrange(len(layout)), rng.random() < 0.5)
                       for _ in range(rng.randint(1, 6))]
            after = lookup_on(apply_writes(cached, watched), hashes, layout, h, max_length)
            changed_by_watched += after != before
    assert changed_by_watched > CASES // 100, changed_by_watched
    CASE_COUNTS["Lean memo theorems"] += CASES


def test_coarseView_watched() -> None:
    """``coarseView_watched``: ``coarseView hashes scale i = some h →
    memB h hashes = true`` (and ``memB_of_hashAt``)."""
    rng = random.Random(6)
    for _ in range(CASES):
        hashes = rng.sample(range(500), rng.randint(0, 20))
        scale, i = rng.randint(1, 4), rng.randint(0, 25)
        read = coarse_view(hashes, scale, i)
        assert read is None or read in hashes


def test_applyWrite_unwatched_and_watched_may_change() -> None:
    """``applyWrite_unwatched`` (a write of an unwatched hash leaves every
    watched key) and ``applyWrite_watched_may_change`` (the written key is
    what the write says)."""
    rng = random.Random(7)
    for _ in range(CASES):
        cached = frozenset((rng.randrange(20), rng.randrange(3)) for _ in range(rng.randint(0, 30)))
        w = MapWrite(rng.randrange(20), rng.randrange(3), rng.random() < 0.5)
        after = apply_writes(cached, [w])
        assert ((w.hash, w.group) in after) == w.present
        for key in [(x, g) for x in range(20) for g in range(3) if x != w.hash]:
            assert (key in after) == (key in cached)
