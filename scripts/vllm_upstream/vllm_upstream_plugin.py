"""pytest plugin for running a vLLM release's own unit tests on a CPU
machine, with or without our SWA prefix-cache lookup patched in.

Loaded by scripts/vllm_upstream_tests.sh as ``-p vllm_upstream_plugin``
(that script puts this folder on ``PYTHONPATH``). It

* marks every collected test ``skip_global_cleanup``: vLLM's autouse cleanup
  fixture (tests/conftest.py) calls accelerator APIs that a CPU build lacks;
* at session start, with ``VLLM_UPSTREAM_PLUGIN=on``, calls
  ``swa_prefix_cache.vllm_adapter.install(Mode.ON)`` and fails the session unless
  ``swa_prefix_cache.vllm_adapter.is_installed()``; with ``VLLM_UPSTREAM_PLUGIN=off`` it makes
  sure the patch is NOT active (and ``SWA_PREFIX_CACHE_MODE=off`` keeps
  vLLM's own plugin loader from installing it);
* with ``HF_HUB_OFFLINE=1``, makes vLLM's
  ``try_get_safetensors_metadata`` return ``None`` at once: offline it can
  only fail, and vLLM then retries with a 2 s sleep for every
  ``ModelConfig`` built (about 2 s per offloading-connector test) before
  returning ``None`` anyway. Same answer, no sleep. Set
  ``VLLM_UPSTREAM_KEEP_HF_RETRY=1`` to leave it alone;
* in both runs alike (plugin on and off, so the comparison stays fair),
  passes over vLLM 0.34+'s x86 "requires Triton" config guard
  (triton_guard.pass_over_triton_guard(): only on x86 without Triton, only
  where that refusal is in vLLM's source, so 0.33.0 runs untouched); said in
  the summary line and the report;
* at session end, writes what happened (mode, installed, backend, the
  calls of the patched lookups during the session, whether the Triton guard
  was passed over and for how many config checks) as JSON to
  ``$VLLM_UPSTREAM_REPORT``, so the driver can refuse a run in which no
  patched method ran. The calls are read generically from
  ``swa_prefix_cache.vllm_adapter.status()``: every integer counter named ``calls`` (or
  ``*_calls``) anywhere in it -- today ``stats.calls`` (the lookups the
  adapter answers) and ``offload_filter.calls`` -- so a newly patched method
  that reports its own counter there is counted without changing this file.
"""

from __future__ import annotations

import json
import os

import pytest
import triton_guard

MODE_VAR = "VLLM_UPSTREAM_PLUGIN"
REPORT_VAR = "VLLM_UPSTREAM_REPORT"

_calls_at_start: dict[str, int] = {}


def _counters(obj: object, prefix: str = "") -> dict[str, int]:
    """``{"stats.calls": n, "offload_filter.calls": m, ...}``: every int
    counter named ``calls`` / ``*_calls`` in ``swa_prefix_cache.vllm_adapter.status()``
    (dicts and dataclass-like objects are walked)."""
    if isinstance(obj, dict):
        items = obj.items()
    elif hasattr(obj, "__dataclass_fields__"):
        items = ((k, getattr(obj, k)) for k in obj.__dataclass_fields__)
    else:
        return {}
    found: dict[str, int] = {}
    for key, value in items:
        path = f"{prefix}{key}"
        if isinstance(value, int) and not isinstance(value, bool):
            if key == "calls" or str(key).endswith("_calls"):
                found[path] = value
        else:
            found.update(_counters(value, path + "."))
    return found


def _call_counts() -> dict[str, int]:
    from swa_prefix_cache import vllm_adapter

    return _counters(vllm_adapter.status())


def _calls_since_start() -> dict[str, int]:
    now = _call_counts()
    return {k: v - _calls_at_start.get(k, 0) for k, v in sorted(now.items())}


def _want_installed() -> bool:
    raw = os.environ.get(MODE_VAR, "").strip().lower()
    if raw not in ("on", "off"):
        raise pytest.UsageError(f"{MODE_VAR} must be 'on' or 'off', got {raw!r}")
    return raw == "on"


def pytest_configure(config: pytest.Config) -> None:
    _want_installed()  # reject a bad VLLM_UPSTREAM_PLUGIN before collection
    triton_guard.pass_over_triton_guard()
    if os.environ.get("HF_HUB_OFFLINE") == "1" and not os.environ.get(
        "VLLM_UPSTREAM_KEEP_HF_RETRY"
    ):
        import vllm.transformers_utils.config as hf_config

        def try_get_safetensors_metadata(model, *, revision=None):  # type: ignore[no-untyped-def]
            return None  # what vLLM returns offline, after its retries

        hf_config.try_get_safetensors_metadata = try_get_safetensors_metadata


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    global _calls_at_start
    from swa_prefix_cache import vllm_adapter

    if _want_installed():
        vllm_adapter.install(vllm_adapter.Mode.ON)
        if not vllm_adapter.is_installed():
            raise pytest.UsageError(
                "swa_prefix_cache.vllm_adapter.install(Mode.ON) did not patch vLLM: "
                f"{vllm_adapter.status()['reason']}"
            )
    else:
        vllm_adapter.uninstall()
        assert not vllm_adapter.is_installed()
    _calls_at_start = _call_counts()


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    for item in items:
        item.add_marker(pytest.mark.skip_global_cleanup)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from swa_prefix_cache import vllm_adapter

    status = vllm_adapter.status()
    calls = _calls_since_start()
    report = {
        "wanted": "on" if _want_installed() else "off",
        "installed_at_end": vllm_adapter.is_installed(),
        "mode": status["mode"],
        "backend": status["backend"],
        "reason": status["reason"],
        "calls": sum(calls.values()),
        "calls_by_counter": calls,
        "triton_guard_passed_over": triton_guard.is_passed_over(),
        "triton_guard_configs": triton_guard.configs_passed(),
        "exitstatus": int(exitstatus),
    }
    path = os.environ.get(REPORT_VAR)
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    from swa_prefix_cache import vllm_adapter

    calls = _calls_since_start()
    terminalreporter.write_line(
        f"vllm_upstream_plugin: wanted={'on' if _want_installed() else 'off'} "
        f"installed={vllm_adapter.is_installed()} "
        f"backend={vllm_adapter.status()['backend'] or '-'} "
        f"patched-method calls={sum(calls.values())} "
        f"({', '.join(f'{k}={v}' for k, v in calls.items()) or 'no counters'})"
    )
    if triton_guard.is_passed_over():
        terminalreporter.write_line(
            f"vllm_upstream_plugin: vLLM's CPU platform refuses configs without Triton "
            f"({triton_guard.TRITON_REFUSAL!r}); passed over for "
            f"{triton_guard.configs_passed()} config checks (triton_guard.py)"
        )
