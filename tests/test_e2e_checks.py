"""The pass criteria of ``make e2e`` (e2e/run_e2e.py) reject what they must.

The live run only ever shows them passing; these cases feed the same
checks a silently unpatched engine, a lookup in the wrong process, a
shadow mismatch, differing ``cached_tokens``, a probe that never hit, a
package imported from the work tree or from another wheel, an engine core
that mapped some other extension, and load phases that lost requests,
never evicted, never hit partially, compared too few lookups or left the
server dead, and expect each to fail. Likewise the full-attention lookups
(a hybrid engine core without them, or with vLLM's own where ours was
asked, a shadow run that compared only the sliding-window ones, an all-SWA
engine that reports some), a long phase whose prompts did not stay cached,
an in-process run without full-attention timing, and data-parallel runs
whose engine cores did not each report their own lookups. No server is
started here.
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


def _engine(mode: str, backend: str, calls: int, full_calls: int = 0) -> dict:
    return {
        "pid": 4242, "process": "VLLM::EngineCore", "installed": True,
        "mode": mode, "backend": backend, "reason": "",
        "full_attention": {"installed": True, "reason": ""},
        "stats": {
            "calls": calls, "lookup_ns": 1000 * calls, "lookup_ns_max": 2000, "errors": 0,
            "full_calls": full_calls, "full_lookup_ns": 3000 * full_calls,
            "full_lookup_ns_max": 5000,
            "shadow_compared": calls + full_calls if mode == "shadow" else 0,
            "shadow_mismatches": 0, "last_mismatch": {},
        },
        "observed": [],
    }


def _outcome(run: run_e2e.Run, cached: list[int], model: str = "swa") -> Outcome:
    full = 4 if model == "hybrid" else 0
    return Outcome(model, run, _samples(cached), _engine(run.mode, run.backend, 4, full), {}, 1.0)


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


def _write(directory: Path, pid: int, calls: int, full_calls: int = 0,
           process: str = "VLLM::EngineCore") -> None:
    data = _engine("on", "python", calls, full_calls)
    data["pid"], data["process"] = pid, process
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


def test_settled_stats_counts_full_attention_lookups_as_lookups(tmp_path) -> None:
    _write(tmp_path, 100, 0)
    _write(tmp_path, 101, 0, full_calls=3)
    engine, _ = run_e2e.settled_stats(tmp_path, server_pid=100, timeout_s=2)
    assert engine["pid"] == 101


def test_settled_engines_finds_every_data_parallel_engine(tmp_path) -> None:
    _write(tmp_path, 100, 0, process="api_server")
    _write(tmp_path, 102, 5, process="VLLM::EngineCore_DP1")
    _write(tmp_path, 101, 7, process="VLLM::EngineCore_DP0")
    _write(tmp_path, 103, 0, process="spawn_main")
    engines, others = run_e2e.settled_engines(tmp_path, server_pid=100, count=2, timeout_s=3)
    assert [e["pid"] for e in engines] == [101, 102]
    assert sorted(o["pid"] for o in others) == [100, 103]
    # One engine core got every request (not spread): only one has lookups.
    (tmp_path / "stats-102.json").unlink()
    _write(tmp_path, 102, 0, process="VLLM::EngineCore_DP1")
    with pytest.raises(Failure, match="expected 2 processes with lookups, found 1"):
        run_e2e.settled_engines(tmp_path, server_pid=100, count=2, timeout_s=1)
    _write(tmp_path, 100, 3, process="api_server")  # lookups in the server
    _write(tmp_path, 102, 5, process="VLLM::EngineCore_DP1")
    with pytest.raises(Failure, match="expected 2 processes with lookups, found 3"):
        run_e2e.settled_engines(tmp_path, server_pid=100, count=2, timeout_s=1)
    (tmp_path / "stats-101.json").unlink()
    with pytest.raises(Failure, match="API server process"):
        run_e2e.settled_engines(tmp_path, server_pid=100, count=2, timeout_s=1)


def test_probe_requests_are_deterministic() -> None:
    work = probe.Workload(prompts=2, prompt_tokens=50, shared_tokens=40, growth_turns=2,
                          growth_step=5, long_prompts=2, long_tokens=300)
    first, second = list(probe.requests(work)), list(probe.requests(work))
    assert first == second
    phases = [p for p, _, _ in first]
    assert phases == ["forward"] * 2 + ["reverse"] * 2 + ["shared"] * 2 + ["growth"] * 2 \
        + ["long"] * 2 + ["long_reverse"] * 2
    assert first[2][2] == first[1][2]  # reverse re-sends prompt 1 first
    assert first[4][2][:40] == first[0][2][:40] != first[4][2]
    assert first[10][2] == first[9][2] and len(first[8][2]) == 300  # long_reverse: 1 first
    assert probe.max_tokens(work) == 300
    # The long phase does not change the phases before it.
    short = list(probe.requests(probe.Workload(prompts=2, prompt_tokens=50, shared_tokens=40,
                                               growth_turns=2, growth_step=5, long_prompts=0)))
    assert short == first[:8]


def test_default_probe_is_long_and_fits_the_models() -> None:
    import make_models

    work = probe.Workload()
    assert work.long_prompts >= 4 and work.long_tokens >= 6000
    # --max-model-len (longest prompt + 64) within the models' positions.
    assert probe.max_tokens(work) + 64 <= make_models.SHAPE["max_position_embeddings"]


# ---- full-attention lookups (run_e2e.check_full_lookups / check_shadow_counts) --------


def test_hybrid_outcomes_with_full_attention_lookups_pass() -> None:
    outcomes = [_outcome(run, GOOD, "hybrid") for run in RUNS]
    for o in outcomes:
        run_e2e.check_outcome(o)
    run_e2e.compare(outcomes)
    times = run_e2e.lookup_times(outcomes)
    assert times["full_attention"]["on"] == {"lookups": 4, "us_mean": 3.0, "total_ms": 0.012,
                                             "max_us": 5.0}
    assert times["sliding_window"]["off"]["us_mean"] == 1.0


@pytest.mark.parametrize("mode", ["off", "on", "shadow"])
@pytest.mark.parametrize("breakage, message", [
    (lambda e: e["stats"].update(full_calls=0, shadow_compared=e["stats"]["calls"]),
     "0 full-attention lookups for 4 requests"),
    (lambda e: e["stats"].update(full_calls=3, shadow_compared=e["stats"]["calls"] + 3),
     "3 full-attention lookups for 4 requests"),
])
def test_hybrid_without_full_attention_lookups_fails(mode, breakage, message) -> None:
    run = {r.mode: r for r in RUNS}[mode]
    outcome = _outcome(run, GOOD, "hybrid")
    breakage(outcome.engine)
    with pytest.raises(Failure, match=message):
        run_e2e.check_outcome(outcome)


@pytest.mark.parametrize("mode", ["on", "shadow"])
def test_hybrid_with_vllms_own_full_attention_lookup_fails(mode) -> None:
    outcome = _outcome({r.mode: r for r in RUNS}[mode], GOOD, "hybrid")
    outcome.engine["full_attention"] = {"installed": False,
                                        "reason": "unknown full-attention lookup"}
    with pytest.raises(Failure, match="full-attention lookup is not replaced"):
        run_e2e.check_outcome(outcome)
    del outcome.engine["full_attention"]  # a plugin that does not even say
    with pytest.raises(Failure, match="full-attention lookup is not replaced"):
        run_e2e.check_outcome(outcome)


def test_shadow_must_compare_both_kinds_of_lookup() -> None:
    outcome = _outcome(RUNS[2], GOOD, "hybrid")
    outcome.engine["stats"].update(shadow_compared=4)  # the sliding-window ones only
    with pytest.raises(Failure, match=r"compared 4 of 8 lookups \(4 sliding-window \+ 4 full"):
        run_e2e.check_outcome(outcome)
    outcome.engine["stats"].update(shadow_compared=8, shadow_mismatches=1)
    with pytest.raises(Failure, match="1 shadow mismatches"):
        run_e2e.check_outcome(outcome)


def test_full_attention_lookups_on_an_all_swa_model_fail() -> None:
    outcome = _outcome(RUNS[1], GOOD, "swa")
    outcome.engine["stats"].update(full_calls=2)
    with pytest.raises(Failure, match="model without full-attention layers"):
        run_e2e.check_outcome(outcome)


# ---- the long phase (run_e2e.check_long_phase) -----------------------------------------

LONG = probe.Workload(long_prompts=2, long_tokens=7000)


def _long_outcome(cached: list[int | None], model: str = "hybrid") -> Outcome:
    o = _outcome(RUNS[1], GOOD, model)
    o.samples += [probe.Sample("long", i, 7000, 0, 900.0) for i in range(2)]
    o.samples += [probe.Sample("long_reverse", 1 - i, 7000, c, 90.0)
                  for i, c in enumerate(cached)]
    o.before_long = copy.deepcopy(o.engine["stats"])
    o.engine["stats"].update(calls=8, lookup_ns=4000 + 4 * 40_000, full_calls=8,
                             full_lookup_ns=12_000 + 4 * 90_000)
    return o


def test_good_long_phase_passes_and_is_timed_on_its_own() -> None:
    o = _long_outcome([6976, 6976])
    run_e2e.check_long_phase(o, LONG)
    long = run_e2e.lookup_times([o], long_only=True)
    assert long["sliding_window"]["on"] == {"lookups": 4, "us_mean": 40.0, "total_ms": 0.16}
    assert long["full_attention"]["on"] == {"lookups": 4, "us_mean": 90.0, "total_ms": 0.36}
    run_e2e.check_long_phase(_outcome(RUNS[1], GOOD), probe.Workload(long_prompts=0))


@pytest.mark.parametrize("change, message", [
    (lambda o: o.samples.pop(), "sent 1 of 2 prompts again"),
    (lambda o: o.samples.pop(-3), "sent 2 of 2"),  # a forward long prompt missing
    (lambda o: o.samples[-1].__setattr__("cached_tokens", 992), "cached 992 of 7000 tokens"),
    (lambda o: o.samples[-1].__setattr__("cached_tokens", None), "cached None of 7000"),
    (lambda o: o.samples[-2].__setattr__("prompt_tokens", 1000), "cached 6976 of 1000"),
    (lambda o: o.engine["stats"].update(calls=4, full_calls=5), "1 lookups in the long phase"),
])
def test_long_phase_breakages_fail(change, message) -> None:
    o = _long_outcome([6976, 6976])
    change(o)
    with pytest.raises(Failure, match=message):
        run_e2e.check_long_phase(o, LONG)


# ---- the installed artifact (run_e2e.check_installed / check_mapped) -------------------

SITE = "/venv/lib/python3.11/site-packages"
WHEEL = {"file": "swa_prefix_cache-0.1.0-cp311-cp311-linux_x86_64.whl", "sha256": "ab" * 32,
         "tag": "cp311-cp311-linux_x86_64",
         "hotpath_member": "swa_prefix_cache/core/_hotpath.cpython-311-x86_64-linux-gnu.so",
         "hotpath_sha256": ""}


def _installed(tmp_path: Path) -> dict:
    hot = tmp_path / "site" / "swa_prefix_cache" / "core" / "_hotpath.cpython-311-x86_64-linux-gnu.so"
    hot.parent.mkdir(parents=True)
    hot.write_bytes(b"the wheel's extension")
    WHEEL["hotpath_sha256"] = run_e2e.sha256_file(hot)
    site = str(tmp_path / "site")
    return {
        "site": [site], "vllm_adapter": f"{site}/swa_prefix_cache/vllm_adapter/__init__.py",
        "core": f"{site}/swa_prefix_cache/core/__init__.py", "hotpath": str(hot),
        "version": "0.1.0", "entry_points": ["swa_prefix_cache.vllm_adapter.plugin:register"],
        "direct_url": {"url": f"file:///repo/dist/{WHEEL['file']}",
                       "archive_info": {"hashes": {"sha256": WHEEL["sha256"]}}},
    }


def test_installed_wheel_passes(tmp_path) -> None:
    run_e2e.check_installed(_installed(tmp_path), WHEEL)


@pytest.mark.parametrize("breakage, message", [
    (lambda w: w.update(vllm_adapter="/repo/swa_prefix_cache/vllm_adapter/__init__.py"), "not from site-packages"),
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
    for mapped in ([], ["/repo/swa_prefix_cache/core/_hotpath.cpython-311-x86_64-linux-gnu.so"],
                   [where["hotpath"], "/repo/swa_prefix_cache/core/_hotpath.so"]):
        with pytest.raises(Failure, match="engine core mapped"):
            run_e2e.check_mapped("swa/on", "native", mapped, where)
    outcome = _outcome(RUNS[1], GOOD)  # on: the default core must be the extension
    outcome.hotpath_mapped = ["/repo/swa_prefix_cache/core/_hotpath.so"]
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
        z.writestr("swa_prefix_cache/core/_hotpath.cpython-311-x86_64-linux-gnu.so", b"elf")
    info = run_e2e.wheel_info(good)
    assert info["tag"] == "cp311-cp311-linux_x86_64" and len(info["sha256"]) == 64
    pure = tmp_path / "swa_prefix_cache-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(pure, "w") as z:
        z.writestr("swa_prefix_cache/core/_hotpath.cpython-311-x86_64-linux-gnu.so", b"elf")
    with pytest.raises(Failure, match="not platform-tagged"):
        run_e2e.wheel_info(pure)
    empty = tmp_path / "swa_prefix_cache-0.1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("swa_prefix_cache/vllm_adapter/__init__.py", "")
    with pytest.raises(Failure, match="expected one"):
        run_e2e.wheel_info(empty)
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("swa_prefix_cache/core/_hotpath.cpython-311-x86_64-linux-gnu.so", b"elf")
        z.writestr("swa_prefix_cache/core/libprefix_cache.so", b"elf")
    with pytest.raises(Failure, match="ships"):
        run_e2e.wheel_info(empty)


# ---- the load phase (run_e2e.check_load, load.summary) ---------------------------------


def _load_outcome() -> run_e2e.LoadOutcome:
    calls = 1001
    engine = _engine("shadow", "native", calls, full_calls=1000)
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
    (lambda o: o.engine["stats"].update(shadow_compared=999, calls=0, full_calls=999),
     "compared 999"),
    (lambda o: o.engine["stats"].update(shadow_compared=900), "compared 900 of 2001"),
    (lambda o: o.engine["stats"].update(shadow_compared=1001), "compared 1001 of 2001"),
    (lambda o: o.engine["stats"].update(full_calls=0, shadow_compared=1001),
     "0 full-attention lookups for 1000 requests"),
    (lambda o: o.engine.update(full_attention={"installed": False, "reason": "python core"}),
     "not replaced"),
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
