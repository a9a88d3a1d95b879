"""Drop-in replacement of vLLM's sliding-window prefix-cache lookup.

Loaded by vLLM as a general plugin (entry point ``vllm.general_plugins``
-> ``swa_prefix_cache.vllm_adapter.plugin:register``). Importing this package does not
import vLLM; ``install()`` does.
"""

from swa_prefix_cache.vllm_adapter.config import CORE_ENV, MODE_ENV, Core, Mode, read_core, read_mode
from swa_prefix_cache.vllm_adapter.installer import install, status, uninstall
from swa_prefix_cache.vllm_adapter.patch import is_installed, stats

__all__ = [
    "CORE_ENV",
    "Core",
    "MODE_ENV",
    "Mode",
    "read_core",
    "install",
    "is_installed",
    "read_mode",
    "stats",
    "status",
    "uninstall",
]
