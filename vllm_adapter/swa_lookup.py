"""The replacement for ``SlidingWindowManager.find_longest_cache_hit``.

The search itself (which blocks to probe, what the hit is) is the verified
core; this module only translates vLLM's arguments, probes ``BlockPool``
for exactly the blocks the core asks about, and builds vLLM's output lists
once the hit is known. Inputs outside what the core models (other spec
types, DCP/PCP, no groups, too few hashes) go to vLLM's own method, so its
own errors and asserts are raised unchanged.
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any

from pyspec import HitResult, SearchParams
from pyspec.params import alignment_period, contiguous_blocks_for_hit

# search(cached, n, need, period, eagle) -> HitResult, where reading
# cached[i] probes the BlockPool for block i. ``need`` is vLLM's raw value
# (may be <= 0 for windows of 0 or 1 token).
Search = Callable[[Sequence[bool], int, int, int, bool], HitResult]


class PoolMask(Sequence[bool]):
    """The cached-block mask of one lookup, probed lazily.

    Reading ``self[i]`` is one ``BlockPool.get_cached_block`` call (vLLM's
    own probe, all groups at once); the blocks it returns are kept so the
    output lists can be built from exactly what vLLM would have read.
    """

    __slots__ = ("_n", "_hashes", "_group_ids", "_get", "found")

    def __init__(self, n: int, hashes: Any, group_ids: list[int], block_pool: Any) -> None:
        self._n = n
        self._hashes = hashes
        self._group_ids = group_ids
        self._get = block_pool.get_cached_block
        self.found: dict[int, list[Any]] = {}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> bool:  # type: ignore[override]
        blocks = self._get(self._hashes[i], self._group_ids)
        if blocks:
            self.found[i] = blocks
            return True
        return False


def python_search(
    cached: Sequence[bool], n: int, need: int, period: int, eagle: bool
) -> HitResult:
    """pyspec's stride search; used when the native library is unavailable."""
    from pyspec import find_hit

    params = SearchParams(n=n, need=max(need, 1), period=period, eagle=eagle)
    return find_hit(cached, params)


def native_search(
    cached: Sequence[bool], n: int, need: int, period: int, eagle: bool
) -> HitResult:
    """The verified C core, calling back into ``cached[i]`` for each probe."""
    from extracted_c import native

    return native.find_hit_probe(cached.__getitem__, n, need, period, eagle)


@functools.lru_cache(maxsize=256)
def _shape(sliding_window: int, block_size: int, alignment_tokens: int,
           eagle: bool) -> tuple[int, int]:
    """(vLLM's raw need, alignment period): fixed per model, so cached."""
    return (
        contiguous_blocks_for_hit(sliding_window, block_size, eagle),
        alignment_period(block_size, alignment_tokens),
    )


def make_lookup(
    original: Callable[..., Any],
    search: Search,
    on_error: Callable[[BaseException], None],
) -> Callable[..., Any]:
    """Build the replacement classmethod body around ``original``.

    If the search itself fails (a bug of ours, never an input vLLM rejects:
    those are sent to ``original`` up front), ``on_error`` is told and
    vLLM's own method answers, so serving never breaks because of us.
    """
    from vllm.v1.core.kv_cache_utils import resolve_block_hashes
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    def find_longest_cache_hit(
        cls: type,
        block_hashes: Any,
        max_length: int,
        kv_cache_group_ids: list[int],
        block_pool: Any,
        kv_cache_spec: Any,
        drop_eagle_block: bool,
        alignment_tokens: int,
        dcp_world_size: int = 1,
        pcp_world_size: int = 1,
    ) -> tuple[tuple[list[Any], ...], int]:
        block_size = getattr(kv_cache_spec, "block_size", 0)
        if (
            not isinstance(kv_cache_spec, SlidingWindowSpec)
            or dcp_world_size != 1
            or pcp_world_size != 1
            or not kv_cache_group_ids
            or type(max_length) is not int
            or type(block_size) is not int
            or type(alignment_tokens) is not int
            or type(kv_cache_spec.sliding_window) is not int
            or max_length < 0
            or block_size < 1
            or alignment_tokens < 1
        ):
            # vLLM asserts or raises on these; let it say so in its own words.
            return original(
                block_hashes, max_length, kv_cache_group_ids, block_pool,
                kv_cache_spec, drop_eagle_block, alignment_tokens,
                dcp_world_size, pcp_world_size,
            )
        hashes = resolve_block_hashes(
            block_hashes,
            block_pool.hash_block_size,
            block_size,
            supports_fine_grained_hash_lookup=cls.supports_fine_grained_hash_lookup,
            alignment_tokens=alignment_tokens,
        )
        n = max_length // block_size
        if len(hashes) < n:
            return original(
                block_hashes, max_length, kv_cache_group_ids, block_pool,
                kv_cache_spec, drop_eagle_block, alignment_tokens,
                dcp_world_size, pcp_world_size,
            )
        eagle = bool(drop_eagle_block)
        need, period = _shape(kv_cache_spec.sliding_window, block_size, alignment_tokens, eagle)
        cached = PoolMask(n, hashes, kv_cache_group_ids, block_pool)
        try:
            hit = search(cached, n, need, period, eagle)
            null = block_pool.null_block
            found = cached.found
            computed = tuple(
                [null] * hit.first_real
                + [found[i][g] for i in range(hit.first_real, hit.length)]
                for g in range(len(kv_cache_group_ids))
            )
        except Exception as exc:
            on_error(exc)
            return original(
                block_hashes, max_length, kv_cache_group_ids, block_pool,
                kv_cache_spec, drop_eagle_block, alignment_tokens,
                dcp_world_size, pcp_world_size,
            )
        return computed, hit.length * block_size

    return find_longest_cache_hit
