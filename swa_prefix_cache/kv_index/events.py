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

import functools
from collections.abc import Callable
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


def _decoder() -> Callable[[bytes], Any]:
    """msgspec's msgpack decoder (vLLM's own), else msgpack's."""
    try:
        import msgspec
    except ImportError:
        import msgpack  # type: ignore[import-not-found]

        return functools.partial(msgpack.unpackb, raw=False, strict_map_key=False)
    return msgspec.msgpack.decode


def _decode(data: bytes) -> Any:
    """The msgpack value of ``data``; ValueError for anything that is not
    valid msgpack (a decoder's own error, or a nesting too deep for it)."""
    decode = _decoder()
    try:
        return decode(data)
    except RecursionError:
        raise ValueError("batch: msgpack nested too deeply") from None
    except Exception as exc:  # each decoder has its own error classes
        raise ValueError(f"batch: not valid msgpack ({type(exc).__name__}: {exc})") from None


def _hashes(value: Any) -> tuple[Any, ...]:
    """An event's ``block_hashes``: a list (msgpack array); a map, a string
    or anything else is refused (iterating a map would read its keys as
    hashes). Each hash is checked, bytes or int, where the index converts
    it to a key (``KVIndex.apply``), before anything is applied."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"batch: block_hashes must be a list, not {type(value).__name__}")
    return tuple(value)


def _event(kind: Any, block_hashes: Any, group_idx: Any, medium: Any) -> Event:
    """One event, checked field by field (the index applies nothing of a
    batch with one bad event)."""
    if kind == CLEARED:
        return Event(CLEARED)
    if kind not in (STORED, REMOVED):
        raise ValueError(f"batch: unknown event type {kind!r:.80}")
    if group_idx is not None and type(group_idx) is not int:
        raise TypeError(f"batch: group_idx must be an int, not {type(group_idx).__name__}")
    if medium is not None and type(medium) is not str:
        raise TypeError(f"batch: medium must be a str, not {type(medium).__name__}")
    return Event(kind, _hashes(block_hashes), group_idx, medium)


_MISSING = object()


def _from_map(event: Any) -> Event:
    if not isinstance(event, dict) or type(event.get("type")) is not str:
        raise ValueError(f"batch: an event is not a tagged map: {event!r:.80}")
    kind = event["type"]
    hashes = event.get("block_hashes", _MISSING)
    if hashes is _MISSING and kind != CLEARED:
        raise ValueError(f"batch: a {kind:.40} event without block_hashes")
    return _event(kind, hashes, event.get("group_idx"), event.get("medium"))


def _from_object(event: Any) -> Event:
    kind = type(event).__name__
    hashes = getattr(event, "block_hashes", _MISSING)
    if hashes is _MISSING and kind in (STORED, REMOVED):
        raise ValueError(f"batch: a {kind} event without block_hashes")
    return _event(kind, hashes, getattr(event, "group_idx", None), getattr(event, "medium", None))


def read_batch(batch: Any) -> tuple[list[Event], int | None]:
    """The events of ``batch`` and its data-parallel rank."""
    if isinstance(batch, (bytes, bytearray, memoryview)):
        raw = _decode(bytes(batch))
        if not isinstance(raw, list) or len(raw) < 2 or not isinstance(raw[1], list):
            raise ValueError("batch: msgpack bytes are not a KVEventBatch [ts, events, ...]")
        rank = raw[2] if len(raw) > 2 else None
        if rank is not None and type(rank) is not int:
            raise TypeError(f"batch: data_parallel_rank must be an int, not {type(rank).__name__}")
        return [_from_map(e) for e in raw[1]], rank
    events = getattr(batch, "events", None)
    if not isinstance(events, list):
        raise TypeError(f"batch must be a KVEventBatch or its msgpack bytes, not {type(batch).__name__}")
    return [_from_object(e) for e in events], getattr(batch, "data_parallel_rank", None)
