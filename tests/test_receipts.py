"""Receipts are compact and lossless (benchmarks/receipts.py): the summary
as JSON, the raw series in a gzip'd sidecar that ``load`` puts back; every
committed receipt is in that form, and the tracked JSON stays within its
budget (issue 43: at most 20,000 lines)."""

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks import receipts

ROOT = Path(__file__).resolve().parent.parent
TRACKED_JSON_LINES_MAX = 20_000

RECEIPT = {
    "summary": {"speedup": 1.18, "ok": True},
    "runs": [
        {"layout": "gemma", "on": {"cdf_ms": [i / 10 for i in range(100)], "p50_ms": 0.3}},
        {"layout": "llama", "on": {"cdf_ms": [1.0, 2.0], "p50_ms": 0.4}},  # too short: kept inline
    ],
    "cells": [{"samples_ns": {"ours": list(range(40)), "vllm": list(range(40, 80))}, "median": 3}],
    "odd/key~name": {"replies": [{"id": i, "text": "x" * 30} for i in range(20)]},
}


def test_write_then_load_gives_the_receipt_back(tmp_path: Path) -> None:
    path = receipts.write(tmp_path / "r.json", RECEIPT)
    assert receipts.load(path) == RECEIPT
    summary = json.loads(path.read_text())
    sidecar = receipts.sidecar_of(path)
    assert sidecar.name == "r.series.json.gz" and sidecar.exists()
    # Each series left the summary for a reference to where it went.
    ref = summary["runs"][0]["on"]["cdf_ms"]
    assert ref == {"series": "r.series.json.gz", "at": "/runs/0/on/cdf_ms", "n": 100}
    assert summary["runs"][1]["on"]["cdf_ms"] == [1.0, 2.0]
    assert summary["cells"][0]["samples_ns"]["at"] == "/cells/0/samples_ns"
    assert summary["odd/key~name"]["replies"]["at"] == "/odd~1key~0name/replies"
    assert summary["summary"] == RECEIPT["summary"]


def test_a_summary_is_not_written_as_a_receipt(tmp_path: Path) -> None:
    """Writing what ``json.loads`` read of a receipt would keep references
    to another file's sidecar: refused, naming where."""
    first = receipts.write(tmp_path / "run.json", RECEIPT)
    summary = json.loads(first.read_text())
    with pytest.raises(ValueError, match="/runs/0/on/cdf_ms: a reference to run.series.json.gz"):
        receipts.write(tmp_path / "suite.json", {"runs": summary["runs"]})
    receipts.write(tmp_path / "suite.json", {"runs": receipts.load(first)["runs"]})


def test_a_receipt_without_series_has_no_sidecar(tmp_path: Path) -> None:
    path = receipts.write(tmp_path / "r.json", RECEIPT)
    assert receipts.sidecar_of(path).exists()
    small = {"speedup": 2.0, "rows": [1, 2, 3]}
    receipts.write(path, small)
    assert not receipts.sidecar_of(path).exists()  # the stale one went
    assert receipts.load(path) == small


def test_the_layout_reads_top_down() -> None:
    text = receipts.dumps({"targets": {"a": {"ok": True, "detail": "x" * 120}},
                           "cells": [{"w": 1, "median": {"ours": 1.0, "vllm": 2.0},
                                      "quartiles": {"ours": [1, 2], "vllm": [3, 4]}, "note": "y" * 90}],
                           "series": list(range(500))})
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}"
    assert any(line.startswith(' "series": [0, 1, 2') for line in lines)  # one line, however long
    assert any(line.startswith('  {"w": 1, "median"') for line in lines)  # a record on one line
    assert json.loads(text)["cells"][0]["note"] == "y" * 90


def _tracked_json() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.json"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in out.stdout.split()]


def test_committed_receipts_are_compact() -> None:
    committed = [p for p in _tracked_json() if p.parent.name == "results"]
    assert committed
    for path in committed:
        summary = json.loads(path.read_text())
        assert path.read_text() == receipts.dumps(summary) + "\n", f"{path}: run scripts/compact_receipts.py"
        again, series = receipts.split(receipts.load(path), receipts.sidecar_of(path).name)
        assert again == summary and not any(
            isinstance(v, dict) and "series" in v for v in series.values()), path


def test_tracked_json_within_its_budget() -> None:
    lines = sum(len(p.read_text().splitlines()) for p in _tracked_json())
    assert lines <= TRACKED_JSON_LINES_MAX, f"{lines} lines of tracked JSON"


# Files read as plain JSON on purpose: the layouts, the e2e models' stamp and
# the plugin's own stats files, none written by ``receipts.write``.
PLAIN_JSON_READERS = {
    "benchmarks/replay_layouts.py", "e2e/make_models.py", "e2e/replicas.py", "e2e/run_e2e.py",
}


def test_receipts_are_read_with_their_series() -> None:
    """A receipt (or a run's ``--json`` file) read with ``json.loads`` would
    hand its series' references to the reader, not the series: every other
    read of a JSON file in benchmarks/ and e2e/ goes through ``receipts.load``."""
    import ast

    found = []
    for folder in ("benchmarks", "e2e"):
        for path in sorted((ROOT / folder).glob("*.py")):
            name = str(path.relative_to(ROOT))
            if name in PLAIN_JSON_READERS or name == "benchmarks/receipts.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and ast.unparse(node.func) in ("json.loads", "json.load")
                        and node.args and "read_text" in ast.unparse(node.args[0])):
                    found.append(f"{name}:{node.lineno}")
    assert not found, found
