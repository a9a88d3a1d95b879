"""The adapter's settings as the enums it acts on (no vLLM import). Each
variable is a record of swa_prefix_cache/settings.py, which reads and parses
it (under its name or a former one) and refuses a bad value with a
``ValueError`` naming it."""

import enum

from swa_prefix_cache import settings
from swa_prefix_cache.settings import Environ

MODE_ENV = settings.MODE.name
CORE_ENV = settings.CORE.name


class Mode(enum.Enum):
    """``on``: our lookup serves vLLM. ``off``: vLLM's own code, untouched.
    ``shadow``: both run, vLLM's answer is returned, disagreements are
    counted and logged with what is needed to reproduce them."""

    ON = "on"
    OFF = "off"
    SHADOW = "shadow"


def read_mode(environ: Environ | None = None) -> Mode:
    """The mode from ``SWA_PREFIX_CACHE_MODE`` (default ``on``)."""
    return Mode(settings.MODE.read(environ))


class Core(enum.Enum):
    """Which implementation of the (same) stride search serves lookups.

    ``native`` (default): the extension ``swa_prefix_cache.core._hotpath``, the
    Frama-C-proved C search (prefix_cache.c, probe instance) probing vLLM's
    BlockPool and building vLLM's lists in C, one call per lookup.
    ``python``: pyspec's stride search, probing the BlockPool from Python.
    Both make the same probes and return vLLM's answer
    (tests/test_hotpath_glue.py, tests/test_hot_path.py, tests/test_adapter.py). If the extension cannot
    be loaded, the plugin says so once and uses ``python``.
    """

    PYTHON = "python"
    NATIVE = "native"


def read_core(environ: Environ | None = None) -> Core:
    """The core from ``SWA_PREFIX_CACHE_CORE`` (default ``native``)."""
    return Core(settings.CORE.read(environ))


OFFLOAD_FILTER_ENV = settings.OFFLOAD_FILTER.name


class OffloadFilter(enum.Enum):
    """Which store filter decides the sliding-window chunks the KV-offload
    connector stores. ``off`` (default): vLLM's own. ``corrected``: the
    chunks the offload lookup reads for every promised hit
    (swa_prefix_cache/vllm_adapter/offload_filter.py; independent of ``SWA_PREFIX_CACHE_MODE``)."""

    OFF = "off"
    CORRECTED = "corrected"


def read_offload_filter(environ: Environ | None = None) -> OffloadFilter:
    """The filter from ``SWA_PREFIX_CACHE_OFFLOAD_FILTER`` (default ``off``)."""
    return OffloadFilter(settings.OFFLOAD_FILTER.read(environ))


DP_ROUTING_ENV = settings.DP_ROUTING.name
DP_TOKENS_PER_LOAD_ENV = settings.DP_TOKENS_PER_LOAD.name


class DpRouting(enum.Enum):
    """How vLLM's data-parallel front end picks an engine core. ``off``
    (default): vLLM's load balancing, untouched. ``exact``: by each rank's
    exact prefix-cache hit (kv_index, from the ranks' KV events) traded
    against vLLM's load score (swa_prefix_cache/kv_index/balance.py;
    swa_prefix_cache/vllm_adapter/dp_routing.py)."""

    OFF = "off"
    EXACT = "exact"


def read_dp_routing(environ: Environ | None = None) -> DpRouting:
    """The setting from ``SWA_PREFIX_CACHE_DP_ROUTING`` (default ``off``)."""
    return DpRouting(settings.DP_ROUTING.read(environ))


def read_tokens_per_load(
    default: float, environ: Environ | None = None
) -> float:
    """``SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD`` (tokens one unit of vLLM's load
    score is worth; swa_prefix_cache/kv_index/balance.py), or ``default`` when unset."""
    value = settings.DP_TOKENS_PER_LOAD.read(environ)
    return default if value is None else value


LOOKUP_MEMO_ENV = settings.LOOKUP_MEMO.name


class LookupMemo(enum.Enum):
    """Whether a coordinator answers a repeated lookup from memory while no
    key it reads was written (swa_prefix_cache/vllm_adapter/lookup_memo.py). ``on`` (default,
    with ``SWA_PREFIX_CACHE_MODE=on``) or ``off``."""

    ON = "on"
    OFF = "off"


def read_lookup_memo(environ: Environ | None = None) -> LookupMemo:
    """The setting from ``SWA_PREFIX_CACHE_LOOKUP_MEMO`` (default ``on``)."""
    return LookupMemo(settings.LOOKUP_MEMO.read(environ))
