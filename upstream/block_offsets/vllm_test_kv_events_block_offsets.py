# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""``BlockStored.block_offsets``: each published hash is placed on its block
of ``token_ids``, also when a group caches sparsely (sliding window), and the
field stays wire compatible with consumers that predate it."""

from typing import Any

import msgspec
import pytest

from tests.v1.core.test_prefix_caching import (
    _make_pure_swa_manager,
    make_kv_cache_config,
    make_kv_cache_config_hybrid_model,
    make_kv_cache_manager,
    make_request,
)
from vllm.distributed.kv_events import (
    BlockRemoved,
    BlockStored,
    EventBatch,
    KVEventBatch,
)
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.core.kv_cache_utils import init_none_hash, maybe_convert_block_hash
from vllm.v1.request import Request

pytestmark = pytest.mark.cpu_test

BLOCK_SIZE = 16


@pytest.fixture(autouse=True)
def _init_none_hash():
    init_none_hash(sha256)


def _sliding_window_manager() -> KVCacheManager:
    # Latest-only retention: the group keeps only the tail a replay can hit.
    return _make_pure_swa_manager(
        BLOCK_SIZE,
        sliding_window=4 * BLOCK_SIZE,
        enable_kv_cache_events=True,
        retention_interval=0,
    )


def _hybrid_manager() -> KVCacheManager:
    return make_kv_cache_manager(
        make_kv_cache_config_hybrid_model(BLOCK_SIZE, 200, sliding_window_blocks=4),
        max_model_len=8192,
        enable_caching=True,
        hash_block_size=BLOCK_SIZE,
        enable_kv_cache_events=True,
        retention_interval=0,
    )


def _full_attention_manager() -> KVCacheManager:
    return make_kv_cache_manager(
        make_kv_cache_config(BLOCK_SIZE, 200),
        max_model_len=8192,
        enable_caching=True,
        hash_block_size=BLOCK_SIZE,
        enable_kv_cache_events=True,
    )


def _check_stores(manager: KVCacheManager, request: Request) -> tuple[int, int]:
    """Check the queued ``BlockStored`` events of ``request`` against the
    blocks the pool cached; returns (stores, sparse stores)."""
    hashes = [maybe_convert_block_hash(h) for h in request.block_hashes]
    managers = manager.coordinator.single_type_managers
    stores = sparse = 0
    for event in manager.take_events():
        if not isinstance(event, BlockStored):
            continue
        stores += 1
        num_blocks = len(event.token_ids) // event.block_size
        assert event.block_offsets is not None
        assert len(event.block_offsets) == len(event.block_hashes)
        assert event.block_offsets == sorted(set(event.block_offsets))
        assert all(0 <= offset < num_blocks for offset in event.block_offsets)
        sparse += len(event.block_hashes) < num_blocks
        # token_ids starts right after the parent block (at 0 without one).
        start = (
            0
            if event.parent_block_hash is None
            else hashes.index(event.parent_block_hash) + 1
        )
        positions = [start + offset for offset in event.block_offsets]
        assert event.block_hashes == [hashes[p] for p in positions]
        # Exactly the blocks of the range that the pool now caches are listed.
        blocks = managers[event.group_idx].req_to_blocks[request.request_id]
        cached = [
            p
            for p in range(start, start + num_blocks)
            if not blocks[p].is_null and blocks[p].block_hash is not None
        ]
        assert positions == cached
    return stores, sparse


@pytest.mark.parametrize(
    ("make_manager", "sparse_groups"),
    [
        (_sliding_window_manager, True),
        (_hybrid_manager, True),
        (_full_attention_manager, False),
    ],
)
def test_block_stored_offsets_match_cached_blocks(make_manager, sparse_groups):
    """Chunked prefill, decode and a resend of the same prompt: every store's
    offsets place each hash on the request's block at that position, which
    is the block the pool cached; sliding-window groups store sparsely."""
    manager = make_manager()
    prompt = [i % 97 for i in range(20 * BLOCK_SIZE + 5)]
    first_chunk = 8 * BLOCK_SIZE

    req0 = make_request("0", prompt, BLOCK_SIZE, sha256)
    assert manager.allocate_slots(req0, first_chunk) is not None
    stores, sparse = _check_stores(manager, req0)
    req0.num_computed_tokens = first_chunk
    assert manager.allocate_slots(req0, req0.num_tokens - first_chunk) is not None
    counts = _check_stores(manager, req0)
    stores, sparse = stores + counts[0], sparse + counts[1]
    req0.num_computed_tokens = req0.num_tokens
    for token in range(2 * BLOCK_SIZE):
        req0.append_output_token_ids(token)
    assert manager.allocate_slots(req0, 2 * BLOCK_SIZE) is not None
    counts = _check_stores(manager, req0)
    stores, sparse = stores + counts[0], sparse + counts[1]
    manager.free(req0)
    manager.take_events()

    # A resend hits the cache; what it stores next starts after the hit,
    # behind null blocks in a sliding-window group.
    req1 = make_request("1", prompt, BLOCK_SIZE, sha256)
    computed, num_computed, _ = manager.get_computed_blocks(req1)
    assert num_computed > 0
    assert (
        manager.allocate_slots(req1, req1.num_tokens - num_computed, num_computed, computed)
        is not None
    )
    counts = _check_stores(manager, req1)
    stores, sparse = stores + counts[0], sparse + counts[1]

    assert stores > 0
    assert (sparse > 0) == sparse_groups


def test_block_stored_offsets_of_reused_blocks():
    """``kv_cache_report_mode="full"`` re-reports the hit blocks from block 0:
    their offsets are 0..n-1."""
    manager = _full_attention_manager()
    prompt = list(range(6 * BLOCK_SIZE))
    req0 = make_request("0", prompt, BLOCK_SIZE, sha256)
    assert manager.allocate_slots(req0, req0.num_tokens) is not None
    manager.free(req0)
    manager.take_events()

    req1 = make_request("1", prompt, BLOCK_SIZE, sha256)
    req1.kv_cache_report_mode = "full"
    _, num_computed, _ = manager.get_computed_blocks(req1)
    assert num_computed == 5 * BLOCK_SIZE
    (event,) = [e for e in manager.take_events() if isinstance(e, BlockStored)]
    assert event.parent_block_hash is None
    assert event.block_offsets == list(range(5))
    assert event.block_hashes == [
        maybe_convert_block_hash(h) for h in req1.block_hashes[:5]
    ]


class _PreOffsetsBlockStored(
    msgspec.Struct,
    omit_defaults=True,  # type: ignore[call-arg]
    gc=False,  # type: ignore[call-arg]
    tag="BlockStored",  # type: ignore[call-arg]
):
    """BlockStored wire schema before block_offsets was added."""

    block_hashes: list[bytes]
    parent_block_hash: bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class _PreOffsetsKVEventBatch(EventBatch):
    """What a consumer that predates block_offsets decodes a batch with."""

    events: list[_PreOffsetsBlockStored | BlockRemoved]


def _sparse_store(block_offsets: list[int] | None) -> BlockStored:
    # Two kept blocks of four: the second and the last.
    return BlockStored(
        block_hashes=[b"\x01" * 32, b"\x02" * 32],
        parent_block_hash=None,
        token_ids=list(range(16)),
        block_size=4,
        lora_id=None,
        medium="GPU",
        lora_name=None,
        group_idx=1,
        kv_cache_spec_kind="sliding_window",
        kv_cache_spec_sliding_window=8,
        block_offsets=block_offsets,
    )


def test_block_offsets_round_trip():
    batch = KVEventBatch(ts=1.0, events=[_sparse_store([1, 3])])
    payload = msgspec.msgpack.encode(batch)
    decoded = msgspec.msgpack.Decoder(KVEventBatch).decode(payload)
    assert decoded.events[0].block_offsets == [1, 3]
    assert decoded.events == batch.events
    assert msgspec.msgpack.decode(payload)[1][0]["block_offsets"] == [1, 3]


def test_block_offsets_is_wire_compatible():
    new = _sparse_store([1, 3])
    # An old consumer decodes a new batch, ignoring the field.
    payload = msgspec.msgpack.encode(KVEventBatch(ts=1.0, events=[new]))
    old = msgspec.msgpack.Decoder(_PreOffsetsKVEventBatch).decode(payload).events[0]
    assert isinstance(old, _PreOffsetsBlockStored)
    assert old.block_hashes == new.block_hashes
    assert old.token_ids == new.token_ids
    assert old.group_idx == 1
    # Without offsets the bytes are the old schema's; decoded, they are None.
    legacy = _PreOffsetsBlockStored(
        **{
            f: getattr(new, f)
            for f in _PreOffsetsBlockStored.__struct_fields__
            if f != "type"
        }
    )
    assert msgspec.msgpack.encode(_sparse_store(None)) == msgspec.msgpack.encode(
        legacy
    )
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(legacy), type=BlockStored)
    assert decoded.block_offsets is None


def test_block_stored_hash_differs_by_block_offsets():
    assert hash(_sparse_store([1, 3])) != hash(_sparse_store([0, 3]))
    assert hash(_sparse_store([1, 3])) == hash(_sparse_store([1, 3]))
