"""kv_index on the KV events of vLLM with ``BlockStored.block_offsets``
(upstream/block_offsets: the patch, applied to a copy of vLLM by
``make upstream-events``, which runs this file on that copy).

* kv_index reads the patched batches unchanged: the same events from the
  objects and from the msgpack bytes, and its scores still equal the
  manager's own ``get_computed_blocks`` on sliding-window and hybrid layouts
  that store sparsely (latest-only retention);
* with the offsets, a consumer places every listed hash on its block of
  ``token_ids`` (and, from block 0 or a placed parent, at its index in the
  request) without recomputing vLLM's hash chain: ``place_hashes``.

On a vLLM without the field every test here is skipped (said so).
"""

from __future__ import annotations

import dataclasses
import inspect
import random
from typing import Any

import pytest

pytest.importorskip("vllm")

import msgspec  # noqa: E402
from test_coordinators import FIXED_HYBRIDS, Group, Scenario, _make_request  # noqa: E402
from test_kv_index import _run  # noqa: E402
from vllm.distributed.kv_events import BlockStored, KVEventBatch  # noqa: E402
from vllm.utils.hashing import sha256_cbor  # noqa: E402
from vllm.v1.core import kv_cache_utils  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402

from swa_prefix_cache.kv_index.events import read_batch  # noqa: E402
from swa_prefix_cache.kv_index.hashing import event_key  # noqa: E402

pytestmark = pytest.mark.skipif(
    "block_offsets" not in BlockStored.__struct_fields__,
    reason="this vLLM's BlockStored has no block_offsets (make upstream-events runs "
    "this file on the patched copy)",
)

SPARSE = [
    Scenario((Group(16, 64),), 16, False),
    Scenario((Group(16, 64),), 16, True),
    *[Scenario(groups, h, eagle) for groups, h in FIXED_HYBRIDS[:2] for eagle in (False, True)],
]


def place_hashes(stored: Any, placed: dict[int, int]) -> list[tuple[int, list[int], int | None]]:
    """(hash, its block's tokens, its block index in the request or None) for
    each hash a ``BlockStored`` lists, from ``block_offsets`` alone.

    ``placed`` maps hashes already placed to their index; the event's
    ``token_ids`` start after ``parent_block_hash``'s block (at 0 with no
    parent), so the index is known when the parent is."""
    size = stored.block_size
    parent = stored.parent_block_hash
    start = 0 if parent is None else placed.get(event_key(parent), -2) + 1
    out = []
    for block_hash, offset in zip(stored.block_hashes, stored.block_offsets, strict=True):
        position = None if start < 0 else start + offset
        out.append((block_hash, stored.token_ids[offset * size:(offset + 1) * size], position))
        if position is not None:
            placed[event_key(block_hash)] = position
    return out


def _sparse_manager(scenario: Scenario, num_blocks: int) -> KVCacheManager:
    config = dataclasses.replace(scenario.kv_cache_config(num_blocks),
                                 prefix_cache_retention_interval=0)
    return KVCacheManager(
        kv_cache_config=config, max_model_len=64 * scenario.hash_block_size,
        scheduler_block_size=scenario.scheduler_block_size,
        hash_block_size=scenario.hash_block_size, enable_caching=True,
        use_eagle=scenario.use_eagle, enable_kv_cache_events=True,
    )


@pytest.mark.parametrize("scenario", SPARSE, ids=str)
def test_offsets_place_each_hash_without_the_chain(scenario: Scenario) -> None:
    kv_cache_utils.init_none_hash(sha256_cbor)
    rng = random.Random(7)
    h = scenario.hash_block_size
    manager = _sparse_manager(scenario, 400)
    doc = [rng.randrange(32_000) for _ in range(24 * h)]
    sparse = placed_by_index = 0
    for n, cut in enumerate((24 * h, 16 * h + 5, 24 * h + 9, 9 * h)):
        request = _make_request(rng, f"r{n}", 0, h, doc[:cut] + [n] * 7)
        blocks, hit, _ = manager.get_computed_blocks(request)
        assert manager.allocate_slots(request, request.num_tokens - hit, hit, blocks) is not None
        batch = KVEventBatch(ts=0.0, events=manager.take_events())
        # kv_index reads the new field's batches as before, objects or bytes.
        assert read_batch(batch) == read_batch(msgspec.msgpack.encode(batch))
        placed: dict[int, int] = {}
        for event in batch.events:
            if not isinstance(event, BlockStored):
                continue
            size = event.block_size
            sparse += len(event.block_hashes) < len(event.token_ids) // size
            for block_hash, tokens, position in place_hashes(event, placed):
                # vLLM's own hash of the block whose tokens the offsets name.
                index = [event_key(x) for x in request.block_hashes].index(event_key(block_hash))
                hashes_per_block = size // h
                block = (index + 1) // hashes_per_block - 1
                assert tokens == request.all_token_ids[block * size:(block + 1) * size]
                if position is not None:
                    assert position == block
                    placed_by_index += 1
        manager.free(request)
    assert sparse > 0 and placed_by_index > 0


@pytest.mark.parametrize("scenario", SPARSE, ids=str)
def test_index_scores_sparse_stores_as_vllm(scenario: Scenario, monkeypatch) -> None:
    """tests/test_kv_index.py's exactness run on latest-only retention."""
    config = Scenario.kv_cache_config
    monkeypatch.setattr(Scenario, "kv_cache_config", lambda self, num_blocks: dataclasses.replace(
        config(self, num_blocks), prefix_cache_retention_interval=0))
    # _run gains a hash-algorithm argument in a change under way; either is fine.
    algo = ("sha256_cbor",) if "algo" in inspect.signature(_run).parameters else ()
    done, hits = _run(scenario, random.Random(11), 200, *algo)
    assert done == 200 and hits > 0
