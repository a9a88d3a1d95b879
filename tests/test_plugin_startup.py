"""The plugin never stops vLLM from starting, and qualify judges what would
really serve.

Each start-up case runs vLLM's real ``load_general_plugins`` in a fresh
process (plugins load once per process), with the plugin found through its
installed entry point, and checks: the loader returns, the process exits 0,
exactly one line of ours names the problem on stderr (our WARNING / ERROR
lines reach it through Python's last-resort handler), and which of vLLM's
methods are still its own. The qualify cases run ``python -m swa_prefix_cache
qualify`` and check its verdict and exit code. Every case's one line goes to
build/plugin-startup.txt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from swa_prefix_cache import settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LINES: list[str] = []

# Loads the plugins as vLLM does, then says what is patched.
LOAD = """
import json
from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager, SlidingWindowManager
swa = SlidingWindowManager.__dict__["find_longest_cache_hit"]
full = FullAttentionManager.__dict__["find_longest_cache_hit"]
from vllm.plugins import load_general_plugins
load_general_plugins()
import swa_prefix_cache.vllm_adapter
status = swa_prefix_cache.vllm_adapter.status()
print(json.dumps({
    "loaded": "swa_prefix_cache.vllm_adapter.plugin" in __import__("sys").modules,
    "swa_patched": SlidingWindowManager.__dict__["find_longest_cache_hit"] is not swa,
    "full_patched": FullAttentionManager.__dict__["find_longest_cache_hit"] is not full,
    "memo": status["lookup_memo"]["installed"],
    "offload_filter": status["offload_filter"]["installed"],
    "dp_routing": status["dp_routing"]["installed"],
}))
"""

# vLLM not importable: the plugin's entry point called directly (vLLM's
# loader itself needs vLLM).
NO_VLLM = """
import sys
sys.modules["vllm"] = None
from swa_prefix_cache.vllm_adapter import plugin, status
plugin.register()
print(status()["offload_filter"]["reason"] + " | " + status()["dp_routing"]["reason"])
"""

CLEAN = {k: v for k, v in os.environ.items()
         if not k.startswith(("SWA_PREFIX_CACHE_", "VLLM_PLUGINS")) and k not in settings.OLD_NAMES}


@pytest.fixture(scope="module", autouse=True)
def _record():
    yield
    out = ROOT / "build" / "plugin-startup.txt"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(LINES) + "\n")


def _run(code: str, env: dict[str, str]) -> tuple[int, dict | str, list[str]]:
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**CLEAN, **env},
                          capture_output=True, text=True, timeout=300)
    ours = [line for line in done.stderr.splitlines() if line.startswith("swa-prefix-cache")]
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    try:
        result: dict | str = json.loads(last)
    except ValueError:
        result = last
    return done.returncode, result, ours


def _record_case(name: str, rc: int, ours: list[str]) -> None:
    LINES.append(f"{name}: exit {rc}; " + (" / ".join(ours) if ours else "(nothing said)"))


BAD_SETTINGS = [
    # (variable, whether the lookups are still ours)
    ("SWA_PREFIX_CACHE_MODE", False),
    ("SWA_PREFIX_CACHE_CORE", False),
    ("SWA_PREFIX_CACHE_LOOKUP_MEMO", True),
    ("SWA_PREFIX_CACHE_OFFLOAD_FILTER", True),
    ("SWA_PREFIX_CACHE_DP_ROUTING", True),
    ("SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD", True),
]


@pytest.mark.parametrize("variable, lookups_ours", BAD_SETTINGS, ids=[b[0] for b in BAD_SETTINGS])
def test_a_bad_setting_never_stops_vllm(variable: str, lookups_ours: bool) -> None:
    rc, result, ours = _run(LOAD, {variable: "garbage"})
    _record_case(f"{variable}=garbage", rc, ours)
    assert rc == 0 and isinstance(result, dict) and result["loaded"]
    problems = [line for line in ours if "DEGRADED" not in line]
    summary = [line for line in ours if "DEGRADED" in line]
    assert len(problems) == 1 and variable in problems[0] and "garbage" in problems[0], ours
    # The once-per-process line repeats it when a part the setting asks for stays off.
    assert len(summary) <= 1 and all(variable in line for line in summary), ours
    assert result["swa_patched"] is lookups_ours
    assert result["full_patched"] is lookups_ours
    assert not result["offload_filter"] and not result["dp_routing"]


def test_a_stats_dir_that_cannot_be_created_never_stops_vllm(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    rc, result, ours = _run(LOAD, {"SWA_PREFIX_CACHE_STATS_DIR": str(blocker / "stats")})
    _record_case("SWA_PREFIX_CACHE_STATS_DIR under a file", rc, ours)
    assert rc == 0 and isinstance(result, dict)
    assert result["swa_patched"] and result["full_patched"]
    assert len(ours) == 1 and "SWA_PREFIX_CACHE_STATS_DIR" in ours[0], ours


def test_without_vllm_the_opt_ins_never_raise() -> None:
    env = {"SWA_PREFIX_CACHE_DP_ROUTING": "exact", "SWA_PREFIX_CACHE_OFFLOAD_FILTER": "corrected"}
    rc, result, ours = _run(NO_VLLM, env)
    _record_case("DP_ROUTING=exact + OFFLOAD_FILTER=corrected, vLLM not importable", rc, ours)
    assert rc == 0, result
    assert "offload store filter" in str(result) and "data-parallel front end" in str(result)
    assert any("offload store filter kept" in line for line in ours)
    assert any("data-parallel balancing kept" in line for line in ours)
    assert any("vLLM left unpatched" in line for line in ours)
    assert len(ours) == 3, ours


def test_vllm_plugins_without_it_loads_nothing() -> None:
    rc, result, ours = _run(LOAD, {"VLLM_PLUGINS": "some_other_plugin"})
    _record_case("VLLM_PLUGINS=some_other_plugin", rc, ours)
    assert rc == 0 and isinstance(result, dict)
    assert not result["loaded"] and not result["swa_patched"] and not result["full_patched"]


def test_the_default_start_patches_everything_it_knows() -> None:
    rc, result, ours = _run(LOAD, {})
    _record_case("default settings", rc, ours)
    assert rc == 0 and isinstance(result, dict)
    assert result["swa_patched"] and result["full_patched"] and result["memo"]
    assert ours == []


# vLLM's logging configured as its processes configure it, then the plugins.
VLLM_LOGGING = """
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging
configure_logging(LoggingConfig())
""" + LOAD

# The pool read's fingerprint unknown (as on a release whose map changed).
POOL_READ_UNKNOWN = """
from swa_prefix_cache.vllm_adapter import known_sources
known_sources.VARIANTS["pool_read"] = []
""" + LOAD


def test_the_start_line_shows_in_vllms_log() -> None:
    """vLLM configures only its own logger; the plugin's once-per-process
    line still reaches vLLM's handler, formatted as vLLM's lines are."""
    done = subprocess.run([sys.executable, "-c", VLLM_LOGGING], cwd=ROOT, env=CLEAN,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [line for line in (done.stdout + done.stderr).splitlines()
             if "swa-prefix-cache: active (mode on)" in line]
    LINES.append("default settings, vLLM's logging on: " + " / ".join(lines))
    assert len(lines) == 1 and " INFO " in lines[0] and "sliding_window native" in lines[0], lines


def test_a_slower_path_is_said_as_a_warning() -> None:
    rc, result, ours = _run(POOL_READ_UNKNOWN, {})
    _record_case("pool read unknown", rc, ours)
    assert rc == 0 and isinstance(result, dict) and result["swa_patched"]
    assert len(ours) == 1 and "DEGRADED" in ours[0] and "get_cached_block" in ours[0], ours


QUALIFY = [
    # (environment, verdict, exit code)
    ({}, "PASS", 0),
    ({"SWA_PREFIX_CACHE_CORE": "python"}, "PASS", 0),
    ({"SWA_PREFIX_CACHE_CORE": "garbage"}, "REFUSED", 2),
    ({"SWA_PREFIX_CACHE_MODE": "garbage"}, "REFUSED", 2),
    ({"SWA_PREFIX_CACHE_MODE": "off"}, "WOULD NOT SERVE", 3),
    ({"VLLM_PLUGINS": "some_other_plugin"}, "WOULD NOT SERVE", 3),
]


@pytest.mark.parametrize("env, verdict, code", QUALIFY,
                         ids=["default", "python core", "core garbage", "mode garbage", "mode off",
                              "plugins exclude it"])
def test_qualify_judges_what_would_serve(env: dict[str, str], verdict: str, code: int,
                                         tmp_path: Path) -> None:
    report_file = tmp_path / "q.json"
    done = subprocess.run([sys.executable, "-m", "swa_prefix_cache", "qualify", "--lookups", "200",
                           "--json", str(report_file)], cwd=ROOT, env={**CLEAN, **env},
                          capture_output=True, text=True, timeout=300)
    last = done.stdout.strip().splitlines()[-1]
    LINES.append(f"qualify {' '.join(f'{k}={v}' for k, v in env.items()) or '(defaults)'}: "
                 f"exit {done.returncode}; {last}")
    assert done.returncode == code, done.stdout + done.stderr
    assert last.startswith(verdict)
    report = json.loads(report_file.read_text())
    assert report["verdict"] == verdict and report["exit"] == code
    if verdict == "PASS":
        check = report["differential"]
        assert check["compared"] == check["expected"] > 0 and check["mismatches"] == 0
