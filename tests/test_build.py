"""The extension's build (setup.py): without a C compiler a user's install
still succeeds and says why there is no native hot path; where the build is
required (``make setup``, CI) the same failure is an error.

Each case builds into its own temporary folder (``--build-lib`` /
``--build-temp``), so the in-place extension the other tests use is never
touched.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _build(tmp_path: Path, cc: str, require: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CC=cc)
    env.pop("SWA_PREFIX_CACHE_REQUIRE_NATIVE", None)
    if require:
        env["SWA_PREFIX_CACHE_REQUIRE_NATIVE"] = "1"
    return subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext",
         "--build-lib", str(tmp_path / "lib"), "--build-temp", str(tmp_path / "temp")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )


def _built(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "lib").glob("extracted_c/_hotpath*.so"))


def test_builds_with_a_compiler(tmp_path: Path) -> None:
    done = _build(tmp_path, os.environ.get("CC", "gcc"), require=True)
    assert done.returncode == 0, done.stderr
    assert len(_built(tmp_path)) == 1


def test_no_compiler_warns_and_installs_without_it(tmp_path: Path) -> None:
    done = _build(tmp_path, str(tmp_path / "no-such-cc"), require=False)
    assert done.returncode == 0, done.stderr
    assert "could not build the native hot path" in done.stderr
    assert "C compiler" in done.stderr
    assert _built(tmp_path) == []


def test_no_compiler_is_an_error_when_required(tmp_path: Path) -> None:
    done = _build(tmp_path, str(tmp_path / "no-such-cc"), require=True)
    assert done.returncode != 0
    assert _built(tmp_path) == []
