"""The opt-in corrected KV-offload store filter (swa_prefix_cache/vllm_adapter/offload_filter.py,
spec swa_prefix_cache/pyspec/offload.py) on vLLM's real offloading scheduler.

Everything runs on vLLM 0.33.0's own ``OffloadingConnectorScheduler`` and
``CPUOffloadingManager`` as tests/test_reachable.py builds them: a finished
prompt is stored through the real ``_build_store_jobs`` (which calls the
patched ``_reachable_store_block_mask``), real requests look it up
(``get_num_new_matched_tokens`` -> ``_lookup_complete_chunks`` ->
``_sliding_window_lookup``), and the baseline stores every key. The
property is test_reachable.py's (``offload_violations``): the resend, the
longer sibling, the junction sibling and (dense) every sibling hit exactly
what they hit with every chunk stored; with a retention interval no sibling
hits less than the best promised hit below it.

1. The model: ``swa_prefix_cache.pyspec.offload.all_stored_lookup`` equals vLLM's own lookup
   on the all-stored baseline (so the reads it derives are vLLM's).
2. With ``SWA_PREFIX_CACHE_OFFLOAD_FILTER=corrected``: the issue's case
   recovers 1,792 tokens, every finding's smallest input and realistic
   example agrees, random cases agree (and the hits recovered over vLLM's
   own filter are counted and printed); vLLM's own filter still fails them
   (the strict xfails in test_reachable.py run unpatched).
3. Cost: chunks stored by the corrected filter vs vLLM's filter vs all, on
   realistic configurations (printed, and bounded).
4. Installation: off by default (nothing patched), refused on an unknown
   offload scheduler while the lookup patch still applies, restored by
   ``uninstall``, locality of the mask (storing step by step keeps the same
   chunks).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from conftest import CASE_COUNTS
from test_reachable import (  # noqa: F401 (fixtures)
    CASES,
    OFFLOAD_FINDINGS,
    _offload_finding,
    _offload_request,
    _offload_scheduler,
    offload_env,
    offload_findings,
    offload_run,
    offload_violations,
    vllm_env,
)

from swa_prefix_cache.pyspec.offload import OffloadGroup, all_stored_lookup, offload_store_chunks

ENV = "SWA_PREFIX_CACHE_OFFLOAD_FILTER"


def _scheduler_class():  # type: ignore[no-untyped-def]
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
        OffloadingConnectorScheduler,
    )

    return OffloadingConnectorScheduler


@pytest.fixture(scope="module")
def vllm_filter(offload_env):  # type: ignore[no-untyped-def]
    """vLLM's own store-filter method (the class attribute before any patch)."""
    from swa_prefix_cache.vllm_adapter import offload_filter

    offload_filter.uninstall()
    return _scheduler_class().__dict__["_reachable_store_block_mask"]


@pytest.fixture
def corrected(offload_env, vllm_filter, monkeypatch) -> Iterator:  # type: ignore[no-untyped-def]
    """The corrected filter installed through the setting; vLLM's back after."""
    from swa_prefix_cache.vllm_adapter import offload_filter

    monkeypatch.setenv(ENV, "corrected")
    assert offload_filter.install()
    assert _scheduler_class().__dict__["_reachable_store_block_mask"] is not vllm_filter
    yield offload_env
    offload_filter.uninstall()
    assert _scheduler_class().__dict__["_reachable_store_block_mask"] is vllm_filter


@pytest.fixture(autouse=True)
def vllm_filter_around(offload_env, vllm_filter) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Every test starts and ends with vLLM's own filter in place."""
    from swa_prefix_cache.vllm_adapter import offload_filter

    offload_filter.uninstall()
    assert _scheduler_class().__dict__["_reachable_store_block_mask"] is vllm_filter
    yield
    offload_filter.uninstall()
    assert _scheduler_class().__dict__["_reachable_store_block_mask"] is vllm_filter


# ---------------------------------------------------------------------------
# 1. the model equals vLLM's lookup on the all-stored baseline
# ---------------------------------------------------------------------------


def _groups(groups, h: int, bpc: int):  # type: ignore[no-untyped-def]
    """``(block, window, eagle)`` triples as pyspec ``OffloadGroup``s."""
    from vllm.utils.math_utils import cdiv

    out = []
    for bs, w, e in groups:
        c = bs * bpc
        if w is None:
            out.append(OffloadGroup(c, None, 0, e))
        else:
            out.append(OffloadGroup(c, max(cdiv(w, c), cdiv(w - 1, c)), w - 1, e))
    return tuple(out)


def random_offload_case(rng: random.Random):  # type: ignore[no-untyped-def]
    """The generator of test_reachable.test_offload_disagrees_only_as_documented."""
    h, bpc = rng.choice((1, 2)), rng.choice((1, 1, 2))
    bsf, bs = h * rng.choice((1, 2, 4)), h * rng.choice((1, 1, 2))
    chunk = bs * bpc
    align = bsf * bpc
    w = rng.randint(2, 5 * chunk + 1)
    es, ef = rng.random() < 0.3, rng.random() < 0.2
    retention = rng.choice((None, None, 0, chunk * rng.randint(1, 4)))
    n = rng.randint(1, 30)
    shared = rng.choice([0, 0, *range(align, n + 1, align)])
    return h, bpc, bsf, bs, w, es, ef, retention, n, shared


def third_group(rng: random.Random, h: int, bpc: int, retention: int | None):  # type: ignore[no-untyped-def]
    """A second sliding-window group (its chunk divides the retention
    interval, as vLLM requires)."""
    sizes = [b for b in (h, 2 * h) if not retention or retention % (b * bpc) == 0]
    return (rng.choice(sizes), rng.randint(2, 4 * h * bpc + 1), rng.random() < 0.3)


def test_model_equals_vllm_all_stored_lookup(offload_env) -> None:  # type: ignore[no-untyped-def]
    """``all_stored_lookup`` (the spec's transcription of
    ``_lookup_complete_chunks``) gives vLLM's hit on every query of the
    all-stored baseline, including a second SWA group and EAGLE groups."""
    rng = random.Random(41)
    done = 0
    for _ in range(CASES // 4):
        h, bpc, bsf, bs, w, es, ef, retention, n, shared = random_offload_case(rng)
        groups = [(bsf, None, ef), (bs, w, es)]
        if rng.random() < 0.3:
            groups.append(third_group(rng, h, bpc, retention))
        longer = n + rng.choice((1, 3, 40))
        queries = [(n, n), (n, longer)] + [(p, longer) for p in range(n + 1)] + [(p, p) for p in range(1, n + 1)]
        hits, _, _ = offload_run(offload_env, groups, h, bpc, retention, n, shared, queries, True)
        model = _groups(groups, h, bpc)
        for (p, length), hit in zip(queries, hits):
            shared_chunks = [min(p, n) // g.chunk for g in model]
            assert all_stored_lookup(model, length, shared_chunks).hit == hit, (groups, h, bpc, n, p, length)
            done += 1
    CASE_COUNTS["offload model vs vLLM lookup (all stored)"] += done


# ---------------------------------------------------------------------------
# 2. hits recovered on vLLM's real scheduler
# ---------------------------------------------------------------------------


def test_issue_case_recovered(offload_env, corrected) -> None:  # type: ignore[no-untyped-def]
    """W = 129, block 16, full-attention chunk 256, prompt 2,000: vLLM's own
    filter gives the resend 0 tokens (test_reachable: strict xfail O1-issue);
    the corrected filter gives 1,792, the all-stored hit."""
    groups = [(256, None, False), (16, 129, False)]
    stored, offered, state = offload_run(offload_env, groups, 16, 1, None, 2000, 0, [(2000, 2000)], False)
    full, _, _ = offload_run(offload_env, groups, 16, 1, None, 2000, 0, [(2000, 2000)], True)
    assert (stored, full) == ([1792], [1792])
    assert _offload_finding(offload_env, "O1-issue") == []
    swa = set(state.group_states[1].offload_keys)
    kept = sum(k in swa for k in set(offered))
    print(f"\nO1 issue case: resend hit {stored[0]} (vLLM's filter: 0); SWA chunks stored {kept} of {len(swa)}")


# Which findings the store side fixes (all of them, on these inputs).
FIXED = ("O1-issue", "O1", "O2", "O3", "O4", "O5")


@pytest.mark.parametrize("name", FIXED)
def test_finding_fixed_by_corrected_filter(offload_env, corrected, name: str) -> None:  # type: ignore[no-untyped-def]
    """Each finding's smallest input (the strict xfails of test_reachable)
    agrees with the corrected filter: no query kind at all is violated."""
    (h, bpc, bsf, bs, w, es, ef, retention, n, shared), _ = OFFLOAD_FINDINGS[name]
    if name == "O1-issue":
        assert _offload_finding(offload_env, name) == []
        return
    violations, _, _ = offload_violations(offload_env, [(bsf, None, ef), (bs, w, es)], h, bpc, retention, n, shared)
    assert violations == []


@pytest.mark.parametrize("name", FIXED)
def test_finding_still_fails_with_vllm_filter(offload_env, name: str) -> None:  # type: ignore[no-untyped-def]
    """The same inputs with the setting off: vLLM's own filter loses hits
    (so the test above shows something the patch did)."""
    assert _offload_finding(offload_env, name) != []


@pytest.mark.parametrize(
    "name,groups,retention,n,shared,query,vllm_hit,full_hit",
    [
        ("O1-issue", [(256, None, False), (16, 129, False)], None, 2000, 0, (2000, 2000), 0, 1792),
        ("O2-resend", [(256, None, True), (16, 128, False)], 4096, 2000, 0, (2000, 2000), 0, 1536),
        ("O2-junction", [(256, None, False), (16, 128, True)], 4096, 3000, 1024, (1024, 3040), 0, 1008),
        ("O3", [(256, None, False), (16, 128, False)], 4096, 2048, 0, (2048, 2048), 1792, 2047),
        ("O5", [(256, None, False), (16, 128, False)], 4096, 2048, 0, (2048, 2088), 1792, 2048),
    ],
)
def test_realistic_hits_recovered(offload_env, vllm_filter, monkeypatch, name, groups, retention, n, shared, query, vllm_hit, full_hit) -> None:  # type: ignore[no-untyped-def]
    """docs/store-lookup-agreement.md's realistic examples: vLLM's filter,
    the corrected one, every chunk stored."""
    from swa_prefix_cache.vllm_adapter import offload_filter

    theirs, _, _ = offload_run(offload_env, groups, 16, 1, retention, n, shared, [query], False)
    monkeypatch.setenv(ENV, "corrected")
    assert offload_filter.install()
    ours, _, _ = offload_run(offload_env, groups, 16, 1, retention, n, shared, [query], False)
    offload_filter.uninstall()
    full, _, _ = offload_run(offload_env, groups, 16, 1, retention, n, shared, [query], True)
    assert (theirs[0], ours[0], full[0]) == (vllm_hit, full_hit, full_hit)
    print(f"\n{name}: vLLM's filter {theirs[0]}, corrected {ours[0]} (= every chunk stored); recovered {ours[0] - theirs[0]} tokens")


def test_random_cases_agree(offload_env, vllm_filter, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """test_reachable's random offload cases (and a second SWA group now and
    then): with the corrected filter no query is violated; with vLLM's own
    filter the same cases lose hits, which are counted as recovered."""
    from swa_prefix_cache.vllm_adapter import offload_filter

    rng = random.Random(42)
    done = cases_fixed = queries_fixed = tokens_recovered = 0
    for _ in range(CASES // 4):
        h, bpc, bsf, bs, w, es, ef, retention, n, shared = random_offload_case(rng)
        groups = [(bsf, None, ef), (bs, w, es)]
        if rng.random() < 0.2:
            groups.append(third_group(rng, h, bpc, retention))
        theirs, _, _ = offload_run_violations(offload_env, groups, h, bpc, retention, n, shared)
        monkeypatch.setenv(ENV, "corrected")
        assert offload_filter.install()
        try:
            ours, _, _ = offload_run_violations(offload_env, groups, h, bpc, retention, n, shared)
        finally:
            offload_filter.uninstall()
        assert ours == [], (groups, h, bpc, retention, n, shared, ours)
        if theirs:
            cases_fixed += 1
            queries_fixed += len(theirs)
            tokens_recovered += sum(want - got for _, (_, _, got, want) in theirs)
        done += 1
    assert cases_fixed > 0
    print(f"\nrandom offload cases: {done}; vLLM's filter lost hits in {cases_fixed} "
          f"({queries_fixed} queries, {tokens_recovered} tokens), the corrected filter in 0")
    CASE_COUNTS["offload corrected filter, real vLLM (cases)"] += done


def test_random_long_prompts_agree(offload_env, vllm_filter, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Prompts long enough (up to 160 tokens, small chunks) that the mask is
    computed by moving one period's runs (``swa_prefix_cache.pyspec.offload._target_runs``,
    ``store_runs``) rather than query by query: still no query violated."""
    from swa_prefix_cache.pyspec.offload import _period
    from swa_prefix_cache.vllm_adapter import offload_filter

    rng = random.Random(44)
    done = periodic = 0
    for _ in range(max(CASES // 40, 6)):
        h, bpc, bsf, bs, w, es, ef, retention, _, _ = random_offload_case(rng)
        align = bsf * bpc
        n = rng.randint(60, 160)
        shared = rng.choice([0, *range(align, n + 1, align)])
        groups = [(bsf, None, ef), (bs, w, es)]
        period, base = _period(_groups(groups, h, bpc))
        periodic += n > base + period
        monkeypatch.setenv(ENV, "corrected")
        assert offload_filter.install()
        try:
            ours, _, _ = offload_violations(offload_env, groups, h, bpc, retention, n, shared)
        finally:
            offload_filter.uninstall()
        assert ours == [], (groups, h, bpc, retention, n, shared, ours)
        done += 1
    assert periodic > 0
    CASE_COUNTS["offload corrected filter, real vLLM (long prompts)"] += done


def test_moved_runs_equal_direct_runs() -> None:
    """Far from token 0 the runs of a query are computed at a position one
    period lower and moved; the union over a range equals the query-by-query
    union (``promised_queries`` + the direct lookup)."""
    from swa_prefix_cache.pyspec.offload import _canonical_runs, _period, _target_runs, promised_queries, store_runs

    rng = random.Random(45)
    done = 0
    for _ in range(CASES // 8):
        c = rng.choice((1, 2, 4))
        f = c * rng.choice((1, 2, 4))
        w = rng.randint(2, 6 * c + 1)
        groups = (OffloadGroup(f, None, 0, rng.random() < 0.3), OffloadGroup(c, math.ceil(w / c), w - 1, rng.random() < 0.4))
        r = rng.choice((None, 0, c * rng.randint(1, 6), f * rng.randint(1, 3)))
        period, base = _period(groups)
        for p in range(base + period, base + 4 * period):
            for length in (p, p + 1, p + c, p + 3 * f + 7):
                assert _target_runs(groups, 1, p, length) == _canonical_runs.__wrapped__(groups, 1, p, length)
        n = rng.randint(base + 2 * period, base + 6 * period)
        bounds = (n - 1,) if r is not None else ()
        start, end = sorted(rng.randint(0, n // c) for _ in range(2))
        got = {x for x in store_runs(groups, 1, start, end, f, r, bounds) if x[0] < end and x[1] > start}
        want = set()
        for q in promised_queries(groups, 0, end * c + 10 * (f + w + c), f, r, bounds):
            hit, found = _canonical_runs.__wrapped__(groups, 1, q.shared, q.length)
            if hit > 0 and (q.always or (r and hit % r == 0)):
                want.update(x for x in found if x[0] < end and x[1] > start)
        assert got == want, (groups, r, n, start, end)
        done += 1
    CASE_COUNTS["offload corrected mask (moved = direct)"] += done


def offload_run_violations(env, groups, h, bpc, retention, n, shared):  # type: ignore[no-untyped-def]
    return offload_violations(env, groups, h, bpc, retention, n, shared)


# ---------------------------------------------------------------------------
# 3. the cost: chunks stored
# ---------------------------------------------------------------------------

# (name, groups (block, window, eagle), blocks per chunk, retention, prompt)
REALISTIC = [
    ("W129 dense", [(256, None, False), (16, 129, False)], 1, None, 32000),
    ("W128 dense", [(256, None, False), (16, 128, False)], 1, None, 32000),
    ("W4096 dense", [(256, None, False), (16, 4096, False)], 1, None, 32000),
    ("W128 r4096", [(256, None, False), (16, 128, False)], 1, 4096, 32000),
    ("W129 r4096", [(256, None, False), (16, 129, False)], 1, 4096, 32000),
    ("W128 r4096 SWA-EAGLE", [(256, None, False), (16, 128, True)], 1, 4096, 32000),
    ("W128 r4096 full-EAGLE", [(256, None, True), (16, 128, False)], 1, 4096, 32000),
    ("W512 dense EAGLE", [(256, None, True), (16, 512, True)], 1, None, 32000),
    ("W129 dense SWA-EAGLE", [(256, None, False), (16, 129, True)], 1, None, 32000),
    ("W129 dense, 2 blocks/chunk", [(128, None, False), (16, 129, False)], 2, None, 32000),
    ("W1024 r4096 SWA-EAGLE", [(256, None, False), (16, 1024, True)], 1, 4096, 32000),
]


@pytest.mark.parametrize("name,groups,bpc,retention,n", REALISTIC, ids=[r[0] for r in REALISTIC])
def test_cost_in_stored_chunks(offload_env, monkeypatch, name, groups, bpc, retention, n) -> None:  # type: ignore[no-untyped-def]
    """SWA chunks stored for one prompt: vLLM's filter, the corrected one,
    every chunk. The corrected filter stores at most what the lookup's runs
    need: per segment (alignment dense, retention interval sparse) at most
    one run of ``window_chunks + 2`` chunks (EAGLE peek and the pop below
    the boundary), plus a few runs for the named queries."""
    from swa_prefix_cache.vllm_adapter import offload_filter

    def swa_stored() -> tuple[int, int]:
        _, offered, state = offload_run(offload_env, groups, 16, bpc, retention, n, 0, [], False)
        swa = [set(g.offload_keys) for g, (_, w, _) in zip(state.group_states, groups) if w is not None]
        got = set(offered)
        return sum(len(s & got) for s in swa), sum(len(s) for s in swa)

    theirs, total = swa_stored()
    monkeypatch.setenv(ENV, "corrected")
    assert offload_filter.install()
    try:
        ours, _ = swa_stored()
    finally:
        offload_filter.uninstall()
    model = _groups(groups, 16, bpc)
    swa = [g for g in model if g.window_chunks is not None]
    align = groups[0][0] * bpc
    segment = align if retention is None else retention
    segments = n // segment + 1
    per_run = max(g.window_chunks for g in swa) + 2
    named = 0 if retention is None else 4
    bound = (segments + named) * per_run * len(swa)
    assert ours <= min(bound, total), (ours, bound, total)
    print(f"\n{name}: SWA chunks stored of {total}: vLLM {theirs}, corrected {ours} ({ours - theirs:+d})")
    CASE_COUNTS["offload cost configurations"] += 1


# ---------------------------------------------------------------------------
# 4. installation and locality
# ---------------------------------------------------------------------------


def test_off_by_default_patches_nothing(offload_env, vllm_filter, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Setting unset (or ``off``): install patches nothing, vLLM's own
    method stays, and the issue's case still loses its hit."""
    from swa_prefix_cache.vllm_adapter import offload_filter

    for value in (None, "off", " OFF "):
        if value is None:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, value)
        assert offload_filter.install() is False
        assert _scheduler_class().__dict__["_reachable_store_block_mask"] is vllm_filter
        assert offload_filter.status()["reason"] == "setting off"
    assert _offload_finding(offload_env, "O1-issue") != []


def test_bad_setting_is_refused(offload_env, vllm_filter, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    from swa_prefix_cache.vllm_adapter import offload_filter

    monkeypatch.setenv(ENV, "correctd")
    with caplog.at_level(logging.ERROR, logger="swa_prefix_cache"):
        assert offload_filter.install() is False
    assert _scheduler_class().__dict__["_reachable_store_block_mask"] is vllm_filter
    assert "SWA_PREFIX_CACHE_OFFLOAD_FILTER must be one of off, corrected" in caplog.text


def test_unknown_offload_build_refused_lookup_patch_still_applies(offload_env, vllm_filter, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """An offload scheduler whose sources hash to no known fingerprint keeps
    vLLM's filter (one log line); the lookup patch, bound to its own
    fingerprint, still applies through the same ``install``."""
    from swa_prefix_cache import vllm_adapter
    from swa_prefix_cache.vllm_adapter import known_sources, offload_filter
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    monkeypatch.setenv(ENV, "corrected")
    monkeypatch.setitem(known_sources.VARIANTS, "offload_filter", [])
    lookup = SlidingWindowManager.__dict__["find_longest_cache_hit"]
    try:
        with caplog.at_level(logging.WARNING, logger="swa_prefix_cache"):
            assert vllm_adapter.install(vllm_adapter.Mode.ON) is True
        assert offload_filter.is_installed() is False
        assert _scheduler_class().__dict__["_reachable_store_block_mask"] is vllm_filter
        assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is not lookup
        assert "unknown KV-offload store filter in vLLM" in caplog.text
        assert vllm_adapter.status()["offload_filter"]["installed"] is False
    finally:
        vllm_adapter.uninstall()
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is lookup


def test_fingerprint_is_known_and_separate(offload_env) -> None:  # type: ignore[no-untyped-def]
    from swa_prefix_cache.vllm_adapter import fingerprint

    found = fingerprint.check(fingerprint.OFFLOAD_FILTER)
    assert found.known and fingerprint.installed_version() in found.releases
    assert "OffloadingConnectorScheduler._reachable_store_block_mask" in found.digests
    assert "OffloadingConnectorScheduler._reachable_store_block_mask" not in fingerprint.check(
        fingerprint.SLIDING_WINDOW).digests


def test_installed_with_the_plugin(offload_env, vllm_filter, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``swa_prefix_cache.vllm_adapter.install`` / ``uninstall`` carry the offload filter."""
    from swa_prefix_cache import vllm_adapter

    monkeypatch.setenv(ENV, "corrected")
    try:
        vllm_adapter.install(vllm_adapter.Mode.ON)
        assert vllm_adapter.status()["offload_filter"]["installed"] is True
        assert _scheduler_class().__dict__["_reachable_store_block_mask"] is not vllm_filter
    finally:
        vllm_adapter.uninstall()
    assert _scheduler_class().__dict__["_reachable_store_block_mask"] is vllm_filter


def test_mask_is_local() -> None:
    """A chunk's answer does not depend on the range asked (the store runs
    step by step)."""
    rng = random.Random(43)
    done = 0
    for _ in range(CASES // 4):
        c = rng.choice((1, 2, 4))
        f = c * rng.choice((1, 2, 4))
        w = rng.randint(2, 6 * c + 1)
        model = (OffloadGroup(f, None, 0, rng.random() < 0.3), OffloadGroup(c, math.ceil(w / c), w - 1, rng.random() < 0.4))
        r = rng.choice((None, 0, c * rng.randint(1, 6)))
        n = rng.randint(1, 60)
        bounds = (n - 1,) + ((rng.choice(range(f, n + 1, f)),) if n >= f and rng.random() < 0.5 else ()) if r is not None else ()
        end = n // c
        whole = offload_store_chunks(model, 1, 0, end, f, r, bounds)
        for start in range(end + 1):
            for stop in (start, (start + end) // 2, end):
                part = offload_store_chunks(model, 1, start, stop, f, r, bounds)
                assert part == [x for x in whole if start <= x[0] < stop], (model, r, n, start, stop)
                done += 1
    CASE_COUNTS["offload corrected mask (locality)"] += done


# ---------------------------------------------------------------------------
# the junction the host tier finds (vLLM 0.34.0's rule, for 0.33.0)
# ---------------------------------------------------------------------------


def _store_finished(env, sched, manager, req) -> None:  # type: ignore[no-untyped-def]
    """``req`` finished: its chunks through the real store path, completed."""
    req.status = env.RequestStatus.FINISHED_STOPPED
    req.is_finished = lambda: True
    state = sched._req_status[req.request_id]
    state.update_offload_keys()
    state.update_block_id_groups(tuple(list(range(1, req.num_tokens // 16 + 2)) for _ in (0, 1)))
    before = len(manager.offered)
    sched._build_store_jobs(SimpleNamespace(num_scheduled_tokens={}, finished_req_ids={req.request_id}))
    manager.complete_store(manager.offered[before:], state.req_context)


@pytest.mark.parametrize("setting", ["off", "corrected"])
def test_tier_junction_pinned_with_an_eagle_draft(offload_env, monkeypatch, setting: str) -> None:  # type: ignore[no-untyped-def]
    """As below, with the draft's layer in the full-attention group (EAGLE,
    legacy hashes): B's junction is the shared run (320), and the corrected
    store keeps the window a sibling sharing it reads after the EAGLE pop,
    so C hits 304. vLLM 0.33.0's own code pins nothing from the tier (C
    hits 0). On 0.34.0 this scheduler keeps the legacy hashes too (the test
    builds it with ``num_hash_lookahead_tokens`` 0) and vLLM pins the
    popped hit (304), where its own store keeps the window C reads; the
    corrected store keeps it too (it promises the siblings of a junction
    and of the junction one EAGLE chunk higher)."""
    from swa_prefix_cache.vllm_adapter import offload_filter

    monkeypatch.setenv(ENV, setting)
    if setting == "corrected":
        assert offload_filter.install()
    hits, _ = _shared_then_diverging(offload_env, [(16, None, True), (16, 64, False)])
    vllm_pins = hasattr(_scheduler_class(), "_maybe_register_shared_prefix_junction")
    assert hits == ({"B": 0, "C": 320 - 16} if setting == "corrected" or vllm_pins else {"B": 0, "C": 0})


def _shared_then_diverging(env, groups):  # type: ignore[no-untyped-def]
    """A (640 tokens) stored through the real store path; then B and C,
    each sharing A's first 320 tokens and going on with their own, looked
    up and stored in turn. Their hits and the junctions their lookups left."""
    manager = env.RecordingManager()
    sched = _offload_scheduler(env, groups, 16, 1, 0, manager)
    n, p = 640, 320
    shared = env.make_block_hashes(p // 16, salt=b"shared")
    prompts = {rid: shared + env.make_block_hashes((n - p) // 16, salt=rid.encode()) for rid in "ABC"}
    a = _offload_request(env, "A", prompts["A"], n, True)
    sched.on_new_request(a)
    _store_finished(env, sched, manager, a)
    hits, junctions = {}, {}
    for rid in "BC":
        req = _offload_request(env, rid, prompts[rid], n, False)
        sched.on_new_request(req)
        hits[rid], _ = sched.get_num_new_matched_tokens(req, 0)
        junctions[rid] = req.shared_prefix_boundary
        _store_finished(env, sched, manager, req)
    return hits, junctions


@pytest.mark.parametrize("setting", ["off", "corrected"])
def test_tier_junction_pinned(offload_env, monkeypatch, setting: str) -> None:  # type: ignore[no-untyped-def]
    """A is stored; B shares A's first 320 tokens and diverges: the tier's
    full-attention groups hit 20 chunks, the sliding window none (vLLM kept
    only A's last window). The corrected store pins B's junction at 320, so
    B's window there is stored and C, diverging at the same point, hits
    320 tokens. vLLM 0.33.0's own code takes the junction from the GPU
    pool's lookup only: C hits 0. vLLM 0.34.0 pins it itself, and the
    corrected store leaves its ``_lookup`` in place there."""
    from swa_prefix_cache.vllm_adapter import offload_filter

    env = offload_env
    monkeypatch.setenv(ENV, setting)
    if setting == "corrected":
        assert offload_filter.install()
    pinned_before = offload_filter.status()["junctions"]
    hits, junctions = _shared_then_diverging(env, [(16, None, False), (16, 64, False)])
    p = 320
    vllm_pins = hasattr(_scheduler_class(), "_maybe_register_shared_prefix_junction")
    if setting == "corrected" or vllm_pins:
        assert (hits, junctions) == ({"B": 0, "C": p}, {"B": p, "C": 0})
    else:
        assert (hits, junctions) == ({"B": 0, "C": 0}, {"B": 0, "C": 0})
    if setting == "corrected":
        found = offload_filter.status()
        # Pinned once by whichever code owns the rule, never by both.
        assert found["junction_rule"] == ("vLLM" if vllm_pins else "plugin")
        assert found["junctions"] - pinned_before == (0 if vllm_pins else 1)
