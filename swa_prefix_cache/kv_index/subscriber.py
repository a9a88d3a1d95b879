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

Faults. ``complete`` means: the index equals the replica, because every
batch the current publisher sent since its seq 0 (or since its last
``AllBlocksCleared``) was applied, in order. It turns False on a reset (a
gap the replay cannot fill, a replay that skips a seq or times out, a
batch the index refuses, a publisher restart or disconnect) and back True
when, on a reset replica, a batch with seq 0 is applied (a vLLM process
starts with an empty pool) or a batch carrying ``AllBlocksCleared`` (vLLM's
``reset_prefix_cache``: the pool is empty after it, and so is the index).
A replica reset by anything but a refused batch asks the replay for seq 0
on, ``resync_after_s`` later (``_resync``; the wait doubles up to
``RESYNC_MAX_S`` while that does not make it complete): while the publisher
still buffers its seq 0 (vLLM keeps the last ``buffer_steps`` batches), the
index is rebuilt from it and is exact again (``stats["resyncs"]``); once
the replay begins past 0 it never holds it again (``stats["resync_gone"]``)
and no more are asked until the next reset. No other horizon is sound: a
block cached before the reset and hit ever since (a shared system prompt)
is never evicted, so no count of events or time
says the index holds it again. While False the index holds a subset of the
replica (every store and remove after the reset is applied, removes of
unknown keys floored at zero): it can under-credit, never over-credit; a
router scores such a rank as holding nothing (swa_prefix_cache/vllm_adapter/dp_routing.py).

* A seq frame that is not 8 bytes or not in ``0 .. 2**63 - 1`` is counted
  (``stats["malformed"]``) and skipped; the next good batch shows the gap.
* A batch the index refuses (``ValueError``/``TypeError``) is counted
  (``stats["refused"]``), the replica reset, and the stream goes on after it.
* Restart: a live batch below ``next_seq`` (one a replay already applied)
  is a duplicate when its payload digest equals the one applied under that
  seq (the last ``DIGESTS`` are kept; vLLM's payload carries a timestamp, so
  a new process's seq k differs from the old one's), or, when that digest is
  no longer kept, when its seq is above the last live seq (one publisher's
  live seqs only increase). Anything else below ``next_seq`` is a new
  publisher: the replica is reset to seq 0 (``stats["restarts"]``) and the
  batch handled as a gap from 0 (filled from the replay when it still holds
  seq 0).
* A replay joins only the publisher it continues: it is asked from the last
  applied batch (``next_seq - 1``) and must begin with that very payload
  (its digest). A replay that begins with another payload under that seq
  comes from a restarted publisher whose first live seq was above
  ``next_seq``: the replica is reset to seq 0 and the replay asked again
  from there (``stats["restarts_in_replay"]``). One that no longer holds
  that batch cannot be joined: the gap resets.
* Disconnect: a socket monitor on the SUB socket reports the publisher's
  connection closing (the process died or restarted; on loopback and ipc the
  connection does not drop otherwise). It is read before every frame is
  handled and when the socket is drained: once seen, the replica is reset to
  seq 0 (``stats["disconnects"]``) before any later frame is applied, so a
  new publisher's batches never land on the dead one's state.
* Replays are applied only while contiguous from ``next_seq`` (a skipped seq
  resets, ``stats["resets_in_replay"]``), and a gap is closed only by a
  replay that reaches the live batch (one that ends short of it resets at
  that batch, ``stats["short_replays"]``); each is bounded by one overall
  deadline (``replay_timeout_ms``) and ``MAX_REPLAY_FRAMES``; a replay that
  times out fills nothing (``stats["replay_timeouts"]``).
* ``poll`` is bounded by ``max_batches`` and a time budget; what is left
  stays queued for the next poll.

A ``Subscriber`` is used from one thread (its sockets are zmq sockets); the
``KVIndex`` it feeds may be scored from others (see ``KVIndex``).
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter, OrderedDict
from typing import Any

from swa_prefix_cache.kv_index.index import KVIndex

END_SEQ = -1
DIGESTS = 512  # applied seqs whose payload digest is kept (restart detection)
MAX_REPLAY_FRAMES = 100_000
POLL_MAX_BATCHES = 1000
POLL_BUDGET_S = 0.05
RESYNC_AFTER_S = 1.0  # a reset replica asks for a rebuild from seq 0 after this
RESYNC_MAX_S = 60.0  # backoff cap while the replay does not answer


def _seq(frame: bytes) -> int | None:
    """The seq of a frame, or None when it is not 8 bytes or out of range."""
    if type(frame) is not bytes or len(frame) != 8:
        return None
    seq = int.from_bytes(frame, "big", signed=True)
    return seq if seq >= 0 or seq == END_SEQ else None


def _digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=16).digest()


class Subscriber:
    """``poll()`` applies what has arrived; ``close()`` releases the sockets.

    ``replay_on_start``: ask the replay socket for what was missed right away
    (False: the caller runs ``catch_up()``, e.g. on its own thread).
    ``rcvhwm``: the SUB socket's receive high-water mark (zmq's default when
    None); batches beyond it are dropped by zmq and seen as a gap."""

    def __init__(
        self,
        index: KVIndex,
        name: str,
        endpoint: str,
        replay_endpoint: str | None = None,
        topic: str = "",
        context: Any = None,
        replay_timeout_ms: int = 2000,
        replay_on_start: bool = True,
        rcvhwm: int | None = None,
        resync_after_s: float = RESYNC_AFTER_S,
    ) -> None:
        import zmq

        if name not in index.replicas():
            raise ValueError(f"name: replica {name!r} is not in the index")
        if type(endpoint) is not str or "://" not in endpoint:
            raise ValueError(f"endpoint must be a zmq address, got {endpoint!r}")
        if replay_endpoint is not None and (type(replay_endpoint) is not str or "://" not in replay_endpoint):
            raise ValueError(f"replay_endpoint must be a zmq address or None, got {replay_endpoint!r}")
        if type(replay_timeout_ms) is not int or replay_timeout_ms < 1:
            raise ValueError(f"replay_timeout_ms must be an int >= 1, got {replay_timeout_ms!r}")
        if rcvhwm is not None and (type(rcvhwm) is not int or rcvhwm < 0):
            raise ValueError(f"rcvhwm must be an int >= 0 or None, got {rcvhwm!r}")
        if type(topic) is not str:
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        if type(resync_after_s) not in (int, float) or not 0 <= resync_after_s < float("inf"):
            raise ValueError(f"resync_after_s must be a finite number >= 0, got {resync_after_s!r}")
        self.index, self.name = index, name
        self._replay_endpoint = replay_endpoint
        self._replay_timeout_ms = replay_timeout_ms
        self.next_seq = 0  # the next batch to apply
        # Nothing is known of the publisher yet: complete once its seq 0 is
        # applied, or its replay shows it has published nothing.
        self.complete = False
        self.stats: Counter[str] = Counter()
        self._digests: OrderedDict[int, bytes] = OrderedDict()
        self._last_live = -1  # the last seq received on the SUB socket
        self._resync_after = float(resync_after_s)
        self._resync_wait = self._resync_after
        self._resync_at: float | None = None  # when a reset replica next asks for seq 0 on
        self._ctx = context or zmq.Context.instance()
        self._sub = self._ctx.socket(zmq.SUB)
        self._monitor = None
        try:
            if rcvhwm is not None:
                self._sub.setsockopt(zmq.RCVHWM, rcvhwm)
            self._sub.setsockopt(zmq.SUBSCRIBE, topic.encode("utf-8"))
            self._monitor = self._sub.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            self._disconnected = zmq.EVENT_DISCONNECTED
            self._sub.connect(endpoint)
            if replay_endpoint is not None and replay_on_start:
                self.catch_up()
        except BaseException:  # a bad endpoint: release what was opened
            self.close()
            raise

    def close(self) -> None:
        if self._monitor is not None:
            try:
                self._sub.disable_monitor()
            except Exception:  # the socket is closed already: nothing to stop
                pass
            self._monitor.close(linger=0)
        self._sub.close(linger=0)

    def catch_up(self) -> int:
        """Ask the replay socket for every batch from ``next_seq`` on and
        apply them (a subscriber that joins late, or one that has seen no
        batch for a while: PUB drops what is sent before a subscription has
        reached it). Returns the number applied; resets the replica when
        the publisher no longer holds ``next_seq``."""
        if self._replay_endpoint is None:
            return 0
        answer = self._joined_replay()
        if answer is None:
            if not self.complete and self._resync_at is None:
                self._resync_at = time.monotonic() + self._resync_wait
            return 0
        joined, replayed = answer
        if not replayed and self.next_seq == 0 and not self.complete:
            self._completed()  # the publisher has published nothing: both are empty
            return 0
        if replayed and not joined:  # it begins past next_seq (> 0): seq 0 is gone too
            self._reset(replayed[0][0], resync=False)
        return self._apply_replayed(replayed)

    def poll(
        self, timeout_ms: int = 0, max_batches: int = POLL_MAX_BATCHES, budget_s: float = POLL_BUDGET_S
    ) -> int:
        """Apply what has arrived (waiting up to ``timeout_ms`` for the
        first), at most ``max_batches`` frames and about ``budget_s`` of
        work (plus the replays of the gaps it meets, and at most one
        rebuild of a reset replica); returns the number of batches
        applied."""
        if type(timeout_ms) is not int or timeout_ms < 0:
            raise ValueError(f"timeout_ms must be an int >= 0, got {timeout_ms!r}")
        if type(max_batches) is not int or max_batches < 1:
            raise ValueError(f"max_batches must be an int >= 1, got {max_batches!r}")
        if type(budget_s) not in (int, float) or not 0 <= budget_s < float("inf"):
            raise ValueError(f"budget_s must be a finite number >= 0, got {budget_s!r}")
        applied = 0
        wait = timeout_ms
        deadline = time.monotonic() + budget_s + timeout_ms / 1000
        for _ in range(max_batches):
            if not self._sub.poll(wait):
                break
            wait = 0
            frames = self._sub.recv_multipart()
            self._check_disconnect()  # before this frame: it may be a new publisher's
            seq = _seq(frames[1]) if len(frames) == 3 else None
            if seq is None or seq == END_SEQ:
                self.stats["malformed"] += 1
            else:
                went_back = seq <= self._last_live
                self._last_live = seq
                applied += self._on_batch(seq, frames[2], went_back)
            if time.monotonic() > deadline:
                break
        self._check_disconnect()
        if not self.complete and self._resync_at is not None and time.monotonic() >= self._resync_at:
            applied += self._resync()
        return applied

    def _check_disconnect(self) -> None:
        """Reset to seq 0 when the monitor saw the publisher's connection close."""
        from zmq.utils.monitor import recv_monitor_message

        lost = False
        for _ in range(100):
            if not self._monitor.poll(0):
                break
            if recv_monitor_message(self._monitor)["event"] == self._disconnected:
                lost = True
        if lost:
            self.stats["disconnects"] += 1
            self._last_live = -1
            self._forget_publisher()

    def _restarted(self, seq: int, payload: bytes) -> int:
        """The publisher started again below ``next_seq``: reset to seq 0 and
        handle the batch as a gap from there."""
        self.stats["restarts"] += 1
        self._forget_publisher()
        return self._on_batch(seq, payload, False)

    def _forget_publisher(self) -> None:
        """Another publisher (or none) from here on: nothing applied so far
        is known to be its, so the replica starts over at seq 0."""
        self._digests.clear()
        self._reset(0)

    def _apply_one(self, seq: int, payload: bytes) -> int:
        """Apply one batch at ``next_seq``; a refused batch resets the replica.
        A reset replica is complete again from seq 0 or an ``AllBlocksCleared``."""
        self._digests[seq] = _digest(payload)
        if len(self._digests) > DIGESTS:
            self._digests.popitem(last=False)
        clears = None if self.complete else self._clears()
        try:
            self.index.apply(self.name, payload)
        except (ValueError, TypeError):
            self.stats["refused"] += 1
            self._reset(seq + 1, resync=False)  # a rebuild would meet it again
            return 0
        self.next_seq = seq + 1
        if seq == 0:  # next_seq 0: a new or reset replica, so now exact again
            self._completed()
        elif clears is not None and self._clears() > clears:  # the pool was emptied
            self.stats["complete_after_clear"] += 1
            self._completed()
        return 1

    def _completed(self) -> None:
        self.complete = True
        self._resync_at = None
        self._resync_wait = self._resync_after

    def _clears(self) -> int:
        return self.index.stats(self.name).get("clears", 0)

    def _on_batch(self, seq: int, payload: bytes, went_back: bool) -> int:
        """Apply a live batch; ``went_back``: its seq is not above the last
        live one (one publisher's live seqs only increase)."""
        if seq < self.next_seq:
            known = self._digests.get(seq)
            if known == _digest(payload) or (known is None and not went_back):
                # sent live and replayed too (a long replay outlives the digests)
                self.stats["duplicates"] += 1
                return 0
            return self._restarted(seq, payload)
        applied = 0
        if seq > self.next_seq:
            self.stats["gaps"] += 1
            applied += self._fill(seq)
            if seq < self.next_seq:  # the replay brought it too
                return applied
        return applied + self._apply_one(seq, payload)

    def _fill(self, upto: int) -> int:
        """Apply batches ``next_seq .. upto - 1`` from the replay socket, or
        reset the replica and start over at ``upto``."""
        answer = self._joined_replay() if self._replay_endpoint else None
        if answer is None or not answer[0]:
            self._reset(upto)
            return 0
        applied = self._apply_replayed(answer[1])
        if self.next_seq < upto:  # the replay ended before the gap did: its tail is missing
            self.stats["short_replays"] += 1
            self._reset(upto)
        return applied

    def _joined_replay(self) -> tuple[bool, list[tuple[int, bytes]]] | None:
        """The publisher's batches from ``next_seq`` on, and whether they
        join what was applied: they begin at ``next_seq`` and the replay
        (asked from ``next_seq - 1`` when that batch's digest is kept)
        begins with the very batch applied there. A replay that begins with
        another payload under that seq is a restarted publisher's: the
        replica is reset to seq 0 and the replay asked again from there.
        None when the replay does not answer."""
        last = self.next_seq - 1
        known = self._digests.get(last) if last >= 0 else None
        replayed = self._replay(last if known is not None else self.next_seq)
        if replayed is None:
            return None
        if known is not None:
            if not replayed or replayed[0][0] != last:
                return False, replayed  # that batch is no longer held: nothing to join to
            if _digest(replayed[0][1]) == known:
                replayed = replayed[1:]
            else:
                self.stats["restarts_in_replay"] += 1
                self._forget_publisher()
                replayed = self._replay(0)
                if replayed is None:
                    return None
        return bool(replayed) and replayed[0][0] == self.next_seq, replayed

    def _reset(self, seq: int, resync: bool = True) -> None:
        """Empty the replica's index and go on at ``seq``; ``resync``: ask
        for a rebuild from seq 0 later (``_resync``)."""
        self.stats["resets"] += 1
        self._empty(seq)
        if resync and self._replay_endpoint is not None:
            self._resync_at = time.monotonic() + self._resync_wait
        else:
            self._resync_at = None

    def _resync(self) -> int:
        """Rebuild a reset replica from the publisher's seq 0 while its
        replay still holds it: applied contiguously from 0, the index is
        exact again. A replay that begins past 0 never holds it again (the
        buffer only moves on): no more tries until the next reset. One that
        does not answer, or does not make the replica complete, is asked
        again later, the wait doubling up to ``RESYNC_MAX_S``."""
        replayed = replay(self._ctx, self._replay_endpoint, 0, self._replay_timeout_ms, first_must_be=0)
        self._resync_wait = min(2 * self._resync_wait, RESYNC_MAX_S)
        self._resync_at = time.monotonic() + self._resync_wait
        if replayed is None:
            self.stats["replay_timeouts"] += 1
            return 0
        if not replayed or replayed[0][0] != 0:
            self.stats["resync_gone"] += 1
            self._resync_at = None
            return 0
        self.stats["resyncs"] += 1
        self._digests.clear()
        self._empty(0)
        return self._apply_replayed(replayed)

    def _empty(self, seq: int) -> None:
        """The replica's index emptied, not complete, going on at ``seq``."""
        self.complete = False
        self.index.reset(self.name)
        self.next_seq = seq

    def _apply_replayed(self, replayed: list[tuple[int, bytes]]) -> int:
        applied = 0
        for seq, payload in replayed:
            if seq < self.next_seq:
                continue
            if seq > self.next_seq:  # the replay skipped a batch
                self.stats["resets_in_replay"] += 1
                self._reset(seq)
            applied += self._apply_one(seq, payload)
        self.stats["replayed"] += applied
        return applied

    def _replay(self, start: int) -> list[tuple[int, bytes]] | None:
        replayed = replay(self._ctx, self._replay_endpoint, start, self._replay_timeout_ms)
        if replayed is None:
            self.stats["replay_timeouts"] += 1
        return replayed


def replay(context: Any, endpoint: str, start: int, timeout_ms: int,
           first_must_be: int | None = None) -> list[tuple[int, bytes]] | None:
    """A publisher's buffered batches from ``start`` on, as ``(seq,
    payload)``, from its replay socket at ``endpoint``; None when it does
    not answer with its end marker within ``timeout_ms`` overall (or
    within ``MAX_REPLAY_FRAMES`` frames). ``first_must_be``: stop at the
    first batch when its seq is another (that one batch is returned)."""
    import zmq

    sock = context.socket(zmq.DEALER)
    try:
        sock.connect(endpoint)
        sock.send_multipart((b"", start.to_bytes(8, "big")))
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout_ms / 1000
        for _ in range(MAX_REPLAY_FRAMES):
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not sock.poll(left_ms):
                return None
            frames = sock.recv_multipart()
            if len(frames) != 4:
                continue
            seq = _seq(frames[2])
            if seq is None:
                continue
            if seq == END_SEQ:
                return out
            out.append((seq, frames[3]))
            if first_must_be is not None and len(out) == 1 and seq != first_must_be:
                return out
        return None
    finally:
        sock.close(linger=0)
