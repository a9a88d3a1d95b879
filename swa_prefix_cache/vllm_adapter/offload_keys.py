"""The replacement for ``RequestOffloadState.update_offload_keys`` (the
KV-offload connector's per-request chunk keys).

Every ``get_num_new_matched_tokens`` first extends, per KV-cache group, the
request's list of offload keys with one key per new chunk: vLLM makes each
key with ``make_offload_key`` (the chunk's last block hash and the group
index as 4 big-endian bytes) and records its end token in the request
context, one Python call each. With a host tier that was most of the
connector's lookup time left once the scans were replaced (7 groups per
Gemma-3 request, a key per 16 tokens each).

The replacement builds the same keys with the same expression
(``block_hash + group_idx.to_bytes(4, "big", signed=False)``) a group at a
time, then appends them and records their positions in the same order, so
the lists and the context's dict end equal to vLLM's, insertion order
included. It applies only to vLLM's own ``ReqContext`` (nothing patched, a
plain dict of positions), a list of block hashes, vLLM's own
``make_offload_key`` in the scheduler's module and int sizes; anything else,
and any failure before a group's keys are appended, hands the rest of the
call to vLLM's own method, which then sees only the groups not yet done
(and raises whatever vLLM raises). Same modes as the lookup patch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from swa_prefix_cache.vllm_adapter import fingerprint, registry
from swa_prefix_cache.vllm_adapter.config import Mode
from swa_prefix_cache.vllm_adapter.instance_attrs import calls_own

logger = logging.getLogger("swa_prefix_cache")

NAME = fingerprint.OFFLOAD_KEYS.name
_KEPT = "vLLM's own key loop stays"
_SCHEDULER = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler"


_counters = registry.Counters()  # answered: every group done here


def plan(mode: Mode) -> registry.Plan:
    """The registry's plan for the key loop in ``mode``. Shadow mode keeps
    vLLM's loop: the method mutates the request, so it cannot be run
    twice."""
    if mode is not Mode.ON:
        return registry.Refusal(f"mode {mode.value}")
    return registry.Build(
        lambda found, originals: (_make_update(originals[0]),), _KEPT, logging.INFO
    )


def uninstall() -> None:
    registry.uninstall(NAME)


def status() -> dict[str, Any]:
    return registry.status_of(NAME, _counters)


def _make_update(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """The replacement method around vLLM's ``original``."""
    import importlib

    from vllm.v1.kv_offload import base

    scheduler_module = importlib.import_module(_SCHEDULER)
    context_type = base.ReqContext
    make_key = base.make_offload_key
    set_position = context_type.__dict__["set_offload_key_position"]

    def modelled(state: Any) -> bool:
        """The request context and key maker are vLLM's own, unpatched."""
        context = state.req_context
        return (
            type(context) is context_type
            and calls_own(context, "set_offload_key_position", set_position)
            and type(context._offload_key_positions) is dict
            and scheduler_module.make_offload_key is make_key
            and type(getattr(state.req, "block_hashes", None)) is list
        )

    def update_offload_keys(self: Any) -> None:
        _counters.calls += 1
        # Most calls find no group with a new chunk (a running request
        # between chunk boundaries): vLLM's loop appends nothing then, and
        # reads the request's hashes only when there is a group. The
        # request's context is checked once, at the first group with work.
        count = -1
        checked = False
        for group_config, group_state in zip(self.config.kv_group_configs, self.group_states):
            stride = group_config.hashes_per_chunk
            keys = group_state.offload_keys
            if count < 0:
                hashes = getattr(self.req, "block_hashes", None)
                count = len(hashes) if type(hashes) is list else -1
            if count < 0 or type(stride) is not int or stride < 1 or type(keys) is not list:
                _counters.delegated += 1
                return original(self)  # this group and the rest, as vLLM does them
            done = len(keys)
            if stride * (done + 1) > count:
                continue  # no new chunk in this group
            tokens = group_config.tokens_per_chunk
            group_idx = group_config.group_idx
            if type(tokens) is not int or tokens < 1 or type(group_idx) is not int:
                _counters.delegated += 1
                return original(self)
            if not checked:
                if not modelled(self):
                    _counters.delegated += 1
                    return original(self)
                checked = True
            try:
                suffix = group_idx.to_bytes(4, "big", signed=False)
                new = [block_hash + suffix for block_hash in hashes[stride * (done + 1) - 1::stride]]
                # Built apart first: an unhashable key raises before anything is changed.
                new_positions = dict(zip(new, range((done + 1) * tokens, (done + len(new)) * tokens + 1, tokens)))
            except Exception:  # vLLM's loop raises its own error from here
                _counters.delegated += 1
                return original(self)
            keys.extend(new)
            self.req_context._offload_key_positions.update(new_positions)
        _counters.answered += 1
        return None

    update_offload_keys.__doc__ = (
        "The request's offload keys, a group at a time (swa-prefix-cache)."
    )
    return update_offload_keys
