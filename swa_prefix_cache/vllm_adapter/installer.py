"""Install and uninstall the plugin, and its ``status()``.

Installation goes through the records of swa_prefix_cache/vllm_adapter/registry.py in
their order and carries out each one's plan, made by the module that
builds that patch: offload_filter.py and dp_routing.py (opt-in, each on its
own setting), patch.py for the lookups. Idempotent and safe to call in
every vLLM process (vLLM runs general plugins in the front end, the engine
core and the workers).
"""

from typing import Any

from swa_prefix_cache.vllm_adapter import (
    connector_lookup, dp_routing, lookup_memo, offload_filter, patch, registry,
)
from swa_prefix_cache.vllm_adapter.config import Mode


def install(mode: Mode | None = None) -> bool:
    """Patch vLLM where its build is known and the settings ask for it.

    Returns whether the sliding-window lookup patch is active. Never raises
    (vLLM calls it while it starts): an unknown vLLM, a missing native
    extension or vLLM itself, a bad setting each leave vLLM's own code in
    place for what they concern (or use the Python search) and log one
    line. ``mode``: the lookups' mode, instead of ``SWA_PREFIX_CACHE_MODE``.
    """
    with registry.lock:
        registry.install_all({
            offload_filter.NAME: offload_filter.plan,
            dp_routing.NAME: dp_routing.plan,
            **patch.plans(mode),
        })
        patch.say_active()
        return patch.is_installed()


def uninstall() -> None:
    """Put vLLM's own attributes back, every record's, the last installed
    first (the data-parallel routers' sockets closed, the lookup memories'
    watches on the pools' maps dropped). Safe to call when not installed."""
    dp_routing.uninstall()
    with registry.lock:
        patch.release()
        for record in reversed(registry.PATCHES):
            registry.uninstall(record.name)
        lookup_memo.release_all()


def status() -> dict[str, Any]:
    """What is active and why; the stats counters; every patch's record
    (``patches``: the registry's rows)."""
    return {
        **patch.status(),
        "patches": registry.rows(),
        "offload_lookup": connector_lookup.status(),
        "offload_filter": offload_filter.status(),
        "dp_routing": dp_routing.status(),
    }
