"""Every Lean theorem of ``Lean/PrefixCache/Thm`` as an executable property.

No Lean toolchain can run on these machines, so a false theorem statement
would only be caught on a machine with Lean. Here each statement is checked
against pyspec instead, exhaustively on small inputs and with Hypothesis on
larger ones: a statement that is false for the code it talks about fails
here first.

Two layers:

* ``_Lean*`` functions transcribe the Lean definitions line for line
  (``Nat`` subtraction is ``_sub``, truncating at 0; the cache is a total
  function ``cached(i)``), and ``test_lean_transcription_matches_pyspec``
  checks that they compute what pyspec computes;
* each ``test_<theoremName>`` checks the Lean statement, quoted in its
  docstring, on pyspec's functions (and on the transcription where the
  statement is about a Lean-only companion such as ``strideReads``).
"""

import itertools
import random

from conftest import CASE_COUNTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swa_prefix_cache.pyspec import (
    CountingMask,
    SearchParams,
    aligned_end,
    contiguous_blocks_for_hit,
    find_hit,
    legacy_scan,
    prefix_fallback,
    realign,
    stride_search,
)
from swa_prefix_cache.pyspec.search import last_aligned_end

# ---------------------------------------------------------------------------
# Line-for-line transcription of the Lean definitions (Spec/*.lean)
# ---------------------------------------------------------------------------


def _sub(a: int, b: int) -> int:
    """Lean's ``Nat`` subtraction."""
    return a - b if a >= b else 0


def _min_n(a: int, b: int) -> int:
    return a if a <= b else b


def _aligned(period: int, eg: int, e: int) -> bool:
    """``AlignedEnd period eg e``."""
    return eg <= e and (e - eg) % period == 0


def _align_down(bound: int, period: int, eg: int) -> int:
    return _sub(bound, _sub(bound, eg) % period)


def _last_aligned_end(bound: int, period: int, eg: int) -> int | None:
    return None if bound < eg else _align_down(bound, period, eg)


def _scan_run(cached, j: int, k: int) -> int:
    for _ in range(k):
        if not cached(j):
            return j
        j += 1
    return j


def _scan_probes(cached, j: int, k: int) -> int:
    count = 0
    for _ in range(k):
        count += 1
        if not cached(j):
            return count
        j += 1
    return count


def _scan_reads(cached, j: int, k: int) -> set[int]:
    reads = set()
    for _ in range(k):
        reads.add(j)
        if not cached(j):
            return reads
        j += 1
    return reads


def _stride_round(cached, need, period, eg, bound, known_lo):
    """One round of ``strideLoop``: ``("none",)``, ``("some", e)`` or
    ``("next", reads_start, reads_len, miss, start)``."""
    if bound < eg:
        return ("none",)
    end = _align_down(bound, period, eg)
    if end < need:
        return ("none",)
    start = _sub(end, need)  # winStart
    limit = _min_n(end, known_lo)  # scanLimit
    miss = _scan_run(cached, start, _sub(limit, start))  # missAt
    if miss < limit:
        return ("next", start, _sub(limit, start), miss, start)
    return ("some", end, start, _sub(limit, start))


def _stride_loop(cached, need, period, eg, fuel, bound, known_lo):
    """``strideLoop`` with its probe count and read set."""
    probes, reads = 0, set()
    while fuel > 0:
        fuel -= 1
        r = _stride_round(cached, need, period, eg, bound, known_lo)
        if r[0] == "none":
            return None, probes, reads
        if r[0] == "some":
            _, end, start, k = r
            probes += _scan_probes(cached, start, k)
            reads |= _scan_reads(cached, start, k)
            return end, probes, reads
        _, start, k, miss, new_lo = r
        probes += _scan_probes(cached, start, k)
        reads |= _scan_reads(cached, start, k)
        bound, known_lo = miss, new_lo
    return None, probes, reads


def _stride_search(cached, n, need, period, eg):
    """``(strideSearch, strideProbes, strideReads)``."""
    return _stride_loop(cached, need, period, eg, n + 1, n, n)


def _last_aligned_clamp(period, eg, p):
    return 0 if p < eg else _align_down(p, period, eg)


def _eagle_pop(period, eg, length):
    return realign(_sub(length, 1), period) if 0 < eg and 0 < length else length


def _fallback_length(period, eg, p):
    return _eagle_pop(period, eg, realign(_last_aligned_clamp(period, eg, p), period))


def _prefix_limit(n, need):
    return _min_n(_sub(need, 1), n)


def _prefix_run(cached, n, need):
    return _scan_run(cached, 0, _prefix_limit(n, need))


def _prefix_fallback(cached, n, need, period, eg):
    return _fallback_length(period, eg, _prefix_run(cached, n, need))


def _eff_need(need):
    return 1 if need == 0 else need


def _find_hit(cached, n, need, period, eg):
    need = _eff_need(need)
    end, _, _ = _stride_search(cached, n, need, period, eg)
    if end is not None:
        return (_sub(end, eg), _sub(end, need))
    return (_prefix_fallback(cached, n, need, period, eg), 0)


def _legacy_loop(cached, need, period, eg, k, run):
    for i in range(k - 1, -1, -1):
        if cached(i):
            if run == 0 and not _aligned(period, eg, i + 1):
                continue
            if need <= run + 1:
                return i, run + 1
            run += 1
        else:
            run = 0
    return None, run


def _legacy_scan(cached, n, need, period, eg):
    i, run = _legacy_loop(cached, need, period, eg, n, 0)
    if i is not None:
        length = _eagle_pop(period, eg, i + run)
        return (length, _min_n(i, length))
    return (_eagle_pop(period, eg, realign(run, period)), 0)


# ---------------------------------------------------------------------------
# The declarative predicates (Spec/Window.lean, Spec/Answer.lean), brute force
# ---------------------------------------------------------------------------


def _all_cached(cached, s, e):
    return all(cached(i) for i in range(s, e))


def _valid_window(cached, n, need, s, e):
    return s <= e and e <= n and need <= e - s and _all_cached(cached, s, e)


def _valid_aligned_ends(cached, n, need, period, eg):
    """Every ``e`` with ``AlignedEnd`` and ``ValidWindow (e - need) e``
    (``e > n`` is never valid, so ``range(n + 1)`` covers them all)."""
    return [
        e
        for e in range(n + 1)
        if _aligned(period, eg, e) and _valid_window(cached, n, need, _sub(e, need), e)
    ]


def _is_max_cached_prefix(cached, limit, p):
    return p <= limit and _all_cached(cached, 0, p) and (p == limit or not cached(p))


def _swa_hit(cached, n, need, period, eg):
    """The unique ``h`` with ``SwaHit cached n need period eg h``."""
    ends = _valid_aligned_ends(cached, n, need, period, eg)
    if ends:
        e = max(ends)
        return (e - eg, e - need)
    limit = _prefix_limit(n, need)
    prefixes = [p for p in range(limit + 1) if _is_max_cached_prefix(cached, limit, p)]
    assert len(prefixes) == 1  # maxCachedPrefix_unique
    return (_fallback_length(period, eg, prefixes[0]), 0)


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------

MAX_EXHAUSTIVE_N = 7
NEEDS = (1, 2, 3, 4)
PERIODS = (1, 2, 3, 4)


def _cached_fn(mask: bytes, tail: bytes = b""):
    """A total ``cached : Nat → Bool``: the mask, then ``tail`` (garbage past
    ``n`` that a correct search never looks at), then misses."""
    full = mask + tail

    def cached(i: int) -> bool:
        return i < len(full) and full[i] != 0

    return cached


def _exhaustive():
    """Every mask of up to ``MAX_EXHAUSTIVE_N`` blocks x need x period x EAGLE."""
    for n in range(MAX_EXHAUSTIVE_N + 1):
        for bits in range(1 << n):
            mask = bytes((bits >> i) & 1 for i in range(n))
            for need, period, eg in itertools.product(NEEDS, PERIODS, (0, 1)):
                yield mask, need, period, eg


def _params(mask, need, period, eg):
    return SearchParams(n=len(mask), need=need, period=period, eagle=bool(eg))


masks = st.integers(min_value=0, max_value=48).flatmap(
    lambda n: st.one_of(
        st.binary(min_size=n, max_size=n),
        # dense masks: long cached runs with a few misses
        st.lists(st.sampled_from([1, 1, 1, 1, 1, 1, 0]), min_size=n, max_size=n).map(bytes),
    )
)
cases = st.tuples(
    masks,
    st.integers(min_value=1, max_value=12),
    st.integers(min_value=1, max_value=6),
    st.integers(min_value=0, max_value=1),
)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _count(name: str, k: int) -> None:
    CASE_COUNTS[f"lean statements: {name}"] += k


# ---------------------------------------------------------------------------
# The transcription computes what pyspec computes
# ---------------------------------------------------------------------------


def _check_transcription(mask, need, period, eg):
    p = _params(mask, need, period, eg)
    c = _cached_fn(mask)
    end, probes, _ = _stride_search(c, len(mask), need, period, eg)
    counting = CountingMask(mask)
    assert end == stride_search(counting, p)
    assert probes == counting.probes
    assert _prefix_fallback(c, len(mask), need, period, eg) == prefix_fallback(mask, p)
    hit = find_hit(mask, p)
    assert _find_hit(c, len(mask), need, period, eg) == (hit.length, hit.first_real)


def test_lean_transcription_matches_pyspec() -> None:
    """The Python transcription of Spec/Stride.lean (strideSearch,
    strideProbes, prefixFallback, findHit) equals pyspec, probe counts
    included; so every test below that uses pyspec tests the Lean
    definitions too."""
    k = 0
    for case in _exhaustive():
        _check_transcription(*case)
        k += 1
    _count("transcription", k)


@SETTINGS
@given(cases)
def test_lean_transcription_matches_pyspec_random(case) -> None:
    _check_transcription(*case)


def _vllm_args():
    """vLLM arguments covering block sizes 1-3, alignment ratios, windows
    giving need from -1 to 6 blocks, and EAGLE."""
    for block_size in (1, 2, 3):
        for alignment in sorted({block_size, 2 * block_size, 3 * block_size, 2, 5}):
            for window in range(-block_size, 6 * block_size + 2, max(block_size - 1, 1)):
                for eagle in (False, True):
                    yield block_size, alignment, window, eagle


def test_legacy_transcription_matches_pyspec() -> None:
    """Spec/Legacy.lean's `legacyScan`, with the gate `AlignedEnd (i + 1)` on
    `period = alignment_period(...)` and `need` the raw vLLM block count
    (negative counts as 0), equals `swa_prefix_cache.pyspec.legacy_scan` on vLLM's own
    arguments; this is the claim that abstracting vLLM's token arithmetic to
    `AlignedEnd` loses nothing."""
    rng = random.Random(20240611)
    k = 0
    for block_size, alignment, window, eagle in _vllm_args():
        for _ in range(12):
            n = rng.randint(0, 9)
            mask = bytes(rng.random() < 0.7 for _ in range(n))
            max_length = n * block_size + rng.randint(0, block_size - 1)
            raw = (max_length, block_size, window, alignment, eagle)
            p = SearchParams.from_vllm(*raw)
            need_raw = max(contiguous_blocks_for_hit(window, block_size, eagle), 0)
            expected = legacy_scan(mask, *raw)
            got = _legacy_scan(_cached_fn(mask), p.n, need_raw, p.period, int(eagle))
            assert got == (expected.length, expected.first_real), raw
            k += 1
    _count("legacy transcription", k)


def test_lastAlignedEnd_matches_pyspec() -> None:
    """`lastAlignedEnd bound period eg = if bound < eg then none else some
    (alignDown bound period eg)` is pyspec `last_aligned_end` (`-1` for
    `none`); `AlignedEnd` is pyspec `aligned_end` wherever `e ≥ eg`;
    `alignDown_aligned` / `le_alignDown_of_aligned`: it is the largest
    aligned end at or below `bound`."""
    for period in range(1, 7):
        for eg in (0, 1):
            for bound in range(0, 30):
                got = _last_aligned_end(bound, period, eg)
                want = last_aligned_end(bound, period, bool(eg))
                assert (got if got is not None else -1) == want
                if got is not None:
                    assert _aligned(period, eg, got)
                    assert all(not _aligned(period, eg, e) for e in range(got + 1, bound + 1))
            for e in range(eg, 30):
                assert _aligned(period, eg, e) == aligned_end(e, period, bool(eg))


# ---------------------------------------------------------------------------
# Thm/Stride.lean
# ---------------------------------------------------------------------------


def _check_sound(mask, need, period, eg):
    c = _cached_fn(mask)
    e = stride_search(mask, _params(mask, need, period, eg))
    if e is not None:
        assert _valid_window(c, len(mask), need, _sub(e, need), e)
        assert _aligned(period, eg, e)


def test_strideSearch_sound() -> None:
    """`strideSearch cached n need period eg = some e →
    ValidWindow cached n need (e - need) e ∧ AlignedEnd period eg e`
    (with `1 ≤ need`, `1 ≤ period`)."""
    k = 0
    for case in _exhaustive():
        _check_sound(*case)
        k += 1
    _count("strideSearch_sound", k)


@SETTINGS
@given(cases)
def test_strideSearch_sound_random(case) -> None:
    _check_sound(*case)


def _check_optimal(mask, need, period, eg):
    c = _cached_fn(mask)
    e = stride_search(mask, _params(mask, need, period, eg))
    ends = _valid_aligned_ends(c, len(mask), need, period, eg)
    if e is not None:
        assert all(e2 <= e for e2 in ends)
    else:
        assert ends == []


def test_strideSearch_optimal() -> None:
    """`(strideSearch … = some e → ∀ e', AlignedEnd period eg e' →
    ValidWindow cached n need (e' - need) e' → e' ≤ e) ∧
    (strideSearch … = none → ∀ e', AlignedEnd period eg e' →
    ¬ ValidWindow cached n need (e' - need) e')`."""
    k = 0
    for case in _exhaustive():
        _check_optimal(*case)
        k += 1
    _count("strideSearch_optimal", k)


@SETTINGS
@given(cases)
def test_strideSearch_optimal_random(case) -> None:
    _check_optimal(*case)


class _BoundedMask:
    """A mask that fails the test on any read at or past ``n``."""

    def __init__(self, mask: bytes) -> None:
        self._mask = mask
        self.reads: list[int] = []

    def __len__(self) -> int:
        return len(self._mask)

    def __getitem__(self, i: int) -> bool:
        assert 0 <= i < len(self._mask), f"read of block {i} outside [0, {len(self._mask)})"
        self.reads.append(i)
        return bool(self._mask[i])


def _check_boundary(mask, need, period, eg, tail=b"\x01\x00\x01"):
    n = len(mask)
    p = _params(mask, need, period, eg)
    bounded = _BoundedMask(mask)
    e = stride_search(bounded, p)
    # The Lean companion `strideReads` (with garbage past n) agrees and is < n.
    end, _, reads = _stride_search(_cached_fn(mask, tail), n, need, period, eg)
    assert end == e
    assert reads == set(bounded.reads)
    assert all(i < n for i in reads)
    if e is not None:
        assert need <= e <= n
        assert all(i < n for i in range(e - need, e))


def test_strideSearch_boundary_safety() -> None:
    """`(∀ i, strideReads cached n need period eg i → i < n) ∧
    (∀ e, strideSearch … = some e → need ≤ e ∧ e ≤ n ∧
    ∀ i, e - need ≤ i → i < e → i < n)`. Also: blocks past `n` never
    change the answer (the transcription sees garbage there)."""
    k = 0
    for case in _exhaustive():
        _check_boundary(*case)
        k += 1
    _count("strideSearch_boundary_safety", k)


@SETTINGS
@given(cases, st.binary(max_size=8))
def test_strideSearch_boundary_safety_random(case, tail) -> None:
    _check_boundary(*case, tail=tail)


def test_strideSearch_total() -> None:
    """`n < fuel → strideLoop cached need period eg fuel n n =
    strideSearch cached n need period eg`: the fuel never cuts the loop."""
    k = 0
    for mask, need, period, eg in _exhaustive():
        c = _cached_fn(mask)
        n = len(mask)
        base = _stride_search(c, n, need, period, eg)
        for fuel in (n + 1, n + 2, 2 * n + 5):
            assert _stride_loop(c, need, period, eg, fuel, n, n) == base
        k += 1
    _count("strideSearch_total", k)


def _check_probe_bound(mask, need, period, eg):
    counting = CountingMask(mask)
    stride_search(counting, _params(mask, need, period, eg))
    assert counting.probes <= len(mask)
    _, probes, reads = _stride_search(_cached_fn(mask), len(mask), need, period, eg)
    assert probes == counting.probes
    assert probes == len(reads)  # each block read at most once


def test_strideSearch_probe_bound() -> None:
    """`strideProbes cached n need period eg ≤ n` (every block is read at
    most once)."""
    k = 0
    for case in _exhaustive():
        _check_probe_bound(*case)
        k += 1
    _count("strideSearch_probe_bound", k)


@SETTINGS
@given(cases)
def test_strideSearch_probe_bound_random(case) -> None:
    _check_probe_bound(*case)


# ---------------------------------------------------------------------------
# Thm/Fallback.lean
# ---------------------------------------------------------------------------


def _check_fallback(mask, need, period, eg):
    n = len(mask)
    c = _cached_fn(mask)
    r = prefix_fallback(mask, _params(mask, need, period, eg))
    assert _all_cached(c, 0, r)
    assert r <= need - 1 and r <= n
    assert r % period == 0
    limit = _prefix_limit(n, need)
    assert _is_max_cached_prefix(c, limit, _prefix_run(c, n, need))
    for p in range(limit + 1):
        if _is_max_cached_prefix(c, limit, p):
            assert r == _fallback_length(period, eg, p)


def test_prefixFallback_correct() -> None:
    """`AllCached cached 0 r ∧ r ≤ need - 1 ∧ r ≤ n ∧ r % period = 0 ∧
    MaxCachedPrefix cached (prefixLimit n need) (prefixRun cached n need) ∧
    ∀ p, MaxCachedPrefix cached (prefixLimit n need) p →
    r = fallbackLength period eg p` for `r = prefixFallback cached n need
    period eg` (with `1 ≤ period`)."""
    k = 0
    for case in _exhaustive():
        _check_fallback(*case)
        k += 1
    _count("prefixFallback_correct", k)


@SETTINGS
@given(cases)
def test_prefixFallback_correct_random(case) -> None:
    _check_fallback(*case)


# ---------------------------------------------------------------------------
# Thm/Legacy.lean and Thm/FindHit.lean
# ---------------------------------------------------------------------------


def _check_find_hit_spec(mask, need, period, eg):
    n = len(mask)
    want = _swa_hit(_cached_fn(mask), n, need, period, eg)
    hit = find_hit(mask, _params(mask, need, period, eg))
    assert (hit.length, hit.first_real) == want


def test_findHit_spec() -> None:
    """`SwaHit cached n (effNeed need) period eg (findHit cached n need period
    eg)`: the rightmost valid aligned window `e` gives `(e - eg, e - need)`,
    and with none the fallback formula on the maximal cached prefix `p`
    gives `(fallbackLength period eg p, 0)` (with `1 ≤ period`)."""
    k = 0
    for case in _exhaustive():
        _check_find_hit_spec(*case)
        k += 1
    _count("findHit_spec", k)


@SETTINGS
@given(cases)
def test_findHit_spec_random(case) -> None:
    _check_find_hit_spec(*case)


def test_legacyScan_spec() -> None:
    """`SwaHit cached n (effNeed need) period eg (legacyScan cached n need
    period eg)` (with `1 ≤ period`, `eg ≤ 1`): on the transcription for
    every small case, and on `swa_prefix_cache.pyspec.legacy_scan` itself with vLLM's
    arguments (need from -1 to 6 blocks, clamped to at least 1)."""
    k = 0
    for mask, need, period, eg in _exhaustive():
        c = _cached_fn(mask)
        assert _legacy_scan(c, len(mask), need, period, eg) == _swa_hit(
            c, len(mask), need, period, eg
        )
        k += 1
    rng = random.Random(11)
    for block_size, alignment, window, eagle in _vllm_args():
        for _ in range(8):
            n = rng.randint(0, 9)
            mask = bytes(rng.random() < 0.75 for _ in range(n))
            raw = (n * block_size, block_size, window, alignment, eagle)
            p = SearchParams.from_vllm(*raw)
            got = legacy_scan(mask, *raw)
            want = _swa_hit(_cached_fn(mask), n, p.need, p.period, int(eagle))
            assert (got.length, got.first_real) == want, raw
            k += 1
    _count("legacyScan_spec", k)


def _check_bounds(mask, need, period, eg):
    hit = find_hit(mask, _params(mask, need, period, eg))
    assert hit.first_real <= hit.length <= len(mask)
    assert hit.length % period == 0


def test_findHit_bounds() -> None:
    """`firstReal ≤ length ∧ length ≤ n ∧ length % period = 0` for
    `findHit cached n need period eg` (with `1 ≤ period`, `eg ≤ 1`)."""
    k = 0
    for case in _exhaustive():
        _check_bounds(*case)
        k += 1
    _count("findHit_bounds", k)


def _check_eq(raw, mask):
    p = SearchParams.from_vllm(*raw)
    expected = legacy_scan(mask, *raw)
    hit = find_hit(mask, p)
    assert hit == expected, raw


def test_findHit_eq_legacyScan() -> None:
    """`findHit cached n need period eg = legacyScan cached n need period eg`
    (with `1 ≤ period`, `eg ≤ 1`), checked on pyspec with vLLM's own
    arguments, needs from -1 to 6 blocks included."""
    rng = random.Random(7)
    k = 0
    for block_size, alignment, window, eagle in _vllm_args():
        for _ in range(12):
            n = rng.randint(0, 10)
            mask = bytes(rng.random() < 0.75 for _ in range(n))
            raw = (n * block_size, block_size, window, alignment, eagle)
            _check_eq(raw, mask)
            k += 1
    _count("findHit_eq_legacyScan", k)


def test_strideSearch_eq_legacyScan() -> None:
    """`legacyScan cached n need period eg = hitOf cached n (effNeed need)
    period eg (strideSearch cached n (effNeed need) period eg)` (with
    `1 ≤ period`, `eg ≤ 1`), on the transcribed definitions, every mask up to
    `MAX_EXHAUSTIVE_N` blocks, `need` 0..4 (0 is clamped)."""
    k = 0
    for n in range(MAX_EXHAUSTIVE_N + 1):
        for bits in range(1 << n):
            mask = bytes((bits >> i) & 1 for i in range(n))
            c = _cached_fn(mask, tail=b"\x01\x01")
            for need, period, eg in itertools.product((0,) + NEEDS, PERIODS, (0, 1)):
                eff = _eff_need(need)
                end, _, _ = _stride_search(c, n, eff, period, eg)
                if end is not None:
                    named = (_sub(end, eg), _sub(end, eff))
                else:
                    named = (_prefix_fallback(c, n, eff, period, eg), 0)
                assert _legacy_scan(c, n, need, period, eg) == named, (mask, need, period, eg)
                k += 1
    _count("strideSearch_eq_legacyScan", k)


@SETTINGS
@given(
    masks,
    st.integers(min_value=1, max_value=4),
    st.integers(min_value=-3, max_value=40),
    st.integers(min_value=1, max_value=12),
    st.booleans(),
)
def test_findHit_eq_legacyScan_random(mask, block_size, window, alignment, eagle) -> None:
    _check_eq((len(mask) * block_size, block_size, window, alignment, eagle), mask)


def test_findHit_need_zero() -> None:
    """`findHit cached n 0 period eg = findHit cached n 1 period eg` and
    `legacyScan cached n 0 period eg = legacyScan cached n 1 period eg`
    (`legacyScan_need_zero`; also `legacyLoop_need_zero`), and on pyspec:
    a vLLM window that needs 0 or fewer blocks behaves like one that needs 1."""
    k = 0
    for n in range(MAX_EXHAUSTIVE_N + 1):
        for bits in range(1 << n):
            mask = bytes((bits >> i) & 1 for i in range(n))
            c = _cached_fn(mask)
            for period, eg in itertools.product(PERIODS, (0, 1)):
                assert _find_hit(c, n, 0, period, eg) == _find_hit(c, n, 1, period, eg)
                assert _legacy_scan(c, n, 0, period, eg) == _legacy_scan(c, n, 1, period, eg)
                for run in range(3):
                    assert _legacy_loop(c, 0, period, eg, n, run) == _legacy_loop(
                        c, 1, period, eg, n, run
                    )
                k += 1
            # pyspec: windows of 0 or 1 token need <= 0 blocks without EAGLE.
            for window in (0, 1, -5):
                raw = (n * 2, 2, window, 2, False)
                assert contiguous_blocks_for_hit(window, 2, False) <= 0
                one = find_hit(mask, SearchParams(n=n, need=1, period=1, eagle=False))
                assert legacy_scan(mask, *raw) == one
                assert find_hit(mask, SearchParams.from_vllm(*raw)) == one
    _count("findHit_need_zero", k)


# ---------------------------------------------------------------------------
# The loop lemmas, for every state satisfying their hypotheses (not only the
# states the loops reach): a false induction hypothesis would fail here.
# ---------------------------------------------------------------------------

SMALL_N = 6


def _small_cases():
    for n in range(SMALL_N + 1):
        for bits in range(1 << n):
            mask = bytes((bits >> i) & 1 for i in range(n))
            for need, period, eg in itertools.product((1, 2, 3), (1, 2, 3), (0, 1)):
                yield mask, need, period, eg


def _no_valid_after(c, n, need, period, eg, b):
    return all(e <= b for e in _valid_aligned_ends(c, n, need, period, eg))


def test_strideLoop_correct() -> None:
    """`bound < fuel → bound ≤ n → AllCached cached knownLo bound →
    NoValidAfter cached n need period eg bound →
    (∀ e, strideLoop … fuel bound knownLo = some e → IsRightmost … e) ∧
    (strideLoop … = none → NoValidWindow …)`; also `strideLoop_fuel`
    (any two fuels above `bound` agree), `strideProbesLoop_le`
    (probes ≤ bound and ≤ knownLo) and `strideReadsLoop_lt` (reads < bound)."""
    k = 0
    for mask, need, period, eg in _small_cases():
        n = len(mask)
        c = _cached_fn(mask, b"\x01\x01")
        ends = _valid_aligned_ends(c, n, need, period, eg)
        for bound in range(n + 3):
            for known_lo in range(n + 3):
                fuel = bound + 1
                e, probes, reads = _stride_loop(c, need, period, eg, fuel, bound, known_lo)
                # strideLoop_fuel, strideProbesLoop_le, strideReadsLoop_lt:
                # no hypotheses besides the fuel.
                assert (e, probes, reads) == _stride_loop(
                    c, need, period, eg, fuel + 3, bound, known_lo
                )
                assert probes <= bound and probes <= known_lo
                assert all(i < bound for i in reads)
                if not (
                    bound <= n
                    and _all_cached(c, known_lo, bound)
                    and _no_valid_after(c, n, need, period, eg, bound)
                ):
                    continue
                if e is not None:
                    assert e in ends and e == max(ends)
                else:
                    assert ends == []
                k += 1
    _count("strideLoop_correct", k)


def _final_run(c, n, need, period, eg, r):
    return (
        r <= n
        and r < need
        and _all_cached(c, 0, r)
        and (r == 0 or _aligned(period, eg, r))
        and not any(
            _aligned(period, eg, e) and _all_cached(c, 0, e) for e in range(r + 1, n + 1)
        )
    )


def test_legacyLoop_spec() -> None:
    """For every `(k, run)` with `k + run ≤ n`, `AllCached cached k (k + run)`,
    `run < need`, `0 < run → AlignedEnd period eg (k + run)`,
    `NoValidAfter … (k + run)` and no aligned `e ∈ (k + run, n]` with
    `AllCached cached k e`: `legacyLoop … k run = (some i, r) → r = need ∧
    IsRightmost … (i + need)` and `= (none, r) → NoValidWindow … ∧
    FinalRun … r`; and `finalRun_eq_clamp`: `FinalRun … r →
    r = lastAlignedClamp period eg (prefixRun cached n need)`."""
    k = 0
    for mask, need, period, eg in _small_cases():
        n = len(mask)
        c = _cached_fn(mask, b"\x01")
        ends = _valid_aligned_ends(c, n, need, period, eg)
        clamp = _last_aligned_clamp(period, eg, _prefix_run(c, n, need))
        for r in range(n + 1):
            if _final_run(c, n, need, period, eg, r):
                assert r == clamp
        for kk in range(n + 1):
            for run in range(0, n + 1 - kk):
                hyps = (
                    _all_cached(c, kk, kk + run)
                    and run < need
                    and (run == 0 or _aligned(period, eg, kk + run))
                    and _no_valid_after(c, n, need, period, eg, kk + run)
                    and not any(
                        _aligned(period, eg, e) and _all_cached(c, kk, e)
                        for e in range(kk + run + 1, n + 1)
                    )
                )
                if not hyps:
                    continue
                i, r = _legacy_loop(c, need, period, eg, kk, run)
                if i is not None:
                    assert r == need and ends and i + need == max(ends)
                else:
                    assert ends == [] and _final_run(c, n, need, period, eg, r)
                k += 1
    _count("legacyLoop_spec", k)


def test_scan_and_arith_lemmas() -> None:
    """Thm/Scan.lean: `scanRun_bounds` (`j ≤ r ≤ j + k`), `scanRun_cached`,
    `scanRun_miss` (`r < j + k → ¬ cached r`), `scanProbes_bound`
    (`probes + j ≤ r + 1 ∧ probes ≤ k`), `scanReads_range`.
    Thm/Arith.lean and Thm/Fallback.lean: `realign_mod`, `realign_le`,
    `realign_of_mod`, `alignDown_aligned`, `le_alignDown_of_aligned`,
    `eaglePop_le`, `eaglePop_aligned`, `fallbackLength_le`,
    `fallbackLength_mod`, `minN_spec`."""
    for bits in range(1 << 6):
        c = _cached_fn(bytes((bits >> i) & 1 for i in range(6)))
        for j in range(7):
            for k in range(7):
                r = _scan_run(c, j, k)
                assert j <= r <= j + k
                assert _all_cached(c, j, r)
                if r < j + k:
                    assert not c(r)
                probes = _scan_probes(c, j, k)
                assert probes + j <= r + 1 and probes <= k
                assert all(j <= i < j + k for i in _scan_reads(c, j, k))
    for p in range(1, 7):
        for eg in (0, 1):
            for x in range(40):
                assert realign(x, p) % p == 0 and realign(x, p) <= x
                if x % p == 0:
                    assert realign(x, p) == x
                if eg <= x:
                    a = _align_down(x, p, eg)
                    assert _aligned(p, eg, a)
                    assert all(e <= a for e in range(x + 1) if _aligned(p, eg, e))
                assert _eagle_pop(p, eg, x) <= x
                if _aligned(p, eg, x) and x >= 1:
                    assert _eagle_pop(p, eg, x) == x - eg
                f = _fallback_length(p, eg, x)
                assert f <= x and f % p == 0
    for a in range(10):
        for b in range(10):
            m = _min_n(a, b)
            assert m <= a and m <= b and m in (a, b)


# ---------------------------------------------------------------------------
# Spec/Joint.lean and Thm/Joint.lean: the multi-group fixed point
# ---------------------------------------------------------------------------

from swa_prefix_cache.pyspec.joint import Group, accepts, attention_groups, joint_lookup  # noqa: E402
from swa_prefix_cache.pyspec.params import cdiv  # noqa: E402
from swa_prefix_cache.pyspec.reachable import reachable_mask  # noqa: E402


def _realign(x, p):
    return x - x % p


def _lean_group(a):
    """`AttnGroup` of a pyspec AttentionGroup: (bs, full, winBlocks, eagle, cached)."""
    wb = 0 if a.sliding_window is None else cdiv(a.sliding_window - 1, a.block_size)
    return (a.block_size, a.sliding_window is None, wb, a.eagle, _cached_fn(bytes(a.cached)))


def _group_hit(g, align, drop, m):
    """`groupHit` (Spec/Joint.lean), line for line."""
    bs, full, wb, _eagle, cached = g
    if full:
        hit = _scan_run(cached, 0, m // bs) * bs
        if drop and 0 < hit:  # jointEagleDrop
            hit = _sub(hit, _min_n(align, bs))
        return _realign(hit, align)
    eg = int(drop)
    length, _ = _find_hit(cached, m // bs, wb + eg, align // bs, eg)
    return length * bs


def _call_max(g, cap, drop, c):
    return _min_n(c + g[0], cap) if drop else c


def _lean_accepts(g, align, cap, length):
    return _group_hit(g, align, g[3], _call_max(g, cap, g[3], length)) == length


def _lean_plain(g, align, length):
    return _group_hit(g, align, False, length) == length


def _joint_round(gs, align, cap, curr, verified, answers):
    verified, answers = set(verified), dict(answers)
    for idx, g in enumerate(gs):
        if g[1] and idx in answers:  # skipFull
            curr = _min_n(curr, answers[idx])
            continue
        drop = g[3] and idx not in verified  # dropFlag
        t = _group_hit(g, align, drop, _call_max(g, cap, drop, curr))  # stepAnswer
        if drop:
            verified.add(idx)
        elif t < curr:
            verified = set()
        answers[idx] = t
        curr = t
    return curr, verified, answers


def _joint_loop(gs, align, cap, fuel, hit, verified=(), answers=None):
    """`jointLoop`: (hitLength, rounds, trace)."""
    answers = {} if answers is None else answers
    if fuel == 0:
        return hit, 0, [hit]
    curr, v, a = _joint_round(gs, align, cap, hit, verified, answers)
    if hit <= curr:
        return hit, 1, [hit, hit]
    if len(gs) == 2 and gs[0][1]:  # isSimpleHybrid
        return curr, 1, [hit, curr]
    h, r, t = _joint_loop(gs, align, cap, fuel - 1, curr, v, a)
    return h, r + 1, [hit] + t


def _joint_cases():
    """Two bs-1 groups (full / windows 1..3, EAGLE on/off, masks up to 4
    blocks), and full bs 2 + SWA bs 1 + SWA bs 2 (alignment 2)."""
    for n in range(0, 5):
        masks = list(itertools.product((False, True), repeat=n))
        for w0, w1 in itertools.product((None, 1, 2, 3), repeat=2):
            for e0, e1 in itertools.product((False, True), repeat=2):
                for m0 in masks:
                    for m1 in masks:
                        yield [Group(1, w0, e0, m0), Group(1, w1, e1, m1)], 1, 1, n
    for n in (2, 4):
        m1s = list(itertools.product((False, True), repeat=n))
        m2s = list(itertools.product((False, True), repeat=n // 2))
        for w1, w2 in ((2, 3), (1, 5), (3, 2)):
            for eagle in itertools.product((False, True), repeat=3):
                for mf in m2s:
                    for m1 in m1s[:: 3 if n == 4 else 1]:
                        for m2 in m2s:
                            yield [
                                Group(2, None, eagle[0], mf),
                                Group(1, w1, eagle[1], m1),
                                Group(2, w2, eagle[2], m2),
                            ], 2, 1, n


def _joint_all():
    for groups, align, h, num_hash in _joint_cases():
        agroups = attention_groups(groups)
        gs = [_lean_group(a) for a in agroups]
        cap = num_hash * h
        for mx in range(0, num_hash * h + 1):
            yield groups, agroups, gs, align, h, num_hash, cap, mx


def test_joint_transcription_matches_pyspec() -> None:
    """Spec/Joint.lean's `jointLookup` (hit length, rounds, trace) and
    `groupHit` / `Accepts` / `PlainAccepts` equal pyspec `joint_lookup`,
    `group_hit` and `accepts` on attention groups."""
    k = 0
    for groups, agroups, gs, align, h, num_hash, cap, mx in _joint_all():
        r = joint_lookup(groups, mx, align, h, num_hash)
        assert _joint_loop(gs, align, cap, mx + 1, mx) == (r.hit_length, r.rounds, list(r.trace))
        for a, g in zip(agroups, gs):
            for length in range(mx + 1):
                assert _lean_accepts(g, align, cap, length) == accepts(a, length, align, cap)
                assert _lean_plain(g, align, length) == accepts(a, length, align, cap, plain=True)
        k += 1
    _count("joint transcription", k)


def _laws(g, align, cap, top):
    """(BoundedHit, AlignedHit, MonotoneHit) of one group on `[0, top]`."""
    bounded = all(
        _group_hit(g, align, False, c) <= c
        and _group_hit(g, align, True, _call_max(g, cap, True, c)) <= c
        for c in range(top + 1)
    )
    aligned = all(
        _group_hit(g, align, d, m) % align == 0 for d in (False, True) for m in range(top + 1)
    )
    mono = all(
        _group_hit(g, align, d, m) <= _group_hit(g, align, d, m + 1)
        for d in (False, True)
        for m in range(top)
    )
    return bounded, aligned, mono


def _drop_then_plain(g, align, cap, length):
    return not (g[3] and _lean_accepts(g, align, cap, length)) or _lean_plain(g, align, length)


def test_joint_laws() -> None:
    """The laws the joint theorems assume hold of pyspec's acceptors (block
    size dividing the alignment): `BoundedHit`, `AlignedHit`, `MonotoneHit`
    always; `DropThenPlain g align cap L` for every `L` when the group is
    not an EAGLE window of one token (`winBlocks ≥ 1` or full attention or
    no EAGLE), and it fails on pyspec's window-1 counterexample."""
    k = 0
    seen = set()
    for _groups, _agroups, gs, align, _h, _nh, cap, _mx in _joint_all():
        for g in gs:
            key = (g[:4], tuple(g[4](i) for i in range(6)), align, cap)
            if key in seen:
                continue
            seen.add(key)
            top = cap + 2 * g[0] + 2
            assert _laws(g, align, cap, top) == (True, True, True), key
            if g[1] or g[2] >= 1 or not g[3]:
                assert all(_drop_then_plain(g, align, cap, L) for L in range(top + 1)), key
            k += 1
    # Window of one token, EAGLE, block size 1, blocks [miss, hit]: accepts 1
    # with the drop, not plainly.
    g = _lean_group(attention_groups([Group(1, 1, True, (False, True)), Group(1, None, False, (True, True))])[1])
    assert _lean_accepts(g, 1, 2, 1) and not _lean_plain(g, 1, 1)
    _count("joint laws", k)


def test_jointLookup_total() -> None:
    """`jointLoop_fuel`: `hit < f → hit < g → jointLoop … f hit v ans =
    jointLoop … g hit v ans` (checked from the start state), and
    `jointLookup_total`."""
    k = 0
    for _g, _a, gs, align, _h, _nh, cap, mx in _joint_all():
        base = _joint_loop(gs, align, cap, mx + 1, mx)
        for fuel in (mx + 2, 2 * mx + 5):
            assert _joint_loop(gs, align, cap, fuel, mx) == base
        k += 1
    _count("jointLookup_total", k)


def test_jointLookup_rounds_le() -> None:
    """`jointLookup_rounds_le_max`: `rounds ≤ maxLength + 1`;
    `jointLookup_rounds_le`: `1 ≤ align → AllG AlignedHit gs → rounds ≤
    maxRoundsBound maxLength align = 2 + maxLength / align`."""
    k = 0
    for _g, _a, gs, align, _h, _nh, cap, mx in _joint_all():
        _, rounds, _ = _joint_loop(gs, align, cap, mx + 1, mx)
        assert rounds <= mx + 1
        assert rounds <= 2 + mx // align
        k += 1
    _count("jointLookup_rounds_le", k)


def _non_incr_from(a, xs):
    for x in xs:
        if x > a:
            return False
        a = x
    return True


def test_jointLookup_trace_nonincreasing() -> None:
    """`NonIncrFrom maxLength (jointLookup …).trace ∧ (jointLookup …).hitLength ≤ maxLength`."""
    k = 0
    for _g, _a, gs, align, _h, _nh, cap, mx in _joint_all():
        hit, _, trace = _joint_loop(gs, align, cap, mx + 1, mx)
        assert _non_incr_from(mx, trace) and hit <= mx
        k += 1
    _count("jointLookup_trace_nonincreasing", k)


def test_jointLookup_accepted() -> None:
    """`AllG (BoundedHit · align cap) gs → isSimpleHybrid gs = false →
    AllG (fun g => g.full = true ∨ Accepts g align cap R ∨ PlainAccepts g
    align R) gs` for `R = (jointLookup gs maxLength align cap).hitLength`
    (the laws are checked by `test_joint_laws`). Also the stronger fact
    pyspec asserts and Lean does not claim: full-attention groups accept R."""
    k = 0
    for _g, _a, gs, align, _h, _nh, cap, mx in _joint_all():
        r, _, _ = _joint_loop(gs, align, cap, mx + 1, mx)
        for g in gs:
            if g[1]:
                assert _lean_accepts(g, align, cap, r)
            if not (len(gs) == 2 and gs[0][1]):
                assert g[1] or _lean_accepts(g, align, cap, r) or _lean_plain(g, align, r)
        k += 1
    _count("jointLookup_accepted", k)


def test_jointLookup_maximal() -> None:
    """`AllG MonotoneHit gs → AllG (DropThenPlain · align cap L) gs → R < L →
    L ≤ maxLength → ¬ AllG (Accepts · align cap L) gs` (and
    `jointLookup_ge_accepted`). The hypotheses are checked per case, so the
    statement is tested exactly as stated (also where DropThenPlain fails,
    in which case it claims nothing)."""
    k = 0
    for _g, _a, gs, align, _h, _nh, cap, mx in _joint_all():
        r, _, _ = _joint_loop(gs, align, cap, mx + 1, mx)
        for L in range(r + 1, mx + 1):
            if all(_drop_then_plain(g, align, cap, L) for g in gs):
                assert not all(_lean_accepts(g, align, cap, L) for g in gs)
                k += 1
    # The window-1 counterexample: DropThenPlain fails and so does maximality.
    groups = [Group(1, 1, False, (False, True)), Group(1, 1, True, (False, True))]
    gs = [_lean_group(a) for a in attention_groups(groups)]
    r, _, _ = _joint_loop(gs, 1, 2, 3, 2)
    assert r == 0 and all(_lean_accepts(g, 1, 2, 1) for g in gs)
    assert not all(_drop_then_plain(g, 1, 2, 1) for g in gs)
    _count("jointLookup_maximal", k)


# ---------------------------------------------------------------------------
# Spec/Reachable.lean and Thm/Reachable.lean: the store mask
# ---------------------------------------------------------------------------


def _in_tail(b, need, eg, i):
    return _sub(b + eg, need) <= i < b + eg


def _seg_tokens(align, retention):
    return align if retention is None else retention


def _keep_block(has_seg, per, need, eg, has_final, fe, use_b, align, bs, bnd, i):
    seg = has_seg and any(_in_tail(k * per, need, eg, i) for k in range(1, i + need + 1))
    fin = has_final and fe % per != 0 and _sub(fe, fe % per) <= i and _sub(fe, need) <= i < fe
    bound = use_b and any(_in_tail(p // align * align // bs, need, eg, i) for p in bnd)
    return seg or fin or bound


def _lean_reachable(align, bs, wb, eagle, retention, bnd, fe):
    """`reachableMask` (Spec/Reachable.lean): None or the keep predicate."""
    eg = int(eagle)
    need = wb + eg
    if align % bs != 0:
        return None
    if retention == 0:
        return lambda i: _keep_block(False, 0, need, eg, False, 0, True, align, bs, bnd, i)
    per = _seg_tokens(align, retention) // bs
    if per <= need:
        return None
    has_final = fe is not None and not eagle
    fe0 = 0 if fe is None else fe
    return lambda i: _keep_block(
        True, per, need, eg, has_final, fe0, retention is not None, align, bs, bnd, i
    )


def _promised(align, bs, retention, bnd, b):
    seg = _seg_tokens(align, retention)
    if retention != 0 and seg > 0 and seg // bs > 0 and b % (seg // bs) == 0 and b >= seg // bs:
        return True
    return retention is not None and any(b == p // align * align // bs for p in bnd)


def _reachable_cases():
    for bs in (1, 2, 3):
        for align in sorted({bs, 2 * bs, 3 * bs, 4}):
            for window in range(1, 5 * bs + 2):
                wb = cdiv(window - 1, bs)
                for eagle in (False, True):
                    for retention in (None, 0, 2 * bs, 4 * bs, 5):
                        for bnd in ((), (7,), (3, 12)):
                            for fe in (None, 5, 8):
                                yield align, bs, window, wb, eagle, retention, bnd, fe


def test_reachable_transcription_matches_pyspec() -> None:
    """`reachableMask` (keep predicate) equals pyspec `reachable_mask` on
    every block of `[start, end)`, `None` included (windows of at least 1
    token, alignment at least 1)."""
    k = 0
    for align, bs, window, wb, eagle, retention, bnd, fe in _reachable_cases():
        lean = _lean_reachable(align, bs, wb, eagle, retention, bnd, fe)
        for start, end in ((0, 14), (3, 9)):
            want = reachable_mask(start, end, align, bs, window, eagle, retention, bnd, fe)
            if want is None:
                assert lean is None
            else:
                assert lean is not None
                assert [lean(i) for i in range(start, end)] == want
            k += 1
    _count("reachable transcription", k)


def test_reachableMask_keeps_tails_and_only_tails() -> None:
    """`reachableMask_keeps_tails`: `reachableMask … = some keep → Promised
    … b → InTail b (winBlocks + eg) eg i → keep i = true`;
    `reachableMask_only_tails`: `keep i = true → (∃ b, Promised … b ∧
    InTail b need eg i) ∨ (finalFlag eagle finalEnd = true ∧ InTail
    (finalEnd.getD 0) need 0 i)`."""
    k = 0
    for align, bs, _w, wb, eagle, retention, bnd, fe in _reachable_cases():
        keep = _lean_reachable(align, bs, wb, eagle, retention, bnd, fe)
        if keep is None:
            continue
        eg, need = int(eagle), wb + int(eagle)
        for i in range(30):
            tails = [b for b in range(i + need + 2) if _promised(align, bs, retention, bnd, b) and _in_tail(b, need, eg, i)]
            if tails:
                assert keep(i)
            if keep(i):
                final = fe is not None and not eagle and _in_tail(fe, need, 0, i)
                assert tails or final
            k += 1
    _count("reachableMask_keeps_tails / only_tails", k)


def test_reachableMask_complete() -> None:
    """`reachableMask_complete`: `reachableMask … = some keep → 1 ≤ winBlocks
    + eg → 1 ≤ period → strideSearch cached n (effNeed (winBlocks + eg))
    period eg = some e → Promised … (e - eg) → ∀ i, e - effNeed … ≤ i → i < e
    → keep i = true`, and `reachableMask_dropped_unread` (its
    contrapositive), on pyspec's `stride_search` over random caches; plus the
    two hypotheses' necessity: a window of one token without EAGLE (L1) and
    a kept block no promised window hit reads (W)."""
    rng = random.Random(5)
    k = 0
    for align, bs, _w, wb, eagle, retention, bnd, fe in _reachable_cases():
        keep = _lean_reachable(align, bs, wb, eagle, retention, bnd, fe)
        eg, need = int(eagle), wb + int(eagle)
        if keep is None or need < 1:
            continue
        for period in (1, 2, 3):
            for _ in range(6):
                n = rng.randint(0, 14)
                mask = bytes(rng.random() < 0.8 for _ in range(n))
                e = stride_search(mask, SearchParams(n=n, need=_eff_need(need), period=period, eagle=eagle))
                if e is None or not _promised(align, bs, retention, bnd, e - eg):
                    continue
                for i in range(_sub(e, _eff_need(need)), e):
                    assert keep(i)
                k += 1
    # L1: window of 1 token, no EAGLE: the mask keeps nothing, the lookup reads a block.
    keep = _lean_reachable(1, 1, 0, False, None, (), None)
    assert keep is not None and not any(keep(i) for i in range(5))
    assert stride_search(b"\x01\x01", SearchParams(n=2, need=1, period=1, eagle=False)) == 2
    # W: EAGLE, r = 0, boundary 0, window 2 tokens at bs 1: block 0 kept, but
    # the only promised length 0 has no window (e = 1 < need = 2).
    keep = _lean_reachable(1, 1, 1, True, 0, (0,), None)
    assert keep(0) and not any(keep(i) for i in range(1, 6))
    _count("reachableMask_complete", k)
