"""pytest plugin for a vLLM release's own unit tests run by check.py on the
stock vLLM and on each patched copy (``-p findings_pytest_plugin``).

* checks that ``vllm`` is imported from ``$UPSTREAM_FINDINGS_VLLM`` (the
  patched copy, or the stock package) and says so in the summary;
* marks every test ``skip_global_cleanup``: vLLM's autouse cleanup fixture
  calls accelerator APIs that a CPU build lacks;
* offline (``HF_HUB_OFFLINE=1``), makes ``try_get_safetensors_metadata``
  return ``None`` at once, what it returns offline after 2 s of retries.

* where vLLM refuses every config on an x86 CPU without Triton (0.34.0+),
  passes over that check for the session, stock and patched alike
  (scripts/vllm_upstream/triton_guard.py, on ``PYTHONPATH``: no Triton
  kernel runs in these tests), and says so in the summary.

Standard library, pytest, vLLM and triton_guard only (the same CPU
accommodations as scripts/vllm_upstream/vllm_upstream_plugin.py, without
swa-prefix-cache).
"""

from __future__ import annotations

import os

import pytest
import triton_guard

_state = {"triton_guard_passed_over": False}


def _vllm_dir() -> str:
    import vllm

    return os.path.dirname(os.path.abspath(vllm.__file__))


def pytest_configure(config: pytest.Config) -> None:
    want = os.environ.get("UPSTREAM_FINDINGS_VLLM")
    if want and _vllm_dir() != os.path.abspath(want):
        raise pytest.UsageError(f"vllm imported from {_vllm_dir()}, expected {want}")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        import vllm.transformers_utils.config as hf_config

        def try_get_safetensors_metadata(model, *, revision=None):  # type: ignore[no-untyped-def]
            return None

        hf_config.try_get_safetensors_metadata = try_get_safetensors_metadata
    _state["triton_guard_passed_over"] = triton_guard.pass_over_triton_guard()


def pytest_collection_modifyitems(session, config, items) -> None:  # type: ignore[no-untyped-def]
    for item in items:
        item.add_marker(pytest.mark.skip_global_cleanup)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    terminalreporter.write_line(f"findings_pytest_plugin: vllm at {_vllm_dir()}")
    if _state["triton_guard_passed_over"]:
        terminalreporter.write_line(
            "findings_pytest_plugin: vLLM's x86 'requires Triton' config check passed over "
            f"({triton_guard.configs_passed()} configs; scripts/vllm_upstream/triton_guard.py)"
        )
