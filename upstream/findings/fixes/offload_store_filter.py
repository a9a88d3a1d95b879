# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Which sliding-window chunks the KV-offload store keeps: exactly the chunks
the offload lookup reads for a hit the cache promises.

``OffloadingConnectorScheduler._reachable_store_block_mask`` used to reuse the
local prefix cache's ``reachable_block_mask`` at the full-attention chunk
alignment, but the offload *lookup* (``_lookup_complete_chunks`` ->
``_sliding_window_lookup``) reads other runs, so stored prompts could give no
hit at all: it asks ``cdiv(W, c)`` chunks instead of ``cdiv(W - 1, c)``, one
chunk past the hit for an EAGLE group with hits lowered by every EAGLE
group's pop, the partial last chunk of a resend, caps that are not multiples
of the sliding-window chunk, the longer sibling of an aligned prompt.

The store here keeps **the union of the chunks that the all-stored lookup
reads for every promised hit**. A store that holds every run the all-stored
lookup reads makes the lookup take the same steps (each sliding-window scan
meets the same misses right of the run and stops at the same place), so it
returns the same hit as with every chunk stored.

* ``all_stored_lookup`` transcribes ``_lookup_complete_chunks`` (the
  multi-group fixed point: full-attention prefix lookups, then sliding-window
  groups by decreasing window, the EAGLE extra chunk and its pop, the
  re-checks) for a request that shares a prefix with one stored prompt, no
  local hit, no deferral; it returns the hit and the chunk runs each group
  read.
* ``promised_queries`` are the queries whose hits the store promises: dense
  (``retention_interval`` None) every request sharing any prefix of the
  prompt; with a retention interval ``r > 0`` those whose hit is a positive
  multiple of ``r``; with a retention interval (``0`` included) the resend of
  the prompt, a longer sibling and a sibling diverging at the junction
  (``Request.shared_prefix_boundary``).
* ``offload_store_chunks`` is the union of the reads of the target group,
  restricted to a chunk range, computed locally (a chunk's answer does not
  depend on the range asked, so storing step by step keeps the same chunks),
  and ``offload_store_block_mask`` turns it into the scheduler's block mask.

Configurations this does not model (decode context parallelism, partial-tail
offloading, Mamba alignment, copy-on-write sources, sliding-window groups of
another spec) get ``None`` from ``offload_store_block_mask``'s caller's point
of view as ``NOT_MODELLED``: the scheduler keeps its own filter for them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any
from dataclasses import dataclass
from functools import lru_cache

from vllm.utils.math_utils import cdiv
from vllm.v1.kv_cache_interface import SlidingWindowSpec


# @include pyspec/offload.py


# ---- the scheduler's side -----------------------------------------------------------

NOT_MODELLED = "not modelled"


def offload_groups(scheduler: Any) -> tuple[OffloadGroup, ...] | str:
    """The scheduler's groups as ``OffloadGroup`` s, or why this module does
    not model the configuration."""
    config = scheduler.config
    if config.dcp_world_size != 1:
        return "decode context parallelism"
    if config.supports_partial_tail:
        return "partial-tail offloading"
    if getattr(scheduler, "_mamba_align_size", None) is not None:
        return "Mamba alignment"
    groups = []
    for gc in config.kv_group_configs:
        spec = gc.kv_cache_spec
        if gc.requires_cow_source:
            return "a group stored from a copy-on-write source"
        if gc.sliding_window_size_in_chunks is None:
            groups.append(OffloadGroup(gc.tokens_per_chunk, None, 0, gc.is_eagle_group))
        elif isinstance(spec, SlidingWindowSpec):
            reach = spec.sliding_window - 1 + spec.extra_retained_tokens
            groups.append(
                OffloadGroup(gc.tokens_per_chunk, gc.sliding_window_size_in_chunks, reach, gc.is_eagle_group)
            )
        else:
            return f"a {type(spec).__name__} group"
    return tuple(groups)


def offload_store_block_mask(
    scheduler: Any,
    group_config: Any,
    start_chunk_idx: int,
    end_chunk_idx: int,
    reachable_boundaries: tuple[int, ...],
) -> list[bool] | None | str:
    """The store mask of sliding-window group ``group_config`` for chunks
    ``[start_chunk_idx, end_chunk_idx)``, in block coordinates (a chunk is
    stored when any of its blocks is marked; a marked null block makes the
    scheduler skip the chunk, so only blocks a hit's window needs are
    marked); ``None``: every block; ``NOT_MODELLED``: use the scheduler's
    own filter."""
    groups = offload_groups(scheduler)
    if isinstance(groups, str):
        return NOT_MODELLED
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
