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

Score. The prompt's block hashes are recomputed (swa_prefix_cache/kv_index/hashing.py), each
group's cached mask read at its block boundaries (block ``i`` of a group
of block size ``bs`` is keyed by hash ``(i + 1) * bs / hash_block_size - 1``,
vLLM's ``BlockHashListWithBlockSize``), and the hit computed by pyspec with
vLLM's rules: one group = ``UnitaryKVCacheCoordinator`` (alignment = block
size, EAGLE drop as flagged); several = ``HybridKVCacheCoordinator``'s
fixed point (``swa_prefix_cache.pyspec.joint.joint_lookup``); the cap is the prompt length
minus one (``get_computed_blocks``' default ``max_cache_hit_length``).

Two cores, one answer. The native core (swa_prefix_cache/kv_index/native.py: the extension
``swa_prefix_cache.kv_index._kvnative``) is the production path: the chain in C (sha256;
sha256_cbor stays in Python), each group's keys in a C hash set, the
masks and the proved ``group_hit`` / ``joint_lookup`` of swa_prefix_cache/core/proved/joint.c
in one call per replica. The pure-Python path above (dicts and pyspec) is
the reference, and the fallback when the extension is not built (said once
in the log); ``KVIndex(native=False)`` asks for it. tests/test_kv_native.py
checks that both answer the same.
"""

from __future__ import annotations

import functools
import threading
from array import array
from collections import Counter
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from swa_prefix_cache.kv_index import native as _native_loader
from swa_prefix_cache.kv_index.events import CLEARED, GPU_MEDIA, STORED, read_batch
from swa_prefix_cache.kv_index.hashing import event_key, none_hash, prompt_block_hashes
from swa_prefix_cache.kv_index.layout import SLIDING_WINDOW, ReplicaLayout
from swa_prefix_cache.pyspec.joint import Group, attention_groups, group_hit, joint_lookup

# The proved C's range for block sizes, windows and the alignment (joint.h:
# PC_MAX_BLOCKS); a layout beyond it is scored by the reference.
_C_LIMIT = 1 << 62


class _DictKeys:
    """The reference key store: per key, stores minus removes, in a dict."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}

    @staticmethod
    def prepare(block_hashes: Sequence[Any]) -> list[int]:
        """An event's keys (TypeError for a hash that is neither bytes nor int)."""
        return [event_key(h) for h in block_hashes]

    def store(self, keys: list[int]) -> None:
        counts = self.counts
        for key in keys:
            counts[key] = counts.get(key, 0) + 1

    def remove(self, keys: list[int]) -> int:
        """One remove of each key; returns how many it did not hold."""
        counts, unknown = self.counts, 0
        for key in keys:
            count = counts.get(key)
            if count is None:
                unknown += 1
            elif count == 1:
                del counts[key]
            else:
                counts[key] = count - 1
        return unknown

    def clear(self) -> None:
        self.counts.clear()

    def __len__(self) -> int:
        return len(self.counts)

    def __contains__(self, key: int) -> bool:
        return key in self.counts


class _NativeKeys:
    """The native key store: uint64 keys in a C ``KeySet``; an int key
    outside [0, 2**64) (an event can carry one; no prompt key is one) in a
    dict beside it, so that counts and stats are the reference's."""

    def __init__(self, native: ModuleType) -> None:
        self.set = native.KeySet()
        self.big = _DictKeys()

    def store(self, prepared: tuple[bytes, list[int]]) -> None:
        packed, big = prepared
        self.set.add(packed)
        if big:
            self.big.store(big)

    def remove(self, prepared: tuple[bytes, list[int]]) -> int:
        packed, big = prepared
        unknown = self.set.remove(packed)
        return unknown + self.big.remove(big) if big else unknown

    def clear(self) -> None:
        self.set.clear()
        self.big.clear()

    def __len__(self) -> int:
        return len(self.set) + len(self.big)

    def __contains__(self, key: int) -> bool:
        return key in self.set or key in self.big


def _plan(layout: ReplicaLayout) -> tuple[tuple[int, int, int, int, tuple[int, ...]], ...] | None:
    """The replica's attention groups for the native score, as
    ``swa_prefix_cache.pyspec.attention_groups`` merges them (equal specs; full attention
    first): ``(block_size, sliding_window, is_full, eagle, members)``; None
    when a value is beyond the proved C's range."""
    groups = [Group(g.block_size, g.sliding_window if g.kind == SLIDING_WINDOW else None, g.eagle, ())
              for g in layout.groups]
    plan = tuple((a.block_size, 0 if a.sliding_window is None else a.sliding_window,
                  int(a.is_full), int(a.eagle), a.members) for a in attention_groups(groups))
    if layout.alignment_tokens > _C_LIMIT or any(
            bs > _C_LIMIT or abs(window) > _C_LIMIT for bs, window, *_ in plan):
        return None
    return plan


class _Replica:
    def __init__(self, layout: ReplicaLayout, native: ModuleType | None) -> None:
        self.layout = layout
        self.stats: Counter[str] = Counter()
        self.keys: list[Any]
        if native is None:
            self.keys = [_DictKeys() for _ in layout.groups]
            self.prepare = _DictKeys.prepare
            self.plan = None
        else:
            self.keys = [_NativeKeys(native) for _ in layout.groups]
            self.prepare = native.keys_of
            self.plan = _plan(layout)
            self.keysets = tuple(k.set for k in self.keys)
        self._none_hash = _seed_hash(layout)

    def none_hash(self) -> bytes:
        return self._none_hash

    def clear(self) -> None:
        for keys in self.keys:
            keys.clear()


def _seed_hash(layout: ReplicaLayout) -> bytes:
    """The replica's ``NONE_HASH``, computed when it is added, so that a
    layout whose chain cannot be computed here is refused then (ValueError)
    and never makes a later ``score`` fail for every replica."""
    algo = layout.hash_algo
    try:
        return none_hash(algo, layout.none_hash_seed)
    except ImportError as exc:
        raise ValueError(f"layout: hash_algo {algo!r} needs the {exc.name} package, "
                         "which is not installed here") from None
    except Exception as exc:  # what the hash's encoder refuses (pickle, CBOR)
        raise ValueError(f"layout: none_hash_seed {layout.none_hash_seed!r:.60} cannot be "
                         f"encoded for {algo} ({type(exc).__name__}: {exc})") from None


def _locked(method: Any) -> Any:
    """Run a ``KVIndex`` method under the index's lock (see the class docstring)."""

    @functools.wraps(method)
    def under_lock(self: KVIndex, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return under_lock


def _check_tokens(prompt_token_ids: Sequence[int]) -> None:
    if not all(type(t) is int for t in prompt_token_ids):
        raise TypeError("prompt_token_ids must hold ints only")


class KVIndex:
    """The cached blocks of several replicas, from their KV events.

    ``native``: None (default) scores with the native core when it is built,
    else with the pure-Python reference; True requires the native core
    (``NativeUnavailable`` otherwise); False uses the reference.

    Thread safety: one lock (an ``RLock``) is held by ``add_replica``,
    ``remove_replica``, ``reset``, ``replicas``, ``stats``, ``apply`` and
    ``score``, so a thread applying events and threads scoring requests can
    share one index; a score sees each batch wholly applied or not at all."""

    def __init__(self, native: bool | None = None) -> None:
        if native is not None and type(native) is not bool:
            raise TypeError(f"native must be a bool or None, not {type(native).__name__}")
        self._replicas: dict[str, _Replica] = {}
        self._lock = threading.RLock()
        if native is None:
            self._native = _native_loader.load()
        elif native:
            self._native = _native_loader.require()
        else:
            self._native = None

    @property
    def core(self) -> str:
        """Which core answers: ``"native"`` (swa_prefix_cache.kv_index._kvnative: C chain,
        C key sets, the proved joint.c) or ``"python"`` (the reference)."""
        return "python" if self._native is None else "native"

    @_locked
    def add_replica(self, name: str, layout: ReplicaLayout) -> None:
        if type(name) is not str:
            raise TypeError(f"name must be a str, not {type(name).__name__}")
        if not isinstance(layout, ReplicaLayout):
            raise TypeError(f"layout must be a ReplicaLayout, not {type(layout).__name__}")
        if name in self._replicas:
            raise ValueError(f"name: replica {name!r} is already added")
        self._replicas[name] = _Replica(layout, self._native)

    @_locked
    def remove_replica(self, name: str) -> None:
        self._replica(name)
        del self._replicas[name]

    @_locked
    def reset(self, name: str) -> None:
        """Forget what replica ``name`` holds (e.g. after lost events)."""
        replica = self._replica(name)
        replica.clear()
        replica.stats["resets"] += 1

    @_locked
    def replicas(self) -> list[str]:
        return list(self._replicas)

    @_locked
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

    @_locked
    def apply(self, name: str, batch: Any) -> int:
        """Apply one ``KVEventBatch`` (the object or its msgpack bytes) from
        replica ``name``; returns the number of events applied. A malformed
        batch (a bad group, a block hash neither bytes nor int) raises
        ValueError / TypeError before anything is applied."""
        replica = self._replica(name)
        events, _rank = read_batch(batch)
        groups = len(replica.layout.groups)
        prepared = []
        for event in events:
            if event.kind == CLEARED or event.medium not in GPU_MEDIA:
                prepared.append(None)
                continue
            if event.group_idx is None and groups != 1:
                raise ValueError(f"batch: a {event.kind} without group_idx for a {groups}-group replica")
            g = 0 if event.group_idx is None else event.group_idx
            if type(g) is not int or not 0 <= g < groups:
                raise ValueError(f"batch: group_idx {g!r} out of range for {groups} groups")
            prepared.append(replica.prepare(event.block_hashes))
        stats = replica.stats
        for event, keys in zip(events, prepared):
            stats["events"] += 1
            if event.kind == CLEARED:
                replica.clear()
                stats["clears"] += 1
                continue
            if event.medium not in GPU_MEDIA:
                stats["skipped_other_medium"] += 1
                continue
            store = replica.keys[0 if event.group_idx is None else event.group_idx]
            if event.kind == STORED:
                store.store(keys)
                stats["stored"] += len(event.block_hashes)
                continue
            unknown = store.remove(keys)
            if unknown:
                stats["removed_unknown"] += unknown
            stats["removed"] += len(event.block_hashes)
        return len(events)

    @_locked
    def score(self, prompt_token_ids: Sequence[int]) -> dict[str, int]:
        """Per replica, the tokens its ``get_computed_blocks`` would return
        for a plain prompt of these token ids now."""
        if isinstance(prompt_token_ids, (str, bytes)) or not isinstance(prompt_token_ids, Sequence):
            raise TypeError("prompt_token_ids must be a sequence of ints")
        if self._native is None:
            return self._score_reference(prompt_token_ids)
        native = self._native
        chains: dict[tuple[int, str, str], bytes] = {}
        checked = False
        scores = {}
        max_len = len(prompt_token_ids) - 1
        for name, replica in self._replicas.items():
            layout = replica.layout
            chain = (layout.hash_block_size, layout.hash_algo, layout.none_hash_seed)
            keys = chains.get(chain)
            if keys is None:
                if layout.hash_algo == "sha256":
                    keys = native.prompt_block_keys(prompt_token_ids, layout.hash_block_size,
                                                    replica.none_hash())
                if keys is None:  # sha256_cbor, or tokens the C encoder declines
                    _check_tokens(prompt_token_ids)
                    keys = array("Q", [event_key(h) for h in
                                       prompt_block_hashes(prompt_token_ids, *chain)]).tobytes()
                checked = True
                chains[chain] = keys
            if replica.plan is None:
                scores[name] = _hit(replica, array("Q", keys).tolist(), max_len)
            else:
                scores[name] = native.score(replica.plan, replica.keysets, keys,
                                            layout.hash_block_size, layout.alignment_tokens,
                                            max_len, len(layout.groups) > 1)
        if not checked:
            _check_tokens(prompt_token_ids)
        return scores

    def _score_reference(self, prompt_token_ids: Sequence[int]) -> dict[str, int]:
        _check_tokens(prompt_token_ids)
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
    """The replica's hit for a prompt whose block-hash keys are ``keys``
    (the reference: pyspec)."""
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
