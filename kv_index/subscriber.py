"""A ZMQ subscriber for one vLLM publisher (one replica, one data-parallel
rank) feeding a ``KVIndex``.

vLLM's ``ZmqEventPublisher`` (vllm/distributed/kv_events.py, 0.33.0) sends
each ``KVEventBatch`` on a PUB socket as three frames ``(topic, seq, payload)``
(``seq``: 8-byte big-endian, from 0; ``payload``: msgpack) and keeps the last
``buffer_steps`` batches for replay on a ROUTER socket: a request carrying a
start ``seq`` (8 bytes) gets every buffered batch from there as ``(topic,
seq, payload)``, then an end marker with ``seq = -1``. vLLM binds the PUB
socket only for ``*``, ``::`` or ipc endpoints; a subscriber connects.

Order is what makes the index exact: batches are applied in ``seq`` order,
each once. A gap (the first batch seen is not 0, or a ``seq`` is skipped)
is filled from the replay socket; when the replay cannot fill it (no replay
endpoint, or the batches are no longer buffered), the replica is reset
(``KVIndex.reset``) and ``complete`` is False from then on. The index then
holds only what was stored after the gap, and every removal after it is
applied: it can under-credit the replica (blocks stored before the gap),
never credit a block the replica does not hold.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kv_index.index import KVIndex

END_SEQ = -1


def _seq(frame: bytes) -> int:
    return int.from_bytes(frame, "big", signed=True)


class Subscriber:
    """``poll()`` applies what has arrived; ``close()`` releases the sockets."""

    def __init__(
        self,
        index: KVIndex,
        name: str,
        endpoint: str,
        replay_endpoint: str | None = None,
        topic: str = "",
        context: Any = None,
        replay_timeout_ms: int = 2000,
    ) -> None:
        import zmq

        if name not in index.replicas():
            raise ValueError(f"name: replica {name!r} is not in the index")
        if type(endpoint) is not str or "://" not in endpoint:
            raise ValueError(f"endpoint must be a zmq address, got {endpoint!r}")
        self.index, self.name = index, name
        self._ctx = context or zmq.Context.instance()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.SUBSCRIBE, topic.encode("utf-8"))
        self._sub.connect(endpoint)
        self._replay_endpoint = replay_endpoint
        self._replay_timeout_ms = replay_timeout_ms
        self.next_seq = 0  # the next batch to apply
        self.complete = True  # every batch from seq 0 on was applied
        self.stats: Counter[str] = Counter()
        if replay_endpoint is not None:
            self.catch_up()

    def close(self) -> None:
        self._sub.close(linger=0)

    def catch_up(self) -> int:
        """Ask the replay socket for every batch from ``next_seq`` on and
        apply them (a subscriber that joins late, or one that has seen no
        batch for a while: PUB drops what is sent before a subscription has
        reached it). Returns the number applied; resets the replica when
        the publisher no longer holds ``next_seq``."""
        if self._replay_endpoint is None:
            return 0
        replayed = self._replay(self.next_seq)
        if replayed is None:
            self.stats["replay_timeouts"] += 1
            return 0
        if replayed and replayed[0][0] > self.next_seq:
            self._reset(replayed[0][0])
        return self._apply_replayed(replayed)

    def poll(self, timeout_ms: int = 0) -> int:
        """Apply every batch that has arrived (waiting up to ``timeout_ms``
        for the first); returns the number of batches applied."""
        applied = 0
        wait = timeout_ms
        while self._sub.poll(wait):
            wait = 0
            frames = self._sub.recv_multipart()
            if len(frames) != 3:
                self.stats["malformed"] += 1
                continue
            applied += self._on_batch(_seq(frames[1]), frames[2])
        return applied

    def _on_batch(self, seq: int, payload: bytes) -> int:
        if seq < self.next_seq:
            self.stats["duplicates"] += 1
            return 0
        applied = 0
        if seq > self.next_seq:
            self.stats["gaps"] += 1
            applied += self._fill(seq)
            if seq < self.next_seq:  # the replay brought it too
                return applied
        self.index.apply(self.name, payload)
        self.next_seq = seq + 1
        return applied + 1

    def _fill(self, upto: int) -> int:
        """Apply batches ``next_seq .. upto - 1`` from the replay socket, or
        reset the replica and start over at ``upto``."""
        replayed = self._replay(self.next_seq) if self._replay_endpoint else None
        if not replayed or replayed[0][0] != self.next_seq:
            self._reset(upto)
            return 0
        return self._apply_replayed(replayed)

    def _reset(self, seq: int) -> None:
        self.stats["resets"] += 1
        self.complete = False
        self.index.reset(self.name)
        self.next_seq = seq

    def _apply_replayed(self, replayed: list[tuple[int, bytes]]) -> int:
        applied = 0
        for seq, payload in replayed:
            if seq == self.next_seq:
                self.index.apply(self.name, payload)
                self.next_seq = seq + 1
                applied += 1
        self.stats["replayed"] += applied
        return applied

    def _replay(self, start: int) -> list[tuple[int, bytes]] | None:
        return replay(self._ctx, self._replay_endpoint, start, self._replay_timeout_ms)


def replay(context: Any, endpoint: str, start: int, timeout_ms: int) -> list[tuple[int, bytes]] | None:
    """A publisher's buffered batches from ``start`` on, as ``(seq,
    payload)``, from its replay socket at ``endpoint``; None when it does
    not answer within ``timeout_ms``."""
    import zmq

    sock = context.socket(zmq.DEALER)
    try:
        sock.connect(endpoint)
        sock.send_multipart((b"", start.to_bytes(8, "big")))
        out: list[tuple[int, bytes]] = []
        while sock.poll(timeout_ms):
            frames = sock.recv_multipart()
            if len(frames) != 4:
                continue
            seq = _seq(frames[2])
            if seq == END_SEQ:
                return out
            out.append((seq, frames[3]))
        return None
    finally:
        sock.close(linger=0)
