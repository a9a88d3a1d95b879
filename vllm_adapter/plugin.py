"""vLLM general-plugin entry point."""

from vllm_adapter import report
from vllm_adapter.patch import install, status


def register() -> None:
    """Called by ``vllm.plugins.load_general_plugins`` in every process.

    With ``SWA_PREFIX_CACHE_STATS_DIR`` set, the process also writes its
    stats file (vllm_adapter/report.py), whether or not the patch applied,
    so a silently unpatched engine shows up as such.
    """
    install()
    report.start(status)
