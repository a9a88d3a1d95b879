"""vLLM general-plugin entry point."""

import logging

from vllm_adapter import report
from vllm_adapter.patch import install, status

logger = logging.getLogger("vllm_adapter")


def register() -> None:
    """Called by ``vllm.plugins.load_general_plugins`` in every process.

    Never raises: an exception here would stop vLLM from starting, and a
    plugin that cannot do its part must leave vLLM as it is. ``install`` and
    ``report.start`` each say what they could not do; this guard only
    catches what neither foresaw.

    With ``SWA_PREFIX_CACHE_STATS_DIR`` set, the process also writes its
    stats file (vllm_adapter/report.py), whether or not the patch applied,
    so a silently unpatched engine shows up as such.
    """
    try:
        install()
    except Exception as exc:  # never stop vLLM
        logger.error("swa-prefix-cache: install failed (%r); vLLM's own code serves", exc)
    try:
        report.start(status)
    except Exception as exc:  # never stop vLLM
        logger.error("swa-prefix-cache: stats file not written (%r)", exc)
