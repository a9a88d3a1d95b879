"""Every patch the plugin can make, one record each, and the one installer
that writes to vLLM's classes.

A record (``Patch``) holds the sources whose semantics the patch replicates
(``binding``: fingerprinted by swa_prefix_cache/vllm_adapter/fingerprint.py, and the
patch applies only to known code; its name is the patch's), the vLLM
attributes it sets (``sets``, each named among those sources, so a module
path is written once; ``binds`` resolves them), what it replaces and the
setting record that governs it. The patch modules
(patch.py for the lookups, connector_lookup.py, offload_keys.py,
offload_filter.py, dp_routing.py) decide whether to patch and how to build
the replacement, each answer a plan (``Build``, ``Bind`` or ``Refusal``);
``install_all`` goes through the records in order and carries out each
one's plan (``apply``): ``install`` fingerprints, builds and binds,
``refuse`` records why a patch stays off, and ``uninstall`` puts vLLM's
attributes back. Only ``bind`` and
``uninstall`` set or delete an attribute of a vLLM class (the lookup memory
also watches each pool's map instance it reads, swa_prefix_cache/vllm_adapter/lookup_memo.py),
so ``swa_prefix_cache.vllm_adapter.status()``, ``qualify`` and the once-per-process log line
read one table (``rows``).

One re-entrant lock guards every record: a patch module holds it while it
decides, and the installer takes it again to bind.
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from swa_prefix_cache import settings
from swa_prefix_cache.vllm_adapter import fingerprint

logger = logging.getLogger("swa_prefix_cache")

lock = threading.RLock()

# Stands for "the class had no such attribute of its own" (a method the
# patch adds, or one the class inherits): uninstall deletes it again.
ABSENT = object()


@dataclass(frozen=True)
class Target:
    """One vLLM attribute a patch sets: ``module.owner.attr``."""

    module: str
    owner: str
    attr: str

    @property
    def name(self) -> str:
        return f"{self.owner}.{self.attr}"

    def owner_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.owner)

    def current(self) -> Any:
        """The class's own attribute as it is now (``ABSENT`` if it has none)."""
        return vars(self.owner_class()).get(self.attr, ABSENT)


@dataclass(frozen=True)
class Patch:
    """One patch: the code it rests on (``binding``, whose name is the
    patch's), the attributes it sets, what it replaces, the setting that
    turns it on or off. ``sets`` names each attribute by its qualified name
    among the binding's sources (so its module is written once, there), or
    as a ``Target`` for an attribute the patch adds to a class. It is empty
    for a fast path that changes how another patch reads vLLM (``part_of``)."""

    binding: fingerprint.Binding
    label: str  # what it concerns, for the log: "full-attention lookup"
    sets: tuple[str | Target, ...]
    replaces: str
    setting: settings.Setting
    opt_in: bool = False
    part_of: str = ""

    @property
    def name(self) -> str:
        return self.binding.name

    @functools.cached_property
    def binds(self) -> tuple[Target, ...]:
        """The vLLM attributes the patch sets, each with its module."""
        modules = {source.qualname: source.module for source in self.binding.sources}
        targets = []
        for item in self.sets:
            if isinstance(item, Target):
                targets.append(item)
                continue
            if item not in modules:
                raise ValueError(f"patch {self.name}: {item} is not one of its binding's sources")
            owner, _, attr = item.rpartition(".")
            targets.append(Target(modules[item], owner, attr))
        return tuple(targets)


@dataclass(frozen=True)
class Build:
    """A plan: when vLLM's sources of the patch's binding are a known variant
    (``found``, or checked then), bind ``make(match, originals)``; otherwise
    keep vLLM's (``kept``: what stays, said once at ``level``). ``said``: a
    line logged at INFO once it is bound, ``{VLLM}`` in it replaced by
    vLLM's version (read then: a plan is made before vLLM's sources are
    checked, and may be made where vLLM cannot be imported)."""

    make: Callable[[fingerprint.Match, tuple[Any, ...]], tuple[Any, ...]]
    kept: str
    level: int = logging.WARNING
    found: fingerprint.Match | None = None
    said: str = ""


@dataclass(frozen=True)
class Bind:
    """A plan that binds ``values`` whatever vLLM's sources are: only for
    wrappers that call vLLM's own attribute and add nothing to its answer
    (the lookup timer of mode off). ``said`` as in ``Build``."""

    values: tuple[Any, ...]
    said: str = ""


@dataclass(frozen=True)
class Refusal:
    """A plan that keeps vLLM's attributes: ``reason``, said once at
    ``level`` with ``kept`` (no line when ``kept`` is empty)."""

    reason: str
    kept: str = ""
    level: int = logging.INFO


# What a patch module answers for one record; None: not tried now (the
# patch rests on another one that is off), its state left as it is.
Plan = Build | Bind | Refusal | None


@dataclass
class PatchState:
    """What one patch did in this process."""

    installed: bool = False
    reason: str = ""  # why it is not installed ("" when it is, or never tried)
    originals: tuple[Any, ...] = ()  # vLLM's attributes it replaced, as in ``binds``
    bound: tuple[Any, ...] = ()  # what it put in their place


# In the order they are installed (``install_all``): the opt-in parts
# first, each on its own setting; then the lookups, the sliding-window
# lookup first (the others rest on what it chose), the lookup memory last
# (it wraps the coordinators' lookups, whose managers' lookups are ours by
# then).
PATCHES: tuple[Patch, ...] = (
    Patch(
        fingerprint.OFFLOAD_FILTER, "KV-offload store filter",
        ("OffloadingConnectorScheduler._reachable_store_block_mask",
         "OffloadingConnectorScheduler._lookup"),
        "the KV-offload store filter of sliding-window groups, by one that keeps every "
        "chunk the lookup reads, and pins the junction the tier's full-attention hit finds",
        settings.OFFLOAD_FILTER, opt_in=True,
    ),
    Patch(
        fingerprint.DP_ROUTING, "data-parallel front end",
        ("DPLBAsyncMPClient.get_core_engine_for_request",
         Target("vllm.v1.engine.core", "EngineCore", "swa_prefix_cache_layout")),
        "the data-parallel front end's choice of engine by load, by exact prefix-cache hit "
        "weighed against load",
        settings.DP_ROUTING, opt_in=True,
    ),
    Patch(
        fingerprint.SLIDING_WINDOW, "sliding-window lookup",
        ("SlidingWindowManager.find_longest_cache_hit",),
        "the right-to-left scan of a sliding-window group, by the proved stride search",
        settings.MODE,
    ),
    Patch(
        fingerprint.POOL_READ, "BlockPool read", (),
        "each probe's call of BlockPool.get_cached_block, by a read of the pool's hash map",
        settings.MODE, part_of="sliding_window",
    ),
    Patch(
        fingerprint.FULL_ATTENTION, "full-attention lookup",
        ("FullAttentionManager.find_longest_cache_hit",),
        "the left-to-right scan of a full-attention group, by the proved full_hit",
        settings.MODE,
    ),
    Patch(
        fingerprint.OFFLOAD_LOOKUP, "KV-offload lookup",
        ("OffloadingConnectorScheduler._sliding_window_lookup",),
        "the KV-offload connector's chunk-by-chunk sliding-window scan, by the proved "
        "offload stride search",
        settings.MODE,
    ),
    Patch(
        fingerprint.OFFLOAD_PREFIX, "KV-offload full-attention lookup",
        ("OffloadingConnectorScheduler._maximal_prefix_lookup",),
        "the KV-offload connector's chunk-by-chunk full-attention scan, by an inline read "
        "of the CPU manager's policy",
        settings.MODE,
    ),
    Patch(
        fingerprint.OFFLOAD_KEYS, "KV-offload request keys",
        ("RequestOffloadState.update_offload_keys",),
        "the KV-offload connector's key-by-key loop over a request's new chunks, by one "
        "that builds each group's keys at once",
        settings.MODE,
    ),
    Patch(
        fingerprint.LOOKUP_MEMO, "lookup memory",
        ("HybridKVCacheCoordinator.find_longest_cache_hit",),
        "a hybrid coordinator's repeated lookup of an unchanged request, by its remembered answer",
        settings.LOOKUP_MEMO,
    ),
)

BY_NAME: dict[str, Patch] = {patch.name: patch for patch in PATCHES}

_states: dict[str, PatchState] = {patch.name: PatchState() for patch in PATCHES}


@dataclass
class Counters:
    """What a replacing patch did with its calls (``status_of``)."""

    calls: int = 0  # calls of the replaced method
    answered: int = 0  # answered by the plugin's code
    delegated: int = 0  # handed to vLLM's own code (an input or object outside the model)


def state(name: str) -> PatchState:
    return _states[name]


def status_of(name: str, counters: Counters) -> dict[str, Any]:
    """A replacing patch's ``status()`` record: its state and counts."""
    found = _states[name]
    return {
        "installed": found.installed,
        "reason": found.reason,
        "calls": counters.calls,
        "answered": counters.answered,
        "delegated": counters.delegated,
    }


def is_installed(name: str) -> bool:
    return _states[name].installed


def original(name: str, index: int = 0) -> Any:
    """vLLM's attribute the installed patch replaced (``binds[index]``), or
    the class's own attribute now when the patch is not installed."""
    with lock:
        found = _states[name]
        if found.installed:
            return found.originals[index]
        return BY_NAME[name].binds[index].current()


def bind(name: str, *values: Any) -> None:
    """Set the patch's attributes to ``values`` (in the order of its
    ``binds``) and remember vLLM's. Replaces an installed binding of the
    same patch (its originals are kept)."""
    patch = BY_NAME[name]
    if len(values) != len(patch.binds):
        raise ValueError(f"bind({name!r}): {len(values)} values for {len(patch.binds)} targets")
    with lock:
        found = _states[name]
        # Every owner is imported before the first attribute is set, so a
        # module that cannot be imported leaves all of them vLLM's.
        owners = [target.owner_class() for target in patch.binds]
        if not found.installed:
            found.originals = tuple(target.current() for target in patch.binds)
        for value in found.bound:
            fingerprint.disown(value)
        for owner, target, value, replaced in zip(owners, patch.binds, values, found.originals):
            setattr(owner, target.attr, value)
            fingerprint.own(value, replaced)
        found.installed, found.reason, found.bound = True, "", tuple(values)


def refuse(name: str, reason: str, kept: str = "", level: int = logging.INFO) -> bool:
    """Record why the patch stays off and say it once in the log at
    ``level`` (``kept``: what serves instead; no line when empty). False."""
    with lock:
        _states[name].reason = reason
    if kept:
        logger.log(level, "swa-prefix-cache: %s; %s", reason, kept)
    return False


def install(name: str, build: Callable[[fingerprint.Match, tuple[Any, ...]], tuple[Any, ...]],
            kept: str, level: int = logging.WARNING,
            found: fingerprint.Match | None = None) -> bool:
    """The one installer: when vLLM's sources of the patch's binding are a
    known variant (``found``, or checked now), ``build(match, originals)``
    makes the replacements from vLLM's attributes now and they are bound;
    otherwise vLLM's stay, with the reason recorded and logged once at
    ``level`` (``kept``: what stays). Returns whether the patch is
    installed. Never raises."""
    patch = BY_NAME[name]
    with lock:
        if _states[name].installed:
            return True
        try:
            found = fingerprint.check(patch.binding) if found is None else found
            if found.foreign:  # another plugin's or a profiler's: keep it, and vLLM's code under it
                return refuse(
                    name,
                    f"the {patch.label} steps aside in vLLM {fingerprint.installed_version()}: "
                    f"{found.replaced_by()}",
                    kept, logging.WARNING,
                )
            if not found.known:
                return refuse(
                    name,
                    f"unknown {patch.label} in vLLM {fingerprint.installed_version()} "
                    f"(changed: {', '.join(found.changed)})",
                    kept, level,
                )
            originals = tuple(target.current() for target in patch.binds)
            bind(name, *build(found, originals))
        except Exception as exc:  # vLLM, or a module the patch needs, not importable
            return refuse(name, f"cannot patch the {patch.label}: {exc!r}", kept, logging.WARNING)
        return True


def apply(name: str, plan: Plan) -> bool:
    """Carry out one record's plan. Whether the patch is installed. Never
    raises but for a plan that is none of the kinds (a bug)."""
    with lock:
        if plan is None or _states[name].installed:
            return _states[name].installed
        if isinstance(plan, Refusal):
            return refuse(name, plan.reason, plan.kept, plan.level)
        if isinstance(plan, Bind):
            try:
                bind(name, *plan.values)
            except Exception as exc:  # vLLM not importable
                return refuse(name, f"cannot patch the {BY_NAME[name].label}: {exc!r}",
                              "vLLM's own code stays", logging.WARNING)
        elif isinstance(plan, Build):
            if not install(name, plan.make, plan.kept, plan.level, plan.found):
                return False
        else:
            raise TypeError(f"apply({name!r}): plan is {type(plan).__name__}, not a registry plan")
        if plan.said:
            said = plan.said.replace("{VLLM}", fingerprint.installed_version())
            logger.info("swa-prefix-cache: %s", said)
        return True


def install_all(plans: Mapping[str, Callable[[], Plan]]) -> None:
    """The plugin's installation: each record in the order of ``PATCHES``
    that is not yet installed gets its plan now (``plans[name]()``, so a
    plan sees what the records before it did) and the plan is carried out.
    A record that is ``part_of`` another is decided by that one's build.
    Every other record must have a plan: a record added without one is a
    ValueError here, not a patch that silently never installs. A plan that
    raises keeps vLLM's code for its record (said once)."""
    missing = [patch.name for patch in PATCHES if not patch.part_of and patch.name not in plans]
    if missing:
        raise ValueError(f"install_all: no plan for {', '.join(missing)}")
    with lock:
        for patch in PATCHES:
            if patch.part_of or _states[patch.name].installed:
                continue
            try:
                plan = plans[patch.name]()
            except Exception as exc:  # a module the plan reads not importable
                plan = Refusal(f"cannot plan the {patch.label}: {exc!r}", "vLLM's own code stays",
                               logging.WARNING)
            apply(patch.name, plan)


def uninstall(name: str) -> bool:
    """Put vLLM's attributes back where the patch's own object is still the
    one in place; where other code has since replaced or wrapped it, leave
    that code in place and say so (the reason records it). Whether the
    patch was installed. The reason a refused patch gave stays."""
    patch = BY_NAME[name]
    with lock:
        found = _states[name]
        if not found.installed:
            return False
        left = []
        for target, value, mine in zip(patch.binds, found.originals, found.bound):
            owner = target.owner_class()
            fingerprint.disown(mine)
            now = target.current()
            if now is not mine:
                left.append(f"{target.name} (now {fingerprint.foreign_owner(now) or 'not the plugin'})")
                continue
            if value is ABSENT:
                delattr(owner, target.attr)
            else:
                setattr(owner, target.attr, value)
        found.installed, found.originals, found.bound = False, (), ()
        if left:
            found.reason = f"uninstalled; left in place, replaced after install by other code: {', '.join(left)}"
            logger.warning("swa-prefix-cache: %s: %s", patch.name, found.reason)
        return True


def rows() -> list[dict[str, Any]]:
    """Each patch as ``status()`` and ``qualify`` show it."""
    with lock:
        return [
            {
                "patch": patch.name,
                "label": patch.label,
                "binds": [target.name for target in patch.binds],
                "replaces": patch.replaces,
                "setting": patch.setting.name,
                "opt_in": patch.opt_in,
                "part_of": patch.part_of,
                "installed": _states[patch.name].installed,
                "reason": _states[patch.name].reason,
            }
            for patch in PATCHES
        ]
