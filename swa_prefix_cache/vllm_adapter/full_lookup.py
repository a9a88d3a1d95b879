"""The replacement for ``FullAttentionManager.find_longest_cache_hit``.

vLLM's full-attention lookup reads the cached run of blocks from block 0
(one ``get_cached_block`` per cached block, the whole prompt when it is
cached) and, in fine-grained mode, the hash boundaries of the next block.
The replacement is the extension's ``Lookup`` of kind ``full_attention``:
the proved ``full_hit_probe`` (swa_prefix_cache/core/proved/full_attention.c, probe
instance) with the pool probe and vLLM's lists in C, one call per lookup
(swa_prefix_cache/core/glue/hotpath_module.c). There is no Python core for it: any input
the extension does not model (DCP > 1, another pool, a patched probe, odd
group ids, hashes that are not bytes) is answered by vLLM's own method, and
so is any call after a failure of ours (told to ``on_error`` first).
"""

from collections.abc import Callable
from typing import Any

from swa_prefix_cache.vllm_adapter.lookup_memo import watch_type
from swa_prefix_cache.vllm_adapter.swa_lookup import LAYOUT_BLOCKS, pool_layout, resolve


def make_full_lookup(
    original: Callable[..., Any],
    on_error: Callable[[BaseException], None],
    pool_read: bool | str | None,
    hotpath: Any,
) -> Any:
    """The extension's full-attention lookup around vLLM's own ``original``
    (the classmethod object, bound to the class each call is made on:
    subclasses that inherit the method are served the same way, and get the
    answer vLLM's own gives them)."""
    from vllm.v1.core import block_pool as block_pool_module
    from vllm.v1.core.kv_cache_utils import BlockHashListWithBlockSize
    from vllm.v1.kv_cache_interface import ChunkedLocalAttentionSpec, FullAttentionSpec

    pool_type = block_pool_module.BlockPool
    map_type = block_pool_module.BlockHashToBlockMap
    block_type = block_pool_module.KVCacheBlock
    layout = pool_layout(pool_read)  # swa_lookup.make_lookup's pool_read
    if hasattr(block_type, "__bool__") or hasattr(block_type, "__len__"):
        layout = None

    def vllm_own(cls: type, *args: Any, **kwargs: Any) -> Any:
        """What the extension delegates to: vLLM's own method, bound to the
        class it was called on."""
        return original.__get__(None, cls)(*args, **kwargs)

    return hotpath.new_lookup(
        fallback=vllm_own,
        original=vllm_own,
        on_error=on_error,
        resolve=resolve,
        spec_type=(FullAttentionSpec, ChunkedLocalAttentionSpec),
        pool_type=pool_type,
        map_type=(map_type, watch_type(map_type)),  # vLLM's map, or the lookup memory's view of it
        block_type=block_type,
        probe_fn=pool_type.__dict__["get_cached_block"],
        read_fn=map_type.__dict__["get_one_block"],
        key_fn=block_pool_module.make_block_hash_with_group_id,
        key_scope=vars(block_pool_module),
        pool_read=layout is not None,
        kind="full_attention",
        view_type=BlockHashListWithBlockSize,
        layout=layout or LAYOUT_BLOCKS,
    )

