"""Shared test fixtures: the native library and case counters."""

import os
from collections import Counter

import pytest

from extracted_c import native

# Counts of cases each suite ran, printed at the end so a run that checked
# nothing cannot pass unnoticed.
CASE_COUNTS: Counter[str] = Counter()


def require_native() -> None:
    """Skip (or, under ``make check``, fail) when the C library is absent."""
    if native.is_available():
        return
    message = f"native library unavailable at {native.library_path()}"
    if os.environ.get("PREFIX_CACHE_REQUIRE_NATIVE") == "1":
        pytest.fail(message + " (PREFIX_CACHE_REQUIRE_NATIVE=1)")
    pytest.skip(message + "; run `make lib`")


@pytest.fixture
def lib() -> None:
    require_native()


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    for name, count in sorted(CASE_COUNTS.items()):
        terminalreporter.write_line(f"cases checked: {name} = {count}")
