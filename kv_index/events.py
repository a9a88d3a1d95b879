"""vLLM's ``KVEventBatch``, as the object or as its msgpack bytes, read
into plain tuples (no vLLM import).

vLLM 0.33.0 (vllm/distributed/kv_events.py) encodes a batch with msgspec:
the batch is an array ``[ts, events, data_parallel_rank?]``; each event a map
tagged ``"type"`` (``BlockStored``, ``BlockRemoved``, ``AllBlocksCleared``)
with its default-valued fields left out. What the index needs of an event:

* ``BlockStored``: ``block_hashes`` (one per block stored, sparse for a
  sliding-window group: only the blocks kept), ``group_idx``, ``medium``;
* ``BlockRemoved``: ``block_hashes``, ``group_idx``, ``medium``;
* ``AllBlocksCleared``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STORED, REMOVED, CLEARED = "BlockStored", "BlockRemoved", "AllBlocksCleared"
# The GPU pool's medium (None: a publisher that does not say).
GPU_MEDIA = ("GPU", None)


@dataclass(frozen=True)
class Event:
    kind: str
    block_hashes: tuple[Any, ...] = ()
    group_idx: int | None = None
    medium: str | None = None


def _decode(data: bytes) -> Any:
    try:
        import msgspec
    except ImportError:
        import msgpack  # type: ignore[import-not-found]

        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    return msgspec.msgpack.decode(data)


def _from_map(event: Any) -> Event:
    if not isinstance(event, dict) or "type" not in event:
        raise ValueError(f"batch: an event is not a tagged map: {event!r:.80}")
    kind = event["type"]
    if kind == CLEARED:
        return Event(CLEARED)
    if kind not in (STORED, REMOVED):
        raise ValueError(f"batch: unknown event type {kind!r}")
    return Event(kind, tuple(event["block_hashes"]), event.get("group_idx"), event.get("medium"))


def _from_object(event: Any) -> Event:
    kind = type(event).__name__
    if kind == CLEARED:
        return Event(CLEARED)
    if kind not in (STORED, REMOVED):
        raise ValueError(f"batch: unknown event type {kind!r}")
    return Event(kind, tuple(event.block_hashes), getattr(event, "group_idx", None),
                 getattr(event, "medium", None))


def read_batch(batch: Any) -> tuple[list[Event], int | None]:
    """The events of ``batch`` and its data-parallel rank."""
    if isinstance(batch, (bytes, bytearray, memoryview)):
        raw = _decode(bytes(batch))
        if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[1], list):
            raise ValueError("batch: msgpack bytes are not a KVEventBatch [ts, events, ...]")
        rank = raw[2] if len(raw) > 2 else None
        return [_from_map(e) for e in raw[1]], rank
    events = getattr(batch, "events", None)
    if not isinstance(events, list):
        raise TypeError(f"batch must be a KVEventBatch or its msgpack bytes, not {type(batch).__name__}")
    return [_from_object(e) for e in events], getattr(batch, "data_parallel_rank", None)
