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

# search(probe, n, need, period, eagle) -> HitResult, where probe(i) says
# whether block i is cached. ``need`` is vLLM's raw value (may be <= 0).
Search = Callable[[Callable[[int], bool], int, int, int, bool], HitResult]


class _ProbedMask(Sequence[bool]):
    """A mask whose entries are probed on first read (pure-Python backend)."""

    def __init__(self, n: int, probe: Callable[[int], bool]) -> None:
        self._n = n
        self._probe = probe

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> bool:  # type: ignore[override]
        return self._probe(i)


def python_search(
    probe: Callable[[int], bool], n: int, need: int, period: int, eagle: bool
) -> HitResult:
    """pyspec's stride search; used when the native library is unavailable."""
    from pyspec import find_hit

    params = SearchParams(n=n, need=max(need, 1), period=period, eagle=eagle)
    return find_hit(_ProbedMask(n, probe), params)


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
        found: dict[int, list[Any]] = {}
        get_cached_block = block_pool.get_cached_block

        def probe(i: int) -> bool:
            blocks = get_cached_block(hashes[i], kv_cache_group_ids)
            if blocks:
                found[i] = blocks
                return True
            return False

        try:
            hit = search(probe, n, need, period, eagle)
            null = block_pool.null_block
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
