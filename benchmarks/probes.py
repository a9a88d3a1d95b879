"""How the sliding-window rows count a lookup's probes.

A probe is one ``BlockPool.get_cached_block`` call. vLLM's and the python
core's are counted by wrapping the pool instance's method (never while
timing). A wrapped method makes the extension hand the call to its Python
lookup, so the native core's probes are counted on the C search itself
(``benchmarks.cffi_core.find_hit_probe``, the same prefix_cache.c probe
instance the extension runs) with a counting probe on the same pool.
``bare_probe_loop`` replays a lookup's probes as bare method calls: what
any code making those probes through ``BlockPool``'s method would spend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

from benchmarks.harness import BS, Impls, same_result, use
from swa_prefix_cache.pyspec.params import alignment_period, contiguous_blocks_for_hit
from vllm_support import count_get_cached_block


def contiguous_need(window: int, eagle: bool) -> int:
    """vLLM's own ``_contiguous_blocks_for_hit``; below 1 acts as 1."""
    return max(SlidingWindowManager._contiguous_blocks_for_hit(window, BS, eagle), 1)


def c_search_probes(kwargs: dict[str, Any]) -> tuple[int, list[int]]:
    """The native core's hit (blocks) and probed block indices on this
    lookup: the C search (``find_hit_probe``, the probe instance of
    prefix_cache.c the extension runs) asking the same pool through
    ``get_cached_block``."""
    from benchmarks import cffi_core as native

    spec = kwargs["kv_cache_spec"]
    hashes, gids, pool = kwargs["block_hashes"], kwargs["kv_cache_group_ids"], kwargs["block_pool"]
    seen: list[int] = []

    def probe(i: int) -> bool:
        seen.append(i)
        return pool.get_cached_block(hashes[i], gids) is not None

    eagle = bool(kwargs["drop_eagle_block"])
    hit = native.find_hit_probe(
        probe, kwargs["max_length"] // spec.block_size,
        max(contiguous_blocks_for_hit(spec.sliding_window, spec.block_size, eagle), 1),
        alignment_period(spec.block_size, kwargs["alignment_tokens"]), eagle)
    return hit.length, seen


def count_probes(impls: Impls, name: str, kwargs: dict[str, Any], want: Any, what: str) -> int:
    """The probes ``name`` makes on this sliding-window lookup. The counted
    lookup must still find vLLM's answer ``want``: the C search its hit
    length, a counted Python lookup the very same block objects."""
    if impls.core_of(name) == "native":
        length, seen = c_search_probes(kwargs)
        if length * kwargs["kv_cache_spec"].block_size != want[1]:
            raise AssertionError(f"{what}: the C search finds {length} blocks, vLLM {want[1]} tokens")
        return len(seen)
    with use(impls.table[name]), count_get_cached_block(kwargs["block_pool"]) as counter:
        got = SlidingWindowManager.find_longest_cache_hit(**kwargs)
    if not same_result(got, want):
        raise AssertionError(f"{what}: {name}, counted, disagrees with vLLM ({got[1]} vs {want[1]} "
                             "tokens or different block objects)")
    return counter[0]


def probe_hashes(impls: Impls, name: str, kwargs: dict[str, Any]) -> list[Any]:
    """The block hashes ``name`` probes on this lookup, in order."""
    if impls.core_of(name) == "native":
        return [kwargs["block_hashes"][i] for i in c_search_probes(kwargs)[1]]
    pool = kwargs["block_pool"]
    seen: list[Any] = []
    real = pool.get_cached_block

    def recording(block_hash: Any, group_ids: list[int]) -> Any:
        seen.append(block_hash)
        return real(block_hash, group_ids)

    pool.get_cached_block = recording
    try:
        with use(impls.table[name]):
            SlidingWindowManager.find_longest_cache_hit(**kwargs)
    finally:
        del pool.get_cached_block
    return seen


def bare_probe_loop(pool: Any, hashes: Sequence[Any], gids: list[int]) -> Callable[[], None]:
    """``hashes`` probed as bare ``pool.get_cached_block`` calls."""
    get = pool.get_cached_block

    def bare() -> None:
        for h in hashes:
            get(h, gids)

    return bare
