"""scripts/dedupe_installs.py: only complete installs, only identical files
(bytes and mode), only large ones; linking leaves every path's content."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import dedupe_installs  # noqa: E402

MIN = 4096


def install(root: Path, files: dict[str, bytes], stamp: bool = True) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if stamp:
        (root / ".stamp").touch()
    return root


def run(tmp_path: Path, *extra: str) -> int:
    return dedupe_installs.main([str(tmp_path / "venvs"), str(tmp_path / "releases"),
                                 "--min-bytes", str(MIN), *extra])


def same_file(a: Path, b: Path) -> bool:
    return os.stat(a).st_ino == os.stat(b).st_ino


def test_identical_large_files_are_linked(tmp_path: Path) -> None:
    big = os.urandom(3 * MIN)
    a = install(tmp_path / "venvs" / "a", {"lib/libx.so": big, "lib/liby.so": os.urandom(2 * MIN)})
    b = install(tmp_path / "releases" / "b", {"nvidia/libx.so": big, "lib/liby.so": os.urandom(2 * MIN)})
    assert run(tmp_path) == 0
    assert same_file(a / "lib/libx.so", b / "nvidia/libx.so")
    assert not same_file(a / "lib/liby.so", b / "lib/liby.so")
    assert (b / "nvidia/libx.so").read_bytes() == big
    assert not list(b.rglob(".*dedupe-*"))


def test_second_run_links_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = os.urandom(2 * MIN)
    install(tmp_path / "venvs" / "a", {"x.so": big})
    install(tmp_path / "venvs" / "b", {"x.so": big})
    install(tmp_path / "venvs" / "c", {"x.so": big})
    run(tmp_path)
    assert "2 files linked" in capsys.readouterr().out
    run(tmp_path)
    assert "0 files linked" in capsys.readouterr().out


def test_same_size_other_bytes_or_mode_or_small_stay(tmp_path: Path) -> None:
    data = os.urandom(2 * MIN)
    other = data[:-1] + bytes([data[-1] ^ 1])
    small = os.urandom(MIN - 1)
    a = install(tmp_path / "venvs" / "a", {"x.so": data, "y.so": data, "s": small})
    b = install(tmp_path / "venvs" / "b", {"x.so": other, "y.so": data, "s": small})
    os.chmod(b / "y.so", 0o755)
    os.chmod(a / "y.so", 0o644)
    run(tmp_path)
    assert not same_file(a / "x.so", b / "x.so")
    assert not same_file(a / "y.so", b / "y.so")
    assert not same_file(a / "s", b / "s")
    assert same_file(a / "x.so", a / "y.so")


def test_incomplete_install_is_left_alone(tmp_path: Path) -> None:
    big = os.urandom(2 * MIN)
    a = install(tmp_path / "venvs" / "a", {"x.so": big})
    b = install(tmp_path / "venvs" / "b", {"x.so": big}, stamp=False)
    run(tmp_path)
    assert not same_file(a / "x.so", b / "x.so")
    run(tmp_path, "--complete", str(b))
    assert same_file(a / "x.so", b / "x.so")


def test_bad_min_bytes_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        dedupe_installs.main([str(tmp_path), "--min-bytes", "0"])
