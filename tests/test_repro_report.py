"""The findings' reproductions never pass by measuring nothing: a run whose
control (every block stored) hits nothing exits 2, a loss exits 1, and only
a run that reached the lookup and lost nothing exits 0
(upstream/findings/_repro.py's Report). Each runs in a process of its own,
as a reproduction does (they refuse to run beside the project's modules)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

FINDINGS = Path(__file__).resolve().parents[1] / "upstream" / "findings"


def _exit(body: str) -> int:
    code = f"import _repro\nr = _repro.Report('T', 'a test')\n{body}\nr.finish()\n"
    return subprocess.run([sys.executable, "-c", code], cwd=FINDINGS, capture_output=True,
                          timeout=120).returncode


def test_nothing_measured_is_not_a_pass() -> None:
    assert _exit("r.case('c', 's', [('q', 0, 0), ('r', 0, 0)])") == 2


def test_a_loss_is_the_bug() -> None:
    assert _exit("r.case('c', 's', [('q', 0, 16), ('r', 0, 0)])") == 1


def test_reached_and_nothing_lost_passes() -> None:
    assert _exit("r.case('c', 's', [('q', 16, 16), ('r', 0, 0)])") == 0


def test_a_verdict_of_its_own_says_whether_it_reached_the_lookup() -> None:
    assert _exit("r.flag(False, reached=False)") == 2
    assert _exit("r.flag(False)") == 0
    assert _exit("r.flag(True)") == 1
