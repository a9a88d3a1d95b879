"""benchmarks/bench_releases.py's driver: its arguments, which install each
release runs from, and the table and PASS/MISS lines built from the
workers' outputs (made up here: nothing is timed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks import bench_releases as br

A, B = "0.33.0", "0.34.0"


def _rows(swa: dict[tuple[int, int], float], full: float, sched: float, step: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"kind": "swa", "window": w, "blocks": n, "hit_rate": 0.05, "ratio": r}
        for (w, n), r in swa.items()]
    rows.append({"kind": "full", "blocks": 2048, "ratio": full, "want": 6.0})
    rows.append({"kind": "sched", "window": 1024, "requests": 64, "blocks": 2048, "swa_groups": 1,
                 "ratio": sched, "want": 15.0})
    rows.append({"kind": "step", "requests": 64, "window": 1024, "ratio": step,
                 "triton_guard_passed": False})
    return rows


def _worker(version: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"vllm_version": version, "vllm_path": f"/x/{version}/vllm", "core": "native",
            "native_error": None, "rows": rows}


def _report(runs: dict[str, list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    table = br.combine(runs, (A, B))
    checks = br.verdicts(table, (A, B))
    text = br.format_report(table, checks, (A, B), runs)
    return table, {c["name"]: c for c in checks}, text


def test_args_defaults_and_rejections(capsys: pytest.CaptureFixture[str]) -> None:
    args = br.parse_args([])
    assert (args.rounds, args.quick, args.releases) == (3, False, None)
    assert br.parse_args(["--quick"]).rounds == 1
    assert br.parse_args(["--releases", A, B, "--rounds", "3"]).releases == [A, B]
    for bad, says in ((["--rounds", "0"], "--rounds must be >= 1"),
                      (["--releases", A, A], "the two releases are the same"),
                      (["--releases", A, "0.34;rm"], "not a version"),
                      (["--releases", A], "expected 2 arguments")):
        with pytest.raises(SystemExit) as exc:
            br.parse_args(bad)
        assert exc.value.code == 2
        assert says in capsys.readouterr().err


def test_overlay_is_none_for_the_venv_release_and_named_when_missing(tmp_path: Path) -> None:
    assert br.release_overlay(A, A, tmp_path) is None
    (tmp_path / B / "vllm").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"make build/releases/0\.34\.0/\.stamp"):
        br.release_overlay(B, A, tmp_path)  # a folder without vllm/__init__.py
    (tmp_path / B / "vllm" / "__init__.py").write_text("")
    assert br.release_overlay(B, A, tmp_path) == tmp_path / B


def test_table_is_the_median_over_rounds_and_targets_pass() -> None:
    swa_a = {(2048, 2048): 800.0, (128, 256): 70.0}
    runs = {A: [_worker(A, _rows(swa_a, 20.0, 16.0, 1.5)),
                _worker(A, _rows({k: v * 1.2 for k, v in swa_a.items()}, 22.0, 17.0, 1.6)),
                _worker(A, _rows({k: v * 0.9 for k, v in swa_a.items()}, 21.0, 18.0, 1.7))],
            B: [_worker(B, _rows({(2048, 2048): 760.0, (128, 256): 66.0}, 19.0, 15.5, 1.4))] * 3}
    table, checks, text = _report(runs)
    big = table[0]
    assert big["ratio"] == {A: 800.0, B: 760.0} and big["b_over_a"] == pytest.approx(0.95)
    assert [c["ok"] for c in checks.values()] == [True] * 5
    assert "MISS" not in text and text.count("PASS") == 5
    assert "sliding window  2048 /  2048 blocks, 5% hits" in text
    assert "Triton" not in text
    runs[B][0]["rows"][-1] = {**runs[B][0]["rows"][-1], "triton_guard_passed": True}
    _, _, text = _report(runs)
    assert f"vLLM {B}: the scheduler step's VllmConfig was built past" in text
    assert f"vLLM {A}: the scheduler step's" not in text


def test_each_target_misses_on_its_own_row() -> None:
    runs = {A: [_worker(A, _rows({(2048, 2048): 800.0, (128, 256): 70.0}, 20.0, 16.0, 1.5))],
            B: [_worker(B, _rows({(2048, 2048): 290.0, (128, 256): 39.0}, 5.9, 14.9, 1.0))]}
    _, checks, text = _report(runs)
    assert all(c["ok"] is False for c in checks.values())
    assert text.count("MISS") == 5
    assert "missed: full attention, 2,048 blocks all cached" in text
    # The reported step row is never judged.
    assert not any("scheduler step" in key for c in checks.values() for key in c["missed"])


def test_b_over_a_pairs_the_rounds() -> None:
    # Medians 200 and 200, but per round 0.9, 1.9, 0.5: B/A is 0.9.
    runs = {A: [_worker(A, _rows({(128, 256): x}, 20.0, 16.0, 1.5)) for x in (100.0, 200.0, 400.0)],
            B: [_worker(B, _rows({(128, 256): x}, 20.0, 16.0, 1.5)) for x in (90.0, 380.0, 200.0)]}
    table, _, _ = _report(runs)
    assert table[0]["ratio"] == {A: 200.0, B: 200.0}
    assert table[0]["b_over_a"] == pytest.approx(0.9)
    with pytest.raises(ValueError, match="3 rounds on 0.33.0, 2 on 0.34.0"):
        br.combine({A: runs[A], B: runs[B][:2]}, (A, B))


def test_within_ten_percent_is_judged_against_the_base_release() -> None:
    runs = {A: [_worker(A, _rows({(2048, 2048): 1000.0}, 20.0, 16.0, 1.5))],
            B: [_worker(B, _rows({(2048, 2048): 899.0}, 20.0, 16.0, 1.5))]}
    _, checks, _ = _report(runs)
    keep = checks[f"sliding-window {B}/{A} >= 0.90"]
    assert keep["ok"] is False and checks["every sliding-window cell >= 40x"]["ok"] is True
    runs[B] = [_worker(B, _rows({(2048, 2048): 901.0}, 20.0, 16.0, 1.5))]
    _, checks, _ = _report(runs)
    assert checks[f"sliding-window {B}/{A} >= 0.90"]["ok"] is True


def test_no_big_cell_is_not_applicable_and_row_mismatch_is_refused() -> None:
    # Window 2,048 on 256 blocks is not the 2,048-block cell.
    cells = {(128, 256): 70.0, (2048, 256): 150.0}
    runs = {A: [_worker(A, _rows(cells, 20.0, 16.0, 1.5))],
            B: [_worker(B, _rows(cells, 20.0, 16.0, 1.5))]}
    _, checks, text = _report(runs)
    assert checks["sliding-window 2,048 blocks / window 2,048 >= 300x"]["ok"] is None
    assert "n/a" in text
    runs[B] = [_worker(B, _rows({(512, 256): 70.0}, 20.0, 16.0, 1.5))]
    with pytest.raises(ValueError, match="other rows"):
        br.combine(runs, (A, B))
    with pytest.raises(ValueError, match="no worker output"):
        br.combine({A: runs[A], B: []}, (A, B))
