"""The exact prefix-cache hit each vLLM replica will serve, from its KV events.

A router process (no vLLM installed) keeps one ``KVIndex``: per replica
and KV-cache group, which block hashes the replica's ``BlockPool`` holds,
updated from the replica's ``KVEventBatch`` stream; ``score`` recomputes the
prompt's block-hash chain as vLLM does and answers with the joint lookup,
i.e. what that replica's ``KVCacheManager.get_computed_blocks`` would
return now (docs/kv-index.md): on the native core (swa_prefix_cache.kv_index._kvnative: the
chain, the key sets and the proved swa_prefix_cache/core/proved/joint.c in C) when it is
built, else on the pure-Python reference (pyspec).

    from swa_prefix_cache.kv_index import KVIndex, ReplicaLayout
    index = KVIndex()
    index.add_replica("r0", ReplicaLayout.from_kv_cache_config(cfg, hash_block_size=16))
    index.apply("r0", batch)          # a KVEventBatch, or its msgpack bytes
    index.score(prompt_token_ids)     # {"r0": hit_tokens}
"""

from swa_prefix_cache.kv_index.index import KVIndex
from swa_prefix_cache.kv_index.layout import GroupLayout, ReplicaLayout

__all__ = ["GroupLayout", "KVIndex", "ReplicaLayout"]
