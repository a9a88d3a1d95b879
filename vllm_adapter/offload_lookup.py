"""The replacement for ``OffloadingConnectorScheduler._sliding_window_lookup``
(the KV-offload connector's sliding-window lookup).

vLLM scans every chunk right to left, one ``manager.lookup(key)`` per
chunk. For a manager whose lookup is pure and never answers ``RETRY`` the
answer is a function of a three-valued chunk mask, and the proved stride
search (``offload_stride_search``: extracted_c/proved/offload_lookup.c through the
extension, or pyspec/offload_lookup.py with the python core) returns the
same value while asking the manager about ``N / W + 2W`` chunks.

Which managers: exactly vLLM's ``CPUOffloadingManager`` with its own
``lookup`` and an LRU or ARC policy with its own ``get`` (a dict read; the
chunk's ``is_ready`` property), as their sources were fingerprinted
(``fingerprint.OFFLOAD_LOOKUP``). Any other manager (the tiered
manager, whose lookup starts asynchronous work and answers ``RETRY``, a
custom one), any other policy, a patched method or an argument outside the
model is answered by vLLM's own scan. The per-call check is cheap: types and
identities. Same modes as the lookup patch (``SWA_PREFIX_CACHE_MODE``).
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_adapter import registry
from vllm_adapter.config import Mode

logger = logging.getLogger("vllm_adapter")

NAME = "offload_lookup"
_KEPT = "vLLM's own offload scan stays"


@dataclass
class _Counters:
    calls: int = 0  # calls of the replaced method
    answered: int = 0  # answered by the stride search
    delegated: int = 0  # answered by vLLM's own scan (manager or input not modelled)


_counters = _Counters()


class _Unsupported(Exception):
    """The manager answered something outside the three-valued model."""


def install(mode: Mode, hotpath: Any, on_error: Callable[[BaseException], None],
            on_shadow: Callable[[Any, Any, dict[str, Any]], None]) -> bool:
    """Patch the offload scheduler's sliding-window lookup if its sources and
    the pure managers' are known (registry.install); otherwise leave vLLM's
    own (said once). ``hotpath``: the extension module, or None for the
    python core. ``on_shadow(ours, theirs, detail)`` records a shadow
    comparison."""
    with registry.lock:
        if registry.is_installed(NAME):
            return True
        if mode is Mode.OFF:
            return registry.refuse(NAME, "mode off")

        def build(found: Any, originals: tuple[Any, ...]) -> tuple[Any, ...]:
            ours = _make_lookup(originals[0], hotpath, on_error)
            if mode is Mode.SHADOW:
                ours = _shadow(ours, originals[0], on_shadow)
            return (ours,)

        done = registry.install(NAME, build, _KEPT, logging.INFO)
        if done:
            logger.info(
                "swa-prefix-cache: KV-offload sliding-window lookup replaced (mode %s, %s core) "
                "for CPUOffloadingManager with LRU/ARC; other managers keep vLLM's scan",
                mode.value, "native" if hotpath is not None else "python",
            )
        return done


def uninstall() -> None:
    registry.uninstall(NAME)


def status() -> dict[str, Any]:
    found = registry.state(NAME)
    return {
        "installed": found.installed,
        "reason": found.reason,
        "calls": _counters.calls,
        "answered": _counters.answered,
        "delegated": _counters.delegated,
    }


def _make_lookup(original: Callable[..., Any], hotpath: Any,
                 on_error: Callable[[BaseException], None]) -> Callable[..., Any]:
    """The replacement method around vLLM's ``original``."""
    from vllm.v1.kv_offload.base import LookupResult
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager
    from vllm.v1.kv_offload.cpu.policies.arc import ARCCachePolicy
    from vllm.v1.kv_offload.cpu.policies.lru import LRUCachePolicy

    from pyspec.offload_lookup import offload_stride_search

    hit, pending, miss = LookupResult.HIT, LookupResult.HIT_PENDING, LookupResult.MISS
    lookup_fn = CPUOffloadingManager.__dict__["lookup"]
    policy_get = {LRUCachePolicy: LRUCachePolicy.__dict__["get"],
                  ARCCachePolicy: ARCCachePolicy.__dict__["get"]}
    chunk_of = {miss: 0, hit: 1, pending: 2}

    def pure_manager(manager: Any) -> bool:
        """The manager is vLLM's CPUOffloadingManager with an LRU or ARC
        policy, nothing patched: its lookup is a pure read, never RETRY."""
        policy = getattr(manager, "_policy", None)
        get = policy_get.get(type(policy))
        return (
            type(manager) is CPUOffloadingManager
            and CPUOffloadingManager.lookup is lookup_fn
            and "lookup" not in vars(manager)
            and get is not None
            and type(policy).get is get
            and "get" not in vars(policy)
        )

    def python_search(lookup: Callable[..., Any], keys: Any, req_context: Any,
                      window: int, initial: int) -> int | None:
        def chunk(i: int) -> int:
            answer = chunk_of.get(lookup(keys[i], req_context))
            if answer is None:
                raise _Unsupported
            return answer

        try:
            return offload_stride_search(chunk, len(keys), window, initial or None)
        except _Unsupported:
            return NotImplemented  # type: ignore[return-value]

    search = hotpath.offload_lookup if hotpath is not None else None

    def _sliding_window_lookup(
        self: Any,
        keys: Any,
        sliding_window_size: int,
        req_context: Any,
        initial_window_size: int | None = None,
    ) -> int | None:
        _counters.calls += 1
        manager = self.manager
        if (
            not pure_manager(manager)
            or type(sliding_window_size) is not int
            or sliding_window_size < 0
            or (initial_window_size is not None
                and (type(initial_window_size) is not int or initial_window_size < 0))
        ):
            _counters.delegated += 1
            return original(self, keys, sliding_window_size, req_context, initial_window_size)
        initial = initial_window_size or 0  # vLLM: initial_window_size or sliding_window_size
        try:
            if search is not None:
                answer = search(manager.lookup, keys, req_context, sliding_window_size, initial,
                                hit, pending, miss)
            else:
                answer = python_search(manager.lookup, keys, req_context,
                                       sliding_window_size, initial)
        except Exception as exc:  # a failure of ours: vLLM's own scan answers
            on_error(exc)
            _counters.delegated += 1
            return original(self, keys, sliding_window_size, req_context, initial_window_size)
        if answer is NotImplemented:
            _counters.delegated += 1
            return original(self, keys, sliding_window_size, req_context, initial_window_size)
        _counters.answered += 1
        return answer

    _sliding_window_lookup.__doc__ = (
        "KV-offload sliding-window lookup by the proved stride search (swa-prefix-cache)."
    )
    return _sliding_window_lookup


def _shadow(ours: Callable[..., Any], original: Callable[..., Any],
            on_shadow: Callable[[Any, Any, dict[str, Any]], None]) -> Callable[..., Any]:
    """Run both (the manager's lookup is pure: reading twice changes
    nothing), return vLLM's answer, report the comparison."""

    def _sliding_window_lookup(self: Any, keys: Any, sliding_window_size: int,
                               req_context: Any, initial_window_size: int | None = None) -> Any:
        theirs = original(self, keys, sliding_window_size, req_context, initial_window_size)
        try:
            mine = ours(self, keys, sliding_window_size, req_context, initial_window_size)
        except Exception as exc:  # a crash in ours must not hurt serving
            mine = exc
        on_shadow(mine, theirs, {
            "lookup": "offload_sliding_window", "chunks": len(keys),
            "sliding_window_size": sliding_window_size,
            "initial_window_size": initial_window_size,
        })
        return theirs

    return _sliding_window_lookup
