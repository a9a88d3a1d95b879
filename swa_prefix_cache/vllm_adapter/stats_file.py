"""Per-process stats files, so a caller outside vLLM's processes can see
what the plugin did inside them.

vLLM runs the scheduler (and so every prefix-cache lookup) in a separate
engine-core process. When ``SWA_PREFIX_CACHE_STATS_DIR`` names a directory,
every process that loads the plugin writes ``stats-<pid>.json`` there: its
pid and process title, what is active and why, and the counters (lookups,
time spent inside them, errors, shadow comparisons). The file is rewritten
by a daemon thread whenever the counters change (at most every
``_PERIOD_S``) and once more at exit. Without the variable nothing is
written and no thread is started.
"""

import atexit
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from swa_prefix_cache import settings

STATS_DIR_ENV = settings.STATS_DIR.name
_PERIOD_S = 0.2

_started_for: int | None = None  # pid that started the writer (fork-safe)
# True once this process writes a stats file: only then are lookups observed.
enabled = False
# coordinator class name -> its KV-cache groups, recorded on first sight.
_observed: dict[str, dict[str, Any]] = {}
_MAX_OBSERVED = 8

logger = logging.getLogger("swa_prefix_cache")


def stats_dir(environ: "os._Environ[str] | dict[str, str] | None" = None) -> Path | None:
    """The directory from ``SWA_PREFIX_CACHE_STATS_DIR``, or None."""
    raw = settings.STATS_DIR.read(environ)
    return Path(raw) if raw else None


def _process_title() -> str:
    """vLLM names its engine-core process (``VLLM::EngineCore``) via
    setproctitle; fall back to the multiprocessing name and argv."""
    try:
        import setproctitle  # type: ignore[import-not-found]

        return str(setproctitle.getproctitle())
    except Exception:
        import multiprocessing

        return f"{multiprocessing.current_process().name} {' '.join(sys.argv[:2])}"


def observe(caller: FrameType, kwargs: dict[str, Any]) -> None:
    """Record, once per coordinator class, the KV-cache groups and managers
    of the coordinator that made this lookup, so a receipt shows what the
    engine really built (vLLM calls the manager's classmethod from the
    coordinator's ``find_longest_cache_hit``: ``caller``'s ``self``)."""
    owner = caller.f_locals.get("self")
    name = type(owner).__name__
    if name in _observed or len(_observed) >= _MAX_OBSERVED:
        return
    groups = []
    config = getattr(owner, "kv_cache_config", None)
    for index, group in enumerate(getattr(config, "kv_cache_groups", ())):
        spec = group.kv_cache_spec
        groups.append({
            "group": index,
            "spec": type(spec).__name__,
            "block_size": getattr(spec, "block_size", None),
            "sliding_window": getattr(spec, "sliding_window", None),
            "layers": len(getattr(group, "layer_names", ())),
        })
    _observed[name] = {
        "coordinator": name,
        "managers": [type(m).__name__ for m in getattr(owner, "single_type_managers", ())],
        "groups": groups,
        "alignment_tokens": kwargs.get("alignment_tokens"),
    }


def _snapshot(status: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    state = dict(status())
    stats = state.pop("stats")
    return {
        "pid": os.getpid(),
        "process": _process_title(),
        "time": time.time(),
        **state,
        "stats": asdict(stats) if is_dataclass(stats) else dict(stats),
        "observed": list(_observed.values()),
    }


def _write(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str))
    os.replace(tmp, path)


def start(status: Callable[[], dict[str, Any]]) -> Path | None:
    """Start writing this process's stats file; returns its path, or None
    when ``SWA_PREFIX_CACHE_STATS_DIR`` is unset or cannot be created (said
    once; serving goes on without the file). Idempotent per process."""
    global _started_for, enabled
    directory = stats_dir()
    if directory is None:
        return None
    path = directory / f"stats-{os.getpid()}.json"
    if _started_for == os.getpid():
        return path if enabled else None
    _started_for = os.getpid()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        logger.warning("swa-prefix-cache: %s=%s cannot be created (%s); no stats file is written",
                       STATS_DIR_ENV, directory, exc)
        return None
    enabled = True

    def flush() -> None:
        try:
            _write(path, _snapshot(status))
        except Exception:  # reporting must never hurt serving
            pass

    def loop() -> None:
        last: Any = None
        while True:
            current = json.dumps(
                [status(), len(_observed)],
                default=lambda o: asdict(o) if is_dataclass(o) else str(o),
            )
            if current != last:
                flush()
                last = current
            time.sleep(_PERIOD_S)

    flush()
    atexit.register(flush)
    threading.Thread(target=loop, name="swa-prefix-cache-stats", daemon=True).start()
    return path
