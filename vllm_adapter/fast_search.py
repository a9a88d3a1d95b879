"""pyspec's search with the pool read inlined: the hot path's python core.

This is a specialization of pyspec's ``stride_search`` followed by
``prefix_fallback`` (``pyspec.find_hit``), with the probe of block ``i``
written into the search loop as the dict read vLLM 0.33.0's
``BlockPool.get_cached_block`` makes, instead of a ``cached[i]`` call on a
mask object. Why: measured on vLLM's real ``BlockPool``
(benchmarks/results/vllm-20261129T162307.json), a probe through the mask
cost ~420 ns, ~340 ns of which was pyspec's loop step with its
``__getitem__`` method call; the read itself is a dict lookup.

Same algorithm, same control flow, step for step: the variables, bounds and
loop conditions are pyspec's (``pyspec/search.py``), with
``last_aligned_end`` written out. It is TESTED, not proved, to make the same
probes in the same order and return the same hit as pyspec
(tests/test_fast_search.py: every mask of up to 12 blocks with every need,
period 1-4 and EAGLE, probe order recorded; hypothesis cases up to
thousands of blocks; and tests/test_hot_path.py, tests/test_adapter.py,
tests/test_coordinators.py against vLLM's own method, with this path taken).
The proofs are about pyspec: pyspec agrees with the C core
(tests/test_exhaustive.py), and the C core is proved by Frama-C.

No vLLM import here: the caller passes the hash map's ``dict.get``
(``read``), vLLM's own ``get_one_block`` (``read_one``, for keys that hold
something other than one block, e.g. several blocks), the block hashes,
the 4-byte group-id suffix(es) and the block class. A probe of block ``i``
for one group is: ``key = hashes[i] + suffix``; ``block = read(key)``;
``None`` is a miss; a value of another class than ``block_type`` is
answered by ``read_one(key)`` and vLLM's truth test (``if not block``).
"""

from collections.abc import Callable, Sequence
from typing import Any

from pyspec.params import SearchParams

# (length, first_real, found): the hit as pyspec.HitResult has it, and the
# block(s) each cached probe returned, by block index.
Found = tuple[int, int, dict[int, Any]]


def find_hit_one_group(
    read: Callable[[Any], Any],
    read_one: Callable[[Any], Any],
    hashes: Sequence[Any],
    suffix: bytes,
    block_type: type,
    p: SearchParams,
) -> Found:
    """``pyspec.find_hit`` on one group, probing inline; ``found[i]`` is
    the block of every probe that hit. ``hashes`` has at least ``p.n``
    entries (the caller checks)."""
    n = p.n
    need = p.need
    period = p.period
    eagle = 1 if p.eagle else 0
    found: dict[int, Any] = {}

    # stride_search
    bound = n
    known_lo = n
    while True:
        if bound < eagle:  # last_aligned_end(bound, period, eagle)
            end = -1
        else:
            end = bound - (bound - eagle) % period
        if end < need:
            break
        start = end - need
        scan_to = end if end < known_lo else known_lo
        j = start
        while j < scan_to:
            key = hashes[j] + suffix
            block = read(key)
            if block is None:
                break
            if type(block) is not block_type:
                block = read_one(key)
                if not block:
                    break
            found[j] = block
            j += 1
        if j == scan_to:
            return end - eagle, start, found
        bound = j
        known_lo = start

    # prefix_fallback
    limit = need - 1 if need - 1 < n else n
    prefix = 0
    while prefix < limit:
        key = hashes[prefix] + suffix
        block = read(key)
        if block is None:
            break
        if type(block) is not block_type:
            block = read_one(key)
            if not block:
                break
        found[prefix] = block
        prefix += 1
    return _fallback_length(prefix, period, eagle), 0, found


def find_hit_groups(
    read: Callable[[Any], Any],
    read_one: Callable[[Any], Any],
    hashes: Sequence[Any],
    suffixes: Sequence[bytes],
    block_type: type,
    p: SearchParams,
) -> Found:
    """``find_hit_one_group`` for several groups: block ``i`` is cached when
    every group has it, read in vLLM's group order and stopping at the first
    miss; ``found[i]`` is the list of blocks, one per group."""
    n = p.n
    need = p.need
    period = p.period
    eagle = 1 if p.eagle else 0
    found: dict[int, Any] = {}

    # stride_search
    bound = n
    known_lo = n
    while True:
        if bound < eagle:  # last_aligned_end(bound, period, eagle)
            end = -1
        else:
            end = bound - (bound - eagle) % period
        if end < need:
            break
        start = end - need
        scan_to = end if end < known_lo else known_lo
        j = start
        while j < scan_to:
            blocks = _read_groups(read, read_one, hashes[j], suffixes, block_type)
            if blocks is None:
                break
            found[j] = blocks
            j += 1
        if j == scan_to:
            return end - eagle, start, found
        bound = j
        known_lo = start

    # prefix_fallback
    limit = need - 1 if need - 1 < n else n
    prefix = 0
    while prefix < limit:
        blocks = _read_groups(read, read_one, hashes[prefix], suffixes, block_type)
        if blocks is None:
            break
        found[prefix] = blocks
        prefix += 1
    return _fallback_length(prefix, period, eagle), 0, found


def _read_groups(
    read: Callable[[Any], Any],
    read_one: Callable[[Any], Any],
    block_hash: Any,
    suffixes: Sequence[bytes],
    block_type: type,
) -> list[Any] | None:
    """One probe of several groups, as ``BlockPool.get_cached_block`` makes
    it: the blocks, or None at the first group that misses. A call per probe
    is kept here (several dict reads per probe make it a small share)."""
    blocks = []
    for suffix in suffixes:
        key = block_hash + suffix
        block = read(key)
        if block is None:
            return None
        if type(block) is not block_type:
            block = read_one(key)
            if not block:
                return None
        blocks.append(block)
    return blocks


def _fallback_length(prefix: int, period: int, eagle: int) -> int:
    """The tail of ``pyspec.prefix_fallback`` once the cached prefix is
    known: the last aligned end within it, re-aligned, the EAGLE block
    dropped and re-aligned again."""
    if prefix < eagle:  # last_aligned_end(prefix, period, eagle), at least 0
        length = 0
    else:
        length = prefix - (prefix - eagle) % period
    length -= length % period
    if eagle and length > 0:
        length -= 1
        length -= length % period
    return length
