"""Install / uninstall the replacement on vLLM's SlidingWindowManager.

Idempotent and safe to call in every vLLM process (vLLM runs general
plugins in the front end, the engine core and the workers). Anything off
(unknown vLLM build, unreadable sources, bad mode) leaves vLLM's own code
in place and is said once in the log.
"""

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from vllm_adapter import report
from vllm_adapter.config import Core, Mode, read_core, read_mode

logger = logging.getLogger("vllm_adapter")

_lock = threading.Lock()


@dataclass
class Stats:
    """Counters a test or an operator can read (``vllm_adapter.stats()``)."""

    calls: int = 0
    # Wall time spent inside the lookup (ours, or vLLM's own when timed in
    # mode off), summed over ``calls``.
    lookup_ns: int = 0
    lookup_ns_max: int = 0  # the slowest single lookup (often the first)
    # The same for FullAttentionManager.find_longest_cache_hit, when it is
    # replaced (native core) or timed (mode off).
    full_calls: int = 0
    full_lookup_ns: int = 0
    full_lookup_ns_max: int = 0
    errors: int = 0
    shadow_compared: int = 0
    shadow_mismatches: int = 0
    last_mismatch: dict[str, Any] = field(default_factory=dict)


@dataclass
class _State:
    installed: bool = False
    mode: Mode | None = None
    backend: str = ""
    original: Any = None  # the classmethod object found on the class
    reason: str = ""
    stats: Stats = field(default_factory=Stats)
    # The extension's lookup object while it counts calls itself, and
    # stats.calls when it was installed.
    counted: Any = None
    calls_before: int = 0
    # The full-attention lookup: its own patch, fingerprint and counters.
    full_installed: bool = False
    full_original: Any = None
    full_reason: str = ""
    full_counted: Any = None
    full_calls_before: int = 0
    # The lookup memory on the coordinators: its own fingerprint and counters.
    memo_originals: dict[Any, Any] = field(default_factory=dict)
    memo_reason: str = ""
    memo_stats: Any = None
    # How the probes read the pool ("blocks", "block_ids" or None: through
    # get_cached_block), and why the native core or the inline read is off.
    pool_read: str | None = None
    pool_reason: str = ""
    core_reason: str = ""


_state = _State()


def _choose_core() -> tuple[Any, str]:
    """The core ``SWA_PREFIX_CACHE_CORE`` asks for: (the extension module,
    "native") or (None, "python"). Python when the extension cannot be
    loaded (said once in the log)."""
    _state.core_reason = ""
    if read_core() is Core.PYTHON:
        return None, "python"
    try:
        from extracted_c import hotpath

        return hotpath.load(), "native"
    except Exception as exc:  # any failure to load means: use Python
        _state.core_reason = f"native hot path unavailable ({exc})"
        logger.warning(
            "swa-prefix-cache: native hot path unavailable (%s); using the "
            "pure-Python stride search", exc,
        )
        return None, "python"


def _pool_read() -> str | None:
    """The layout in which probes may read ``BlockPool``'s hash map inline
    ("blocks" or "block_ids", from the matched variant's semantics): only
    when the sources of that read match a known vLLM build (``fingerprint``);
    otherwise None, and every probe calls ``BlockPool.get_cached_block``
    (same answers, slower), said once in the log."""
    from vllm_adapter import fingerprint

    try:
        found = fingerprint.check(fingerprint.POOL_READ)
        if found.known:
            return "block_ids" if found.semantics == fingerprint.BLOCK_IDS else "blocks"
        reason = f"its BlockPool read path is unknown code ({', '.join(found.changed)} changed)"
    except Exception as exc:  # sources unreadable: the generic probe is safe
        reason = f"cannot fingerprint its BlockPool read path: {exc!r}"
    _state.pool_reason = reason
    logger.info("swa-prefix-cache: %s; probing through get_cached_block", reason)
    return None


def install(mode: Mode | None = None) -> bool:
    """Patch vLLM if its build is known and the mode is not ``off``.

    Returns whether the patch is active. Never raises (vLLM calls it while
    it starts): an unknown vLLM, a missing native extension or vLLM itself,
    a bad setting each leave vLLM's own code in place for what they concern
    (or use the Python search) and log one line. The opt-in KV-offload store filter
    (``SWA_PREFIX_CACHE_OFFLOAD_FILTER``) is installed first, on its own
    fingerprint, whatever the lookup patch does, and so is the opt-in
    data-parallel routing (``SWA_PREFIX_CACHE_DP_ROUTING``).
    """
    from vllm_adapter import dp_routing, offload_filter

    offload_filter.install()
    dp_routing.install()
    with _lock:
        if _state.installed:
            return True
        try:
            mode = read_mode() if mode is None else mode
            read_core()
        except ValueError as exc:
            _state.reason = str(exc)
            logger.error("swa-prefix-cache: %s; vLLM left unpatched", exc)
            return False
        _state.mode = mode
        if mode is Mode.OFF:
            _state.reason = "mode off"
            if report.stats_dir() is not None:
                try:
                    return _install_timer()
                except Exception as exc:  # vLLM not importable
                    _state.reason = f"mode off; vLLM's lookups not timed: {exc!r}"
                    logger.warning("swa-prefix-cache: %s", _state.reason)
                    return False
            logger.info("swa-prefix-cache: mode off; vLLM left unpatched")
            return False
        from vllm_adapter import fingerprint

        try:
            version = fingerprint.installed_version()
            found = fingerprint.check(fingerprint.SLIDING_WINDOW)
        except Exception as exc:  # vLLM missing or reshaped beyond recognition
            _state.reason = f"cannot fingerprint vLLM: {exc!r}"
            logger.warning("swa-prefix-cache: %s; vLLM left unpatched", _state.reason)
            return False
        if not found.known:
            _state.reason = (
                f"unknown vLLM build {version} (changed: {', '.join(found.changed)})"
            )
            logger.warning("swa-prefix-cache: %s; vLLM left unpatched", _state.reason)
            return False
        # The lookup memory's sources include the managers' lookups: read
        # them before ours replace them.
        memo_found = _memo_fingerprint()
        from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

        from vllm_adapter.swa_lookup import make_lookup

        hotpath, backend = _choose_core()
        original = SlidingWindowManager.__dict__["find_longest_cache_hit"]
        # Timing each lookup (``_counted``) costs about 1 us per call, a third
        # of a lookup's fixed cost, so it wraps the lookup only while the stats
        # are written out; otherwise the lookup counts its own calls (into a
        # throwaway Stats when ``_counted`` counts them).
        timed = report.stats_dir() is not None
        _state.pool_reason = ""
        pool_read = _state.pool_read = _pool_read()
        ours = make_lookup(
            original, _on_error,
            Stats() if timed or hotpath is not None else _state.stats, pool_read,
            hotpath,
        )
        # The extension counts its own calls; stats() adds them up.
        _state.counted = ours if hotpath is not None and not timed else None
        _state.calls_before = _state.stats.calls
        if found.semantics == fingerprint.BLOCK_ALIGNED_ONLY:
            ours = _block_aligned_only(ours, original)
        if mode is Mode.SHADOW:
            ours = _shadow(ours, original)
        SlidingWindowManager.find_longest_cache_hit = classmethod(
            _counted(ours) if timed else ours
        )
        _state.installed, _state.original, _state.backend = True, original, backend
        _state.reason = ""
        # The other lookups are independent parts: one that fails leaves
        # vLLM's own code for it and the rest in place.
        try:
            _install_full(mode, hotpath, pool_read, timed)
        except Exception as exc:
            _state.full_reason = f"cannot patch the full-attention lookup: {exc!r}"
            logger.warning("swa-prefix-cache: %s; vLLM's own stays", _state.full_reason)
        from vllm_adapter import offload_lookup

        try:
            offload_lookup.install(mode, hotpath, _on_error, _offload_shadow)
        except Exception as exc:
            offload_lookup.refuse(f"cannot patch the KV-offload lookup: {exc!r}")
        try:
            _install_memo(mode, memo_found)
        except Exception as exc:
            _state.memo_reason = f"cannot install the lookup memory: {exc!r}"
            logger.warning("swa-prefix-cache: %s; lookups are not remembered", _state.memo_reason)
        _say_active(version, found.variant)
        return True


def _say_active(version: str, variant: str) -> None:
    """The once-per-process line: what answers each lookup; a WARNING
    naming what is slower than this build could be, when anything is."""
    answers = ", ".join(f"{name} {row['answers']}" for name, row in paths().items())
    slower = degraded()
    if slower:
        logger.warning(
            "swa-prefix-cache: DEGRADED on vLLM %s: %s; "
            "lookups answered by: %s; pid %d", version, "; ".join(slower), answers, os.getpid(),
        )
        return
    logger.info(
        "swa-prefix-cache: active (mode %s) on vLLM %s (its lookup's code as in %s); "
        "lookups answered by: %s; pid %d",
        _state.mode.value if _state.mode else "?", version, variant, answers, os.getpid(),
    )


def _memo_fingerprint() -> Any:
    """The lookup memory's sources against the known variants (a
    ``fingerprint.Match``), or the reason they cannot be read."""
    from vllm_adapter import fingerprint

    try:
        return fingerprint.check(fingerprint.LOOKUP_MEMO)
    except Exception as exc:  # sources unreadable: remember nothing
        return f"cannot fingerprint the lookup memory's sources: {exc!r}"


def _install_memo(mode: Mode, found: Any) -> None:
    """Answer a hybrid coordinator's repeated lookups from memory
    (vllm_adapter/lookup_memo.py), in mode on only (shadow compares every
    call), unless ``SWA_PREFIX_CACHE_LOOKUP_MEMO=off`` or the sources it
    rests on are unknown code (said once). Called with ``_lock`` held."""
    from vllm_adapter import lookup_memo
    from vllm_adapter.config import LookupMemo, read_lookup_memo

    _state.memo_reason, _state.memo_stats = "", None
    if mode is not Mode.ON:
        _state.memo_reason = f"mode {mode.value}"
        return
    try:
        wanted = read_lookup_memo()
    except ValueError as exc:
        _state.memo_reason = str(exc)
        logger.error("swa-prefix-cache: %s; lookups are not remembered", exc)
        return
    if wanted is LookupMemo.OFF:
        _state.memo_reason = "SWA_PREFIX_CACHE_LOOKUP_MEMO=off"
        return
    if isinstance(found, str):
        _state.memo_reason = found
    elif not found.known:
        _state.memo_reason = f"its sources are unknown code ({', '.join(found.changed)} changed)"
    if _state.memo_reason:
        logger.info("swa-prefix-cache: %s; lookups are not remembered", _state.memo_reason)
        return
    from vllm.v1.core.kv_cache_coordinator import HybridKVCacheCoordinator

    # Hybrid coordinators only: their lookup is several searches and vLLM's
    # fixed point (tens of us on gemma-3-27b); a unitary lookup is one native
    # search, already cheaper than remembering it (llama-3.1-8b's replay:
    # 4.7 us a lookup without the memory, 7.2 us with it).
    _state.memo_stats = lookup_memo.MemoStats()
    cls = HybridKVCacheCoordinator
    original = cls.__dict__["find_longest_cache_hit"]
    cls.find_longest_cache_hit = lookup_memo.make_memoized(original, _state.memo_stats)
    _state.memo_originals[cls] = original
    logger.info("swa-prefix-cache: repeated lookups answered from memory (lookup memory on)")


def _install_full(mode: Mode, hotpath: Any, pool_read: str | None, timed: bool) -> None:
    """Replace ``FullAttentionManager.find_longest_cache_hit`` by the
    extension's proved ``full_hit`` (vllm_adapter/full_lookup.py), on its
    own fingerprint and in the same mode. With the python core, or an
    unknown full-attention lookup, vLLM's own stays (said once). Called
    with ``_lock`` held, after the sliding-window patch."""
    from vllm_adapter import fingerprint

    if hotpath is None:
        _state.full_reason = "python core: the full-attention lookup is replaced only natively"
        logger.info("swa-prefix-cache: %s; vLLM's own full-attention lookup stays", _state.full_reason)
        return
    found = fingerprint.check(fingerprint.FULL_ATTENTION)
    if not found.known:
        _state.full_reason = (
            f"unknown full-attention lookup in vLLM {fingerprint.installed_version()} "
            f"(changed: {', '.join(found.changed)})"
        )
        logger.warning("swa-prefix-cache: %s; vLLM's own stays", _state.full_reason)
        return
    from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager

    from vllm_adapter.full_lookup import make_full_lookup

    original = FullAttentionManager.__dict__["find_longest_cache_hit"]
    ours = make_full_lookup(original, _on_error, pool_read, hotpath)
    _state.full_counted = None if timed else ours
    _state.full_calls_before = _state.stats.full_calls
    if mode is Mode.SHADOW:
        ours = _shadow(ours, original)
    FullAttentionManager.find_longest_cache_hit = classmethod(
        _counted(ours, full=True) if timed else ours
    )
    _state.full_installed, _state.full_original, _state.full_reason = True, original, ""
    logger.info("swa-prefix-cache: full-attention lookup replaced too (mode %s)", mode.value)


def _install_timer() -> bool:
    """Mode off with a stats directory: vLLM's own method answers every
    lookup, wrapped only to count and time it, so an end-to-end run can
    compare the time spent inside the lookup with the plugin on and off.
    Called with ``_lock`` held."""
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    original = SlidingWindowManager.__dict__["find_longest_cache_hit"]
    own = original.__get__(None, SlidingWindowManager)

    def vllm_own(cls: type, *args: Any, **kwargs: Any) -> Any:
        return own(*args, **kwargs)

    SlidingWindowManager.find_longest_cache_hit = classmethod(_counted(vllm_own))
    _state.installed, _state.original, _state.backend = True, original, "vllm"
    _time_vllms_full_lookup()
    logger.info(
        "swa-prefix-cache: mode off; vLLM's own lookup answers, timed for %s, pid %d",
        report.STATS_DIR_ENV, os.getpid(),
    )
    return True


def _time_vllms_full_lookup() -> None:
    """Mode off with a stats directory: vLLM's own full-attention lookup,
    counted and timed the same way (``full_*`` stats)."""
    from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager

    original = FullAttentionManager.__dict__["find_longest_cache_hit"]
    own = original.__func__

    def vllm_own(cls: type, *args: Any, **kwargs: Any) -> Any:
        return own(cls, *args, **kwargs)

    FullAttentionManager.find_longest_cache_hit = classmethod(_counted(vllm_own, full=True))
    _state.full_installed, _state.full_original = True, original


def uninstall() -> None:
    """Put vLLM's own methods back. Safe to call when not installed."""
    from vllm_adapter import dp_routing, offload_filter, offload_lookup

    dp_routing.uninstall()
    offload_filter.uninstall()
    offload_lookup.uninstall()
    with _lock:
        if not _state.installed:
            return
        from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

        SlidingWindowManager.find_longest_cache_hit = _state.original
        for cls, original in _state.memo_originals.items():
            cls.find_longest_cache_hit = original
        _state.memo_originals.clear()
        _sync_calls()
        _state.installed = False
        _state.original = None
        _state.counted = None
        if _state.full_installed:
            from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager

            FullAttentionManager.find_longest_cache_hit = _state.full_original
            _state.full_installed = False
            _state.full_original = None
            _state.full_counted = None


def is_installed() -> bool:
    return _state.installed


def paths() -> dict[str, dict[str, Any]]:
    """Per lookup, what really answers it in this process: ``native`` (the
    proved C through the extension), ``python`` (pyspec's search) or
    ``vllm`` (vLLM's own code), and the fast paths that are on."""
    from vllm_adapter import offload_lookup

    ours = _state.installed and _state.backend in ("native", "python")
    probes = {"blocks": "inline map read", "block_ids": "inline map read (block ids)"}
    return {
        "sliding_window": {
            "answers": _state.backend if ours else "vllm",
            "probes": probes.get(_state.pool_read or "", "get_cached_block") if ours else "vllm",
        },
        "full_attention": {"answers": _state.backend if _state.full_installed else "vllm"},
        "offload_lookup": {
            "answers": (_state.backend if ours else "python") if offload_lookup.status()["installed"]
            else "vllm",
        },
        "lookup_memo": {"answers": "memory" if _state.memo_originals else "off"},
    }


def degraded() -> list[str]:
    """What is slower here than this build of the plugin could make it,
    each with its reason; empty when every patch that exists for a lookup
    applies (or a setting turned it off on purpose). Mode off is not
    degraded: it asks for vLLM's own code."""
    from vllm_adapter import config, dp_routing, offload_filter, offload_lookup

    slower: list[str] = []
    mode = _state.mode
    if mode is not None and mode is not Mode.OFF:
        if not _state.installed:
            slower.append(f"sliding-window lookup is vLLM's own: {_state.reason}")
        else:
            if _state.core_reason:
                slower.append(_state.core_reason)
            if _state.pool_reason:
                slower.append(f"probes call get_cached_block: {_state.pool_reason}")
            if _state.backend == "native" and not _state.full_installed:
                slower.append(f"full-attention lookup is vLLM's own: {_state.full_reason}")
            offload = offload_lookup.status()
            if not offload["installed"]:
                slower.append(f"KV-offload lookup is vLLM's own: {offload['reason']}")
            if mode is Mode.ON and not _state.memo_originals and _memo_wanted():
                slower.append(f"lookup memory off: {_state.memo_reason}")
    opt_in = (("offload store filter", offload_filter, config.read_offload_filter),
              ("data-parallel routing", dp_routing, config.read_dp_routing))
    for name, module, read in opt_in:
        row = module.status()
        if not row["installed"] and _asked_for(read):
            slower.append(f"{name} asked for, vLLM's own kept: {row['reason']}")
    return slower


def _asked_for(read: Callable[[], Any]) -> bool:
    """Whether a setting asks for its part (any value but ``off``; a value
    the plugin does not know was asked for too, and refused)."""
    try:
        return read().value != "off"
    except ValueError:
        return True


def _memo_wanted() -> bool:
    from vllm_adapter.config import read_lookup_memo

    return _asked_for(read_lookup_memo)


def status() -> dict[str, Any]:
    """What is active and why; the stats counters."""
    return {
        "installed": _state.installed,
        "mode": _state.mode.value if _state.mode else None,
        "backend": _state.backend,
        "reason": _state.reason,
        "paths": paths(),
        "degraded": degraded(),
        "stats": stats(),
        "full_attention": {"installed": _state.full_installed, "reason": _state.full_reason},
        "lookup_memo": {
            "installed": bool(_state.memo_originals),
            "reason": _state.memo_reason,
            "stats": vars(_state.memo_stats) if _state.memo_stats is not None else {},
        },
        "offload_lookup": _offload_lookup_status(),
        "offload_filter": _offload_filter_status(),
        "dp_routing": _dp_routing_status(),
    }


def _offload_lookup_status() -> dict[str, Any]:
    from vllm_adapter import offload_lookup

    return offload_lookup.status()


def _offload_shadow(mine: Any, theirs: Any, detail: dict[str, Any]) -> None:
    """One shadow comparison of the KV-offload lookup: the same int, or
    None on both sides."""
    _state.stats.shadow_compared += 1
    same = not isinstance(mine, Exception) and (mine is None) == (theirs is None) and mine == theirs
    if not same:
        _state.stats.shadow_mismatches += 1
        detail = dict(detail, ours=repr(mine), vllm=repr(theirs))
        _state.stats.last_mismatch = detail
        logger.error("swa-prefix-cache shadow MISMATCH: %s", detail)


def _offload_filter_status() -> dict[str, Any]:
    from vllm_adapter import offload_filter

    return offload_filter.status()


def _dp_routing_status() -> dict[str, Any]:
    from vllm_adapter import dp_routing

    return dp_routing.status()


def stats() -> Stats:
    _sync_calls()
    return _state.stats


def _sync_calls() -> None:
    """Add the calls the extension counted (it counts in C, for free)."""
    if _state.counted is not None:
        _state.stats.calls = _state.calls_before + _state.counted.calls
    if _state.full_counted is not None:
        _state.stats.full_calls = _state.full_calls_before + _state.full_counted.calls


def _on_error(exc: BaseException) -> None:
    """Our search failed: vLLM's own method answers; say so once."""
    _state.stats.errors += 1
    if _state.stats.errors == 1:
        logger.error(
            "swa-prefix-cache: lookup failed (%r); vLLM's own method answered "
            "(counted in stats().errors, logged once)", exc, exc_info=exc,
        )


def _counted(lookup: Any, full: bool = False) -> Any:
    """``lookup`` counted and timed into the stats (``full_*`` for the
    full-attention lookup)."""
    calls, spent_ns, max_ns = (
        ("full_calls", "full_lookup_ns", "full_lookup_ns_max") if full
        else ("calls", "lookup_ns", "lookup_ns_max")
    )

    def counted(cls: type, *args: Any, **kwargs: Any) -> Any:
        stats = _state.stats
        setattr(stats, calls, getattr(stats, calls) + 1)
        start = time.perf_counter_ns()
        try:
            return lookup(cls, *args, **kwargs)
        finally:
            spent = time.perf_counter_ns() - start
            setattr(stats, spent_ns, getattr(stats, spent_ns) + spent)
            if spent > getattr(stats, max_ns):
                setattr(stats, max_ns, spent)
            if report.enabled and not full:
                report.observe(sys._getframe(1), kwargs)

    counted.__doc__ = "Prefix-cache lookup, counted and timed (swa-prefix-cache)."
    return counted


def _same_result(a: Any, b: Any) -> bool:
    """Equal hit length and, per group, the very same block objects."""
    (blocks_a, len_a), (blocks_b, len_b) = a, b
    if len_a != len_b or len(blocks_a) != len(blocks_b):
        return False
    return all(
        len(x) == len(y) and all(p is q for p, q in zip(x, y))
        for x, y in zip(blocks_a, blocks_b)
    )


def _block_aligned_only(ours: Any, original: Any) -> Any:
    """For a vLLM whose sliding-window lookup asserts that
    ``alignment_tokens`` is a multiple of the block size (0.28/0.29,
    ``fingerprint.BLOCK_ALIGNED_ONLY``): a lookup that is not goes to vLLM's
    own method, which fails on it exactly as it would without the plugin.
    The others are the lookups the search models on every release."""

    def block_aligned_only(cls: type, *args: Any, **kwargs: Any) -> Any:
        spec = args[4] if len(args) > 4 else kwargs.get("kv_cache_spec")
        align = args[6] if len(args) > 6 else kwargs.get("alignment_tokens")
        block_size = getattr(spec, "block_size", None)
        if (
            type(align) is not int
            or type(block_size) is not int
            or block_size < 1
            or align % block_size != 0
        ):
            return original.__get__(None, cls)(*args, **kwargs)
        return ours(cls, *args, **kwargs)

    return block_aligned_only


def _shadow(ours: Any, original: Any) -> Any:
    """Run both, return vLLM's answer, record any disagreement.
    ``original``: vLLM's classmethod object, bound to the class each call
    is made on (a subclass that inherits the method gets its own answer)."""

    def shadow(cls: type, *args: Any, **kwargs: Any) -> Any:
        theirs = original.__get__(None, cls)(*args, **kwargs)
        try:
            mine = ours(cls, *args, **kwargs)
        except Exception as exc:  # a crash in ours must not hurt serving
            mine = exc
        _state.stats.shadow_compared += 1
        if isinstance(mine, Exception) or not _same_result(mine, theirs):
            _record_mismatch(args, kwargs, mine, theirs)
        return theirs

    return shadow


def _record_mismatch(args: tuple, kwargs: dict, mine: Any, theirs: Any) -> None:
    """Log the inputs needed to replay the lookup on pyspec."""
    from vllm_adapter.replay import describe_lookup

    _state.stats.shadow_mismatches += 1
    detail = describe_lookup(args, kwargs)
    detail["ours"] = repr(mine) if isinstance(mine, Exception) else _summary(mine)
    detail["vllm"] = _summary(theirs)
    _state.stats.last_mismatch = detail
    logger.error("swa-prefix-cache shadow MISMATCH: %s", detail)


def _summary(result: Any) -> dict[str, Any]:
    blocks, hit_tokens = result
    first = blocks[0] if blocks else []
    return {
        "hit_tokens": hit_tokens,
        "lengths": [len(b) for b in blocks],
        "block_ids": [getattr(b, "block_id", None) for b in first],
    }
