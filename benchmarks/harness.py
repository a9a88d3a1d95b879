"""What the benches put on vLLM's classes and how they check it: vLLM's own
lookups (taken before any install), ours as the plugin's ``install()``
builds them from the environment, the other core, each as a ``Patch`` (the
sliding-window and the full-attention lookup together); ``use`` puts one in
place, ``call_checked`` fails unless the native core answered in C, and
``same_result`` is vLLM's answer with the very same block objects.
``Planter`` plants masks into one real ``BlockPool``.

Shared by bench_vllm.py's rows, bench_interpreters.py and the trace replay
(replay.py)."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _path in (str(ROOT), str(ROOT / "tests")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from swa_prefix_cache import vllm_adapter  # noqa: E402
from benchmarks.seed_table import SEED_BLOCK_SIZE  # noqa: E402
from swa_prefix_cache.vllm_adapter import patch as adapter_patch  # noqa: E402
from vllm_support import count_native, make_block_hashes, make_block_pool, make_spec  # noqa: E402

from vllm.v1.core.kv_cache_coordinator import HybridKVCacheCoordinator  # noqa: E402
from vllm.v1.core.kv_cache_utils import BlockHash, make_block_hash_with_group_id  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import (  # noqa: E402
    FullAttentionManager,
    SlidingWindowManager,
)

BS = SEED_BLOCK_SIZE
ATTR = "find_longest_cache_hit"
ORIGINAL = SlidingWindowManager.__dict__[ATTR]  # vLLM's own, before any install
FULL_ORIGINAL = FullAttentionManager.__dict__[ATTR]  # vLLM's own full-attention lookup
# The hybrid coordinator's lookup, vLLM's own (the lookup memory wraps it).
HYBRID_ORIGINAL = HybridKVCacheCoordinator.__dict__[ATTR]
# The KV-offload connector's sliding-window and full-attention scans, vLLM's
# own (None on a vLLM without the offloading connector).
OFFLOAD_ATTR = "_sliding_window_lookup"
OFFLOAD_PREFIX_ATTR = "_maximal_prefix_lookup"
# The request's offload keys (run inside the connector's lookup), vLLM's own.
KEYS_ATTR = "update_offload_keys"
try:
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (  # noqa: E402
        OffloadingConnectorScheduler,
        RequestOffloadState,
    )
except ImportError:  # an older vLLM: no offloading scheduler to patch
    OffloadingConnectorScheduler = RequestOffloadState = None


def _current(cls: Any, attr: str) -> Any:
    """``cls.attr`` as it is now (None without the class or the attribute:
    an older vLLM)."""
    return None if cls is None else cls.__dict__.get(attr)


OFFLOAD_ORIGINAL = _current(OffloadingConnectorScheduler, OFFLOAD_ATTR)
OFFLOAD_PREFIX_ORIGINAL = _current(OffloadingConnectorScheduler, OFFLOAD_PREFIX_ATTR)
KEYS_ORIGINAL = _current(RequestOffloadState, KEYS_ATTR)


CORES = ("native", "python")


@dataclass(frozen=True)
class Patch:
    """What one implementation puts on vLLM's classes: the sliding-window
    lookup and the full-attention lookup (vLLM's own ``FULL_ORIGINAL`` when
    that core does not replace it: the python core, or vLLM itself), the
    hybrid coordinator's lookup (vLLM's own unless the lookup memory is on)
    and the KV-offload connector's sliding-window and full-attention lookups
    and its request keys (vLLM's own unless given: the host-tier replay)."""

    swa: Any
    full: Any
    hybrid: Any = HYBRID_ORIGINAL
    offload: Any = OFFLOAD_ORIGINAL
    offload_prefix: Any = OFFLOAD_PREFIX_ORIGINAL
    offload_keys: Any = KEYS_ORIGINAL

    @property
    def full_replaced(self) -> bool:
        return self.full is not FULL_ORIGINAL


VLLM_PATCH = Patch(ORIGINAL, FULL_ORIGINAL)


def _captured() -> Patch:
    """What the plugin has put on the classes right now."""
    return Patch(SlidingWindowManager.__dict__[ATTR], FullAttentionManager.__dict__[ATTR],
                 HybridKVCacheCoordinator.__dict__[ATTR], _current(OffloadingConnectorScheduler, OFFLOAD_ATTR),
                 _current(OffloadingConnectorScheduler, OFFLOAD_PREFIX_ATTR),
                 _current(RequestOffloadState, KEYS_ATTR))


@dataclass
class Impls:
    """The ``Patch`` objects (both lookups) to put on vLLM's classes in turn."""

    table: dict[str, Patch]  # "vllm", "ours" and, when measured, the other core's name
    backend: str  # the core of "ours"
    other: str | None  # the other core (a key of ``table``), None without an extra column
    other_error: str | None  # why the other core is not measured, if it is not
    native_error: str | None  # ours was native but broke on its first call
    # Ours as install() leaves vLLM, the lookup memory on the coordinator
    # included (the trace replay); the table's entries are the searches
    # alone, so that a row timing the same lookup again times a search.
    installed: Patch = VLLM_PATCH

    def core_of(self, name: str) -> str | None:
        """The core behind a timed name (None for vLLM)."""
        return {"vllm": None, "ours": self.backend}.get(name, name)


def _searches(patch: Patch) -> Patch:
    """``patch`` with vLLM's own coordinator and offload lookups (no
    lookup memory): the searches alone."""
    return replace(patch, hybrid=HYBRID_ORIGINAL, offload=OFFLOAD_ORIGINAL,
                   offload_prefix=OFFLOAD_PREFIX_ORIGINAL, offload_keys=KEYS_ORIGINAL)


def _choice(core: str) -> tuple[Any, str]:
    """What ``patch._choose_core`` returns for ``core``; raises when the
    extension cannot be loaded (rather than falling back to python)."""
    if core == "python":
        return None, "python"
    from swa_prefix_cache.core import hotpath

    return hotpath.load(), "native"


def _install_forced(core: str) -> Any:
    """Ours on ``core`` (forced the way a test would monkeypatch it); the
    class is left as vLLM's."""
    chosen = _choice(core)
    saved = adapter_patch._choose_core
    adapter_patch._choose_core = lambda: chosen
    try:
        if not vllm_adapter.install(vllm_adapter.Mode.ON):
            raise SystemExit(f"plugin did not install with the {core} core")
        if vllm_adapter.status()["backend"] != core:
            raise SystemExit(f"forcing the {core} core gave {vllm_adapter.status()['backend']}")
        _check_full_status(core)
        return _searches(_captured())
    finally:
        vllm_adapter.uninstall()
        adapter_patch._choose_core = saved


def _check_full_status(core: str) -> None:
    """The native core must have replaced the full-attention lookup too
    (``status()["full_attention"]``), the python core must have left it."""
    full = vllm_adapter.status().get("full_attention", {})
    replaced = FullAttentionManager.__dict__[ATTR] is not FULL_ORIGINAL
    if bool(full.get("installed")) != replaced or replaced != (core == "native"):
        raise SystemExit(f"{core} core: full-attention lookup replaced={replaced}, status {full}")


def capture_impls() -> Impls:
    """vLLM's classmethods, ours as ``install()`` builds them from the
    environment, and ours on the other core."""
    if _captured() != VLLM_PATCH:
        raise SystemExit("vLLM is already patched; run in a fresh process")
    if not vllm_adapter.install(vllm_adapter.Mode.ON):
        raise SystemExit(f"plugin did not install: {vllm_adapter.status()['reason']}")
    backend = vllm_adapter.status()["backend"]
    _check_full_status(backend)
    installed = _captured()
    table = {"vllm": VLLM_PATCH, "ours": _searches(installed)}
    vllm_adapter.uninstall()
    native_error = other_error = None
    # An extension that loads but cannot serve fails on its first call:
    # measure python as ours then, with no other column.
    if backend == "native":
        try:
            _smoke(table["ours"], "native")
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            native_error = f"{type(exc).__name__}: {exc}"
            table["ours"] = _install_forced("python")
            installed = table["ours"]  # degraded: the python searches, no memory
            backend = "python"
            other_error = f"the native core fails: {native_error}"
    other: str | None = next(c for c in CORES if c != backend)
    if other_error is None:
        try:
            table[other] = _install_forced(other)
            _smoke(table[other], other)
        except Exception as exc:  # noqa: BLE001 - reported, not hidden
            table.pop(other, None)
            other_error = f"the {other} core cannot be used: {type(exc).__name__}: {exc}"
    if other_error is not None:
        other = None
    if _captured() != VLLM_PATCH:
        raise SystemExit("uninstall did not restore vLLM's methods")
    return Impls(table=table, backend=backend, other=other, other_error=other_error,
                 native_error=native_error, installed=installed)


def _smoke(impl: Any, core: str) -> None:
    """One lookup on ``impl``, which must agree with vLLM's (and, for the
    native core, be answered in C)."""
    hashes = make_block_hashes(8, b"smoke")
    planter = Planter(8)
    planter.plant(hashes, {0: [True] * 8})
    kwargs = dict(block_hashes=hashes, max_length=8 * BS, kv_cache_group_ids=[0],
                  block_pool=planter.pool, kv_cache_spec=make_spec(BS, 4 * BS),
                  drop_eagle_block=False, alignment_tokens=BS)
    with use(ORIGINAL):
        want = SlidingWindowManager.find_longest_cache_hit(**kwargs)
    got = call_checked(impl, core, lambda: SlidingWindowManager.find_longest_cache_hit(**kwargs))
    if not same_result(got, want):
        raise AssertionError(f"the {core} core disagrees with vLLM on a smoke lookup")


@contextmanager
def use(impl: Any) -> Iterator[None]:
    """Put ``impl`` on the classes for the duration (a ``Patch``: both
    lookups; a bare classmethod: the sliding-window lookup, vLLM's own
    full-attention lookup); vLLM's methods after."""
    patch = impl if isinstance(impl, Patch) else Patch(impl, FULL_ORIGINAL)
    SlidingWindowManager.find_longest_cache_hit = patch.swa
    FullAttentionManager.find_longest_cache_hit = patch.full
    HybridKVCacheCoordinator.find_longest_cache_hit = patch.hybrid
    if OFFLOAD_ORIGINAL is not None:
        setattr(OffloadingConnectorScheduler, OFFLOAD_ATTR, patch.offload)
        setattr(OffloadingConnectorScheduler, OFFLOAD_PREFIX_ATTR, patch.offload_prefix)
    if KEYS_ORIGINAL is not None:
        setattr(RequestOffloadState, KEYS_ATTR, patch.offload_keys)
    try:
        yield
    finally:
        SlidingWindowManager.find_longest_cache_hit = ORIGINAL
        FullAttentionManager.find_longest_cache_hit = FULL_ORIGINAL
        HybridKVCacheCoordinator.find_longest_cache_hit = HYBRID_ORIGINAL
        if OFFLOAD_ORIGINAL is not None:
            setattr(OffloadingConnectorScheduler, OFFLOAD_ATTR, OFFLOAD_ORIGINAL)
            setattr(OffloadingConnectorScheduler, OFFLOAD_PREFIX_ATTR, OFFLOAD_PREFIX_ORIGINAL)
        if KEYS_ORIGINAL is not None:
            setattr(RequestOffloadState, KEYS_ATTR, KEYS_ORIGINAL)


def call_checked(impl: Any, core: str | None, fn: Callable[[], Any], calls: int = 1) -> Any:
    """``fn()`` with ``impl`` on the class; for the native core, fail
    unless the extension answered in C, at least ``calls`` times, and handed
    nothing to its Python fallback
    (a delegated call would time the Python fallback under its name)."""
    with use(impl):
        if core != "native":
            return fn()
        with count_native() as counted:
            result = fn()
    if counted["delegated"] or counted["native"] < calls:
        raise AssertionError(f"the extension did not answer in C: {counted} for {calls} lookup(s)")
    return result


def same_result(a: Any, b: Any) -> bool:
    """Equal hit length and, per group, the very same block objects."""
    (blocks_a, len_a), (blocks_b, len_b) = a[:2], b[:2]
    return (
        len_a == len_b
        and a[2:] == b[2:]
        and len(blocks_a) == len(blocks_b)
        and all(
            len(x) == len(y) and all(p is q for p, q in zip(x, y))
            for x, y in zip(blocks_a, blocks_b)
        )
    )


class Planter:
    """One real ``BlockPool`` that many masks are planted into, each block a
    distinct pool block (identity checks can tell them apart), plus
    ``fill``: other cached blocks, so the hash map has a realistic size."""

    def __init__(self, capacity: int, pool: Any = None) -> None:
        self.pool = pool if pool is not None else make_block_pool(capacity + 1, BS)
        null = self.pool.null_block
        self._free = (b for b in self.pool.blocks if b is not null)

    def _insert(self, block_hash: Any, group: int) -> None:
        block = next(self._free, None)
        if block is None:
            raise ValueError("block pool too small for the planted blocks")
        self.pool.cached_block_hash_to_block.insert(
            make_block_hash_with_group_id(block_hash, group), block)

    def plant(self, hashes: Sequence[Any], group_masks: dict[int, Sequence[bool]]) -> None:
        for g, mask in group_masks.items():
            for i, present in enumerate(mask):
                if present:
                    self._insert(hashes[i], g)

    def fill(self, count: int, groups: Sequence[int], rng: random.Random) -> None:
        """``count`` blocks under random 32-byte hashes, spread over ``groups``."""
        for k in range(count):
            self._insert(BlockHash(rng.randbytes(32)), groups[k % len(groups)])
