"""Turn a lookup's arguments into a self-contained reproduction record.

Block hashes cannot be replayed elsewhere, but what the search sees can:
the cached/not-cached mask over the blocks and the numbers that shape it.
``swa_prefix_cache.pyspec.legacy_scan(mask, **params)`` reproduces vLLM's answer from it.
"""

import inspect
from typing import Any


def describe_lookup(args: tuple, kwargs: dict) -> dict[str, Any]:
    from vllm.v1.core.kv_cache_utils import resolve_block_hashes
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    names = list(inspect.signature(_signature).parameters)
    bound = dict(zip(names, args), **kwargs)
    spec = bound["kv_cache_spec"]
    pool = bound["block_pool"]
    record: dict[str, Any] = {
        "max_length": bound["max_length"],
        "block_size": getattr(spec, "block_size", None),
        "sliding_window": getattr(spec, "sliding_window", None),
        "alignment_tokens": bound["alignment_tokens"],
        "drop_eagle_block": bound["drop_eagle_block"],
        "kv_cache_group_ids": list(bound["kv_cache_group_ids"]),
    }
    try:
        hashes = resolve_block_hashes(
            bound["block_hashes"], pool.hash_block_size, spec.block_size,
            supports_fine_grained_hash_lookup=(
                SlidingWindowManager.supports_fine_grained_hash_lookup
            ),
            alignment_tokens=bound["alignment_tokens"],
        )
        n = min(bound["max_length"] // spec.block_size, len(hashes))
        record["mask"] = "".join(
            "1" if pool.get_cached_block(hashes[i], bound["kv_cache_group_ids"]) else "0"
            for i in range(n)
        )
    except Exception as exc:  # the record is best effort; never raise here
        record["mask_error"] = repr(exc)
    return record


def _signature(
    block_hashes: Any, max_length: Any, kv_cache_group_ids: Any, block_pool: Any,
    kv_cache_spec: Any, drop_eagle_block: Any, alignment_tokens: Any,
    dcp_world_size: Any = 1, pcp_world_size: Any = 1,
) -> None:
    """vLLM's argument order for find_longest_cache_hit (without cls)."""
