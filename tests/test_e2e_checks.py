"""The pass criteria of ``make e2e`` (e2e/run_e2e.py) reject what they must.

The live run only ever shows them passing; these cases feed the same
checks a silently unpatched engine, a lookup in the wrong process, a
shadow mismatch, differing ``cached_tokens`` and a probe that never hit,
and expect each to fail. No server is started here.
"""

import copy
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

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
