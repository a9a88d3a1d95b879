"""pytest plugin for the two sessions of vLLM's tests in ``make upstream-patch``.

Loaded as ``-p swa_stride_session`` in a vLLM tree made by
upstream/check_patch.py (vLLM's installed package, hard-linked, with or
without the patch applied, and vLLM's sdist tests). It makes sure the method
that answers is the one under test, not the project's plugin:

* at session start: ``vllm`` and its ``SlidingWindowManager.
  find_longest_cache_hit`` come from ``$SWA_STRIDE_TREE``; the method is the
  patched one (``$SWA_STRIDE_SESSION=patched``: no TODO, the stride search's
  names) or vLLM's stock one (``stock``); ``vllm_adapter`` is not installed;
* it counts the method's calls (a thin classmethod wrapper, put on in both
  sessions alike), so a session in which it never ran is seen;
* at session end: the same checks again, then a JSON report to
  ``$SWA_STRIDE_REPORT``;
* CPU accommodation (vLLM 0.34+): its CPU platform refuses any ``VllmConfig``
  on an x86 CPU without Triton (triton-cpu), which fails every test that
  builds one, scheduler tests included, before vLLM's code under test runs.
  Where that refusal is in vLLM's source and Triton is absent, the check
  is passed over (scripts/vllm_upstream/triton_guard.py: ``HAS_TRITON``
  reads true for ``check_and_update_config`` alone); no Triton kernel is
  run by these tests. Said in the summary and the report.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import triton_guard

STOCK_TODO = "# TODO: reduce i by sliding_window_contiguous_blocks when cache miss"
PATCHED_MARK = "known_cached_start"

_state: dict[str, Any] = {"calls": 0, "problems": [], "triton_check_bypassed": False}


def _expected() -> tuple[str, Path]:
    session = os.environ.get("SWA_STRIDE_SESSION", "")
    if session not in ("stock", "patched"):
        raise pytest.UsageError(f"SWA_STRIDE_SESSION must be stock or patched, got {session!r}")
    return session, Path(os.environ["SWA_STRIDE_TREE"]).resolve()


def _check(where: str) -> list[str]:
    """What is wrong with the method in place (empty: nothing)."""
    import inspect

    import vllm
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    session, tree = _expected()
    problems = []
    if not Path(vllm.__file__).resolve().is_relative_to(tree):
        problems.append(f"{where}: vllm imported from {vllm.__file__}, not {tree}")
    attr = SlidingWindowManager.__dict__["find_longest_cache_hit"]
    func = getattr(attr.__func__, "__wrapped__", attr.__func__)
    source_file = Path(inspect.getfile(func)).resolve()
    if not source_file.is_relative_to(tree):
        problems.append(f"{where}: the method comes from {source_file}")
    source = inspect.getsource(func)
    if session == "patched" and (STOCK_TODO in source or PATCHED_MARK not in source):
        problems.append(f"{where}: the method in place is not the patched one")
    if session == "stock" and STOCK_TODO not in source:
        problems.append(f"{where}: the method in place is not vLLM's stock one")
    adapter = sys.modules.get("swa_prefix_cache.vllm_adapter")
    if adapter is not None and adapter.is_installed():
        problems.append(f"{where}: the swa-prefix-cache plugin is installed")
    return problems


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    problems = _check("session start")
    if problems:
        raise pytest.UsageError("; ".join(problems))
    _state["triton_check_bypassed"] = triton_guard.pass_over_triton_guard()
    func = SlidingWindowManager.__dict__["find_longest_cache_hit"].__func__

    @functools.wraps(func)
    def counted(cls: type, *args: Any, **kwargs: Any) -> Any:
        _state["calls"] += 1
        return func(cls, *args, **kwargs)

    SlidingWindowManager.find_longest_cache_hit = classmethod(counted)  # type: ignore[assignment]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    kind, tree = _expected()
    problems = _check("session end")
    report = {
        "session": kind,
        "tree": str(tree),
        "calls": _state["calls"],
        "problems": problems,
        "exitstatus": int(exitstatus),
        "triton_check_bypassed": _state["triton_check_bypassed"],
    }
    path = os.environ.get("SWA_STRIDE_REPORT")
    if path:
        Path(path).write_text(json.dumps(report, indent=2))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    kind, _ = _expected()
    terminalreporter.write_line(
        f"swa_stride_session: {kind} find_longest_cache_hit called {_state['calls']} times"
    )
    if _state["triton_check_bypassed"]:
        terminalreporter.write_line(
            f"swa_stride_session: CPU platform's {triton_guard.TRITON_REFUSAL!r} check bypassed"
        )
