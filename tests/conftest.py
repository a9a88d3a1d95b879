"""Shared test fixtures: the native library and case counters."""

import os
from collections import Counter

# vLLM resolves its platform once, on first use: the CPU platform, as the
# benches and the trace replay (tests/test_replay.py) build vLLM's configs.
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import pytest

from benchmarks import cffi_core as native
from swa_prefix_cache import settings as swa_settings

# Counts of cases each suite ran, printed at the end so a run that checked
# nothing cannot pass unnoticed.
CASE_COUNTS: Counter[str] = Counter()


def require_native() -> None:
    """Skip (or, under ``make check``: SWA_PREFIX_CACHE_STRICT_NATIVE=1, fail)
    when the C library is absent."""
    if native.is_available():
        return
    message = f"native library unavailable at {native.library_path()}"
    if swa_settings.STRICT_NATIVE.read():
        pytest.fail(message + " (SWA_PREFIX_CACHE_STRICT_NATIVE=1)")
    pytest.skip(message + "; run `make lib`")


@pytest.fixture
def lib() -> None:
    require_native()


def require_hotpath() -> None:
    """Skip (or, under ``make check``, fail) when the extension
    ``swa_prefix_cache.core._hotpath`` cannot be loaded (``make ext`` builds it)."""
    from swa_prefix_cache.core import hotpath

    try:
        hotpath.load()
    except hotpath.HotPathUnavailable as exc:
        message = str(exc)
        if swa_settings.STRICT_NATIVE.read():
            pytest.fail(message + " (SWA_PREFIX_CACHE_STRICT_NATIVE=1)")
        pytest.skip(message)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    for name, count in sorted(CASE_COUNTS.items()):
        terminalreporter.write_line(f"cases checked: {name} = {count}")


def cpu_has_avx2() -> bool:
    """Whether this CPU has AVX2 (the read-ahead's SipHash needs it)."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx2" in line for line in f)
    except OSError:
        return False
