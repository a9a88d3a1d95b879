"""Opt-in: the corrected KV-offload store filter for sliding-window groups.

vLLM 0.33.0's offloading connector decides which sliding-window chunks to
store with ``OffloadingConnectorScheduler._reachable_store_block_mask`` (the
local cache's ``reachable_block_mask`` at the full-attention chunk
alignment). Its own lookup then asks for runs the store did not keep, so
hits are lost (docs/store-lookup-agreement.md, O1..O5; the issue's case:
``W = 129``, block 16, full-attention chunk 256, prompt 2,000: 0 tokens
instead of 1,792).

With ``SWA_PREFIX_CACHE_OFFLOAD_FILTER=corrected`` the plugin replaces that
method with ``swa_prefix_cache.pyspec.offload.offload_store_chunks``: keep every chunk
the all-stored offload lookup reads for a promised hit (the offload variant
of ``swa_prefix_cache.pyspec.reachable.correct_mask``). Default ``off``: vLLM's own filter.

It also pins the junction the host tier finds (``_lookup``, after vLLM's
own): 0.33.0 takes a request's ``shared_prefix_boundary`` only from the GPU
pool's lookup, so where the full-attention groups hit further in the tier
than a sliding-window group, the window before that point is never stored,
and the next prompt that diverges there misses it (on the trace under
``--turns blocks``: 5.7 % of prompt tokens, docs/replay.md). vLLM 0.34.0
pins it itself (``_maybe_register_shared_prefix_junction``); this is that
rule for 0.33.0: the full-attention groups' hit end, capped as the lookup
caps it, becomes the junction when it lies past the hit and past the
junction already set. The lookup's answer is vLLM's own, untouched. On
0.34.0 (the variant's semantics ``junction_pinned``) vLLM's ``_lookup``
stays in place.

vLLM 0.34.0's store path differs from 0.33.0's only where the model reads
it as a parameter: an EAGLE group drops its trailing chunk only without
look-ahead block hashes (``use_lookahead_block_hashes``), so the model's
``eagle`` flag is that ``apply_eagle_drop``; its lookup lowers the cap by
the recomputed token before the new-token and load caps, which the
promised queries (no caps) do not meet; its final-tail reconsideration
calls the mask again with another final segment, which the corrected mask
does not read (it is local: docs/store-lookup-agreement.md).

The patch applies only to a vLLM whose offload sources hash to a known
fingerprint (``fingerprint.OFFLOAD_FILTER``), independently of the
lookup patch; any other build keeps vLLM's filter, said once in the log.
Inside the method, a configuration the model does not cover (Mamba or
chunked-local groups, DCP > 1, partial-tail offloading, a group that is
neither full attention nor ``SlidingWindowSpec``) is handed to vLLM's own
method, said once in the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from swa_prefix_cache.vllm_adapter import fingerprint, registry
from swa_prefix_cache.vllm_adapter.config import OffloadFilter, read_offload_filter

logger = logging.getLogger("swa_prefix_cache")

NAME = fingerprint.OFFLOAD_FILTER.name
_KEPT = "vLLM's offload store filter kept"


@dataclass
class _Counters:
    setting: OffloadFilter | None = None
    calls: int = 0
    fallbacks: int = 0
    fallback_reason: str = ""
    junctions: int = 0  # junctions pinned from the tier's full-attention hit
    junction_rule: str = ""  # whose code pins them: "plugin" or "vLLM"


_counters = _Counters()


def install() -> bool:
    """Replace vLLM's offload store filter when the setting asks for it and
    the build is known. Idempotent; never raises."""
    return registry.apply(NAME, plan())


def plan() -> registry.Plan:
    """The registry's plan for the store filter (its setting, read now)."""
    try:
        setting = read_offload_filter()
    except ValueError as exc:
        return registry.Refusal(str(exc), _KEPT, logging.ERROR)
    _counters.setting = setting
    if setting is OffloadFilter.OFF:
        return registry.Refusal("setting off")
    return registry.Build(
        _build, _KEPT,
        said="corrected KV-offload store filter active on vLLM {VLLM}",
    )


def _build(found: fingerprint.Match, originals: tuple[Any, ...]) -> tuple[Any, Any]:
    """The mask's replacement, and ``_lookup``'s: vLLM's own where it pins
    the tier's junction itself."""
    mask, lookup = originals
    if found.semantics == fingerprint.JUNCTION_PINNED:
        _counters.junction_rule = "vLLM"
        return _make_mask(mask), lookup
    _counters.junction_rule = "plugin"
    return _make_mask(mask), _make_lookup(lookup)


def uninstall() -> None:
    """Put vLLM's own method back. Safe to call when not installed."""
    registry.uninstall(NAME)


def is_installed() -> bool:
    return registry.is_installed(NAME)


def status() -> dict[str, Any]:
    found = registry.state(NAME)
    return {
        "installed": found.installed,
        "setting": _counters.setting.value if _counters.setting else None,
        "reason": found.reason,
        "calls": _counters.calls,
        "fallbacks": _counters.fallbacks,
        "fallback_reason": _counters.fallback_reason,
        "junctions": _counters.junctions,
        "junction_rule": _counters.junction_rule,
    }


def offload_groups(scheduler: Any) -> tuple[Any, ...] | str:
    """The scheduler's groups as ``OffloadGroup`` s (swa_prefix_cache/pyspec/offload.py), or
    why the model does not cover this configuration."""
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    from swa_prefix_cache.pyspec.offload import OffloadGroup

    config = scheduler.config
    if config.dcp_world_size != 1:
        return "decode context parallelism"
    if config.supports_partial_tail:
        return "partial-tail offloading"
    if getattr(scheduler, "_mamba_align_size", None) is not None:
        return "Mamba alignment"
    # vLLM 0.34: an EAGLE group drops its trailing chunk only without
    # look-ahead hashes (0.33.0 has no such setting).
    eagle_drops = not getattr(scheduler, "use_lookahead_block_hashes", False)
    groups = []
    for gc in config.kv_group_configs:
        spec = gc.kv_cache_spec
        if gc.requires_cow_source:
            return "a group stored from a copy-on-write source"
        if gc.sliding_window_size_in_chunks is None:
            groups.append(OffloadGroup(gc.tokens_per_chunk, None, 0, gc.is_eagle_group and eagle_drops))
        elif isinstance(spec, SlidingWindowSpec):
            reach = spec.sliding_window - 1 + spec.extra_retained_tokens
            groups.append(
                OffloadGroup(gc.tokens_per_chunk, gc.sliding_window_size_in_chunks, reach,
                             gc.is_eagle_group and eagle_drops)
            )
        else:
            return f"a {type(spec).__name__} group"
    return tuple(groups)


def corrected_block_mask(
    scheduler: Any,
    group_config: Any,
    start_chunk_idx: int,
    end_chunk_idx: int,
    reachable_boundaries: tuple[int, ...],
) -> list[bool] | None | str:
    """The corrected mask for ``[start_chunk_idx, end_chunk_idx)`` of
    ``group_config``, in vLLM's block coordinates (a chunk is stored when
    any of its blocks is marked; a marked null block makes vLLM skip the
    chunk, so only blocks a hit's window needs are marked), or why the
    model does not cover it."""
    from swa_prefix_cache.pyspec.offload import offload_store_chunks

    groups = offload_groups(scheduler)
    if isinstance(groups, str):
        return groups
    configs = scheduler.config.kv_group_configs
    target = next(i for i, gc in enumerate(configs) if gc is group_config)
    need = offload_store_chunks(
        groups,
        target,
        start_chunk_idx,
        end_chunk_idx,
        scheduler.config.alignment_tokens,
        scheduler.config.retention_interval,
        reachable_boundaries,
    )
    if need is None:
        return None
    bpc = scheduler.config.blocks_per_chunk
    bs = group_config.tokens_per_block
    base = start_chunk_idx * bpc
    mask = [False] * ((end_chunk_idx - start_chunk_idx) * bpc)
    for chunk, first_token in need:
        for block in range(max(first_token // bs, chunk * bpc), (chunk + 1) * bpc):
            mask[block - base] = True
    return mask


def _make_mask(original: Any) -> Any:
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    def _reachable_store_block_mask(
        self: Any,
        group_config: Any,
        start_chunk_idx: int,
        end_chunk_idx: int,
        final_segment_end_chunk_idx: int | None,
        reachable_boundaries: tuple[int, ...],
    ) -> list[bool] | None:
        def vllm_own() -> list[bool] | None:
            return original(
                self, group_config, start_chunk_idx, end_chunk_idx,
                final_segment_end_chunk_idx, reachable_boundaries,
            )

        if not isinstance(group_config.kv_cache_spec, SlidingWindowSpec):
            return vllm_own()
        _counters.calls += 1
        result = corrected_block_mask(
            self, group_config, start_chunk_idx, end_chunk_idx, reachable_boundaries
        )
        if isinstance(result, str):
            _counters.fallbacks += 1
            if _counters.fallbacks == 1:
                _counters.fallback_reason = result
                logger.warning(
                    "swa-prefix-cache: corrected offload store filter does not "
                    "model %s; vLLM's own filter used (logged once)", result,
                )
            return vllm_own()
        return result

    _reachable_store_block_mask.__doc__ = (
        "Corrected KV-offload store filter (swa-prefix-cache, "
        "swa_prefix_cache.pyspec.offload.offload_store_chunks)."
    )
    return _reachable_store_block_mask


def tier_junction(scheduler: Any, req_status: Any, max_num_new_tokens: int | None,
                  num_hit_tokens: int) -> int:
    """Where the full-attention groups' tier hit ends, if a sliding-window
    group cut the hit below it (0 otherwise or where not modelled: no
    retention, Mamba, a group of another kind). The caps are the lookup's
    own (``_lookup_complete_chunks``): at most the request's tokens, the
    new-token and load limits, minus the token recomputed for its logits.

    With EAGLE groups it is the shared run itself, before the EAGLE pop: the
    corrected store keeps, for a junction, what the all-stored lookup of a
    sibling sharing that run reads, pop included (``swa_prefix_cache.pyspec.offload``'s
    junction queries), so the window before the point the sibling lands on
    is kept. A junction only decides what is stored; the lookup's answer is
    vLLM's own."""
    if scheduler.config.retention_interval is None:
        return 0
    if getattr(scheduler, "_mamba_align_size", None) is not None:
        return 0
    full, sliding = scheduler._full_attention_groups, scheduler._sliding_window_groups
    configs = scheduler.config.kv_group_configs
    if not full or not sliding:
        return 0
    local = req_status.num_locally_computed_tokens
    cap = req_status.req.num_tokens
    if max_num_new_tokens is not None:
        cap = min(cap, local + max_num_new_tokens)
    if req_status.max_load_tokens is not None:
        cap = min(cap, local + req_status.max_load_tokens)
    boundary = cap - 1
    for g in full:
        boundary = min(boundary,
                       req_status.group_states[g].lookup_hit_end_chunk_idx * configs[g].tokens_per_chunk)
    return boundary if boundary > local + num_hit_tokens else 0


def _make_lookup(original: Any) -> Any:
    def _lookup(self: Any, req_status: Any, max_num_new_tokens: int | None = None) -> int | None:
        num_hit_tokens = original(self, req_status, max_num_new_tokens)
        if num_hit_tokens is not None:
            boundary = tier_junction(self, req_status, max_num_new_tokens, num_hit_tokens)
            request = req_status.req
            if boundary > request.shared_prefix_boundary:
                request.shared_prefix_boundary = boundary  # never lowered
                _counters.junctions += 1
        return num_hit_tokens

    _lookup.__doc__ = (
        "vLLM's offload lookup, then the tier's junction pinned (swa-prefix-cache, "
        "corrected store)."
    )
    return _lookup
