"""``KVIndex``: per replica and KV-cache group, the block hashes its GPU
``BlockPool`` holds, and the hit its ``get_computed_blocks`` would return.

State. vLLM's pool maps a key (block hash, group) to one or more blocks
(two requests can cache the same block); the key is a hit while any block
is under it. Every insertion publishes a ``BlockStored`` entry and every
removal a ``BlockRemoved`` one (``BlockPool.cache_full_blocks``,
``_remove_cached_block_hashes``), so the index counts, per group, the
stores minus the removes of each key, and a key with a count is cached.
``AllBlocksCleared`` empties the replica. Events of another medium (the
CPU / storage tiers of KV offloading) are not the GPU pool's and are
skipped. One thing the count cannot see: with ``kv_cache_report_mode =
"full"`` (opt-in, per request) vLLM re-publishes reused blocks as stores;
such a replica is over-credited after evictions (docs/kv-index.md).

Score. The prompt's block hashes are recomputed (kv_index/hashing.py), each
group's cached mask read at its block boundaries (block ``i`` of a group
of block size ``bs`` is keyed by hash ``(i + 1) * bs / hash_block_size - 1``,
vLLM's ``BlockHashListWithBlockSize``), and the hit computed by pyspec with
vLLM's rules: one group = ``UnitaryKVCacheCoordinator`` (alignment = block
size, EAGLE drop as flagged); several = ``HybridKVCacheCoordinator``'s
fixed point (``pyspec.joint.joint_lookup``); the cap is the prompt length
minus one (``get_computed_blocks``' default ``max_cache_hit_length``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from kv_index.events import CLEARED, GPU_MEDIA, STORED, read_batch
from kv_index.hashing import event_key, prompt_block_hashes
from kv_index.layout import SLIDING_WINDOW, ReplicaLayout
from pyspec.joint import Group, group_hit, joint_lookup


class _Replica:
    def __init__(self, layout: ReplicaLayout) -> None:
        self.layout = layout
        self.keys: list[dict[int, int]] = [{} for _ in layout.groups]
        self.stats: Counter[str] = Counter()

    def clear(self) -> None:
        for keys in self.keys:
            keys.clear()


class KVIndex:
    """The cached blocks of several replicas, from their KV events."""

    def __init__(self) -> None:
        self._replicas: dict[str, _Replica] = {}

    def add_replica(self, name: str, layout: ReplicaLayout) -> None:
        if type(name) is not str:
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        if not isinstance(layout, ReplicaLayout):
            raise TypeError(f"layout must be a ReplicaLayout, not {type(layout).__name__}")
        if name in self._replicas:
            raise ValueError(f"name: replica {name!r} is already added")
        self._replicas[name] = _Replica(layout)

    def remove_replica(self, name: str) -> None:
        self._replica(name)
        del self._replicas[name]

    def reset(self, name: str) -> None:
        """Forget what replica ``name`` holds (e.g. after lost events)."""
        replica = self._replica(name)
        replica.clear()
        replica.stats["resets"] += 1

    def replicas(self) -> list[str]:
        return list(self._replicas)

    def stats(self, name: str) -> dict[str, int]:
        """Counters: events applied, keys stored / removed, removes of a key
        the index did not hold (it is behind), skipped other-medium events,
        clears, resets; and ``cached_keys`` now."""
        replica = self._replica(name)
        return dict(replica.stats, cached_keys=sum(len(k) for k in replica.keys))

    def _replica(self, name: str) -> _Replica:
        try:
            return self._replicas[name]
        except (KeyError, TypeError):
            raise ValueError(f"name: no replica {name!r}") from None

    def apply(self, name: str, batch: Any) -> int:
        """Apply one ``KVEventBatch`` (the object or its msgpack bytes) from
        replica ``name``; returns the number of events applied. A malformed
        batch raises ValueError / TypeError before anything is applied."""
        replica = self._replica(name)
        events, _rank = read_batch(batch)
        groups = len(replica.layout.groups)
        for event in events:
            if event.kind == CLEARED or event.medium not in GPU_MEDIA:
                continue
            if event.group_idx is None and groups != 1:
                raise ValueError(f"batch: a {event.kind} without group_idx for a {groups}-group replica")
            g = 0 if event.group_idx is None else event.group_idx
            if type(g) is not int or not 0 <= g < groups:
                raise ValueError(f"batch: group_idx {g!r} out of range for {groups} groups")
        for event in events:
            replica.stats["events"] += 1
            if event.kind == CLEARED:
                replica.clear()
                replica.stats["clears"] += 1
                continue
            if event.medium not in GPU_MEDIA:
                replica.stats["skipped_other_medium"] += 1
                continue
            keys = replica.keys[0 if event.group_idx is None else event.group_idx]
            if event.kind == STORED:
                for block_hash in event.block_hashes:
                    key = event_key(block_hash)
                    keys[key] = keys.get(key, 0) + 1
                replica.stats["stored"] += len(event.block_hashes)
                continue
            for block_hash in event.block_hashes:
                key = event_key(block_hash)
                count = keys.get(key)
                if count is None:
                    replica.stats["removed_unknown"] += 1
                elif count == 1:
                    del keys[key]
                else:
                    keys[key] = count - 1
            replica.stats["removed"] += len(event.block_hashes)
        return len(events)

    def score(self, prompt_token_ids: Sequence[int]) -> dict[str, int]:
        """Per replica, the tokens its ``get_computed_blocks`` would return
        for a plain prompt of these token ids now."""
        if isinstance(prompt_token_ids, (str, bytes)) or not isinstance(prompt_token_ids, Sequence):
            raise TypeError("prompt_token_ids must be a sequence of ints")
        if not all(type(t) is int for t in prompt_token_ids):
            raise TypeError("prompt_token_ids must hold ints only")
        chains: dict[tuple[int, str, str], list[int]] = {}
        scores = {}
        for name, replica in self._replicas.items():
            layout = replica.layout
            chain = (layout.hash_block_size, layout.hash_algo, layout.none_hash_seed)
            if chain not in chains:
                chains[chain] = [event_key(h) for h in prompt_block_hashes(prompt_token_ids, *chain)]
            scores[name] = _hit(replica, chains[chain], len(prompt_token_ids) - 1)
        return scores


def _hit(replica: _Replica, keys: list[int], max_cache_hit_length: int) -> int:
    """The replica's hit for a prompt whose block-hash keys are ``keys``."""
    if max_cache_hit_length <= 0:
        return 0
    layout = replica.layout
    h = layout.hash_block_size
    groups = []
    for gl, held in zip(layout.groups, replica.keys):
        k = gl.block_size // h
        # Block i of the group is keyed by hash (i + 1) * k - 1: keys[k-1::k].
        cached = tuple(map(held.__contains__, keys[k - 1::k]))
        window = gl.sliding_window if gl.kind == SLIDING_WINDOW else None
        groups.append(Group(gl.block_size, window, gl.eagle, cached))
    if len(groups) == 1:
        tokens, _first_real = group_hit(groups[0], max_cache_hit_length, groups[0].block_size,
                                        groups[0].eagle)
        return tokens
    return joint_lookup(groups, max_cache_hit_length, layout.alignment_tokens, h, len(keys)).hit_length
