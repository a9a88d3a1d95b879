"""Bind each patch to the vLLM code whose semantics we have proved equal.

Each patch replicates the semantics of a handful of vLLM functions (its
*binding*). Every one of them is fingerprinted by its syntax tree, docstrings
dropped (swa_prefix_cache/vllm_adapter/source_tree.py), and a patch applies only when the
installed functions' fingerprints together equal one *variant* of that
binding that was checked: read against pyspec and tested with the
differential suites in a venv of a vLLM release that has it
(swa_prefix_cache/vllm_adapter/known_sources.py lists the variants and those releases; it is
written by scripts/fingerprint_releases.py from the releases' wheels).

So a future vLLM release whose replicated code is unchanged (docstring,
comment or layout edits aside) keeps the plugin on, whatever its version
string, and any change of code in one of them leaves that patch off, said
once in the log, with the functions that changed (``python -m swa_prefix_cache
qualify`` prints them).

Adding a variant: check the changed sources against pyspec (the module each
binding's docstring names), run the binding's tests in a venv of that
release (make matrix-vllm), add the release to
scripts/fingerprint_releases.py's list and regenerate known_sources.py.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from swa_prefix_cache.vllm_adapter.source_tree import file_digests, object_digest


@dataclass(frozen=True)
class Source:
    """One replicated vLLM definition: where it lives and the name the
    tables use for it. ``called``: the patch only calls it through the
    class's attribute, at call time, so a wrapper put there by other code
    is honoured and does not make the patch step aside."""

    name: str
    module: str
    qualname: str
    called: bool = False

    def resolve(self) -> Any:
        """The live object (imports its module)."""
        obj: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            # __dict__ first, so a classmethod is found as itself.
            obj = vars(obj)[part] if part in vars(obj) else getattr(obj, part)
        return obj

    def path_in(self, root: Path) -> Path:
        """The module's file under a source tree such as an unpacked wheel."""
        return Path(root, *self.module.split(".")).with_suffix(".py")


@dataclass(frozen=True)
class Binding:
    """The sources one patch replicates, and what its docstring says."""

    name: str
    doc: str
    sources: tuple[Source, ...]


_SWA = "vllm.v1.core.single_type_kv_cache_manager"
_POOL = "vllm.v1.core.block_pool"
_UTILS = "vllm.v1.core.kv_cache_utils"
_MATH = "vllm.utils.math_utils"
_OFFLOAD_SCHED = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler"
_OFFLOAD_EVENTS = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.events"
_OFFLOAD_CONFIG = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.config"


def _src(module: str, qualname: str, called: bool = False) -> Source:
    return Source(qualname, module, qualname, called)


SLIDING_WINDOW = Binding(
    "sliding_window",
    "SlidingWindowManager.find_longest_cache_hit, modelled by swa_prefix_cache/pyspec/legacy.py",
    (
        _src(_SWA, "SlidingWindowManager.find_longest_cache_hit"),
        _src(_SWA, "SlidingWindowManager._contiguous_blocks_for_hit"),
        _src(_POOL, "BlockPool.get_cached_block", called=True),
        _src(_UTILS, "resolve_block_hashes"),
        _src(_MATH, "cdiv"),
    ),
)

# The one-group probe reads BlockPool's hash map inline, the way these
# functions do, and the native probe reads the block-size view of the
# hashes directly (block i is ``block_hashes[(i + 1) * scale_factor - 1]``).
# A vLLM without a match is still patched, but probes through
# ``BlockPool.get_cached_block`` itself.
POOL_READ = Binding(
    "pool_read",
    "BlockPool's hash-map read, inlined by the probes",
    (
        _src(_POOL, "BlockPool.get_cached_block"),
        _src(_POOL, "BlockHashToBlockMap.__init__"),
        _src(_POOL, "BlockHashToBlockMap.get_one_block"),
        _src(_UTILS, "make_block_hash_with_group_id"),
        _src(_UTILS, "BlockHashListWithBlockSize.__init__"),
        _src(_UTILS, "BlockHashListWithBlockSize.__len__"),
        _src(_UTILS, "BlockHashListWithBlockSize._get_value_at"),
    ),
)

FULL_ATTENTION = Binding(
    "full_attention",
    "FullAttentionManager.find_longest_cache_hit, modelled by swa_prefix_cache/pyspec/full.py",
    (
        _src(_SWA, "FullAttentionManager.find_longest_cache_hit"),
        _src(_POOL, "BlockPool.get_cached_block", called=True),
        _src(_UTILS, "resolve_block_hashes"),
        _src(_UTILS, "BlockHashListWithBlockSize.__init__"),
        _src(_UTILS, "BlockHashListWithBlockSize.__iter__"),
        _src(_UTILS, "BlockHashListWithBlockSize.__getitem__"),
        _src(_MATH, "cdiv"),
    ),
)

# Replaced only for managers whose lookup is a pure read that never answers
# RETRY (CPUOffloadingManager with LRU or ARC): the purity rests on the
# manager's lookup, the policies' get and the chunk's is_ready.
OFFLOAD_LOOKUP = Binding(
    "offload_lookup",
    "OffloadingConnectorScheduler._sliding_window_lookup, modelled by swa_prefix_cache/pyspec/offload_lookup.py",
    (
        _src(_OFFLOAD_SCHED, "OffloadingConnectorScheduler._sliding_window_lookup"),
        _src("vllm.v1.kv_offload.cpu.manager", "CPUOffloadingManager.lookup"),
        _src("vllm.v1.kv_offload.cpu.policies.lru", "LRUCachePolicy.get"),
        _src("vllm.v1.kv_offload.cpu.policies.arc", "ARCCachePolicy.get"),
        # Whole: the search reads its ref_cnt field inline (is_ready's test).
        _src("vllm.v1.kv_offload.cpu.policies.base", "ChunkStatus"),
        _src("vllm.v1.kv_offload.base", "LookupResult"),
    ),
)

# The full-attention groups' offload lookup, read inline for the same pure
# managers while the events tracker's record_lookup returns at once
# (swa_prefix_cache/vllm_adapter/connector_lookup.py).
OFFLOAD_PREFIX = Binding(
    "offload_prefix",
    "OffloadingConnectorScheduler._maximal_prefix_lookup, modelled by "
    "swa_prefix_cache/pyspec/offload_lookup.py's offload_prefix_lookup",
    (
        _src(_OFFLOAD_SCHED, "OffloadingConnectorScheduler._maximal_prefix_lookup"),
        _src(_OFFLOAD_EVENTS, "OffloadingEventsTracker.__init__"),
        _src(_OFFLOAD_EVENTS, "OffloadingEventsTracker.record_lookup"),
        _src("vllm.v1.kv_offload.cpu.manager", "CPUOffloadingManager.lookup"),
        _src("vllm.v1.kv_offload.cpu.policies.lru", "LRUCachePolicy.get"),
        _src("vllm.v1.kv_offload.cpu.policies.arc", "ARCCachePolicy.get"),
        _src("vllm.v1.kv_offload.cpu.policies.base", "ChunkStatus"),
        _src("vllm.v1.kv_offload.base", "LookupResult"),
        # What a ready chunk's life depends on, whole: the remembered ready
        # runs (connector_lookup._make_prefix_answer) hold while the manager
        # is not full and not reset.
        _src("vllm.v1.kv_offload.cpu.manager", "CPUOffloadingManager"),
        _src("vllm.v1.kv_offload.cpu.policies.lru", "LRUCachePolicy"),
        _src("vllm.v1.kv_offload.cpu.policies.arc", "ARCCachePolicy"),
    ),
)

# The request's offload keys, built a group at a time for vLLM's own
# request context (swa_prefix_cache/vllm_adapter/offload_keys.py).
OFFLOAD_KEYS = Binding(
    "offload_keys",
    "RequestOffloadState.update_offload_keys, rewritten a group at a time",
    (
        _src(_OFFLOAD_SCHED, "RequestOffloadState.update_offload_keys"),
        _src("vllm.v1.kv_offload.base", "make_offload_key"),
        _src("vllm.v1.kv_offload.base", "ReqContext"),
    ),
)

# The opt-in corrected store filter replaces _reachable_store_block_mask;
# its model (swa_prefix_cache/pyspec/offload.py) transcribes the offload lookup and the store
# path, so all of these are bound.
OFFLOAD_FILTER = Binding(
    "offload_filter",
    "OffloadingConnectorScheduler._reachable_store_block_mask, modelled by swa_prefix_cache/pyspec/offload.py",
    (
        _src(_OFFLOAD_SCHED, "OffloadingConnectorScheduler._reachable_store_block_mask"),
        _src(_OFFLOAD_SCHED, "OffloadingConnectorScheduler._build_store_jobs"),
        _src(_OFFLOAD_SCHED, "OffloadingConnectorScheduler._lookup_complete_chunks"),
        _src(_OFFLOAD_SCHED, "OffloadingConnectorScheduler._sliding_window_lookup"),
        _src(_OFFLOAD_SCHED, "OffloadingConnectorScheduler._maximal_prefix_lookup"),
        _src(_OFFLOAD_SCHED, "OffloadingConnectorScheduler._lookup"),
        _src(_OFFLOAD_SCHED, "OffloadingConnectorScheduler.__init__"),
        _src(_OFFLOAD_SCHED, "GroupOffloadConfig.load_window_size_in_chunks"),
        _src(_OFFLOAD_SCHED, "SchedulerOffloadConfig.from_spec"),
        _src(_OFFLOAD_SCHED, "RequestOffloadState.update_offload_keys"),
        _src(_OFFLOAD_SCHED, "RequestOffloadState.storable_chunks"),
        _src(_OFFLOAD_CONFIG, "get_sliding_window_size_in_chunks"),
        _src(_MATH, "cdiv"),
    ),
)

# The opt-in data-parallel routing runs vLLM's engine choice and then moves
# the bookkeeping it wrote (local waiting count, in-flight count, abort
# map); swa_prefix_cache/kv_index/balance.py transcribes its load score. The bookkeeping is
# set up in __init__ and unwound in process_engine_outputs.
_CLIENT = "vllm.v1.engine.core_client"
DP_ROUTING = Binding(
    "dp_routing",
    "DPLBAsyncMPClient.get_core_engine_for_request, its load score in swa_prefix_cache/kv_index/balance.py",
    (
        _src(_CLIENT, "DPLBAsyncMPClient.get_core_engine_for_request"),
        _src(_CLIENT, "DPLBAsyncMPClient.process_engine_outputs"),
        _src(_CLIENT, "DPLBAsyncMPClient.__init__"),
    ),
)

# The lookup memory (swa_prefix_cache/vllm_adapter/lookup_memo.py) answers a hybrid
# coordinator's repeated lookup from memory: exact while every lookup reads
# the pools' maps only at the request's hashes (the coordinator, each manager's
# lookup, the pool's read and the key layout), every map write goes through
# the map's insert / pop or a new map (the pool's writers), and a request's
# hashes only grow or have a suffix recomputed (update_block_hashes).
_COORD = "vllm.v1.core.kv_cache_coordinator"
LOOKUP_MEMO = Binding(
    "lookup_memo",
    "HybridKVCacheCoordinator.find_longest_cache_hit, answered from memory (swa_prefix_cache/vllm_adapter/lookup_memo.py)",
    (
        _src(_COORD, "HybridKVCacheCoordinator.find_longest_cache_hit"),
        _src(_SWA, "FullAttentionManager.find_longest_cache_hit"),
        _src(_SWA, "SlidingWindowManager.find_longest_cache_hit"),
        _src(_SWA, "CircularBufferManager.find_longest_cache_hit"),
        _src(_SWA, "ChunkedLocalAttentionManager.find_longest_cache_hit"),
        _src(_SWA, "MambaManager.find_longest_cache_hit"),
        _src(_SWA, "CrossAttentionManager.find_longest_cache_hit"),
        _src(_SWA, "_HiSparseAuxiliaryManager.find_longest_cache_hit"),
        _src(_POOL, "BlockPool.get_cached_block"),
        _src(_POOL, "BlockPool._insert_block_hash"),
        _src(_POOL, "BlockPool._remove_cached_block_hashes"),
        _src(_POOL, "BlockPool.reset_prefix_cache"),
        _src(_POOL, "BlockHashToBlockMap.__init__"),
        _src(_POOL, "BlockHashToBlockMap.get_one_block"),
        _src(_POOL, "BlockHashToBlockMap.contain"),
        _src(_POOL, "BlockHashToBlockMap.insert"),
        _src(_POOL, "BlockHashToBlockMap.pop"),
        _src(_UTILS, "make_block_hash_with_group_id"),
        _src(_UTILS, "resolve_block_hashes"),
        _src(_UTILS, "BlockHashListWithBlockSize._get_value_at"),
        _src("vllm.v1.request", "Request.update_block_hashes"),
    ),
)

BINDINGS: tuple[Binding, ...] = (
    SLIDING_WINDOW, POOL_READ, FULL_ATTENTION, OFFLOAD_LOOKUP, OFFLOAD_PREFIX, OFFLOAD_KEYS,
    OFFLOAD_FILTER, DP_ROUTING,
    LOOKUP_MEMO,
)


# The plugin's own replacements, each with the object it replaced
# (registry.bind and registry.uninstall keep this): a source the plugin has
# replaced is read through to vLLM's object.
_ours: dict[int, tuple[Any, Any]] = {}


def own(value: Any, replaced: Any) -> None:
    """``value`` is the plugin's, put where ``replaced`` was."""
    _ours[id(value)] = (value, replaced)


def disown(value: Any) -> None:
    entry = _ours.get(id(value))
    if entry is not None and entry[0] is value:
        del _ours[id(value)]


def _through_ours(obj: Any) -> Any:
    """``obj``, or what the plugin's own replacement ``obj`` replaced."""
    for _ in range(16):
        entry = _ours.get(id(obj))
        if entry is None or entry[0] is not obj:
            break
        obj = entry[1]
    return obj


def _vllm_dir() -> str:
    import os

    import vllm

    return os.path.realpath(os.path.dirname(vllm.__file__)) + os.sep


def foreign_owner(obj: Any) -> str | None:
    """Who put ``obj`` (a source's live object, the plugin's own read
    through) where vLLM defines it, when that is not vLLM: the file of a
    wrapper or replacement defined outside vLLM's package, or the type of a
    callable object that is not vLLM's. None for vLLM's own object."""
    import os

    fn = _through_ours(obj)
    if isinstance(fn, (classmethod, staticmethod)):
        fn = fn.__func__
    if isinstance(fn, property):
        fn = fn.fget
    if isinstance(fn, type):
        return None
    code = getattr(fn, "__code__", None)
    if code is None:
        module = getattr(type(fn), "__module__", "") or ""
        return None if module.split(".")[0] == "vllm" else f"{module}.{type(fn).__qualname__}"
    if os.path.realpath(code.co_filename).startswith(_vllm_dir()):
        return None
    return code.co_filename


def foreign_sources(binding: Binding) -> dict[str, str]:
    """The sources of ``binding`` that other code has replaced or wrapped
    (a source marked ``called`` is honoured through its attribute and never
    listed), with whose they are now (``foreign_owner``)."""
    foreign: dict[str, str] = {}
    for source in binding.sources:
        if source.called:
            continue
        try:
            owner = foreign_owner(source.resolve())
        except Exception:  # moved or renamed: the digests say it
            continue
        if owner is not None:
            foreign[source.name] = owner
    return foreign


def installed_digests(binding: Binding, foreign: dict[str, str] | None = None) -> dict[str, str | None]:
    """Each source's fingerprint in the installed vLLM (None where it
    cannot be found or read, or where other code has replaced or wrapped
    it: ``foreign``, ``foreign_sources`` when not given), the plugin's own
    replacements read through."""
    if foreign is None:
        foreign = foreign_sources(binding)
    digests: dict[str, str | None] = {}
    for source in binding.sources:
        if source.name in foreign:
            digests[source.name] = None
            continue
        try:
            digests[source.name] = object_digest(_through_ours(source.resolve()))
        except Exception:  # moved, renamed, or no source: not the known code
            digests[source.name] = None
    return digests


def release_digests(binding: Binding, root: Path) -> dict[str, str | None]:
    """Each source's fingerprint in an unpacked release (not imported)."""
    digests: dict[str, str | None] = {}
    for source in binding.sources:
        path = source.path_in(root)
        digests[source.name] = (
            file_digests(path, [source.qualname])[source.qualname] if path.exists() else None
        )
    return digests


# A variant's ``semantics``: what the patch does differently there.
# vLLM 0.28/0.29 assert, in SlidingWindowManager.find_longest_cache_hit,
# that alignment_tokens is a multiple of the block size (fine-grained hits
# came in 0.30); the patch hands such lookups to vLLM's own method.
BLOCK_ALIGNED_ONLY = "block_aligned_only"
# pool_read: the hash map's ``_cache`` holds block ids and the block is
# ``_blocks[id]`` (vLLM 0.34's BlockHashToBlockMap); "" there: the value is
# the block itself, or a dict of them.
BLOCK_IDS = "block_ids"
# offload_filter: ``OffloadingConnectorScheduler._lookup`` pins the
# junction the tier's full-attention hit finds itself (vLLM 0.34's
# ``_maybe_register_shared_prefix_junction``), so the patch leaves it
# vLLM's; "" there: the patch adds that rule (swa_prefix_cache/vllm_adapter/offload_filter.py).
JUNCTION_PINNED = "junction_pinned"
SEMANTICS = ("", BLOCK_ALIGNED_ONLY, BLOCK_IDS, JUNCTION_PINNED)


@dataclass(frozen=True)
class Match:
    """How the installed sources of one binding compare with the known
    variants. ``variant`` is the matching variant's name (its releases), or
    None; ``changed`` names the sources that differ from the nearest known
    variant (or cannot be read)."""

    binding: str
    variant: str | None
    releases: tuple[str, ...] = ()
    semantics: str = ""
    changed: tuple[str, ...] = ()
    digests: dict[str, str | None] = field(default_factory=dict)
    # Sources other code has replaced or wrapped, with whose they are now.
    foreign: tuple[tuple[str, str], ...] = ()

    @property
    def known(self) -> bool:
        return self.variant is not None

    def describe(self) -> str:
        """One line for the log."""
        if self.known:
            return f"{self.binding}: known code (as in vLLM {', '.join(self.releases)})"
        if self.foreign:
            return f"{self.binding}: {self.replaced_by()}"
        return f"{self.binding}: unknown code, changed: {', '.join(self.changed) or '?'}"

    def replaced_by(self) -> str:
        """The sources other code has replaced or wrapped, and by whom."""
        return "; ".join(f"{name} is replaced or wrapped by {owner}" for name, owner in self.foreign)


def match(binding: Binding, digests: dict[str, str | None]) -> Match:
    """Compare ``digests`` with the known variants of ``binding``."""
    from swa_prefix_cache.vllm_adapter.known_sources import VARIANTS

    best: tuple[int, tuple[str, ...]] | None = None
    for variant in VARIANTS.get(binding.name, ()):
        changed = tuple(
            s.name for s in binding.sources if digests.get(s.name) is None
            or digests[s.name] != variant["digests"].get(s.name)
        )
        if not changed:
            return Match(binding.name, variant["name"], tuple(variant["releases"]),
                         variant["semantics"], (), digests)
        if best is None or len(changed) < best[0]:
            best = (len(changed), changed)
    changed = best[1] if best else tuple(s.name for s in binding.sources)
    return Match(binding.name, None, (), "", changed, digests)


def check(binding: Binding) -> Match:
    """The installed vLLM against the known variants of ``binding``; a
    source that other code has replaced or wrapped is not the known code."""
    foreign = foreign_sources(binding)
    found = match(binding, installed_digests(binding, foreign))
    if foreign:
        found = replace(found, foreign=tuple(sorted(foreign.items())))
    return found


def installed_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))
