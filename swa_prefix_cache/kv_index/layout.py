"""What a replica's prefix-cache lookup depends on that its events do not say.

vLLM's KV events name a group (``group_idx``) and list block hashes; the
rules of the lookup (each group's kind, block size and window, which groups
drop the EAGLE block, the alignment, the hash block size and algorithm) are
the replica's configuration. ``ReplicaLayout`` holds them, from plain values
or from the replica's ``KVCacheConfig`` (duck-typed: no vLLM import).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from swa_prefix_cache.pyspec.joint import drop_flags

FULL = "full_attention"
SLIDING_WINDOW = "sliding_window"
KINDS = (FULL, SLIDING_WINDOW)
# vLLM's --prefix-caching-hash-algo values kv_index can recompute (xxhash
# needs a seed shared by PYTHONHASHSEED and the xxhash package: not yet).
HASH_ALGOS = ("sha256", "sha256_cbor")
# vLLM's NONE_HASH seed for a cryptographic hash when PYTHONHASHSEED is unset
# (vllm/v1/core/kv_cache_utils.py DEFAULT_NONE_HASH_SEED).
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
# The spec classes vLLM looks up with FullAttentionManager / SlidingWindowManager.
SPEC_KINDS = {
    "FullAttentionSpec": FULL,
    "MLAAttentionSpec": FULL,
    "SlidingWindowSpec": SLIDING_WINDOW,
}


def _positive_int(value: Any, name: str) -> int:
    if type(value) is not int:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


@dataclass(frozen=True)
class GroupLayout:
    """One KV-cache group, in the replica's group order (``group_idx``).

    ``eagle``: the group drops the EAGLE block (its id is in the
    coordinator's ``drop_eagle_group_ids``).
    """

    kind: str
    block_size: int
    sliding_window: int | None = None
    eagle: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        _positive_int(self.block_size, "block_size")
        if self.kind == SLIDING_WINDOW:
            if type(self.sliding_window) is not int:
                raise TypeError("sliding_window must be an int for a sliding-window group")
            if self.sliding_window < 1:
                # No model's window is below one token: such a value is a mistake,
                # refused rather than scored.
                raise ValueError(f"sliding_window must be >= 1, got {self.sliding_window}")
        elif self.sliding_window is not None:
            raise ValueError("sliding_window must be None for a full-attention group")
        if type(self.eagle) is not bool:
            raise TypeError("eagle must be a bool")


@dataclass(frozen=True)
class ReplicaLayout:
    """A replica's lookup rules.

    ``groups``: in the replica's order. ``hash_block_size``: the tokens per
    block hash (vLLM's ``hash_block_size``; every group block size is a
    multiple of it). ``hash_algo``: ``--prefix-caching-hash-algo``.
    ``none_hash_seed``: the replica's ``PYTHONHASHSEED`` if it sets one,
    else vLLM's fixed seed. The alignment of a hybrid lookup is the lcm of
    the block sizes (``alignment_tokens``).
    """

    groups: tuple[GroupLayout, ...]
    hash_block_size: int
    hash_algo: str = "sha256"
    none_hash_seed: str = DEFAULT_NONE_HASH_SEED

    def __post_init__(self) -> None:
        if not isinstance(self.groups, tuple) or not self.groups:
            raise ValueError("groups must be a non-empty tuple of GroupLayout")
        for g in self.groups:
            if not isinstance(g, GroupLayout):
                raise TypeError(f"groups must hold GroupLayout, not {type(g).__name__}")
        _positive_int(self.hash_block_size, "hash_block_size")
        for i, g in enumerate(self.groups):
            if g.block_size % self.hash_block_size:
                raise ValueError(
                    f"groups[{i}].block_size {g.block_size} is not a multiple of "
                    f"hash_block_size {self.hash_block_size}"
                )
        if len(self.groups) == 1 and self.groups[0].block_size != self.hash_block_size:
            raise ValueError("a one-group replica hashes at its block size (hash_block_size)")
        if self.hash_algo not in HASH_ALGOS:
            raise ValueError(f"hash_algo must be one of {HASH_ALGOS}, got {self.hash_algo!r}")
        if type(self.none_hash_seed) is not str:
            raise TypeError("none_hash_seed must be a str")

    @property
    def alignment_tokens(self) -> int:
        """The coordinator's scheduler block size: lcm of the hash block
        size and every group block size (swa_prefix_cache.pyspec.joint.scheduler_block_size)."""
        return math.lcm(self.hash_block_size, *(g.block_size for g in self.groups))

    @classmethod
    def from_kv_cache_config(
        cls,
        kv_cache_config: Any,
        hash_block_size: int,
        use_eagle: bool = False,
        hash_algo: str = "sha256",
        none_hash_seed: str | None = None,
    ) -> ReplicaLayout:
        """From a vLLM ``KVCacheConfig`` (its ``kv_cache_groups``: each one's
        ``kv_cache_spec`` and ``is_eagle_group``) and the engine's settings
        that are not in it. Raises ValueError for a group kind kv_index does
        not model (Mamba, chunked local attention, ...)."""
        groups_in = getattr(kv_cache_config, "kv_cache_groups", None)
        if not isinstance(groups_in, Sequence) or not groups_in:
            raise TypeError("kv_cache_config must have a non-empty kv_cache_groups list")
        if type(use_eagle) is not bool:
            raise TypeError("use_eagle must be a bool")
        drops = drop_flags([bool(getattr(g, "is_eagle_group", False)) for g in groups_in], use_eagle)
        groups = []
        for i, (group, drop) in enumerate(zip(groups_in, drops)):
            spec = group.kv_cache_spec
            kind = SPEC_KINDS.get(type(spec).__name__)
            if kind is None:
                raise ValueError(
                    f"kv_cache_config: group {i} has a {type(spec).__name__}, which kv_index "
                    "does not model"
                )
            window = spec.sliding_window if kind == SLIDING_WINDOW else None
            groups.append(GroupLayout(kind, spec.block_size, window, drop))
        return cls(
            tuple(groups), hash_block_size, hash_algo,
            DEFAULT_NONE_HASH_SEED if none_hash_seed is None else none_hash_seed,
        )
