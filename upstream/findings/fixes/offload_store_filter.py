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


# @include swa_prefix_cache/pyspec/offload.py


# ---- the scheduler's side -----------------------------------------------------------

NOT_MODELLED = "not modelled"


# @include swa_prefix_cache/vllm_adapter/offload_filter.py: offload_groups, corrected_block_mask
def offload_store_block_mask(
    scheduler: Any,
    group_config: Any,
    start_chunk_idx: int,
    end_chunk_idx: int,
    reachable_boundaries: tuple[int, ...],
) -> list[bool] | None | str:
    """The store mask of sliding-window group ``group_config`` for chunks
    ``[start_chunk_idx, end_chunk_idx)`` (``corrected_block_mask``);
    ``None``: every block; ``NOT_MODELLED``: use the scheduler's own
    filter."""
    mask = corrected_block_mask(
        scheduler, group_config, start_chunk_idx, end_chunk_idx, reachable_boundaries
    )
    return NOT_MODELLED if isinstance(mask, str) else mask
