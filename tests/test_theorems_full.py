"""Every theorem of Lean/PrefixCache/Thm/Full.lean, restated as an executable property.

No Lean toolchain runs here, so each statement is checked on inputs: the
Lean definitions of Lean/PrefixCache/Spec/Full.lean are transcribed below
(``Nat`` arithmetic: truncated subtraction, floor division; masks as
functions of the index), the transcription is checked equal to swa_prefix_cache.pyspec.full
(``test_transcription_matches_pyspec``), and each theorem is a test named
after it: exhaustive on small inputs plus hypothesis.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import NamedTuple

from conftest import CASE_COUNTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swa_prefix_cache.pyspec.full import full_hit, legacy_full_scan

Mask = Callable[[int], bool]


def nsub(a: int, b: int) -> int:
    """Lean's truncated ``Nat`` subtraction."""
    return max(a - b, 0)


def min_n(a: int, b: int) -> int:
    return a if a <= b else b


# ---- Spec/Stride.lean (used) and Spec/Full.lean, transcribed --------------

def scan_run(c: Mask, j: int, k: int) -> int:
    while k > 0 and c(j):
        j, k = j + 1, k - 1
    return j


def scan_probes(c: Mask, j: int, k: int) -> int:
    reads = 0
    while k > 0:
        reads += 1
        if not c(j):
            return reads
        j, k = j + 1, k - 1
    return reads


def fine_mode(bs: int, align: int) -> bool:
    return align < bs and bs % align == 0


def phase1_limit(max_length: int, bs: int, n_cached: int) -> int:
    return min_n(max_length // bs, n_cached)


def fine_lo(p: int, bs: int, align: int) -> int:
    return p * (bs // align)


def fine_hi(p: int, bs: int, align: int, max_length: int, n_fine: int) -> int:
    s = bs // align
    return min_n(min_n(nsub(p * s + s, 1), max_length // align), n_fine)


def fine_down(f: Mask, lo: int, k: int) -> int | None:
    while k > 0:
        if f(lo + k - 1):
            return lo + k - 1
        k -= 1
    return None


def fine_down_probes(f: Mask, lo: int, k: int) -> int:
    reads = 0
    while k > 0:
        reads += 1
        if f(lo + k - 1):
            return reads
        k -= 1
    return reads


def raw_hit(p: int, t: int | None, bs: int, align: int) -> int:
    return p * bs if t is None else (t + 1) * align


def eagle_drop(h: int, bs: int, align: int, eagle: bool) -> int:
    return nsub(h, min_n(align, bs)) if eagle and h > 0 else h


def cdiv_n(h: int, bs: int) -> int:
    return nsub(h + bs, 1) // bs


def realign(x: int, p: int) -> int:
    return x - x % p


def finish_hit(raw: int, bs: int, align: int, eagle: bool) -> int:
    return realign(eagle_drop(raw, bs, align, eagle), align)


class FullResult(NamedTuple):
    hit_tokens: int
    num_blocks: int
    prefix: int
    tail: int | None
    probes: int


def full_finish(p: int, t: int | None, q: int, bs: int, align: int, eagle: bool) -> FullResult:
    h = finish_hit(raw_hit(p, t, bs, align), bs, align, eagle)
    return FullResult(h, cdiv_n(h, bs), p, t, q)


def full_after_phase1(f: Mask, p: int, q: int, n_fine: int, max_length: int, bs: int,
                      align: int, eagle: bool) -> FullResult:
    if fine_mode(bs, align):
        lo = fine_lo(p, bs, align)
        k = nsub(fine_hi(p, bs, align, max_length, n_fine), lo)
        return full_finish(p, fine_down(f, lo, k), q + fine_down_probes(f, lo, k), bs, align, eagle)
    return full_finish(p, None, q, bs, align, eagle)


def lean_full_hit(c: Mask, f: Mask, n_cached: int, n_fine: int, max_length: int, bs: int,
                  align: int, eagle: bool) -> FullResult:
    limit = phase1_limit(max_length, bs, n_cached)
    return full_after_phase1(f, scan_run(c, 0, limit), scan_probes(c, 0, limit), n_fine,
                             max_length, bs, align, eagle)


def legacy_phase1(c: Mask, i: int, probes: int, k: int) -> tuple[int, int]:
    if k == 0:
        return i, probes
    if c(i):
        return legacy_phase1(c, i + 1, probes + 1, k - 1)
    return i, probes + 1


def legacy_phase2(f: Mask, lo: int, probes: int, k: int) -> tuple[int | None, int]:
    while k > 0:
        k -= 1
        if f(lo + k):
            return lo + k, probes + 1
        probes += 1
    return None, probes


def legacy_finish(hit_length: int, computed_len: int, p: int, tail: int | None, probes: int,
                  bs: int, align: int, eagle: bool) -> FullResult:
    h1 = nsub(hit_length, min_n(align, bs)) if eagle and hit_length > 0 else hit_length
    h2 = h1 - h1 % align
    return FullResult(h2, min_n(computed_len, cdiv_n(h2, bs)), p, tail, probes)


def legacy_after_phase2(r2: tuple[int | None, int], computed: int, bs: int, align: int,
                        eagle: bool) -> FullResult:
    t, q = r2
    if t is None:
        return legacy_finish(computed * bs, computed, computed, None, q, bs, align, eagle)
    return legacy_finish((t + 1) * align, computed + 1, computed, t, q, bs, align, eagle)


def lean_legacy_full_scan(c: Mask, f: Mask, n_cached: int, n_fine: int, max_length: int,
                          bs: int, align: int, eagle: bool) -> FullResult:
    computed, q = legacy_phase1(c, 0, 0, min_n(max_length // bs, n_cached))
    if align < bs and bs % align == 0:
        first = computed * (bs // align)
        max_p = min_n(min_n(nsub(first + bs // align, 1), max_length // align), n_fine)
        return legacy_after_phase2(legacy_phase2(f, first, q, nsub(max_p, first)), computed,
                                   bs, align, eagle)
    return legacy_finish(computed * bs, computed, computed, None, q, bs, align, eagle)


# ---- inputs -----------------------------------------------------------------

class Case(NamedTuple):
    cached: list[bool]
    fine: list[bool]
    max_length: int
    bs: int
    align: int
    eagle: bool

    def masks(self) -> tuple[Mask, Mask]:
        # Outside the lists the masks say "cached": a theorem that read past
        # n_cached / n_fine would then show.
        cached, fine = self.cached, self.fine
        return (lambda i: i >= len(cached) or cached[i]), (lambda j: j >= len(fine) or fine[j])

    def lean_args(self) -> tuple:
        c, f = self.masks()
        return (c, f, len(self.cached), len(self.fine), self.max_length, self.bs, self.align,
                self.eagle)


CONFIGS = [(1, 1), (2, 1), (4, 1), (4, 2), (6, 2), (4, 4), (4, 8), (4, 3), (4, 6)]


def small_cases() -> list[Case]:
    out = []
    for bs, align in CONFIGS:
        s = bs // align if fine_mode(bs, align) else 1
        for n in range(4):
            for bits in itertools.product([False, True], repeat=n):
                for fbits in itertools.product([False, True], repeat=min(n * s + s - 1, 6)):
                    for max_length in range(0, (n + 1) * bs + 2, max(1, align // 2)):
                        for eagle in (False, True):
                            out.append(Case(list(bits), list(fbits), max_length, bs, align, eagle))
    return out


SMALL = small_cases()


def random_case(rng: random.Random) -> Case:
    bs, align = rng.choice(CONFIGS + [(16, 4), (64, 16), (12, 3), (16, 16), (16, 5)])
    n = rng.randrange(0, 40)
    run = rng.randrange(n + 1)
    cached = [i < run or rng.random() < 0.5 for i in range(n)]
    fine = [rng.random() < rng.random() for _ in range(rng.randrange(0, 40 * max(bs // align, 1)))]
    return Case(cached, fine, rng.randrange(0, (n + 2) * bs + 1), bs, align, rng.random() < 0.5)


def for_all(prop: Callable[[Case], None], name: str) -> None:
    for case in SMALL:
        prop(case)
    CASE_COUNTS[f"theorems (full): {name}"] += len(SMALL)


random_cases = settings(max_examples=300, deadline=None, derandomize=True,
                        suppress_health_check=[HealthCheck.too_slow])


# ---- the transcription is pyspec ---------------------------------------------

def check_transcription(case: Case) -> None:
    ours = lean_full_hit(*case.lean_args())
    args = (case.cached, case.fine, case.max_length, case.bs, case.align, case.eagle)
    assert tuple(ours) == tuple(full_hit(*args)), case
    assert tuple(lean_legacy_full_scan(*case.lean_args())) == tuple(legacy_full_scan(*args)), case


def test_transcription_matches_pyspec() -> None:
    for_all(check_transcription, "transcription")


@random_cases
@given(seed=st.integers(0, 2**32 - 1))
def test_transcription_matches_pyspec_random(seed: int) -> None:
    check_transcription(random_case(random.Random(seed)))


# ---- the theorems -------------------------------------------------------------

def test_scanRun_zero_maxCachedPrefix() -> None:
    for bits in itertools.chain.from_iterable(
        itertools.product([False, True], repeat=n) for n in range(8)
    ):
        c = lambda i, b=bits: i < len(b) and b[i]  # noqa: E731
        for limit in range(len(bits) + 2):
            p = scan_run(c, 0, limit)
            assert p <= limit and all(c(i) for i in range(p)) and (p == limit or not c(p))


def test_scanProbes_exact() -> None:
    for bits in itertools.product([False, True], repeat=6):
        c = lambda i, b=bits: i < len(b) and b[i]  # noqa: E731
        for j in range(7):
            for k in range(8):
                r, q = scan_run(c, j, k), scan_probes(c, j, k)
                if r < j + k:
                    assert q + j == r + 1
                else:
                    assert r == j + k and q == k


def test_legacyPhase1_eq() -> None:
    for bits in itertools.product([False, True], repeat=6):
        c = lambda i, b=bits: i < len(b) and b[i]  # noqa: E731
        for i, q, k in itertools.product(range(7), range(3), range(8)):
            assert legacy_phase1(c, i, q, k) == (scan_run(c, i, k), q + scan_probes(c, i, k))


def test_fineDown_some_none_and_probes() -> None:
    """fineDown_some, fineDown_none, fineDownProbes_some, fineDownProbes_none."""
    for bits in itertools.product([False, True], repeat=7):
        f = lambda j, b=bits: j < len(b) and b[j]  # noqa: E731
        for lo in range(8):
            for k in range(9 - lo):
                t = fine_down(f, lo, k)
                probes = fine_down_probes(f, lo, k)
                if t is not None:
                    assert lo <= t < lo + k and f(t)
                    assert not any(f(i) for i in range(t + 1, lo + k))
                    assert probes + t == lo + k
                else:
                    assert not any(f(i) for i in range(lo, lo + k))
                    assert probes == k


def test_legacyPhase2_eq() -> None:
    for bits in itertools.product([False, True], repeat=6):
        f = lambda j, b=bits: j < len(b) and b[j]  # noqa: E731
        for lo, q, k in itertools.product(range(7), range(3), range(7)):
            assert legacy_phase2(f, lo, q, k) == (fine_down(f, lo, k),
                                                  q + fine_down_probes(f, lo, k))


def test_finishHit_le_and_cdivN_le() -> None:
    """finishHit_le, cdivN_le."""
    for raw, bs, align, eagle in itertools.product(range(60), range(1, 9), range(1, 9),
                                                   (False, True)):
        assert finish_hit(raw, bs, align, eagle) <= raw
    for h, q, bs in itertools.product(range(80), range(12), range(1, 9)):
        if h <= q * bs:
            assert cdiv_n(h, bs) <= q


def test_tailTokens_le() -> None:
    for bs, align in [(b, a) for b in range(1, 13) for a in range(1, 13) if fine_mode(b, a)]:
        for p, max_length, n_fine in itertools.product(range(5), range(0, 60, 3), range(0, 30, 2)):
            for j in range(fine_hi(p, bs, align, max_length, n_fine)):
                assert (j + 1) * align <= (p + 1) * bs


def check_fullHit_theorems(case: Case) -> None:
    """fullHit_fine / fullHit_not_fine (unfolding), fullHit_prefix_cached,
    fullHit_prefix_maximal, fullHit_tail_not_fine, fullHit_tail_highest,
    fullHit_tail_none, fullHit_hit_le_raw, fullHit_aligned, fullHit_trim,
    fullHit_blocks_exist, fullHit_probes_phase1."""
    c, f, n_cached, n_fine, max_length, bs, align, eagle = case.lean_args()
    r = lean_full_hit(*case.lean_args())
    limit = phase1_limit(max_length, bs, n_cached)
    # fullHit_prefix_cached / fullHit_prefix_maximal
    assert all(c(i) for i in range(r.prefix))
    assert r.prefix <= limit and (r.prefix == limit or not c(r.prefix))
    lo, hi = fine_lo(r.prefix, bs, align), fine_hi(r.prefix, bs, align, max_length, n_fine)
    if not fine_mode(bs, align):
        assert r.tail is None  # fullHit_tail_not_fine
        # fullHit_probes_phase1
        assert r.probes == r.prefix + (1 if r.prefix < limit else 0)
    elif r.tail is not None:  # fullHit_tail_highest
        assert lo <= r.tail < hi and f(r.tail)
        assert not any(f(i) for i in range(r.tail + 1, hi))
    else:  # fullHit_tail_none
        assert not any(f(i) for i in range(lo, hi))
    # fullHit_hit_le_raw
    raw = raw_hit(r.prefix, r.tail, bs, align)
    assert r.hit_tokens == finish_hit(raw, bs, align, eagle) <= raw
    assert r.hit_tokens % align == 0  # fullHit_aligned
    assert r.num_blocks == cdiv_n(r.hit_tokens, bs)  # fullHit_trim
    # fullHit_blocks_exist
    assert r.num_blocks <= r.prefix + (0 if r.tail is None else 1)


def test_fullHit_theorems() -> None:
    for_all(check_fullHit_theorems, "fullHit_*")


@random_cases
@given(seed=st.integers(0, 2**32 - 1))
def test_fullHit_theorems_random(seed: int) -> None:
    check_fullHit_theorems(random_case(random.Random(seed)))


def test_legacyFinish_eq() -> None:
    for p, t, bs, align, eagle in itertools.product(range(5), [None, 0, 3, 7, 11], range(1, 7),
                                                    range(1, 7), (False, True)):
        h = raw_hit(p, t, bs, align)
        fin = finish_hit(h, bs, align, eagle)
        for cl in range(cdiv_n(fin, bs), cdiv_n(fin, bs) + 3):
            assert legacy_finish(h, cl, p, t, 5, bs, align, eagle) == \
                full_finish(p, t, 5, bs, align, eagle)


def check_legacy_eq(case: Case) -> None:
    assert lean_legacy_full_scan(*case.lean_args()) == lean_full_hit(*case.lean_args()), case


def test_legacyFullScan_eq_fullHit() -> None:
    for_all(check_legacy_eq, "legacyFullScan_eq_fullHit")


@random_cases
@given(seed=st.integers(0, 2**32 - 1))
def test_legacyFullScan_eq_fullHit_random(seed: int) -> None:
    check_legacy_eq(random_case(random.Random(seed)))
