"""The reference store: a KV cache that keeps exactly the blocks vLLM's
lookups can read, with LRU eviction at a byte budget.

Standard library only. It answers "at these bytes, how many prompt tokens
could a prefix cache serve on this workload if it stored only what a lookup
can land on", the figure the host-tier replay's measured hit rates are set
against (benchmarks/tier_sweep.py).

The workload is a sequence of prompts in arrival order, each given as the
keys of its full blocks (equal keys: equal tokens and equal prefix, as
vLLM's chained block hashes) and its token count; every prompt is computed
and stored before the next arrives. The cache has KV-cache groups, each a
block size in tokens shared by all (``block``), a sliding window in tokens
(None: full attention) and the bytes of one block of that group. One
prompt:

1. **Lookup** (vLLM's prefix semantics, ``HybridKVCacheCoordinator``): the
   full-attention hit ``h`` is the longest run of the prompt's blocks from
   block 0 that every full-attention group holds, at most ``tokens - 1``
   tokens cut to whole blocks; the hit is the largest ``p <= h`` (a whole
   number of blocks) at which every sliding-window group holds the
   ``need = cdiv(window - 1, block)`` blocks before ``p`` (vLLM's
   ``SlidingWindowManager``: at least one block; none needed at ``p = 0``).
   The blocks the hit reads become the most recently used.
2. **The points a later lookup can land on** (vLLM's reachable boundaries,
   with the longer sibling that finding L3 restores): the resend
   ``floor((tokens - 1) / block)``, the longer sibling ``floor(tokens /
   block)`` (in blocks), and the junction ``h`` when the hit stopped below it
   (vLLM's ``shared_prefix_boundary``: the prefix other prompts share that a
   sliding-window group has not cached).
3. **Store**: every full block in each full-attention group; in each
   sliding-window group only the ``need`` blocks before each of those
   points. Stored blocks become the most recently used (a prompt's last
   block first, so its prefix is the last to go); then the least recently
   used blocks are evicted until the bytes fit the budget.

``reference_hits`` returns the hit tokens per prompt. With no sliding-window
group and an unbounded budget it is the prefix ceiling (every earlier prompt
kept); a sliding-window group loses the first prompt to diverge at a new
point (its window there was never stored), as vLLM's sparse retention does.

An EAGLE/MTP draft whose layers sit in a full-attention group changes two
things, each a parameter:

* ``hash_lookahead`` (vLLM's ``num_hash_lookahead_tokens``: a block's hash
  also covers that many tokens after it): a prompt has a key for block
  ``i`` only when it has ``(i + 1) * block + hash_lookahead`` tokens, so
  only those blocks are stored and looked up;
* ``eagle_drop`` (vLLM's ``use_eagle_block_drop``, legacy hashes: with a KV
  connector): the full-attention hit drops its last block before the
  sliding-window groups check it, so every point a lookup lands on is one
  block lower (a resend at ``cap - 1``, a longer sibling at ``n - 1``, a
  junction sibling one block below the shared run).

A draft in a sliding-window group is not modelled.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

Prompt = tuple[Sequence[Hashable], int]  # (full-block keys, token count)


@dataclass(frozen=True)
class Group:
    """One KV-cache group: its sliding window in tokens (None: full
    attention) and one block's bytes."""

    window: int | None
    block_bytes: int

    def __post_init__(self) -> None:
        if self.window is not None and (isinstance(self.window, bool) or not isinstance(self.window, int)
                                        or self.window < 1):
            raise ValueError(f"window must be a positive int or None, got {self.window!r}")
        if isinstance(self.block_bytes, bool) or not isinstance(self.block_bytes, int) or self.block_bytes < 1:
            raise ValueError(f"block_bytes must be a positive int, got {self.block_bytes!r}")


def chained_keys(token_ids: Sequence[int], block: int) -> list[int]:
    """A key per full ``block``-token block of a prompt, chained like vLLM's
    block hashes (a block's key covers its tokens and every block before
    it; Python's tuple hash, 64 bits: equal prefixes give equal keys, and
    unequal ones collide with odds of about n^2 / 2^64)."""
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive int, got {block!r}")
    keys = []
    key = 0
    for j in range(len(token_ids) // block):
        key = hash((key, tuple(token_ids[j * block:(j + 1) * block])))
        keys.append(key)
    return keys


def window_blocks(window: int, block: int) -> int:
    """Blocks a sliding-window hit needs before its end (vLLM's
    ``cdiv(sliding_window - 1, block_size)``, at least one)."""
    return max(1, -(-(window - 1) // block))


def reference_hits(prompts: Sequence[Prompt], block: int, groups: Sequence[Group],
                   capacity_bytes: int | None, *, hash_lookahead: int = 0,
                   eagle_drop: bool = False) -> list[int]:
    """Hit tokens per prompt of the reference store (module docstring);
    ``capacity_bytes`` None: unbounded."""
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive int, got {block!r}")
    if isinstance(hash_lookahead, bool) or not isinstance(hash_lookahead, int) or hash_lookahead < 0:
        raise ValueError(f"hash_lookahead must be a non-negative int, got {hash_lookahead!r}")
    if not isinstance(eagle_drop, bool):
        raise TypeError(f"eagle_drop must be a bool, got {eagle_drop!r}")
    if not groups or not all(isinstance(g, Group) for g in groups):
        raise ValueError("groups must be a non-empty sequence of Group")
    if capacity_bytes is not None and (isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int)
                                       or capacity_bytes < 0):
        raise ValueError(f"capacity_bytes must be a non-negative int or None, got {capacity_bytes!r}")
    # Groups with the same window keep the same blocks: one kind each, its bytes summed.
    kinds: dict[int | None, int] = {}
    for g in groups:
        kinds[g.window] = kinds.get(g.window, 0) + g.block_bytes
    full_bytes = kinds.pop(None, 0)
    windows = {w: window_blocks(w, block) for w in kinds}
    lru: OrderedDict[tuple[int | None, Hashable], int] = OrderedDict()  # (kind, key) -> bytes
    used = 0

    def has(kind: int | None, key: Hashable) -> bool:
        return (kind, key) in lru

    def touch(kind: int | None, key: Hashable, nbytes: int) -> None:
        nonlocal used
        entry = (kind, key)
        if entry in lru:
            lru.move_to_end(entry)
        else:
            lru[entry] = nbytes
            used += nbytes

    hits = []
    for keys, tokens in prompts:
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ValueError(f"a prompt's token count must be a non-negative int, got {tokens!r}")
        if len(keys) != tokens // block:
            raise ValueError(f"a prompt of {tokens} tokens has {tokens // block} full blocks, "
                             f"got {len(keys)} keys")
        keyed = max(0, tokens - hash_lookahead) // block  # blocks with a key
        cap = min(keyed, max(0, tokens - 1) // block)  # blocks a hit may cover
        h = 0
        if full_bytes:
            while h < cap and has(None, keys[h]):
                h += 1
        else:
            h = cap
        drop = 1 if eagle_drop else 0
        h = max(0, h - drop)
        # runs[w][i]: how many of blocks i, i - 1, ... kind w holds in a row.
        runs = {}
        for w in windows:
            run, count = [], 0
            for i in range(h):
                count = count + 1 if has(w, keys[i]) else 0
                run.append(count)
            runs[w] = run
        p = h
        while p > 0 and not all(runs[w][p - 1] >= min(need, p) for w, need in windows.items()):
            p -= 1
        hits.append(p * block)
        # The blocks the hit read become the most recently used.
        for i in range(p):
            if full_bytes:
                touch(None, keys[i], full_bytes)
        for w, need in windows.items():
            for i in range(max(0, p - need), p):
                touch(w, keys[i], kinds[w])
        points = {max(0, cap - drop), max(0, keyed - drop)}
        if p < h:
            points.add(h)
        # Stored last block first, so that a prompt's prefix, which every
        # hit on it reads, is the last of its blocks to be evicted.
        for w, need in windows.items():
            for end in sorted(points, reverse=True):
                for i in range(end - 1, max(0, end - need) - 1, -1):
                    touch(w, keys[i], kinds[w])
        if full_bytes:
            for key in reversed(keys[:keyed]):
                touch(None, key, full_bytes)
        while capacity_bytes is not None and used > capacity_bytes and lru:
            _, nbytes = lru.popitem(last=False)
            used -= nbytes
    return hits
