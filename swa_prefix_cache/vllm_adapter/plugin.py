"""vLLM general-plugin entry point."""

import logging

from swa_prefix_cache import settings
from swa_prefix_cache.vllm_adapter import stats_file
from swa_prefix_cache.vllm_adapter.installer import install, status

logger = logging.getLogger("swa_prefix_cache")


def register() -> None:
    """Called by ``vllm.plugins.load_general_plugins`` in every process.

    Never raises: an exception here would stop vLLM from starting, and a
    plugin that cannot do its part must leave vLLM as it is. ``install`` and
    ``stats_file.start`` each say what they could not do; this guard only
    catches what neither foresaw.

    With ``SWA_PREFIX_CACHE_STATS_DIR`` set, the process also writes its
    stats file (swa_prefix_cache/vllm_adapter/stats_file.py), whether or not the patch applied,
    so a silently unpatched engine shows up as such.
    """
    _show_in_vllms_log()
    try:
        settings.warn_unknown()  # a typo such as SWA_PREFIX_CACHE_MOD=off is said, not ignored
    except Exception as exc:  # never stop vLLM
        logger.error("swa-prefix-cache: settings not checked (%r)", exc)
    try:
        install()
    except Exception as exc:  # never stop vLLM
        logger.error("swa-prefix-cache: install failed (%r); vLLM's own code serves", exc)
    try:
        stats_file.start(status)
    except Exception as exc:  # never stop vLLM
        logger.error("swa-prefix-cache: stats file not written (%r)", exc)



class _ToVllmsLog(logging.Handler):
    """Hands each record to vLLM's log as it is when the record is made
    (vLLM configures its logging after loading plugins in some processes):
    to the handlers of vLLM's ``vllm`` logger when it has them and the
    application did not configure logging itself (then the root logger's
    handlers get the record already); otherwise to Python's last-resort
    handler, as if this handler were not there."""

    def emit(self, record: logging.LogRecord) -> None:
        theirs = logging.getLogger("vllm")
        if theirs.handlers and not logging.getLogger().handlers:
            theirs.handle(record)
        elif logging.lastResort is not None and not logging.getLogger().handlers:
            if record.levelno >= logging.lastResort.level:
                logging.lastResort.handle(record)


def _show_in_vllms_log() -> None:
    """vLLM configures its ``vllm`` logger only (its handler, propagation
    off), so our lines, on the ``swa_prefix_cache`` logger, would reach no
    handler but Python's last resort (warnings only, unformatted): the
    once-per-process line would not show. Route them to vLLM's handlers,
    at INFO like vLLM's own (vLLM's handler applies VLLM_LOGGING_LEVEL)."""
    ours = logging.getLogger("swa_prefix_cache")
    if any(isinstance(handler, _ToVllmsLog) for handler in ours.handlers):
        return
    ours.addHandler(_ToVllmsLog())
    if ours.level == logging.NOTSET:
        ours.setLevel(logging.INFO)
