"""The lookups' patches (sliding window, its pool read, full attention,
the KV-offload lookups and request keys, the lookup memory): their plans,
what answers each lookup (``paths``), what is slower than it could be
(``degraded``), and their counters (``stats``).

Each patch is a record of swa_prefix_cache/vllm_adapter/registry.py; the
installer (swa_prefix_cache/vllm_adapter/installer.py) goes through the
records and carries out the plans this module makes: it chooses the mode
and the core and builds the lookups. Anything off (unknown vLLM build,
unreadable sources, bad mode) leaves vLLM's own code in place for what it
concerns and is said once in the log.
"""

import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from swa_prefix_cache import settings
from swa_prefix_cache.vllm_adapter import fingerprint, registry, stats_file
from swa_prefix_cache.vllm_adapter.config import Core, Mode, read_core, read_mode

logger = logging.getLogger("swa_prefix_cache")


@dataclass
class Stats:
    """Counters a test or an operator can read (``swa_prefix_cache.vllm_adapter.stats()``)."""

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
    """What the lookup patches chose in this process; whether each is
    installed, and why not, is the registry's (swa_prefix_cache/vllm_adapter/registry.py)."""

    mode: Mode | None = None
    backend: str = ""  # what answers the sliding-window lookup: native, python or vllm
    stats: Stats = field(default_factory=Stats)
    # The extension's lookup object while it counts calls itself, and
    # stats.calls when it was installed; the same for full attention.
    counted: Any = None
    calls_before: int = 0
    full_counted: Any = None
    full_calls_before: int = 0
    memo_stats: Any = None
    # How the probes read the pool ("blocks", "block_ids" or None: through
    # get_cached_block), and why the native core is off.
    pool_read: str | None = None
    core_reason: str = ""
    last_choice: Any = None  # the latest installation's _Choice (say_active reads it)


_state = _State()

# The records this module plans, by their bindings' names (registry.PATCHES).
SLIDING_WINDOW = fingerprint.SLIDING_WINDOW.name
POOL_READ = fingerprint.POOL_READ.name
FULL_ATTENTION = fingerprint.FULL_ATTENTION.name
LOOKUP_MEMO = fingerprint.LOOKUP_MEMO.name
OFFLOAD_LOOKUP = fingerprint.OFFLOAD_LOOKUP.name
OFFLOAD_PREFIX = fingerprint.OFFLOAD_PREFIX.name
OFFLOAD_KEYS = fingerprint.OFFLOAD_KEYS.name


def _choose_core() -> tuple[Any, str]:
    """The core ``SWA_PREFIX_CACHE_CORE`` asks for: (the extension module,
    "native") or (None, "python"). Python when the extension cannot be
    loaded (said once in the log)."""
    _state.core_reason = ""
    if read_core() is Core.PYTHON:
        return None, "python"
    try:
        from swa_prefix_cache.core import hotpath

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
    when the sources of that read match a known vLLM build (the registry's
    ``pool_read`` record); otherwise None, and every probe calls
    ``BlockPool.get_cached_block`` (same answers, slower), said once in the
    log."""
    def build(found: fingerprint.Match, originals: tuple[Any, ...]) -> tuple[Any, ...]:
        _state.pool_read = "block_ids" if found.semantics == fingerprint.BLOCK_IDS else "blocks"
        return ()

    _state.pool_read = None
    registry.install(POOL_READ, build, "probing through get_cached_block", logging.INFO)
    return _state.pool_read


@dataclass
class _Choice:
    """What one installation of the lookups chose, shared by their plans
    (each made when the installer reaches its record)."""

    mode: Mode | None = None
    hotpath: Any = None  # the extension module, or None: the python core
    timed: bool = False
    memo_found: Any = None  # the lookup memory's fingerprint, read before ours bind
    variant: str = ""
    already: bool = False  # the sliding-window lookup was installed before this call
    offload: dict[str, Any] = field(default_factory=dict)



def plans(mode: Mode | None = None) -> dict[str, Callable[[], registry.Plan]]:
    """The registry's plans for the lookups, each made when the installer
    reaches its record (registry.install_all). The sliding-window lookup
    comes first: it reads the mode and the core, and the others rest on
    it (not tried when it stays vLLM's); in mode off with a stats directory
    both managers' lookups are vLLM's own, timed. Once the sliding-window
    lookup is installed in this process, the lookups are decided: a later
    installation leaves them as they are."""
    choice = _state.last_choice = _Choice(already=registry.is_installed(SLIDING_WINDOW))

    def ours_on() -> bool:
        """The later lookups are tried: ours answers the sliding-window
        lookup, in this installation."""
        return (
            not choice.already
            and registry.is_installed(SLIDING_WINDOW)
            and choice.mode is not None
            and choice.mode is not Mode.OFF
        )

    def sliding_window() -> registry.Plan:
        if choice.already:
            return None
        return _sliding_window_plan(mode, choice)

    def full_attention() -> registry.Plan:
        if choice.already or not registry.is_installed(SLIDING_WINDOW):
            return None
        if choice.mode is Mode.OFF:  # the timer of mode off
            return registry.Bind((_timer(FULL_ATTENTION, full=True),))
        return _full_plan(choice)

    def offload(name: str) -> registry.Plan:
        if not ours_on():
            return None
        if not choice.offload:
            from swa_prefix_cache.vllm_adapter import connector_lookup

            choice.offload = connector_lookup.plans(
                choice.mode, choice.hotpath, _on_error, _offload_shadow,
            )
        return choice.offload[name]

    def offload_keys() -> registry.Plan:
        from swa_prefix_cache.vllm_adapter import offload_keys

        return offload_keys.plan(choice.mode) if ours_on() else None

    def lookup_memo() -> registry.Plan:
        return _memo_plan(choice) if ours_on() else None

    return {
        SLIDING_WINDOW: sliding_window,
        FULL_ATTENTION: full_attention,
        OFFLOAD_LOOKUP: lambda: offload(OFFLOAD_LOOKUP),
        OFFLOAD_PREFIX: lambda: offload(OFFLOAD_PREFIX),
        OFFLOAD_KEYS: offload_keys,
        LOOKUP_MEMO: lookup_memo,
    }


def _sliding_window_plan(mode: Mode | None, choice: _Choice) -> registry.Plan:
    """Read the mode and the core, and plan the sliding-window lookup: ours
    (with its pool read, a part of it), vLLM's own timed (mode off with a
    stats directory), or vLLM's own."""
    kept = "vLLM left unpatched"
    try:
        mode = read_mode() if mode is None else mode
        read_core()
    except ValueError as exc:
        return registry.Refusal(str(exc), kept, logging.ERROR)
    _state.mode = choice.mode = mode
    if mode is Mode.OFF:
        if stats_file.stats_dir() is None:
            return registry.Refusal("mode off", kept)
        try:
            timer = _timer(SLIDING_WINDOW, full=False)
        except Exception as exc:  # vLLM not importable
            return registry.Refusal(f"mode off; vLLM's lookups not timed: {exc!r}", kept,
                                    logging.WARNING)
        _state.backend = "vllm"
        return registry.Bind(
            (timer,),
            said=f"mode off; vLLM's own lookup answers, timed for {settings.STATS_DIR.name}, "
                 f"pid {os.getpid()}",
        )
    # The lookup memory's sources include the managers' lookups: read them
    # before ours replace them.
    choice.memo_found = _memo_fingerprint()
    choice.hotpath, backend = _choose_core()
    hotpath = choice.hotpath
    # Timing each lookup (``_counted``) costs about 1 us per call, a third of
    # a lookup's fixed cost, so it wraps the lookup only while the stats are
    # written out; otherwise the lookup counts its own calls (into a
    # throwaway Stats when ``_counted`` counts them).
    timed = choice.timed = stats_file.stats_dir() is not None

    def build(found: fingerprint.Match, originals: tuple[Any, ...]) -> tuple[Any, ...]:
        from swa_prefix_cache.vllm_adapter.swa_lookup import make_lookup

        original = originals[0]
        pool_read = _pool_read()
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
        choice.variant = found.variant or "?"
        _state.backend = backend
        return (classmethod(_counted(ours) if timed else ours),)

    return registry.Build(build, kept)


def say_active() -> None:
    """The once-per-process lines of an installation that put our lookups
    in place (none when vLLM's own answer)."""
    from swa_prefix_cache.vllm_adapter import connector_lookup

    choice = _state.last_choice
    if choice is None or choice.already or choice.mode in (None, Mode.OFF):
        return
    if not registry.is_installed(SLIDING_WINDOW):
        return
    connector_lookup.say_installed(choice.mode, choice.hotpath)
    if registry.is_installed(LOOKUP_MEMO):
        logger.info("swa-prefix-cache: repeated lookups answered from memory (lookup memory on)")
    _say_active(fingerprint.installed_version(), choice.variant)


def _say_active(version: str, variant: str) -> None:
    """The once-per-process line, from the registry: what answers each
    lookup, and each patch that is off and why; a WARNING naming what is
    slower than this build could be, when anything is."""
    answers = ", ".join(f"{name} {row['answers']}" for name, row in paths().items())
    off = ", ".join(
        f"{row['patch']} ({row['reason'] or 'not asked for'})"
        for row in registry.rows() if not row["installed"]
    )
    slower = degraded()
    if slower:
        logger.warning(
            "swa-prefix-cache: DEGRADED on vLLM %s: %s; "
            "lookups answered by: %s; patches off: %s; pid %d",
            version, "; ".join(slower), answers, off or "none", os.getpid(),
        )
        return
    logger.info(
        "swa-prefix-cache: active (mode %s) on vLLM %s (its lookup's code as in %s); "
        "lookups answered by: %s; patches off: %s; pid %d",
        _state.mode.value if _state.mode else "?", version, variant, answers, off or "none",
        os.getpid(),
    )


def _memo_fingerprint() -> Any:
    """The lookup memory's sources against the known variants (a
    ``fingerprint.Match``), or the reason they cannot be read."""
    try:
        return fingerprint.check(fingerprint.LOOKUP_MEMO)
    except Exception as exc:  # sources unreadable: remember nothing
        return f"cannot fingerprint the lookup memory's sources: {exc!r}"


def _memo_plan(choice: _Choice) -> registry.Plan:
    """Answer a hybrid coordinator's repeated lookups from memory
    (swa_prefix_cache/vllm_adapter/lookup_memo.py), in mode on only (shadow compares every
    call), unless ``SWA_PREFIX_CACHE_LOOKUP_MEMO=off`` or the sources it
    rests on are unknown code (said once)."""
    from swa_prefix_cache.vllm_adapter import lookup_memo
    from swa_prefix_cache.vllm_adapter.config import LookupMemo, read_lookup_memo

    kept = "lookups are not remembered"
    _state.memo_stats = None
    if choice.mode is not Mode.ON:
        return registry.Refusal(f"mode {choice.mode.value}")
    try:
        wanted = read_lookup_memo()
    except ValueError as exc:
        return registry.Refusal(str(exc), kept, logging.ERROR)
    if wanted is LookupMemo.OFF:
        return registry.Refusal(f"{settings.LOOKUP_MEMO.name}=off")
    if isinstance(choice.memo_found, str):
        return registry.Refusal(choice.memo_found, kept)

    # Hybrid coordinators only: their lookup is several searches and vLLM's
    # fixed point (tens of us on gemma-3-27b); a unitary lookup is one native
    # search, already cheaper than remembering it (llama-3.1-8b's replay:
    # 4.7 us a lookup without the memory, 7.2 us with it).
    def build(found: Any, originals: tuple[Any, ...]) -> tuple[Any, ...]:
        _state.memo_stats = lookup_memo.MemoStats()
        return (lookup_memo.make_memoized(originals[0], _state.memo_stats),)

    return registry.Build(build, kept, logging.INFO, found=choice.memo_found)


def _full_plan(choice: _Choice) -> registry.Plan:
    """Replace ``FullAttentionManager.find_longest_cache_hit`` by the
    extension's proved ``full_hit`` (swa_prefix_cache/vllm_adapter/full_lookup.py), on its
    own fingerprint and in the same mode. With the python core, or an
    unknown full-attention lookup, vLLM's own stays (said once)."""
    kept = "vLLM's own full-attention lookup stays"
    hotpath, mode, timed = choice.hotpath, choice.mode, choice.timed
    if hotpath is None:
        return registry.Refusal(
            "python core: the full-attention lookup is replaced only natively", kept,
        )

    def build(found: Any, originals: tuple[Any, ...]) -> tuple[Any, ...]:
        from swa_prefix_cache.vllm_adapter.full_lookup import make_full_lookup

        ours = make_full_lookup(originals[0], _on_error, _state.pool_read, hotpath)
        _state.full_counted = None if timed else ours
        _state.full_calls_before = _state.stats.full_calls
        if mode is Mode.SHADOW:
            ours = _shadow(ours, originals[0])
        return (classmethod(_counted(ours, full=True) if timed else ours),)

    return registry.Build(build, kept, said=f"full-attention lookup replaced too (mode {mode.value})")


def _timer(name: str, full: bool) -> Any:
    """Mode off with a stats directory: vLLM's own method answers every
    lookup, wrapped only to count and time it (``full_*`` stats for the
    full-attention lookup), so an end-to-end run can compare the time spent
    inside the lookup with the plugin on and off."""
    own = registry.BY_NAME[name].binds[0].current().__func__

    def vllm_own(cls: type, *args: Any, **kwargs: Any) -> Any:
        return own(cls, *args, **kwargs)

    return classmethod(_counted(vllm_own, full=full))


def release() -> None:
    """Before the installer puts vLLM's methods back: keep the calls the
    extension counted, and let its lookup objects go."""
    with registry.lock:
        _sync_calls()
        _state.counted = None
        _state.full_counted = None


def is_installed() -> bool:
    return registry.is_installed(SLIDING_WINDOW)


def paths() -> dict[str, dict[str, Any]]:
    """Per lookup, what really answers it in this process: ``native`` (the
    proved C through the extension), ``python`` (pyspec's search) or
    ``vllm`` (vLLM's own code), and the fast paths that are on."""
    ours = registry.is_installed(SLIDING_WINDOW) and _state.backend in ("native", "python")
    probes = {"blocks": "inline map read", "block_ids": "inline map read (block ids)"}
    full = registry.is_installed(FULL_ATTENTION)
    return {
        "sliding_window": {
            "answers": _state.backend if ours else "vllm",
            "probes": probes.get(_state.pool_read or "", "get_cached_block") if ours else "vllm",
        },
        "full_attention": {"answers": _state.backend if full else "vllm"},
        "offload_lookup": {
            "answers": (_state.backend if ours else "python")
            if registry.is_installed(OFFLOAD_LOOKUP) else "vllm",
        },
        "offload_prefix": {
            "answers": "inline read" if registry.is_installed(OFFLOAD_PREFIX) else "vllm",
        },
        "offload_keys": {
            "answers": "a group at a time" if registry.is_installed(OFFLOAD_KEYS) else "vllm",
        },
        "lookup_memo": {"answers": "memory" if registry.is_installed(LOOKUP_MEMO) else "off"},
    }


def degraded() -> list[str]:
    """What is slower here than this build of the plugin could make it,
    each with its reason; empty when every patch that exists for a lookup
    applies (or a setting turned it off on purpose). Mode off is not
    degraded: it asks for vLLM's own code."""
    state = registry.state
    slower: list[str] = []
    mode = _state.mode
    if mode is not None and mode is not Mode.OFF:
        if not state(SLIDING_WINDOW).installed:
            slower.append(f"sliding-window lookup is vLLM's own: {state(SLIDING_WINDOW).reason}")
        else:
            if _state.core_reason:
                slower.append(_state.core_reason)
            if not state(POOL_READ).installed:
                slower.append(f"probes call get_cached_block: {state(POOL_READ).reason}")
            if _state.backend == "native" and not state(FULL_ATTENTION).installed:
                slower.append(f"full-attention lookup is vLLM's own: {state(FULL_ATTENTION).reason}")
            if not state(OFFLOAD_LOOKUP).installed:
                slower.append(f"KV-offload lookup is vLLM's own: {state(OFFLOAD_LOOKUP).reason}")
            if mode is Mode.ON and not state(LOOKUP_MEMO).installed and _asked_for(LOOKUP_MEMO):
                slower.append(f"lookup memory off: {state(LOOKUP_MEMO).reason}")
    for patch in registry.PATCHES:
        if patch.opt_in and not state(patch.name).installed and _asked_for(patch.name):
            slower.append(f"{patch.label} asked for, vLLM's own kept: {state(patch.name).reason}")
    return slower


def _asked_for(name: str) -> bool:
    """Whether the patch's setting asks for it (any value but ``off``; a
    value the plugin does not know was asked for too, and refused)."""
    try:
        return registry.BY_NAME[name].setting.read() != "off"
    except ValueError:
        return True


def status() -> dict[str, Any]:
    """The lookups' part of the plugin's ``status()``: what is active and
    why, the stats counters."""
    memo = registry.state(LOOKUP_MEMO)
    return {
        "installed": registry.is_installed(SLIDING_WINDOW),
        "mode": _state.mode.value if _state.mode else None,
        "backend": _state.backend,
        "reason": registry.state(SLIDING_WINDOW).reason,
        "paths": paths(),
        "degraded": degraded(),
        "stats": stats(),
        "full_attention": {
            "installed": registry.is_installed(FULL_ATTENTION),
            "reason": registry.state(FULL_ATTENTION).reason,
        },
        "lookup_memo": {
            "installed": memo.installed,
            "reason": memo.reason,
            "stats": vars(_state.memo_stats) if _state.memo_stats is not None else {},
        },
    }


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
            if stats_file.enabled and not full:
                stats_file.observe(sys._getframe(1), kwargs)

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
    from swa_prefix_cache.vllm_adapter.repro_record import describe_lookup

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
