"""The wheel installs beside distributions that own the names its parts
once had at the top of site-packages (``pyspec``, ``kv_index``).

A clean venv first gets PyPI's ``kv-index`` (it installs a top-level
``kv_index``) and a distribution that owns the top-level ``pyspec``. PyPI's
own ``pyspec`` (x-ray data analysis, 0.2.post213 and older) is a Python 2
sdist that no Python 3 can build, so a stand-in made here takes its place:
a clash needs only the top-level name. Then the wheel (``make dist``),
without dependencies. Checked:

* all three import, each from its own files in the venv;
* every file the wheel installs is under ``swa_prefix_cache/`` or its
  dist-info, and the console script;
* ``python -m swa_prefix_cache qualify`` passes, with vLLM from the
  project's venv on the path after the clean venv's own site-packages;
* uninstalling the wheel leaves the other two importable.

``make wheel-beside-peers`` (part of ``make check``) builds the wheel and
passes it in $SWA_PREFIX_CACHE_TEST_WHEEL; without it the test is skipped.
"""

import base64
import hashlib
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WHEEL_ENV = "SWA_PREFIX_CACHE_TEST_WHEEL"
PEERS = ROOT / "requirements" / "beside-peers.txt"  # PyPI's kv-index, pinned
STAND_IN = "pyspec"

pytestmark = pytest.mark.skipif(not os.environ.get(WHEEL_ENV),
                                reason=f"make wheel-beside-peers passes the wheel in ${WHEEL_ENV}")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _stand_in_wheel(directory: Path) -> Path:
    """A pure wheel named ``pyspec`` whose package ``pyspec`` says whose it is."""
    dist_info = f"{STAND_IN}-0.0.0.dist-info"
    files = {
        f"{STAND_IN}/__init__.py": b'OWNER = "the stand-in for PyPI\'s pyspec"\n',
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {STAND_IN}\nVersion: 0.0.0\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist_info}/top_level.txt": f"{STAND_IN}\n".encode(),
    }
    record = [_record_line(name, data) for name, data in files.items()] + [f"{dist_info}/RECORD,,"]
    wheel = directory / f"{STAND_IN}-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel


def _run(cmd: list[str], cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{cmd}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


WHERE = """
import importlib, json
print(json.dumps({name: getattr(importlib.import_module(name), "__file__", None)
                  for name in ("pyspec", "kv_index", "swa_prefix_cache", "swa_prefix_cache.kv_index")}))
"""


def test_the_wheel_installs_beside_pyspec_and_kv_index(tmp_path: Path) -> None:
    import json

    wheel = Path(os.environ[WHEEL_ENV]).resolve()
    assert wheel.is_file(), wheel
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
    _run(pip + ["-r", str(PEERS), str(_stand_in_wheel(tmp_path))], tmp_path)
    _run(pip + [str(wheel)], tmp_path)

    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     tmp_path).strip())
    where = json.loads(_run([str(python), "-I", "-c", WHERE], tmp_path).splitlines()[-1])
    assert where["pyspec"] == str(site / "pyspec" / "__init__.py"), where
    assert where["kv_index"] == str(site / "kv_index" / "__init__.py"), where
    assert where["swa_prefix_cache"] == str(site / "swa_prefix_cache" / "__init__.py"), where
    assert where["swa_prefix_cache.kv_index"] == str(site / "swa_prefix_cache" / "kv_index" / "__init__.py")
    owner = _run([str(python), "-I", "-c", "import pyspec; print(pyspec.OWNER)"], tmp_path)
    assert "stand-in" in owner

    # Every file of ours is under our name (the console script aside).
    record = next(site.glob("swa_prefix_cache-*.dist-info")) / "RECORD"
    tops = {line.split(",")[0].split("/")[0] for line in record.read_text().splitlines() if line}
    tops = {t for t in tops if not t.endswith(".dist-info") and t != ".."}
    assert tops == {"swa_prefix_cache"}, tops

    # qualify, with vLLM (and torch) from the project's venv after our own site-packages.
    (site / "zz-project-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    out = _run([str(python), "-m", "swa_prefix_cache", "qualify", "--lookups", "200"], tmp_path)
    assert out.strip().splitlines()[-1] == "PASS", out
    where = json.loads(_run([str(python), "-c", WHERE], tmp_path).splitlines()[-1])
    assert where["swa_prefix_cache"] == str(site / "swa_prefix_cache" / "__init__.py"), where

    # Removing ours leaves theirs.
    _run([sys.executable, "-m", "pip", "--python", str(python), "uninstall", "-q", "-y", "swa-prefix-cache"],
         tmp_path)
    _run([str(python), "-I", "-c", "import pyspec, kv_index"], tmp_path)
    assert not (site / "swa_prefix_cache").exists()
