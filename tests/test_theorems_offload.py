"""Every Lean statement of ``Lean/PrefixCache/Thm/Offload.lean`` as an
executable property (no Lean toolchain runs here, so the Lean proofs are not
machine-checked on this machine; these tests make sure every statement
proved there is at least true on every small case).

``_lean_*`` functions transcribe ``Lean/PrefixCache/Spec/Offload.lean`` line
for line (the cache is a total function ``c(i)``; chunks at or beyond ``n``
are padding the functions must never depend on, checked by running each
case with two different paddings). ``test_lean_transcription_matches_pyspec``
checks the transcription computes what pyspec computes; each
``test_<theoremName>`` checks the statement quoted in its docstring.
``test_OffloadStrideEqLegacy`` / ``test_OffloadLegacyEqLookup`` check the two
equalities of the KV-offload lookup, proved in Lean (``offloadStrideSearch_eq_legacyOffloadScan``,
``legacyOffloadScan_eq_offloadLookup``: both loops meet the one declarative
answer ``OffloadAnswer``, ``test_OffloadAnswer``) and of the C twins by WP.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from conftest import CASE_COUNTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swa_prefix_cache.pyspec.offload_lookup import (
    CountingChunks,
    legacy_offload_scan,
    offload_lookup,
    offload_stride_search,
)

C = Callable[[int], int]


def _sub(a: int, b: int) -> int:
    return a - b if a >= b else 0


def _required(w: int, initial: int | None) -> int:
    if initial is None:
        return w
    return w if initial == 0 else initial


def _gate(p: bool, e: int) -> int | None:
    return None if p else e


def _pending_in(c: C, s: int, k: int) -> bool:
    return any(c(s + t) == 2 for t in range(k))


def _non_miss_b(c: C, s: int, k: int) -> bool:
    return all(c(s + t) != 0 for t in range(k))


def _rightmost_miss(c: C, k: int) -> int | None:
    while k > 0:
        if c(k - 1) == 0:
            return k - 1
        k -= 1
    return None


def _leading_run(c: C, j: int, k: int) -> int:
    for _ in range(k):
        if c(j) == 0:
            return j
        j += 1
    return j


def _last_window(c: C, w: int, e: int) -> int | None:
    while e > 0:
        if w <= e and _non_miss_b(c, _sub(e, w), w):
            return e
        e -= 1
    return 0 if w == 0 else None


def _lean_offload_lookup(c: C, n: int, w: int, initial: int | None) -> int | None:
    r = _required(w, initial)
    if 1 <= r <= n and _non_miss_b(c, _sub(n, r), r):
        return _gate(_pending_in(c, _sub(n, r), r), n)
    m = _rightmost_miss(c, n)
    if m is None:
        return _gate(_pending_in(c, 0, n), n)
    e = _last_window(c, w, m)
    if e is not None:
        return _gate(_pending_in(c, _sub(e, w), w), e)
    p = _leading_run(c, 0, n)
    return _gate(_pending_in(c, 0, p), p)


def _lean_legacy_loop(c: C, w: int, k: int, hits: int, pend: bool, req: int) -> int | None:
    """``offloadLegacyLoop`` (vLLM's loop, ``k`` chunks left)."""
    while k > 0:
        k -= 1
        if c(k) == 0:
            if w == 0:
                return _gate(False, k + w)
            hits, pend, req = 0, False, w
        else:
            if hits + 1 == req:
                return _gate(pend or c(k) == 2, k + req)
            hits, pend = hits + 1, pend or c(k) == 2
    return _gate(pend, hits)


def _lean_legacy(c: C, n: int, w: int, initial: int | None) -> int | None:
    return _lean_legacy_loop(c, w, n, 0, False, _required(w, initial))


def _phase1(c: C, n: int, r: int, k: int, count: int, pend: bool):  # type: ignore[no-untyped-def]
    while k > 0:
        k -= 1
        if c(k) == 0:
            return ("inr", k)
        if count + 1 == r:
            return ("inl", _gate(pend or c(k) == 2, n))
        count, pend = count + 1, pend or c(k) == 2
    return ("inl", _gate(pend, n))


def _scan_tri(c: C, j: int, k: int) -> tuple[int, bool]:
    if k == 0:
        return (j, False)
    if c(j) == 0:
        return (j, False)
    stop, p = _scan_tri(c, j + 1, k - 1)
    return (stop, c(j) == 2 or p)


def _scan_tri_probes(c: C, j: int, k: int) -> int:
    if k == 0:
        return 0
    if c(j) == 0:
        return 1
    return _scan_tri_probes(c, j + 1, k - 1) + 1


def _stride_loop2(c: C, w: int, fuel: int, bound: int, kl: int, kp: bool):  # type: ignore[no-untyped-def]
    while fuel > 0:
        fuel -= 1
        if bound < w:
            return ("inr", (bound, kl, kp))
        start = _sub(bound, w)
        stop, p = _scan_tri(c, start, _sub(kl, start))
        if stop == kl:
            return ("inl", _gate(p or kp, bound))
        bound, kl, kp = stop, start, p
    return ("inr", (bound, kl, kp))


def _phase3(c: C, bound: int, kl: int, kp: bool) -> int | None:
    stop, p = _scan_tri(c, 0, kl)
    if stop == kl:
        return _gate(p or kp, bound)
    return _gate(p, stop)


def _lean_stride(c: C, n: int, w: int, initial: int | None) -> int | None:
    tag, v = _phase1(c, n, _required(w, initial), n, 0, False)
    if tag == "inl":
        return v
    m = v
    if w == 0:
        return m
    tag, v = _stride_loop2(c, w, m + 1, m, m, False)
    if tag == "inl":
        return v
    b, kl, kp = v
    return _phase3(c, b, kl, kp)


def _fn(mask: list[int], pad: int) -> C:
    n = len(mask)
    return lambda i: mask[i] if i < n else pad


def small_cases(max_n: int):  # type: ignore[no-untyped-def]
    for n in range(max_n + 1):
        for mask in itertools.product((0, 1, 2), repeat=n):
            for w in range(n + 2):
                for initial in [None, *range(n + 2)]:
                    yield list(mask), w, initial


def test_lean_transcription_matches_pyspec() -> None:
    count = 0
    for mask, w, initial in small_cases(6):
        n = len(mask)
        want = offload_lookup(mask, w, initial)
        for pad in (0, 1, 2):
            c = _fn(mask, pad)
            assert _lean_offload_lookup(c, n, w, initial) == want
            assert _lean_legacy(c, n, w, initial) == want
            assert _lean_stride(c, n, w, initial) == want
        count += 1
    CASE_COUNTS["lean offload transcription"] += count


def test_OffloadStrideEqLegacy() -> None:
    """``offloadStrideSearch_eq_legacyOffloadScan`` (and ``OffloadStrideEqLegacy``):
    ``offloadStrideSearch c n w initial = legacyOffloadScan c n w initial``."""
    count = 0
    for mask, w, initial in small_cases(7):
        c = _fn(mask, 1)
        assert _lean_stride(c, len(mask), w, initial) == _lean_legacy(c, len(mask), w, initial)
        count += 1
    CASE_COUNTS["lean OffloadStrideEqLegacy"] += count


def test_OffloadLegacyEqLookup() -> None:
    """``legacyOffloadScan_eq_offloadLookup`` (and ``OffloadLegacyEqLookup``):
    ``legacyOffloadScan c n w initial = offloadLookup c n w initial``; also
    ``offloadStrideSearch_eq_offloadLookup``."""
    for mask, w, initial in small_cases(7):
        c = _fn(mask, 2)
        want = _lean_offload_lookup(c, len(mask), w, initial)
        assert _lean_legacy(c, len(mask), w, initial) == want
        assert _lean_stride(c, len(mask), w, initial) == want


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mask=st.lists(st.sampled_from([1] * 20 + [0, 2]), max_size=600),
    w=st.integers(0, 40),
    initial=st.one_of(st.none(), st.integers(0, 50)),
)
def test_equalities_large(mask: list[int], w: int, initial: int | None) -> None:
    """Both equalities, and pyspec's functions, on long masks."""
    c = _fn(mask, 1)
    n = len(mask)
    want = _lean_offload_lookup(c, n, w, initial)
    assert _lean_legacy(c, n, w, initial) == want
    assert _lean_stride(c, n, w, initial) == want
    assert legacy_offload_scan(CountingChunks(mask), n, w, initial) == want
    assert offload_stride_search(CountingChunks(mask), n, w, initial) == want


def _all_scans(max_len: int):  # type: ignore[no-untyped-def]
    for length in range(max_len + 1):
        for mask in itertools.product((0, 1, 2), repeat=length):
            c = _fn(list(mask), 1)
            for j in range(length + 1):
                for k in range(length - j + 1):
                    yield c, j, k


def test_scanTri_bounds_nonMiss_miss_noPending_probes() -> None:
    """``scanTri_bounds``: ``j ≤ stop ≤ j + k``; ``scanTri_nonMiss``: chunks
    ``[j, stop)`` non-miss; ``scanTri_miss``: ``stop < j + k → c stop = 0``;
    ``scanTri_noPending``: flag false → no pending in ``[j, stop)``;
    ``scanTriProbes_le``: at most ``k`` reads."""
    for c, j, k in _all_scans(6):
        stop, p = _scan_tri(c, j, k)
        assert j <= stop <= j + k
        assert all(c(i) != 0 for i in range(j, stop))
        if stop < j + k:
            assert c(stop) == 0
        assert p == any(c(i) == 2 for i in range(j, stop))
        assert _scan_tri_probes(c, j, k) <= k


def test_strideLoop2_fuel() -> None:
    """``bound < fuel → kl ≤ bound → bound < kl + w →
    strideLoop2 (fuel + 1) bound kl kp = strideLoop2 fuel bound kl kp``."""
    for length in range(7):
        for mask in itertools.product((0, 1, 2), repeat=length):
            c = _fn(list(mask), 1)
            for w in range(length + 2):
                for bound in range(length + 1):
                    for kl in range(bound + 1):
                        if not bound < kl + w:
                            continue
                        for kp in (False, True):
                            fuel = bound + 1
                            assert _stride_loop2(c, w, fuel + 1, bound, kl, kp) == _stride_loop2(
                                c, w, fuel, bound, kl, kp
                            )


def test_gate_lemmas() -> None:
    """``gate_none_iff``: ``gate p e = none ↔ p``; ``gate_some``:
    ``gate p e = some x → p = false ∧ x = e``."""
    for p in (False, True):
        for e in range(5):
            assert (_gate(p, e) is None) == p
            if _gate(p, e) is not None:
                assert not p and _gate(p, e) == e


def test_pendingIn_nonMissB_rightmostMiss_lastWindow_leadingRun() -> None:
    """``pendingIn_false``, ``nonMissB_true``, ``rightmostMiss_none``,
    ``lastWindow_sound`` (``w ≤ e ≤ e0`` and ``[e - w, e)`` non-miss),
    ``leadingRun_sound``."""
    for length in range(7):
        for mask in itertools.product((0, 1, 2), repeat=length):
            c = _fn(list(mask), 1)
            for s in range(length + 1):
                for k in range(length - s + 1):
                    if not _pending_in(c, s, k):
                        assert all(c(i) != 2 for i in range(s, s + k))
                    if _non_miss_b(c, s, k):
                        assert all(c(i) != 0 for i in range(s, s + k))
                    run = _leading_run(c, s, k)
                    assert s <= run <= s + k and all(c(i) != 0 for i in range(s, run))
            if _rightmost_miss(c, length) is None:
                assert all(c(i) != 0 for i in range(length))
            for w in range(length + 2):
                for e0 in range(length + 1):
                    e = _last_window(c, w, e0)
                    if e is not None:
                        assert w <= e <= e0 and _non_miss_b(c, e - w, w)


def test_offloadLookup_sound() -> None:
    """``offloadLookup c n w initial = some e → ∃ s, s ≤ e ∧ NonMiss c s e ∧
    NoPending c s e ∧ (e - s = requiredWindow w initial ∨ e - s = w ∨ s = 0)``."""
    count = 0
    for mask, w, initial in small_cases(7):
        e = offload_lookup(mask, w, initial)
        if e is None:
            continue
        r = _required(w, initial)
        ok = [
            s
            for s in range(e + 1)
            if all(mask[i] != 0 and mask[i] != 2 for i in range(s, e))
            and (e - s == r or e - s == w or s == 0)
        ]
        assert ok, (mask, w, initial, e)
        count += 1
    CASE_COUNTS["lean offloadLookup_sound"] += count


def test_scanTri_of_miss_of_hit_and_bool_splits() -> None:
    """``scanTri_of_miss``: ``c j = 0 → scanTri c j (k+1) = (j, false)``;
    ``scanTri_of_hit``: otherwise ``((scanTri c (j+1) k).1, c j == 2 ||
    (scanTri c (j+1) k).2)``; ``and_true_split``, ``or_false_split``."""
    for c, j, k in _all_scans(5):
        if c(j) == 0:
            assert _scan_tri(c, j, k + 1) == (j, False)
        else:
            stop, p = _scan_tri(c, j + 1, k)
            assert _scan_tri(c, j, k + 1) == (stop, c(j) == 2 or p)
    for a in (False, True):
        for b in (False, True):
            if a and b:
                assert a is True and b is True
            if not (a or b):
                assert a is False and b is False


# ---- the KV-offload proofs: helpers, characterisations, OffloadAnswer ----


def _non_miss(c: C, s: int, e: int) -> bool:
    return all(c(i) != 0 for i in range(s, e))


def _no_window_in(c: C, w: int, lo: int, hi: int) -> bool:
    """``NoWindowIn c w lo hi``: no ``e`` in ``(lo, hi]`` with ``w ≤ e`` and
    ``[e - w, e)`` non-miss."""
    return not any(w <= e and _non_miss(c, e - w, e) for e in range(lo + 1, hi + 1))


def _window_answer(c: C, w: int, m: int, a: int | None) -> bool:
    """Clause 3: ``e`` ends the rightmost window of ``w`` non-miss chunks at or
    before ``m`` and ``a`` is its gate."""
    return any(
        _non_miss(c, e - w, e) and _no_window_in(c, w, e, m) and a == _gate(_pending_in(c, e - w, w), e)
        for e in range(w, m + 1)
    )


def _lead_answer(c: C, a: int | None, hi: int) -> bool:
    """Clause 4: ``[0, p)`` non-miss, chunk ``p ≤ hi`` a miss, ``a`` its gate."""
    return any(
        _non_miss(c, 0, p) and c(p) == 0 and a == _gate(_pending_in(c, 0, p), p) for p in range(hi + 1)
    )


def _offload_answer(c: C, n: int, w: int, initial: int | None, a: int | None) -> bool:
    """``OffloadAnswer c n w initial a`` (Lean), the C predicate ``offload_answer``."""
    r = _required(w, initial)
    if 1 <= r <= n and _non_miss(c, n - r, n) and a == _gate(_pending_in(c, n - r, r), n):
        return True
    if (r < 1 or n < r) and _non_miss(c, 0, n) and a == _gate(_pending_in(c, 0, n), n):
        return True
    for m in range(n):
        if not (c(m) == 0 and _non_miss(c, m + 1, n) and (r < 1 or _sub(n, r) <= m)):
            continue
        if _window_answer(c, w, m, a):
            return True
        if w >= 1 and _no_window_in(c, w, 0, m) and _lead_answer(c, a, m):
            return True
    return False


def test_pendingIn_append_split_scanTri_pend_nonMissB_of() -> None:
    """``pendingIn_append``: ``pendingIn c s (a + b) = (pendingIn c s a ||
    pendingIn c (s + a) b)`` (and ``pendingIn_split``); ``scanTri_pend``:
    ``(scanTri c j k).2 = pendingIn c j ((scanTri c j k).1 - j)``;
    ``nonMissB_of``: ``NonMiss c s (s + k) → nonMissB c s k = true``;
    ``pendingIn_true`` / ``pendingIn_of_pending``: ``pendingIn c s k = true ↔
    ∃ i, s ≤ i < s + k ∧ c i = 2``."""
    for c, j, k in _all_scans(6):
        for a in range(k + 1):
            assert _pending_in(c, j, k) == (_pending_in(c, j, a) or _pending_in(c, j + a, k - a))
        stop, p = _scan_tri(c, j, k)
        assert p == _pending_in(c, j, stop - j)
        if _non_miss(c, j, j + k):
            assert _non_miss_b(c, j, k)
        assert _pending_in(c, j, k) == any(c(i) == 2 for i in range(j, j + k))


def test_searches_characterised() -> None:
    """``rightmostMiss_eq_some``: ``m < k → c m = 0 → NonMiss c (m + 1) k →
    rightmostMiss c k = some m``; ``rightmostMiss_eq_none``; ``leadingRun_eq``:
    ``j ≤ p ≤ j + k → NonMiss c j p → (p = j + k ∨ c p = 0) → leadingRun c j k
    = p``; ``lastWindow_eq_some``: ``w ≤ e ≤ e0 → NonMiss c (e - w) e →
    NoWindowIn c w e e0 → lastWindow c w e0 = some e``; ``lastWindow_eq_none``:
    ``1 ≤ w → NoWindowIn c w 0 e0 → lastWindow c w e0 = none``."""
    for length in range(7):
        for mask in itertools.product((0, 1, 2), repeat=length):
            c = _fn(list(mask), 1)
            for k in range(length + 1):
                for m in range(k):
                    if c(m) == 0 and _non_miss(c, m + 1, k):
                        assert _rightmost_miss(c, k) == m
                if _non_miss(c, 0, k):
                    assert _rightmost_miss(c, k) is None
            for j in range(length + 1):
                for k in range(length - j + 1):
                    for p in range(j, j + k + 1):
                        if _non_miss(c, j, p) and (p == j + k or c(p) == 0):
                            assert _leading_run(c, j, k) == p
            for w in range(length + 2):
                for e0 in range(length + 1):
                    for e in range(w, e0 + 1):
                        if _non_miss(c, e - w, e) and _no_window_in(c, w, e, e0):
                            assert _last_window(c, w, e0) == e
                    if w >= 1 and _no_window_in(c, w, 0, e0):
                        assert _last_window(c, w, e0) is None


def test_OffloadAnswer() -> None:
    """``offloadLookup_answer``, ``legacyOffloadScan_answer``,
    ``offloadStrideSearch_answer``: the three functions satisfy
    ``OffloadAnswer``; ``offloadAnswer_eq_offloadLookup`` /
    ``offloadAnswer_unique``: no other value does."""
    count = 0
    for mask, w, initial in small_cases(5):
        n = len(mask)
        c = _fn(mask, 1)
        want = _lean_offload_lookup(c, n, w, initial)
        assert _lean_legacy(c, n, w, initial) == want
        assert _lean_stride(c, n, w, initial) == want
        for a in [None, *range(n + 2)]:
            assert _offload_answer(c, n, w, initial, a) == (a == want), (mask, w, initial, a)
        count += 1
    CASE_COUNTS["lean OffloadAnswer"] += count


def test_offloadLookup_none_iff() -> None:
    """``offloadLookup_none_iff``: some non-miss window ``[s, e)`` with ``e ≤ n``
    and ``e - s = requiredWindow ∨ e - s = w ∨ s = 0`` such that the answer is
    ``none`` iff a chunk of it is pending, and ``some e`` otherwise."""
    for mask, w, initial in small_cases(5):
        n = len(mask)
        c = _fn(mask, 1)
        a = _lean_offload_lookup(c, n, w, initial)
        r = _required(w, initial)
        assert any(
            _non_miss(c, s, e)
            and (e - s == r or e - s == w or s == 0)
            and ((a is None) == any(c(i) == 2 for i in range(s, e)))
            and (a is None or a == e)
            for e in range(n + 1)
            for s in range(e + 1)
        ), (mask, w, initial)


def _after_first_miss(c: C, w: int, m: int) -> int | None:
    """What vLLM's loop does on reading the miss ``m`` (``offloadLegacyLoop_succ``)."""
    return _gate(False, m + w) if w == 0 else _lean_legacy_loop(c, w, m, 0, False, w)


def test_offloadLegacyLoop_tail_afterMiss() -> None:
    """``offloadLegacyLoop_tail`` and ``offloadLegacyLoop_afterMiss`` (vLLM's
    loop invariant), on every state satisfying their hypotheses."""
    for length in range(6):
        for mask in itertools.product((0, 1, 2), repeat=length):
            c = _fn(list(mask), 1)
            n = length
            for w in range(n + 2):
                for r in range(n + 2):
                    for k in range(n + 1):
                        hits = n - k
                        if r >= 1 and not hits < r:
                            continue
                        if not _non_miss(c, k, n):
                            continue
                        pend = _pending_in(c, k, hits)
                        got = _lean_legacy_loop(c, w, k, hits, pend, r)
                        ok1 = 1 <= r <= n and _non_miss(c, n - r, n) and got == _gate(
                            _pending_in(c, n - r, r), n
                        )
                        ok2 = (r < 1 or n < r) and _non_miss(c, 0, n) and got == _gate(
                            _pending_in(c, 0, n), n
                        )
                        ok3 = any(
                            c(m) == 0
                            and _non_miss(c, m + 1, n)
                            and (r < 1 or _sub(n, r) <= m)
                            and got == _after_first_miss(c, w, m)
                            for m in range(n)
                        )
                        assert ok1 or ok2 or ok3
                if w < 1:
                    continue
                for m in range(n):
                    for k in range(m + 1):
                        for hits in range(min(w, m - k + 1)):
                            if c(k + hits) != 0 or not _non_miss(c, k, k + hits):
                                continue
                            if not _no_window_in(c, w, k + hits, m):
                                continue
                            got = _lean_legacy_loop(c, w, k, hits, _pending_in(c, k, hits), w)
                            assert _window_answer(c, w, m, got) or (
                                _no_window_in(c, w, 0, m) and _lead_answer(c, got, m)
                            )


def test_phase1_strideLoop2_phase3_spec() -> None:
    """``phase1_spec``, ``strideLoop2_spec`` (phase 2's invariant, any fuel
    above ``bound``) and ``phase3_spec``, on every state satisfying their
    hypotheses."""
    for length in range(6):
        for mask in itertools.product((0, 1, 2), repeat=length):
            c = _fn(list(mask), 1)
            n = length
            for r in range(n + 2):
                for k in range(n + 1):
                    count = n - k
                    if (r >= 1 and not count < r) or not _non_miss(c, k, n):
                        continue
                    tag, v = _phase1(c, n, r, k, count, _pending_in(c, k, count))
                    ok1 = 1 <= r <= n and _non_miss(c, n - r, n) and (tag, v) == (
                        "inl",
                        _gate(_pending_in(c, n - r, r), n),
                    )
                    ok2 = (r < 1 or n < r) and _non_miss(c, 0, n) and (tag, v) == (
                        "inl",
                        _gate(_pending_in(c, 0, n), n),
                    )
                    ok3 = (
                        tag == "inr"
                        and v < n
                        and c(v) == 0
                        and _non_miss(c, v + 1, n)
                        and (r < 1 or _sub(n, r) <= v)
                    )
                    assert ok1 or ok2 or ok3
            for w in range(1, n + 2):
                for m in range(n):
                    for bound in range(m + 1):
                        if c(bound) != 0 or not _no_window_in(c, w, bound, m):
                            continue
                        for kl in range(bound + 1):
                            if not bound < kl + w or not _non_miss(c, kl, bound):
                                continue
                            kp = _pending_in(c, kl, bound - kl)
                            for fuel in (bound + 1, bound + 2):
                                tag, v = _stride_loop2(c, w, fuel, bound, kl, kp)
                                if tag == "inl":
                                    assert _window_answer(c, w, m, v)
                                else:
                                    b, kl2, kp2 = v
                                    assert _no_window_in(c, w, 0, m)
                                    assert b < w and kl2 <= b <= m and c(b) == 0
                                    assert _non_miss(c, kl2, b)
                                    assert kp2 == _pending_in(c, kl2, b - kl2)
                                    assert _lead_answer(c, _phase3(c, b, kl2, kp2), b)
