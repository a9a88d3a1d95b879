"""The adapter's settings, read from the environment (no vLLM import);
every variable is listed in pyspec/settings.py, which finds its value
(under its name or a former one)."""

import enum
import os
from typing import TypeVar

from pyspec import settings

MODE_ENV = "SWA_PREFIX_CACHE_MODE"
CORE_ENV = "SWA_PREFIX_CACHE_CORE"


class Mode(enum.Enum):
    """``on``: our lookup serves vLLM. ``off``: vLLM's own code, untouched.
    ``shadow``: both run, vLLM's answer is returned, disagreements are
    counted and logged with what is needed to reproduce them."""

    ON = "on"
    OFF = "off"
    SHADOW = "shadow"


def read_mode(environ: "os._Environ[str] | dict[str, str] | None" = None) -> Mode:
    """The mode from ``SWA_PREFIX_CACHE_MODE`` (default ``on``)."""
    return _read_choice(MODE_ENV, Mode, Mode.ON, environ)


class Core(enum.Enum):
    """Which implementation of the (same) stride search serves lookups.

    ``native`` (default): the extension ``extracted_c._hotpath``, the
    Frama-C-proved C search (prefix_cache.c, probe instance) probing vLLM's
    BlockPool and building vLLM's lists in C, one call per lookup.
    ``python``: pyspec's stride search, probing the BlockPool from Python.
    Both make the same probes and return vLLM's answer
    (tests/test_hotpath_glue.py, tests/test_hot_path.py, tests/test_adapter.py). If the extension cannot
    be loaded, the plugin says so once and uses ``python``.
    """

    PYTHON = "python"
    NATIVE = "native"


def read_core(environ: "os._Environ[str] | dict[str, str] | None" = None) -> Core:
    """The core from ``SWA_PREFIX_CACHE_CORE`` (default ``native``)."""
    return _read_choice(CORE_ENV, Core, Core.NATIVE, environ)


OFFLOAD_FILTER_ENV = "SWA_PREFIX_CACHE_OFFLOAD_FILTER"


class OffloadFilter(enum.Enum):
    """Which store filter decides the sliding-window chunks the KV-offload
    connector stores. ``off`` (default): vLLM's own. ``corrected``: the
    chunks the offload lookup reads for every promised hit
    (vllm_adapter/offload_filter.py; independent of ``SWA_PREFIX_CACHE_MODE``)."""

    OFF = "off"
    CORRECTED = "corrected"


def read_offload_filter(environ: "os._Environ[str] | dict[str, str] | None" = None) -> OffloadFilter:
    """The filter from ``SWA_PREFIX_CACHE_OFFLOAD_FILTER`` (default ``off``)."""
    return _read_choice(OFFLOAD_FILTER_ENV, OffloadFilter, OffloadFilter.OFF, environ)


DP_ROUTING_ENV = "SWA_PREFIX_CACHE_DP_ROUTING"
DP_TOKENS_PER_LOAD_ENV = "SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD"


class DpRouting(enum.Enum):
    """How vLLM's data-parallel front end picks an engine core. ``off``
    (default): vLLM's load balancing, untouched. ``exact``: by each rank's
    exact prefix-cache hit (kv_index, from the ranks' KV events) traded
    against vLLM's load score (kv_index/balance.py;
    vllm_adapter/dp_routing.py)."""

    OFF = "off"
    EXACT = "exact"


def read_dp_routing(environ: "os._Environ[str] | dict[str, str] | None" = None) -> DpRouting:
    """The setting from ``SWA_PREFIX_CACHE_DP_ROUTING`` (default ``off``)."""
    return _read_choice(DP_ROUTING_ENV, DpRouting, DpRouting.OFF, environ)


def read_tokens_per_load(
    default: float, environ: "os._Environ[str] | dict[str, str] | None" = None
) -> float:
    """``SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD`` (tokens one unit of vLLM's load
    score is worth; kv_index/balance.py), or ``default`` when unset."""
    raw = settings.get(DP_TOKENS_PER_LOAD_ENV, environ)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise ValueError(f"{DP_TOKENS_PER_LOAD_ENV} must be a number >= 0, got {settings.shown(raw)}")
    return value


LOOKUP_MEMO_ENV = "SWA_PREFIX_CACHE_LOOKUP_MEMO"


class LookupMemo(enum.Enum):
    """Whether a coordinator answers a repeated lookup from memory while no
    key it reads was written (vllm_adapter/lookup_memo.py). ``on`` (default,
    with ``SWA_PREFIX_CACHE_MODE=on``) or ``off``."""

    ON = "on"
    OFF = "off"


def read_lookup_memo(environ: "os._Environ[str] | dict[str, str] | None" = None) -> LookupMemo:
    """The setting from ``SWA_PREFIX_CACHE_LOOKUP_MEMO`` (default ``on``)."""
    return _read_choice(LOOKUP_MEMO_ENV, LookupMemo, LookupMemo.ON, environ)


Choice = TypeVar("Choice", Mode, Core, OffloadFilter, DpRouting, LookupMemo)


def _read_choice(
    name: str,
    choices: type[Choice],
    default: Choice,
    environ: "os._Environ[str] | dict[str, str] | None",
) -> Choice:
    """Read one enum-valued variable. An unknown value raises ``ValueError``
    naming the variable: a typo must not silently change what serves
    production traffic."""
    found = settings.get(name, environ)
    raw = (default.value if found is None else found).strip().lower()
    try:
        return choices(raw)
    except ValueError:
        allowed = ", ".join(c.value for c in choices)
        raise ValueError(f"{name} must be one of {allowed}, got {settings.shown(raw)}") from None
