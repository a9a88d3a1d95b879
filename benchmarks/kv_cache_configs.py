"""The KV-cache configs the hybrid rows build vLLM's managers on.

One full-attention group and ``swa_groups`` sliding-window groups of one
spec, as a model with sliding-window layers has (vLLM builds a
``HybridKVCacheCoordinator`` for it, which merges groups of one spec into
one lookup over their group ids). The specs are tiny (one KV head of size
1): no tensor is ever allocated, and only the block size and the window
matter to the lookups.
"""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.harness import BS
from vllm_support import make_spec


def full_attention_spec(block_size: int = BS) -> Any:
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    return FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32)


def hybrid_kv_cache_config(num_blocks: int, window: int, swa_groups: int) -> Any:
    """Group 0 full attention, groups 1..``swa_groups`` a sliding window of
    ``window`` tokens."""
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec

    swa = make_spec(BS, window)
    return KVCacheConfig(
        num_blocks=num_blocks, kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["full.0"], full_attention_spec())]
        + [KVCacheGroupSpec([f"swa.{g}"], swa) for g in range(1, 1 + swa_groups)],
    )


def hybrid_manager(num_blocks: int, max_model_len: int, window: int, swa_groups: int) -> Any:
    """A real ``KVCacheManager`` with prefix caching on the hybrid config."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    return KVCacheManager(hybrid_kv_cache_config(num_blocks, window, swa_groups),
                          max_model_len=max_model_len, scheduler_block_size=BS,
                          hash_block_size=BS, enable_caching=True)
