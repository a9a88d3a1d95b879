"""scripts/disk_budget.py: installed bytes count toward the need (each inode
once); short of it, exit 1 saying how much is missing."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import disk_budget  # noqa: E402


def test_links_count_once(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(os.urandom(1 << 16))
    os.link(tmp_path / "a", tmp_path / "b")
    assert disk_budget.installed_bytes([tmp_path]) == (tmp_path / "a").stat().st_blocks * 512
    assert disk_budget.installed_bytes([tmp_path / "missing"]) == 0


def test_short_disk_fails_with_the_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    free_gb = shutil.disk_usage(tmp_path).free / 1e9
    assert disk_budget.main(["--need-gb", str(free_gb + 1000), str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "GB short" in err and "CHECK_DISK_GB=0" in err
    assert disk_budget.main(["--need-gb", str(max(free_gb - 1, 0.001)), str(tmp_path)]) == 0
    assert disk_budget.main(["--need-gb", "0", str(tmp_path)]) == 0
    assert "SKIPPED" in capsys.readouterr().out


def test_negative_need_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        disk_budget.main(["--need-gb", "-1", str(tmp_path)])
