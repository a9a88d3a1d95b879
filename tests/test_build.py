"""The extension's build (setup.py): a failed native build fails the
install by default, with a message that says why and how to install without
it (SWA_PREFIX_CACHE_NATIVE=optional), which pip shows in its normal output
(pip prints a backend's output only when the build fails);
SWA_PREFIX_CACHE_NATIVE=optional installs without it and says so; the
former SWA_PREFIX_CACHE_REQUIRE_NATIVE=1 still means required. On a
free-threaded CPython nothing is built and swa_prefix_cache/core/hotpath.py refuses
the extension.

Each case builds into its own temporary folder (``--build-lib`` /
``--build-temp``), so the in-place extension the other tests use is never
touched.
"""

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from swa_prefix_cache import settings
from swa_prefix_cache.core import hotpath

ROOT = Path(__file__).resolve().parent.parent
NATIVE_ENV = settings.NATIVE.name
LEGACY_ENV = settings.NATIVE.old_names[0].name


def _build(tmp_path: Path, cc: str, mode: str | None = None, legacy: bool = False,
           prelude: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CC=cc)
    env.pop(NATIVE_ENV, None)
    env.pop(LEGACY_ENV, None)
    if mode is not None:
        env[NATIVE_ENV] = mode
    if legacy:
        env[LEGACY_ENV] = "1"
    argv = ["setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
            "--build-temp", str(tmp_path / "temp")]
    code = (prelude + "import runpy, sys\n"
            f"sys.argv = {argv!r}\n"
            "runpy.run_path('setup.py', run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def _built(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "lib").glob("swa_prefix_cache/core/_hotpath*.so"))


def test_builds_with_a_compiler(tmp_path: Path) -> None:
    done = _build(tmp_path, os.environ.get("CC", "gcc"))
    assert done.returncode == 0, done.stderr
    assert len(_built(tmp_path)) == 1


@pytest.mark.parametrize("cc", ["no-such-cc", "/bin/false"])
def test_failed_build_fails_by_default_and_says_how_to_skip_it(tmp_path: Path, cc: str) -> None:
    done = _build(tmp_path, cc if cc.startswith("/") else str(tmp_path / cc))
    assert done.returncode != 0
    assert "could not build the native hot path" in done.stderr
    assert "C compiler" in done.stderr
    assert f"{NATIVE_ENV}=optional" in done.stderr
    assert _built(tmp_path) == []


def test_optional_installs_without_it_and_says_so(tmp_path: Path) -> None:
    done = _build(tmp_path, str(tmp_path / "no-such-cc"), mode="optional")
    assert done.returncode == 0, done.stderr
    assert "could not build the native hot path" in done.stderr
    assert "installed without it" in done.stderr
    assert _built(tmp_path) == []


@pytest.mark.parametrize("mode, legacy", [("required", False), (None, True)])
def test_required_is_an_error(tmp_path: Path, mode: str | None, legacy: bool) -> None:
    done = _build(tmp_path, str(tmp_path / "no-such-cc"), mode=mode, legacy=legacy)
    assert done.returncode != 0
    assert "could not build the native hot path" in done.stderr
    assert _built(tmp_path) == []


def test_a_bad_mode_is_an_error(tmp_path: Path) -> None:
    done = _build(tmp_path, os.environ.get("CC", "gcc"), mode="maybe")
    assert done.returncode != 0
    assert f"{NATIVE_ENV} must be one of required, optional, got 'maybe'" in done.stderr


FREE_THREADED = (
    "import sysconfig\n"
    "_get = sysconfig.get_config_var\n"
    "sysconfig.get_config_var = lambda name: 1 if name == 'Py_GIL_DISABLED' else _get(name)\n"
)


def test_free_threaded_builds_nothing_and_says_so(tmp_path: Path) -> None:
    done = _build(tmp_path, os.environ.get("CC", "gcc"), prelude=FREE_THREADED)
    assert done.returncode == 0, done.stderr
    assert "native hot path is not built" in done.stderr
    assert "free-threaded" in done.stderr
    assert _built(tmp_path) == []


def _fake_config(real, **fake):  # noqa: ANN001, ANN003, ANN202
    return lambda name: fake[name] if name in fake else real(name)


def test_unsupported_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sysconfig.get_config_var
    assert hotpath.unsupported_reason() is None or not sysconfig.get_config_var("Py_GIL_DISABLED")
    monkeypatch.setattr(sysconfig, "get_config_var", _fake_config(real, Py_GIL_DISABLED=1))
    assert "free-threaded" in (hotpath.unsupported_reason() or "")
    monkeypatch.setattr(sysconfig, "get_config_var", _fake_config(real, Py_GIL_DISABLED=0))
    assert hotpath.unsupported_reason() is None


def test_load_refuses_a_free_threaded_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hotpath, "_module", None)
    monkeypatch.setattr(sysconfig, "get_config_var",
                        _fake_config(sysconfig.get_config_var, Py_GIL_DISABLED=1))
    with pytest.raises(hotpath.HotPathUnavailable, match="free-threaded"):
        hotpath.load()
    paths = hotpath.fast_paths()
    assert paths["built"] is False and "free-threaded" in paths["why"]


def test_a_missing_build_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The message the plugin logs once when there is no extension."""
    monkeypatch.setattr(hotpath, "_module", None)
    monkeypatch.setattr(hotpath, "MODULE", "swa_prefix_cache.core._no_such_hotpath")
    monkeypatch.setattr(hotpath, "__file__", str(tmp_path / "hotpath.py"))
    monkeypatch.delenv(settings.HOTPATH.name, raising=False)
    with pytest.raises(hotpath.HotPathUnavailable, match="was not built"):
        hotpath.load()


def test_units_name_proved_cores_and_glue_that_exist() -> None:
    """swa_prefix_cache/core/units.py, the one list setup.py and the Makefile read:
    each extension's core is proved C (swa_prefix_cache/core/proved/) and its glue is
    not; every file exists; the command line prints what the Makefile
    compiles and refuses a name it does not know."""
    from swa_prefix_cache.core import units

    for name, paths in units.UNITS.items():
        assert paths, name
        for path in paths:
            assert (ROOT / path).is_file(), path
            assert path.startswith("swa_prefix_cache/core/proved/") == name.endswith("-core"), (name, path)
    script = [sys.executable, str(ROOT / "swa_prefix_cache" / "core" / "units.py")]
    done = subprocess.run(script + ["hotpath-core", "kv-glue"], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.split() == units.UNITS["hotpath-core"] + units.UNITS["kv-glue"]
    refused = subprocess.run(script + ["hotpath"], capture_output=True, text=True)
    assert refused.returncode == 2 and "hotpath-core" in refused.stderr


@pytest.mark.parametrize("target", ["setup", "bench", "test"])
def test_the_main_job_needs_no_root(target: str) -> None:
    """Issue 43: ``make setup``, ``make bench`` and ``make test`` install
    nothing with apt (only the proofs need the Frama-C tools, and only
    ``verify-c`` and ``check`` depend on ``apt-tools``): ``make -n`` of each,
    every prerequisite remade, names neither apt-get nor sudo."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    dry = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, env=env)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "apt-get" not in dry.stdout and "sudo" not in dry.stdout, dry.stdout[-2000:]
    check = subprocess.run(["make", "-n", "-B", "verify-c"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert "apt-get" in check.stdout  # the proofs still install their tools
