"""The README's support table check (scripts/matrix/support_table.py): it
fails on what the table claims (its rows, what is patched, a failed suite)
and only says what depends on the machine (counts, skips, fast paths)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "matrix"))

import support_table  # noqa: E402


def _receipt(passed: int = 10, skipped: int = 0, failed: int = 0, vllm: str = "0.33.0",
             python: str = "3.11.7") -> dict:
    return {"id": f"vllm-{vllm}-cpython-{python}", "vllm": vllm, "python": python, "arch": "x86_64",
            "extension": {"built": True, "read_ahead": True, "hash": "avx2-siphash13"},
            "suites": [{"name": "all", "passed": passed, "failed": failed, "skipped": skipped,
                        "errors": 0}],
            "skipped_reason": None, "ok": not failed}


def _check(readme_receipts: list[dict], run_receipts: list[dict]) -> tuple[list[str], list[str]]:
    readme = support_table.table(readme_receipts)
    return support_table.differences(readme, support_table.table(run_receipts), run_receipts)


def test_the_same_receipts_agree() -> None:
    assert _check([_receipt()], [_receipt()]) == ([], [])


def test_counts_and_skips_are_said_not_failed_on() -> None:
    failures, notes = _check([_receipt(passed=13)], [_receipt(passed=10, skipped=3)])
    assert failures == []
    assert len(notes) == 1 and "10 passed, 3 skipped" in notes[0]


def test_a_missing_or_extra_row_fails() -> None:
    failures, _ = _check([_receipt(), _receipt(python="3.12.1")], [_receipt()])
    assert any("no receipt" in f for f in failures)
    failures, _ = _check([_receipt()], [_receipt(), _receipt(python="3.12.1")])
    assert any("not in the README" in f for f in failures)


def test_a_patch_release_of_cpython_is_the_machines() -> None:
    """A README made where CPython is pyenv's 3.11.7 matches a run on
    Debian's 3.11.2: a row claims CPython 3.11 (a fresh clone's make check
    as a non-root user failed on this); another minor release is another row."""
    assert _check([_receipt(python="3.11.7")], [_receipt(python="3.11.2")]) == ([], [])
    assert "| 3.11 |" in support_table.table([_receipt(python="3.11.2")])
    failures, _ = _check([_receipt(python="3.11.7")], [_receipt(python="3.12.1")])
    assert failures


def test_a_different_patched_cell_fails() -> None:
    # The README claims 0.33.0's patches for 0.20.0, a release no binding lists.
    readme = support_table.table([_receipt()]).replace("0.33.0", "0.20.0")
    run = [_receipt(vllm="0.20.0")]
    failures, _ = support_table.differences(readme, support_table.table(run), run)
    assert failures and "patched" in failures[0]


def test_a_failed_suite_fails() -> None:
    failures, _ = _check([_receipt(failed=1)], [_receipt(failed=1)])
    assert failures == ["vllm-0.33.0-cpython-3.11.7: a suite failed"]


def test_a_skipped_run_makes_no_row() -> None:
    """Issue 43: the table describes releases, not the machine that made it:
    a run skipped for want of an interpreter makes no row, and a README
    without that row still matches."""
    skipped = dict(_receipt(python="3.14.0"), suites=[], skipped_reason="no python3.14 interpreter here",
                   ok=False)
    assert "3.14" not in support_table.table([_receipt(), skipped])
    assert _check([_receipt()], [_receipt(), skipped]) == ([], [])
