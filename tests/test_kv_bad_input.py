"""kv_index refuses bad input with an error that names it, and a refusal
changes nothing: a malformed batch leaves the index as it was, and a layout
that cannot be scored is refused when it is added, so one replica can never
break another's score.

Every malformed batch is tried as msgpack bytes (what a publisher sends)
and, where it can be built, as an object; on both cores (native and the
Python reference). A byte-level fuzz of vLLM's own encoding checks that
nothing else than ValueError / TypeError ever comes out of ``apply``.
"""

from __future__ import annotations

import random
import sys

import pytest

pytest.importorskip("vllm")

import msgspec  # noqa: E402
from vllm.distributed.kv_events import BlockRemoved, BlockStored, KVEventBatch  # noqa: E402

from swa_prefix_cache.kv_index import GroupLayout, KVIndex, ReplicaLayout  # noqa: E402
from swa_prefix_cache.kv_index.native import load as load_native  # noqa: E402

CORES = [False] + ([True] if load_native() is not None else [])
HYBRID = ReplicaLayout(
    (GroupLayout("full_attention", 16), GroupLayout("sliding_window", 16, sliding_window=64)), 16)
PROMPT = list(range(200))


def _stored(hashes: list[int], group: int) -> BlockStored:
    return BlockStored(block_hashes=hashes, parent_block_hash=None, token_ids=[], block_size=16,
                       lora_id=None, medium="GPU", lora_name=None, group_idx=group)


def _index(native: bool) -> KVIndex:
    """Two replicas, one holding the prompt's first blocks in both groups."""
    from swa_prefix_cache.kv_index.hashing import event_key, prompt_block_hashes

    index = KVIndex(native=native)
    index.add_replica("r0", HYBRID)
    index.add_replica("r1", HYBRID)
    keys = [event_key(h) for h in prompt_block_hashes(PROMPT, 16, "sha256", HYBRID.none_hash_seed)]
    index.apply("r0", KVEventBatch(ts=0.0, events=[_stored(keys[:8], 0), _stored(keys[:8], 1)]))
    return index


def _snapshot(index: KVIndex) -> tuple:
    return index.score(PROMPT), index.stats("r0"), index.stats("r1")


def _bytes(events: list, *rest) -> bytes:
    return msgspec.msgpack.encode([0.0, events, *rest])


# Each: (what is wrong, the bytes, the exception, a word the message names).
MALFORMED = [
    ("not msgpack", b"\xc1", ValueError, "msgpack"),
    ("truncated", _bytes([{"type": "BlockStored", "block_hashes": [1]}])[:-1], ValueError, "msgpack"),
    ("nested too deeply", b"\x91" * 100_000 + b"\xc0", ValueError, "nested"),
    ("not a batch", msgspec.msgpack.encode({"ts": 0}), ValueError, "KVEventBatch"),
    ("events not a list", msgspec.msgpack.encode([0.0, {"a": 1}]), ValueError, "KVEventBatch"),
    ("event not a map", _bytes([[1, 2]]), ValueError, "tagged map"),
    ("type not a str", _bytes([{"type": [1], "block_hashes": [1]}]), ValueError, "tagged map"),
    ("unknown type", _bytes([{"type": "BlockMoved", "block_hashes": [1]}]), ValueError, "BlockMoved"),
    ("no block_hashes", _bytes([{"type": "BlockStored", "group_idx": 0}]), ValueError, "block_hashes"),
    ("block_hashes a map", _bytes([{"type": "BlockRemoved", "block_hashes": {1: 2}}]), TypeError,
     "block_hashes"),
    ("block_hashes a str", _bytes([{"type": "BlockStored", "block_hashes": "ab"}]), TypeError,
     "block_hashes"),
    ("a hash a list", _bytes([{"type": "BlockStored", "block_hashes": [[1]], "group_idx": 0}]),
     TypeError, "block hash"),
    ("a hash a float", _bytes([{"type": "BlockStored", "block_hashes": [1.5], "group_idx": 0}]),
     TypeError, "block hash"),
    ("group_idx a str", _bytes([{"type": "BlockStored", "block_hashes": [1], "group_idx": "0"}]),
     TypeError, "group_idx"),
    ("group_idx out of range", _bytes([{"type": "BlockStored", "block_hashes": [1], "group_idx": 2}]),
     ValueError, "group_idx"),
    ("no group_idx, two groups", _bytes([{"type": "BlockStored", "block_hashes": [1]}]), ValueError,
     "group_idx"),
    ("medium an int", _bytes([{"type": "BlockStored", "block_hashes": [1], "medium": 3}]), TypeError,
     "medium"),
    ("rank a str", _bytes([], "dp0"), TypeError, "data_parallel_rank"),
]


@pytest.mark.parametrize("native", CORES, ids=lambda n: "native" if n else "python")
@pytest.mark.parametrize("what, data, error, word", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_batch_is_refused_and_changes_nothing(native, what, data, error, word) -> None:
    index = _index(native)
    before = _snapshot(index)
    # A good event first: a refused batch applies none of its events.
    good = {"type": "BlockRemoved", "block_hashes": [1], "group_idx": 0, "medium": "GPU"}
    raw = msgspec.msgpack.decode(data) if what not in ("not msgpack", "truncated",
                                                       "nested too deeply") else None
    if isinstance(raw, list) and len(raw) >= 2 and isinstance(raw[1], list):
        data = msgspec.msgpack.encode([raw[0], [good, *raw[1]], *raw[2:]])
    with pytest.raises(error, match=word):
        index.apply("r0", data)
    assert _snapshot(index) == before


@pytest.mark.parametrize("native", CORES, ids=lambda n: "native" if n else "python")
def test_a_malformed_event_object_is_refused(native) -> None:
    index = _index(native)
    before = _snapshot(index)

    class BlockStoredWithoutHashes:  # named as vLLM's event, lacking its field
        group_idx = 0
        medium = "GPU"

    BlockStoredWithoutHashes.__name__ = "BlockStored"
    for events, error, word in (
        ([BlockStoredWithoutHashes()], ValueError, "block_hashes"),
        ([BlockRemoved(block_hashes={1: 2}, medium="GPU", group_idx=0)], TypeError, "block_hashes"),
        ([BlockRemoved(block_hashes=[1], medium=7, group_idx=0)], TypeError, "medium"),
        ([BlockRemoved(block_hashes=[1], medium="GPU", group_idx=True)], TypeError, "group_idx"),
    ):
        with pytest.raises(error, match=word):
            index.apply("r0", KVEventBatch(ts=0.0, events=events))
    assert _snapshot(index) == before


@pytest.mark.parametrize("native", CORES, ids=lambda n: "native" if n else "python")
def test_fuzzed_bytes_only_ever_raise_value_or_type_error(native) -> None:
    """Random byte edits of vLLM's own encoding of a real batch: each is
    applied, or refused with ValueError / TypeError and nothing changed."""
    from vllm.distributed.kv_events import KVEventBatch as Batch

    encoded = msgspec.msgpack.Encoder().encode(Batch(ts=1.0, events=[
        _stored([11, 12, 13], 0), BlockRemoved(block_hashes=[11], medium="GPU", group_idx=1)]))
    rng = random.Random(7)
    index = _index(native)
    refused = 0
    for _ in range(3000):
        data = bytearray(encoded)
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(data))
            data[at] = rng.randrange(256)
        data = bytes(data[:rng.randrange(len(data) // 2, len(data) + 1)])
        before = _snapshot(index)
        try:
            index.apply("r1", data)
        except (ValueError, TypeError):
            refused += 1
            assert _snapshot(index) == before
    assert refused > 300, f"only {refused} of 3000 edits refused: the fuzz says little"


def test_a_window_below_one_token_is_refused() -> None:
    for window in (0, -1, -64):
        with pytest.raises(ValueError, match="sliding_window"):
            GroupLayout("sliding_window", 16, sliding_window=window)


@pytest.mark.parametrize("native", CORES, ids=lambda n: "native" if n else "python")
def test_a_layout_that_cannot_hash_is_refused_when_added(native, monkeypatch) -> None:
    """Refused by ``add_replica``, naming what is wrong; the replicas
    already there score as before."""
    index = _index(native)
    before = _snapshot(index)
    cbor = ReplicaLayout((GroupLayout("full_attention", 16),), 16, hash_algo="sha256_cbor")
    with pytest.raises(ValueError, match="none_hash_seed"):
        index.add_replica("bad-seed", ReplicaLayout((GroupLayout("full_attention", 16),), 16,
                                                    "sha256_cbor", "\ud800"))
    monkeypatch.setitem(sys.modules, "cbor2", None)  # cbor2 not installed
    with pytest.raises(ValueError, match="cbor2"):
        index.add_replica("no-cbor2", cbor)
    assert index.replicas() == ["r0", "r1"]
    assert _snapshot(index) == before
    monkeypatch.delitem(sys.modules, "cbor2")
    index.add_replica("cbor", cbor)
    assert index.score(PROMPT)["cbor"] == 0
