"""The pass criteria of ``make e2e`` (e2e/run_e2e.py) reject what they must.

The live run only ever shows them passing; these cases feed the same
checks a silently unpatched engine, a lookup in the wrong process, a
shadow mismatch, differing ``cached_tokens``, a probe that never hit, a
package imported from the work tree or from another wheel, an engine core
that mapped some other extension, and load phases that lost requests,
never evicted, never hit partially, compared too few lookups or left the
server dead, and expect each to fail. No server is started here.
"""

import copy
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

import load  # noqa: E402
import probe  # noqa: E402
import run_e2e  # noqa: E402
from run_e2e import RUNS, Failure, Outcome  # noqa: E402


def _samples(cached: list[int]) -> list[probe.Sample]:
    phases = ["forward", "reverse"]
    return [
        probe.Sample(phases[i % 2], i, 1000, c, 10.0) for i, c in enumerate(cached)
    ]


def _engine(mode: str, backend: str, calls: int) -> dict:
    return {
        "pid": 4242, "process": "VLLM::EngineCore", "installed": True,
        "mode": mode, "backend": backend, "reason": "",
        "stats": {
            "calls": calls, "lookup_ns": 1000 * calls, "lookup_ns_max": 2000, "errors": 0,
            "shadow_compared": calls if mode == "shadow" else 0, "shadow_mismatches": 0,
            "last_mismatch": {},
        },
        "observed": [],
    }


def _outcome(run: run_e2e.Run, cached: list[int]) -> Outcome:
    return Outcome("swa", run, _samples(cached), _engine(run.mode, run.backend, 4), {}, 1.0)


GOOD = [0, 992, 0, 992]


def test_good_outcomes_pass() -> None:
    outcomes = [_outcome(run, GOOD) for run in RUNS]
    for o in outcomes:
        run_e2e.check_outcome(o)
    run_e2e.compare(outcomes)


@pytest.mark.parametrize("breakage, message", [
    (lambda e: e.update(installed=False, reason="unknown vLLM build"), "not active"),
    (lambda e: e.update(backend="python"), "engine core runs"),
    (lambda e: e["stats"].update(calls=3), "lookups for 4 requests"),
    (lambda e: e["stats"].update(errors=1), "adapter errors"),
    (lambda e: e["stats"].update(shadow_mismatches=1), "shadow mismatch"),
    (lambda e: e["stats"].update(shadow_compared=2), "compared 2 of 4"),
])
def test_engine_stats_breakages_fail(breakage, message) -> None:
    outcome = _outcome(RUNS[2], GOOD)  # shadow: every field matters
    outcome.engine = copy.deepcopy(outcome.engine)
    breakage(outcome.engine)
    with pytest.raises(Failure, match=message):
        run_e2e.check_outcome(outcome)


def test_missing_cached_tokens_fail() -> None:
    outcome = _outcome(RUNS[1], GOOD)
    outcome.samples[1].cached_tokens = None
    with pytest.raises(Failure, match="no cached_tokens"):
        run_e2e.check_outcome(outcome)


def test_different_cached_tokens_fail() -> None:
    outcomes = [_outcome(RUNS[0], GOOD), _outcome(RUNS[1], [0, 992, 0, 960])]
    with pytest.raises(Failure, match="cached 992 with off, 960 with on"):
        run_e2e.compare(outcomes)


def test_different_metrics_fail() -> None:
    outcomes = [_outcome(run, GOOD) for run in RUNS]
    outcomes[2].metrics = {"vllm:prefix_cache_hits_total": 1.0}
    with pytest.raises(Failure, match="/metrics"):
        run_e2e.compare(outcomes)


def test_probe_without_any_hit_fails() -> None:
    outcomes = [_outcome(run, [0, 0, 0, 0]) for run in RUNS]
    with pytest.raises(Failure, match="no request hit"):
        run_e2e.compare(outcomes)


def _write(directory: Path, pid: int, calls: int) -> None:
    data = _engine("on", "python", calls)
    data["pid"] = pid
    (directory / f"stats-{pid}.json").write_text(json.dumps(data))


def test_settled_stats_finds_the_engine_core(tmp_path) -> None:
    _write(tmp_path, 100, 0)  # the API server: loaded the plugin, made no lookup
    _write(tmp_path, 101, 7)
    engine, others = run_e2e.settled_stats(tmp_path, server_pid=100, timeout_s=2)
    assert engine["pid"] == 101 and [o["pid"] for o in others] == [100]


def test_settled_stats_rejects_lookups_in_the_server_or_nowhere(tmp_path) -> None:
    _write(tmp_path, 100, 5)
    with pytest.raises(Failure, match="API server process"):
        run_e2e.settled_stats(tmp_path, server_pid=100, timeout_s=1)
    (tmp_path / "stats-100.json").unlink()
    with pytest.raises(Failure, match="found 0"):
        run_e2e.settled_stats(tmp_path, server_pid=100, timeout_s=1)


def test_probe_requests_are_deterministic() -> None:
    work = probe.Workload(prompts=2, prompt_tokens=50, shared_tokens=40, growth_turns=2,
                          growth_step=5)
    first, second = list(probe.requests(work)), list(probe.requests(work))
    assert first == second
    phases = [p for p, _, _ in first]
    assert phases == ["forward"] * 2 + ["reverse"] * 2 + ["shared"] * 2 + ["growth"] * 2
    assert first[2][2] == first[1][2]  # reverse re-sends prompt 1 first
    assert first[4][2][:40] == first[0][2][:40] != first[4][2]


# ---- the installed artifact (run_e2e.check_installed / check_mapped) -------------------

SITE = "/venv/lib/python3.11/site-packages"
WHEEL = {"file": "swa_prefix_cache-0.1.0-cp311-cp311-linux_x86_64.whl", "sha256": "ab" * 32,
         "tag": "cp311-cp311-linux_x86_64",
         "hotpath_member": "extracted_c/_hotpath.cpython-311-x86_64-linux-gnu.so",
         "hotpath_sha256": ""}


def _installed(tmp_path: Path) -> dict:
    hot = tmp_path / "site" / "extracted_c" / "_hotpath.cpython-311-x86_64-linux-gnu.so"
    hot.parent.mkdir(parents=True)
    hot.write_bytes(b"the wheel's extension")
    WHEEL["hotpath_sha256"] = run_e2e.sha256_file(hot)
    site = str(tmp_path / "site")
    return {
        "site": [site], "vllm_adapter": f"{site}/vllm_adapter/__init__.py",
        "extracted_c": f"{site}/extracted_c/__init__.py", "hotpath": str(hot),
        "version": "0.1.0", "entry_points": ["vllm_adapter.plugin:register"],
        "direct_url": {"url": f"file:///repo/dist/{WHEEL['file']}",
                       "archive_info": {"hashes": {"sha256": WHEEL["sha256"]}}},
    }


def test_installed_wheel_passes(tmp_path) -> None:
    run_e2e.check_installed(_installed(tmp_path), WHEEL)


@pytest.mark.parametrize("breakage, message", [
    (lambda w: w.update(vllm_adapter="/repo/vllm_adapter/__init__.py"), "not from site-packages"),
    (lambda w: w.update(direct_url={"url": "file:///repo", "dir_info": {"editable": True}}),
     "not installed from a wheel"),
    (lambda w: w["direct_url"]["archive_info"]["hashes"].update(sha256="cd" * 32),
     "not swa_prefix_cache"),
    (lambda w: w["direct_url"].update(url="file:///elsewhere/other-0.1.0-py3-none-any.whl"),
     "not swa_prefix_cache"),
    (lambda w: Path(w["hotpath"]).write_bytes(b"rebuilt since"), "differs from"),
    (lambda w: w.update(entry_points=[]), "entry point"),
])
def test_installed_breakages_fail(tmp_path, breakage, message) -> None:
    where = _installed(tmp_path)
    breakage(where)
    with pytest.raises(Failure, match=message):
        run_e2e.check_installed(where, WHEEL)


def test_engine_must_map_the_installed_extension(tmp_path) -> None:
    where = _installed(tmp_path)
    run_e2e.check_mapped("swa/on", "native", [where["hotpath"]], where)
    run_e2e.check_mapped("swa/off", "vllm", [], where)  # vLLM's own lookup: nothing to map
    for mapped in ([], ["/repo/extracted_c/_hotpath.cpython-311-x86_64-linux-gnu.so"],
                   [where["hotpath"], "/repo/extracted_c/_hotpath.so"]):
        with pytest.raises(Failure, match="engine core mapped"):
            run_e2e.check_mapped("swa/on", "native", mapped, where)
    outcome = _outcome(RUNS[1], GOOD)  # on: the default core must be the extension
    outcome.hotpath_mapped = ["/repo/extracted_c/_hotpath.so"]
    with pytest.raises(Failure, match="engine core mapped"):
        run_e2e.check_outcome(outcome, where)


def test_runs_use_the_native_default() -> None:
    by_mode = {r.mode: r for r in RUNS}
    assert by_mode["on"].core == "" and by_mode["on"].backend == "native"
    assert by_mode["shadow"].backend == "native" and by_mode["off"].backend == "vllm"


def test_wheel_info_rejects_pure_or_empty_wheels(tmp_path) -> None:
    import zipfile

    good = tmp_path / "swa_prefix_cache-0.1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(good, "w") as z:
        z.writestr("extracted_c/_hotpath.cpython-311-x86_64-linux-gnu.so", b"elf")
    info = run_e2e.wheel_info(good)
    assert info["tag"] == "cp311-cp311-linux_x86_64" and len(info["sha256"]) == 64
    pure = tmp_path / "swa_prefix_cache-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(pure, "w") as z:
        z.writestr("extracted_c/_hotpath.cpython-311-x86_64-linux-gnu.so", b"elf")
    with pytest.raises(Failure, match="not platform-tagged"):
        run_e2e.wheel_info(pure)
    empty = tmp_path / "swa_prefix_cache-0.1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("vllm_adapter/__init__.py", "")
    with pytest.raises(Failure, match="expected one"):
        run_e2e.wheel_info(empty)
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("extracted_c/_hotpath.cpython-311-x86_64-linux-gnu.so", b"elf")
        z.writestr("extracted_c/libprefix_cache.so", b"elf")
    with pytest.raises(Failure, match="ships"):
        run_e2e.wheel_info(empty)


# ---- the load phase (run_e2e.check_load, load.summary) ---------------------------------


def _load_outcome() -> run_e2e.LoadOutcome:
    calls = 1001
    engine = _engine("shadow", "native", calls)
    summary = {
        "requests": 1000, "completed": 1000, "failed": 0, "unsent": 0, "failures": [],
        "concurrency": 16, "wall_s": 5.0, "full_hits": 200, "partial_hits": 700,
        "misses": 100, "refetched_after_eviction": 3, "max_prompt_tokens": 3000,
        "latency_ms_p50": 50.0, "latency_ms_p99": 300.0,
    }
    return run_e2e.LoadOutcome("hybrid", 256, summary, engine,
                               {run_e2e.EVICTION_METRIC: 5000.0}, True, 30.0)


def test_good_load_passes() -> None:
    run_e2e.check_load(_load_outcome())


@pytest.mark.parametrize("breakage, message", [
    (lambda o: o.summary.update(requests=999, completed=999), "below 1000"),
    (lambda o: o.summary.update(concurrency=8), "below 1000 at 16"),
    (lambda o: o.summary.update(completed=998, failed=2), "998 of 1000 completed"),
    (lambda o: o.summary.update(completed=990, unsent=10), "unsent at the deadline"),
    (lambda o: setattr(o, "final_ok", False), "did not answer"),
    (lambda o: o.engine.update(mode="on"), "engine core runs on"),
    (lambda o: o.engine.update(backend="python"), "engine core runs shadow / python"),
    (lambda o: o.engine.update(installed=False), "engine core runs"),
    (lambda o: o.engine["stats"].update(errors=2), "2 adapter errors"),
    (lambda o: o.engine["stats"].update(shadow_mismatches=1), "1 shadow mismatches"),
    (lambda o: o.engine["stats"].update(shadow_compared=999, calls=999), "compared 999"),
    (lambda o: o.engine["stats"].update(shadow_compared=900), "compared 900 of 1001"),
    (lambda o: o.metrics.clear(), "no block was evicted"),
    (lambda o: o.metrics.update({run_e2e.EVICTION_METRIC: 0.0}), "no block was evicted"),
    (lambda o: o.summary.update(refetched_after_eviction=0), "evictions never reached"),
    (lambda o: o.summary.update(partial_hits=0), "partial hits"),
    (lambda o: o.summary.update(full_hits=0), "full and"),
])
def test_load_breakages_fail(breakage, message) -> None:
    outcome = _load_outcome()
    breakage(outcome)
    with pytest.raises(Failure, match=message):
        run_e2e.check_load(outcome)


def test_load_must_map_the_installed_extension(tmp_path) -> None:
    where = _installed(tmp_path)
    outcome = _load_outcome()
    outcome.hotpath_mapped = [where["hotpath"]]
    run_e2e.check_load(outcome, where)
    outcome.hotpath_mapped = []
    with pytest.raises(Failure, match="engine core mapped"):
        run_e2e.check_load(outcome, where)


def test_load_requests_are_deterministic_and_shared() -> None:
    work = load.LoadWorkload(requests=400)
    first, second = load.requests(work), load.requests(work)
    assert first == second
    assert all(len(r.words) == r.prefix_tokens + r.suffix_tokens <= work.document_tokens
               for r in first)
    assert max(len(r.words) for r in first) == work.document_tokens
    bare = [r for r in first if r.suffix_tokens == 0]
    assert 0 < len(bare) < len(first)
    # The same bare prefix recurs (full hits), and prefixes are document prefixes.
    assert len({(r.document, r.prefix_tokens) for r in bare}) < len(bare)
    docs: dict[int, tuple[str, ...]] = {}
    for r in first:
        longest = docs.get(r.document, ())
        shorter, longer = sorted((longest, r.words[:r.prefix_tokens]), key=len)
        assert longer[:len(shorter)] == shorter
        docs[r.document] = longer


def _load_sample(i, prefix, suffix, cached, started, finished) -> load.LoadSample:
    return load.LoadSample(i, 0, prefix, suffix, prefix + suffix, cached, started, finished)


def test_load_summary_counts_hits_and_eviction_witnesses() -> None:
    samples = [
        _load_sample(0, 1000, 0, 0, 0.0, 1.0),  # miss
        _load_sample(1, 1000, 0, 992, 2.0, 3.0),  # full hit after 0 completed
        _load_sample(2, 1000, 40, 992, 2.0, 3.0),  # partial (suffix not cached)
        _load_sample(3, 1000, 0, 0, 4.0, 5.0),  # was fully cached: evicted since
        _load_sample(4, 500, 0, 0, 4.0, 5.0),  # first of its kind: no witness
        _load_sample(5, 500, 0, 0, 4.5, 5.5),  # sent before 4 completed: no witness
    ]
    result = load.LoadResult(load.LoadWorkload(requests=6), samples)
    s = load.summary(result, 32)
    assert (s["full_hits"], s["partial_hits"], s["misses"]) == (1, 1, 4)
    assert s["refetched_after_eviction"] == 1
    assert s["requests"] == s["completed"] == 6


def test_load_run_counts_failures_and_the_deadline() -> None:
    work = load.LoadWorkload(requests=40, concurrency=4, documents=2, document_tokens=200)

    def flaky(port, model, req, max_tokens, timeout_s):
        if req.index % 10 == 3:
            raise OSError("connection reset")
        return {"usage": {"prompt_tokens": len(req.words),
                          "prompt_tokens_details": {"cached_tokens": 0}}}

    result = load.run(0, "tiny", work, send=flaky)
    assert (len(result.samples), result.failed, result.unsent) == (36, 4, 0)
    s = load.summary(result, 32)
    assert s["requests"] == 40 and s["completed"] == 36
    late = load.run(0, "tiny", work, deadline_s=-1.0, send=flaky)
    assert late.unsent == 40 and not late.samples
