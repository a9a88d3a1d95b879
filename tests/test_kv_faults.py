"""Faults on a subscriber fed by vLLM's real ``ZmqEventPublisher`` and a real
``KVCacheManager``: the index never credits more than the replica serves,
and equals it whenever the subscriber says it is complete.

Each fault test records ``fault=<name> complete=<bool> overcredit=<n of m
probes> undercredit=<n>``; the lines are printed and written to
``build/kv-faults.txt`` at the end of the session. Sockets are ipc under
``tmp_path``; every loop is bounded in count and time.
"""

from __future__ import annotations

import contextlib
import random
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

pytest.importorskip("vllm")

import msgspec  # noqa: E402
from test_kv_index import (  # noqa: E402
    SCENARIOS,
    Replica,
    _follow,
    _publish_some,
    _stream,
    _subscribe,
)
from vllm.distributed.kv_events import BlockRemoved, KVEventBatch, ZmqEventPublisher  # noqa: E402

from swa_prefix_cache.kv_index import KVIndex  # noqa: E402
from swa_prefix_cache.kv_index.subscriber import Subscriber, replay  # noqa: E402

FAULT_LINES: list[str] = []
PROBES = 40
OUT = Path(__file__).resolve().parent.parent / "build" / "kv-faults.txt"


@pytest.fixture(scope="session", autouse=True)
def fault_report():
    """Writes every recorded fault line to build/kv-faults.txt and prints them."""
    yield
    if FAULT_LINES:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text("".join(line + "\n" for line in FAULT_LINES))
        print("\n" + "\n".join(FAULT_LINES))


def _check(name: str, sub: Subscriber, replica: Replica, index: KVIndex,
           others: tuple[Replica, ...] = ()) -> tuple[int, int]:
    """The invariant over ``PROBES`` prompts (drawn from ``replica``'s
    workload and from ``others``', whose blocks an index that kept a dead
    publisher's state would still credit): complete => the index's score
    equals ``get_computed_blocks``; otherwise it never exceeds it."""
    works = [replica.work] + [other.work for other in others]
    over = under = 0
    for i in range(PROBES):
        prompt = works[i % len(works)].prompt()
        want = replica.manager.get_computed_blocks(replica.request("probe", prompt))[1]
        got = index.score(prompt)[sub.name]
        over += got > want
        under += got < want
        if sub.complete:
            assert got == want, f"{name}: complete, yet index {got} != vLLM {want}"
    line = f"fault={name} complete={sub.complete} overcredit={over} of {PROBES} probes undercredit={under}"
    FAULT_LINES.append(line)
    print(line)
    assert over == 0, line
    return over, under


def _publisher(tmp_path, buffer_steps: int = 1000, hwm: int = 100_000) -> ZmqEventPublisher:
    return ZmqEventPublisher(0, endpoint=f"ipc://{tmp_path}/pub",
                             replay_endpoint=f"ipc://{tmp_path}/replay",
                             buffer_steps=buffer_steps, hwm=hwm)


def _drive(sub: Subscriber, published: int, rounds: int = 50) -> None:
    """Poll (bounded) until the subscriber is at ``published`` or quiet."""
    for _ in range(rounds):
        sub.poll(20)
        if sub.next_seq >= published:
            return


class ReplayInjector:
    """A fault injector standing in front of vLLM's replay socket: a ROUTER
    that answers each request with the real publisher's replay, altered
    (a seq skipped, frames trickling, no end marker, the first requests
    never answered). Serves on its own thread until ``close`` or 30 s."""

    def __init__(self, tmp_path, upstream: str, skip: int | None = None,
                 delay_s: float = 0.0, endless: bool = False, drop_tail: int = 0,
                 silent_first: int = 0) -> None:
        import zmq

        self.endpoint = f"ipc://{tmp_path}/injector"
        self._ctx = zmq.Context.instance()
        self._router = self._ctx.socket(zmq.ROUTER)
        self._router.bind(self.endpoint)
        self._upstream, self._skip, self._delay, self._endless = upstream, skip, delay_s, endless
        self._drop_tail = drop_tail  # each replay loses its last batches
        self._silent_first = silent_first  # requests left unanswered (a flooded publisher)
        self._stop = threading.Event()
        self.requests = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        deadline = time.monotonic() + 30
        while not self._stop.is_set() and time.monotonic() < deadline:
            if not self._router.poll(20):
                continue
            ident, _, start = self._router.recv_multipart()
            self.requests += 1
            if self.requests <= self._silent_first:
                continue
            batches = replay(self._ctx, self._upstream, int.from_bytes(start, "big"), 2000) or []
            if self._drop_tail:
                batches = batches[:-self._drop_tail]
            for seq, payload in batches:
                if seq == self._skip:
                    continue
                if self._delay and self._stop.wait(self._delay):
                    return
                self._router.send_multipart((ident, b"", b"", seq.to_bytes(8, "big"), payload))
            if self._endless:  # the last frame again and again, never the end marker
                seq, payload = batches[-1] if batches else (0, b"\x90")
                for _ in range(20_000):
                    if self._stop.wait(0.001):
                        return
                    self._router.send_multipart((ident, b"", b"", seq.to_bytes(8, "big"), payload))
                continue
            self._router.send_multipart((ident, b"", b"", (-1).to_bytes(8, "big", signed=True), b""))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._router.close(linger=0)


@contextlib.contextmanager
def _injected(tmp_path, seed: int, **fault):
    """A replica, vLLM's publisher, an index, and a replay injector."""
    with _stream(tmp_path, SCENARIOS[6], seed=seed, buffer_steps=1000) as (replica, pub, index):
        injector = ReplayInjector(tmp_path, f"ipc://{tmp_path}/replay", **fault)
        try:
            yield replica, pub, index, injector
        finally:
            injector.close()


# ---- bad frames and batches ----------------------------------------------------


def _tamper(sub: Subscriber, change: Callable[[int, list[bytes]], list[bytes]]) -> None:
    """A fault injector on the live socket: each arrival's frames pass
    through ``change(arrival number from 1, frames)`` before the
    subscriber reads them."""
    receive = sub._sub.recv_multipart
    count = [0]

    def tampered() -> list[bytes]:
        count[0] += 1
        return change(count[0], receive())

    sub._sub.recv_multipart = tampered


@pytest.mark.parametrize("bad", [b"\x00" * 9, b"\x00" * 7, (-5).to_bytes(8, "big", signed=True)],
                         ids=["9-bytes", "7-bytes", "negative"])
def test_bad_seq_frames_are_skipped(tmp_path, bad) -> None:
    """Every fifth seq frame is corrupted: counted as malformed, the gap is
    filled from the replay, and the stream goes on."""
    with _stream(tmp_path, SCENARIOS[6], seed=11, buffer_steps=1000) as (replica, pub, index):
        sub = _subscribe(tmp_path, index)

        def corrupt(arrival: int, frames: list[bytes]) -> list[bytes]:
            if arrival % 5 == 0:
                frames[1] = bad
            return frames

        _tamper(sub, corrupt)
        try:
            published = 0
            for _ in range(20):
                published += _publish_some(replica, pub, 1)
                for _ in range(50):
                    sub.poll(20)
                    if sub.next_seq >= published:
                        break
                    sub.catch_up()  # the last batch's frame may be the corrupted one
            assert sub.next_seq == published
            assert sub.stats["malformed"] >= 1
            assert sub.next_seq < 2**63
            _check(f"bad-seq-{len(bad)}-bytes" if bad[0] == 0 else "bad-seq-negative",
                   sub, replica, index)
        finally:
            sub.close()


def test_poison_payload_resets_and_the_stream_goes_on(tmp_path) -> None:
    """One payload that is not a KVEventBatch: counted as refused, the
    replica reset, complete False, and later batches are still applied."""
    with _stream(tmp_path, SCENARIOS[6], seed=12, buffer_steps=1000) as (replica, pub, index):
        sub = _subscribe(tmp_path, index)

        def poison(arrival: int, frames: list[bytes]) -> list[bytes]:
            if arrival == 3:
                frames[2] = b"\x93\x01\x02\x03"  # not a KVEventBatch
            return frames

        _tamper(sub, poison)
        try:
            published = 0
            for _ in range(20):
                published += _publish_some(replica, pub, 1)
                _drive(sub, published)
            assert sub.stats["refused"] == 1 and not sub.complete
            assert sub.next_seq == published
            _check("poison-payload", sub, replica, index)
        finally:
            sub.close()


def test_poison_batch_group_idx_out_of_range(tmp_path) -> None:
    """vLLM's publisher sends one batch with a ``group_idx`` the layout does
    not have: the index refuses it, the replica is reset (complete False),
    and every later batch is applied."""
    with _stream(tmp_path, SCENARIOS[6], seed=13, buffer_steps=1000) as (replica, pub, index):
        sub = _subscribe(tmp_path, index)
        try:
            published = _publish_some(replica, pub, 10)
            _follow(sub, published)
            _publish_refused(pub)
            published += 1
            for _ in range(15):
                published += _publish_some(replica, pub, 1)
                _drive(sub, published)
            assert sub.stats["refused"] == 1 and not sub.complete
            assert sub.next_seq == published
            assert index.stats("r0")["resets"] == 1
            _check("poison-group-idx", sub, replica, index)
        finally:
            sub.close()


def test_subscriber_arguments_are_checked(tmp_path) -> None:
    """Bad settings are refused with the argument named, before any socket
    is left open."""
    index = KVIndex()
    index.add_replica("r0", Replica(SCENARIOS[0], random.Random(1)).layout)
    endpoint = f"ipc://{tmp_path}/none"
    for kwargs, match in ((dict(replay_timeout_ms=0), "replay_timeout_ms"),
                          (dict(replay_endpoint="nowhere"), "replay_endpoint"),
                          (dict(rcvhwm=-1), "rcvhwm"),
                          (dict(resync_after_s=float("inf")), "resync_after_s"),
                          (dict(resync_after_s=-1), "resync_after_s")):
        with pytest.raises(ValueError, match=match):
            Subscriber(index, "r0", endpoint, **kwargs)
    with pytest.raises(TypeError, match="topic"):
        Subscriber(index, "r0", endpoint, topic=b"kv")
    sub = Subscriber(index, "r0", endpoint)
    try:
        for kwargs, match in ((dict(max_batches=0), "max_batches"),
                              (dict(budget_s=float("nan")), "budget_s"),
                              (dict(timeout_ms=-1), "timeout_ms")):
            with pytest.raises(ValueError, match=match):
                sub.poll(**kwargs)
        assert sub.poll(0) == 0
    finally:
        sub.close()


# ---- publisher restart and death -----------------------------------------------


class DeafSubscriber(Subscriber):
    """The project's Subscriber without its disconnect check: a restart is
    then seen only by the seq going back with another payload."""

    def _check_disconnect(self) -> None:
        return None


@pytest.mark.parametrize("seen_by", ["any", "digest", "digest-past-window"])
def test_publisher_restart(tmp_path, seen_by) -> None:
    """vLLM restarts: the first publisher shuts down, a second binds the same
    endpoints with a new, empty manager and seq from 0. The dead server's
    blocks are dropped and, once the new publisher's seq 0 on is applied,
    the index is exact for the new replica (probed with both workloads).
    ``digest``: the subscriber does not watch the connection, so the seq
    going back with another payload is all it sees; ``digest-past-window``:
    the old publisher had sent more batches than the digests kept, so the
    seq going below the last live one is."""
    old = Replica(SCENARIOS[6], random.Random(21))
    index = KVIndex()
    index.add_replica("r0", old.layout)
    pub = _publisher(tmp_path)
    kind = Subscriber if seen_by == "any" else DeafSubscriber
    sub = kind(index, "r0", f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay")
    new = pub2 = None
    try:
        published = _publish_some(old, pub, 600 if seen_by == "digest-past-window" else 40)
        _follow(sub, published)
        assert sub.complete
        pub.shutdown()
        new = Replica(SCENARIOS[6], random.Random(22))
        assert new.layout == old.layout
        pub2 = _publisher(tmp_path)
        published = 0
        for _ in range(25):
            published += _publish_some(new, pub2, 1)
            _follow(sub, published)
        if seen_by != "any":
            assert sub.stats["restarts"] >= 1 and sub.stats["disconnects"] == 0
        else:
            assert sub.stats["restarts"] + sub.stats["disconnects"] >= 1
        assert sub.complete and sub.next_seq == published
        _check(f"publisher-restart-{seen_by}", sub, new, index, others=(old,))
    finally:
        _close(sub, pub2, new, old)


def _held(index: KVIndex, name: str) -> list[dict[int, int]]:
    """Per group, each key's count in a reference-core index."""
    return [dict(keys.counts) for keys in index._replica(name).keys]


def _publish_refused(pub: ZmqEventPublisher) -> None:
    """One batch the index refuses (a ``group_idx`` the layout does not
    have), sent before this returns."""
    pub.publish(KVEventBatch(ts=time.time(), events=[
        BlockRemoved(block_hashes=[1], medium="GPU", group_idx=99)]))
    pub._event_queue.join()


def _publish_cleared(replica: Replica, pub: ZmqEventPublisher) -> None:
    """vLLM's ``reset_prefix_cache`` on the replica (its requests freed
    first), and the ``AllBlocksCleared`` batch it makes, sent."""
    replica.close()
    replica.live = []
    assert replica.manager.reset_prefix_cache()
    pub.publish(KVEventBatch(ts=time.time(), events=replica.manager.take_events()))
    pub._event_queue.join()


def _close(sub: Subscriber, pub: ZmqEventPublisher | None, *replicas: Replica | None) -> None:
    """A restart test's teardown: the subscriber, the second publisher and
    the replicas that were made."""
    sub.close()
    if pub is not None:
        pub.shutdown()
    for replica in replicas:
        if replica is not None:
            replica.close()


def _watched(kind: type[Subscriber]) -> type[Subscriber]:
    """``kind`` checking itself after every batch it applies, once
    ``truths`` is set (each publisher's batches, in order): while complete,
    its (reference-core) index must hold exactly what one publisher's
    batches up to the seq applied leave; each apply that leaves it complete
    and like neither is counted."""

    class Watched(kind):
        truths: list[list[KVEventBatch]] = []
        wrong = 0
        complete_applies = 0

        def _apply_one(self, seq: int, payload: bytes) -> int:
            applied = super()._apply_one(seq, payload)
            if applied and self.complete and self.truths:
                self.complete_applies += 1
                held = _held(self.index, self.name)
                if all(held != self._truth(batches[:seq + 1]) for batches in self.truths):
                    self.wrong += 1
            return applied

        def _truth(self, batches: list[KVEventBatch]) -> list[dict[int, int]]:
            want = KVIndex(native=False)
            want.add_replica("r0", self.index._replica(self.name).layout)
            for batch in batches:
                want.apply("r0", batch)
            return _held(want, "r0")

    return Watched


class Recorder:
    """Stands in for a publisher, keeping each batch it passes on."""

    def __init__(self, pub: ZmqEventPublisher, kept: list[KVEventBatch]) -> None:
        self.pub, self.kept = pub, kept
        self._event_queue = pub._event_queue

    def publish(self, batch: KVEventBatch) -> None:
        self.kept.append(batch)
        self.pub.publish(batch)


@pytest.mark.parametrize("seen_by", ["monitor", "digest"])
def test_restart_race(tmp_path, seen_by) -> None:
    """Issue 44: vLLM restarts while the subscriber still has the old
    publisher's last 10 batches queued; it reads them in a poll that ends at
    its batch budget (so never drains), and the first live seq of the new
    publisher it then sees is above them (the new one sent 20 batches while
    the subscription reconnected). The new publisher's batches must never be
    applied on top of the old one's state: after every apply that leaves the
    subscriber complete, the index holds exactly what one publisher's batches
    up to that seq leave. ``monitor``: the connection monitor,
    read before every frame, resets at the disconnect; ``digest`` (no
    monitor): the replay that would fill the gap begins with another payload
    under seq 14, a restart. Records the time from the new publisher's first
    batch until the index is complete and current."""
    old = Replica(SCENARIOS[6], random.Random(41))
    index = KVIndex(native=False)
    index.add_replica("r0", old.layout)
    pub = _publisher(tmp_path)
    kind = _watched(Subscriber if seen_by == "monitor" else DeafSubscriber)
    sub = kind(index, "r0", f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay")
    new = pub2 = None
    try:
        new = Replica(SCENARIOS[6], random.Random(42))
        sub.truths = [[], []]
        published = _publish_some(old, Recorder(pub, sub.truths[0]), 5)
        _follow(sub, published)
        assert sub.complete
        _publish_some(old, Recorder(pub, sub.truths[0]), 10)
        time.sleep(0.1)
        pub.shutdown()
        time.sleep(0.1)
        sub.poll(0, max_batches=10)  # the old publisher's last batches, read to the budget's end
        pub2 = _publisher(tmp_path)
        recorder = Recorder(pub2, sub.truths[1])
        start = time.monotonic()
        published = _publish_some(new, recorder, 20)
        for _ in range(20):  # until one of its batches waits on the reconnected socket
            published += _publish_some(new, recorder, 1)
            if sub._sub.poll(200):
                break
        recovered_ms = None
        for _ in range(25):
            published += _publish_some(new, recorder, 1)
            _drive(sub, published)
            if recovered_ms is None and sub.complete and sub.next_seq == published:
                recovered_ms = (time.monotonic() - start) * 1000
        assert sub.complete and sub.next_seq == published, sub.stats
        assert sub.complete_applies > 0
        line = (f"fault=restart-race-{seen_by} applies_left_complete_and_wrong={sub.wrong} "
                f"of {sub.complete_applies} recovered_in_ms={recovered_ms:.0f}")
        FAULT_LINES.append(line)
        print(line)
        assert sub.wrong == 0, (line, sub.stats)
        _check(f"restart-race-{seen_by}", sub, new, index, others=(old,))
    finally:
        _close(sub, pub2, new, old)


def test_killed_publisher(tmp_path) -> None:
    """The publisher goes away without a word: the subscriber sees the
    connection close, resets the replica (complete False: nothing is known
    of a dead replica), and a replay to the dead socket gives up in time."""
    replica = Replica(SCENARIOS[6], random.Random(23))
    index = KVIndex()
    index.add_replica("r0", replica.layout)
    pub = _publisher(tmp_path)
    sub = Subscriber(index, "r0", f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay",
                     replay_timeout_ms=300)
    try:
        published = _publish_some(replica, pub, 30)
        _follow(sub, published)
        assert sub.complete
        pub.shutdown()
        for _ in range(100):
            sub.poll(20)
            if sub.stats["disconnects"]:
                break
        assert sub.stats["disconnects"] == 1 and not sub.complete
        start = time.monotonic()
        assert sub.catch_up() == 0
        assert time.monotonic() - start < 5
        _check("killed-publisher", sub, replica, index)
    finally:
        sub.close()
        replica.close()


# ---- replays that go wrong -----------------------------------------------------


def test_replay_gap_is_not_applied_past(tmp_path) -> None:
    """A subscriber joins late; the replay it gets skips seq 7. Seqs 0..6
    are applied, then the replica is reset at 8: complete False."""
    with _injected(tmp_path, seed=24, skip=7) as (replica, pub, index, injector):
        published = _publish_some(replica, pub, 15)
        sub = Subscriber(index, "r0", f"ipc://{tmp_path}/pub", injector.endpoint)
        try:
            assert sub.stats["resets_in_replay"] == 1 and not sub.complete
            assert sub.next_seq == published
            for _ in range(10):
                published += _publish_some(replica, pub, 1)
                _drive(sub, published)
            assert not sub.complete
            _check("replay-gap", sub, replica, index)
        finally:
            sub.close()


def test_a_replay_missing_its_tail_is_not_applied_past(tmp_path) -> None:
    """Issue 44: every replay loses its last two batches. The late
    subscriber's first replay gives 0..12 of 0..14; the next live batch
    (15) finds the gap 13..14, whose replay brings only 13. Batch 15 must
    not be applied on top of the missing 14 as if the stream were whole:
    the replica is reset at 15 (complete False) and never over-credits."""
    with _injected(tmp_path, seed=26, drop_tail=2) as (replica, pub, index, injector):
        published = _publish_some(replica, pub, 15)
        sub = Subscriber(index, "r0", f"ipc://{tmp_path}/pub", injector.endpoint)
        try:
            assert sub.next_seq == published - 2 and sub.complete
            for _ in range(10):
                published += _publish_some(replica, pub, 1)
                _drive(sub, published)
            assert sub.stats["short_replays"] >= 1 and not sub.complete, sub.stats
            assert sub.next_seq == published
            _check("replay-missing-tail", sub, replica, index)
        finally:
            sub.close()


@pytest.mark.parametrize("fault", ["trickling", "endless"])
def test_slow_replay_is_bounded(tmp_path, fault) -> None:
    """A replay that trickles (one frame per 100 ms) or never sends its end
    marker: each replay gives up at its overall deadline (300 ms), nothing of
    it is applied, and the gap it was to fill resets the replica."""
    kind = dict(delay_s=0.1) if fault == "trickling" else dict(endless=True)
    with _injected(tmp_path, seed=25, **kind) as (replica, pub, index, injector):
        published = _publish_some(replica, pub, 15)
        start = time.monotonic()
        sub = Subscriber(index, "r0", f"ipc://{tmp_path}/pub", injector.endpoint,
                         replay_timeout_ms=300)
        try:
            assert time.monotonic() - start < 5
            assert sub.stats["replay_timeouts"] == 1 and sub.next_seq == 0
            for _ in range(5):
                published += _publish_some(replica, pub, 1)
                start = time.monotonic()
                _drive(sub, published, rounds=10)
                assert time.monotonic() - start < 10
            assert sub.stats["replay_timeouts"] >= 2 and not sub.complete
            assert sub.next_seq == published
            _check(f"{fault}-replay", sub, replica, index)
        finally:
            sub.close()


def test_replay_function_gives_up_on_an_endless_replay(tmp_path) -> None:
    """``replay`` itself: a socket that sends batches forever and never its
    end marker gets None at the overall deadline."""
    import zmq

    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    endpoint = f"ipc://{tmp_path}/endless"
    router.bind(endpoint)
    stop = threading.Event()

    def serve() -> None:
        if not router.poll(2000):
            return
        ident, _, _ = router.recv_multipart()
        for seq in range(100_000):
            if stop.wait(0.001):
                return
            router.send_multipart((ident, b"", b"", seq.to_bytes(8, "big"), b"\x90"))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        start = time.monotonic()
        assert replay(ctx, endpoint, 0, 200) is None
        assert time.monotonic() - start < 5
    finally:
        stop.set()
        thread.join(5)
        router.close(linger=0)


def test_a_reset_replica_is_complete_again_after_a_clear(tmp_path) -> None:
    """Issue 44: a refused batch leaves the replica reset (complete False:
    no count of later events says the index holds again what the replica
    cached before it). vLLM's ``reset_prefix_cache`` empties the pool and
    publishes ``AllBlocksCleared``: from that batch on the index is complete
    and exact again, without waiting for a seq 0. Records the batches from
    the refusal until then."""
    with _stream(tmp_path, SCENARIOS[6], seed=14, buffer_steps=1000) as (replica, pub, index):
        sub = _subscribe(tmp_path, index)
        try:
            published = _publish_some(replica, pub, 10)
            _follow(sub, published)
            _publish_refused(pub)
            refused_at = published
            published += 1
            for _ in range(8):
                published += _publish_some(replica, pub, 1)
                _drive(sub, published)
            assert sub.stats["refused"] == 1 and not sub.complete
            _check("refused-before-clear", sub, replica, index)
            _publish_cleared(replica, pub)
            published += 1
            _drive(sub, published)
            assert sub.complete and sub.stats["complete_after_clear"] == 1, sub.stats
            line = f"fault=refused-then-cleared complete_again_after_batches={published - refused_at}"
            FAULT_LINES.append(line)
            print(line)
            for _ in range(10):
                published += _publish_some(replica, pub, 1)
                _drive(sub, published)
            assert sub.complete and sub.next_seq == published
            _check("refused-then-cleared", sub, replica, index)
        finally:
            sub.close()


def test_one_refused_batch_keeps_exact_routing(tmp_path) -> None:
    """Issue 44: two data-parallel ranks behind vLLM's real publishers, read
    by the router's poller thread. One batch that rank 1's index refuses
    resets that rank only: the next 50 requests are all still routed by the
    index (rank 1 scored as holding nothing, never above its hit, and
    counted unsure per request), not handed to vLLM's balancer. vLLM's
    ``reset_prefix_cache`` on rank 1 then makes it complete again; the time
    from that batch's publication until the router reads rank 1 as complete
    is recorded."""
    from test_dp_routing import _client, _request, _wait, publishing_ranks

    rng = random.Random(43)
    with publishing_ranks(tmp_path, SCENARIOS[6], rng) as (replicas, pubs, index, subs, router):
        router.attach(index, ["dp0", "dp1"], subs)
        published = [_publish_some(replicas[r], pubs[r], 10) for r in range(2)]
        assert _wait(lambda: router.ready and all(
            sub.complete and sub.next_seq >= n for sub, n in zip(subs, published)))
        _publish_refused(pubs[1])
        assert _wait(lambda: subs[1].stats["refused"] == 1)
        client = _client(2)
        routed = over = 0
        for step in range(50):
            replica = replicas[step % 2]
            prompt = replica.work.prompt()
            prepared = router.prepare(client, _request(f"q{step}", prompt))
            if prepared is None:
                continue
            routed += 1
            truth = [r.manager.get_computed_blocks(r.request("probe", prompt))[1] for r in replicas]
            over += any(hit > want for hit, want in zip(prepared[0], truth))
        assert router.unsure["dp1 index reset: scored 0"] == routed
        start = time.monotonic()
        _publish_cleared(replicas[1], pubs[1])
        assert _wait(lambda: subs[1].complete)
        recovered_ms = (time.monotonic() - start) * 1000
        assert router.prepare(client, _request("after", replicas[1].work.prompt())) is not None
        assert router.unsure["dp1 index reset: scored 0"] == routed
        line = (f"fault=one-refused-batch-routing routed_by_index={routed} of 50 "
                f"overcredit={over} complete_again_in_ms={recovered_ms:.0f} (after reset_prefix_cache)")
        FAULT_LINES.append(line)
        print(line)
        assert routed == 50 and over == 0, line


def test_a_reset_replica_rebuilds_from_seq_0_while_the_replay_holds_it(tmp_path) -> None:
    """Issue 44: the replay does not answer the subscriber's first two
    requests (a publisher busy under a flood): the late join and the gap
    the next live batch shows both time out, and the replica is reset
    (complete False). A moment later the subscriber asks the replay for seq
    0 on; the publisher still buffers it, so the index is rebuilt from it
    and is complete and exact again, with no seq 0 or clear on the live
    stream. Records the time from the reset until complete."""
    with _injected(tmp_path, seed=28, silent_first=2) as (replica, pub, index, injector):
        published = _publish_some(replica, pub, 15)
        sub = Subscriber(index, "r0", f"ipc://{tmp_path}/pub", injector.endpoint,
                         replay_timeout_ms=300, resync_after_s=0.2)
        try:
            assert sub.stats["replay_timeouts"] == 1 and not sub.complete
            published += _publish_some(replica, pub, 1)
            _drive(sub, published)
            assert sub.stats["replay_timeouts"] == 2 and sub.stats["resets"] == 1, sub.stats
            reset_at = time.monotonic()
            _check("flooded-replay-reset", sub, replica, index)
            recovered_ms = None
            for _ in range(20):
                published += _publish_some(replica, pub, 1)
                _drive(sub, published)
                if recovered_ms is None and sub.complete:
                    recovered_ms = (time.monotonic() - reset_at) * 1000
                time.sleep(0.05)
            assert sub.complete and sub.stats["resyncs"] == 1 and sub.next_seq == published, sub.stats
            line = f"fault=flooded-replay-then-rebuilt complete_again_in_ms={recovered_ms:.0f}"
            FAULT_LINES.append(line)
            print(line)
            _check("flooded-replay-then-rebuilt", sub, replica, index)
        finally:
            sub.close()


def test_a_rebuild_is_not_asked_once_seq_0_is_gone(tmp_path) -> None:
    """The publisher buffers only its last 20 batches. The subscriber
    follows from seq 0, then loses 40 batches (their seq frames corrupted):
    the replay that would fill the gap begins past it, so the replica is
    reset (complete False). Its one request for a rebuild from seq 0 finds
    the replay beginning past 0, and it asks no more (the buffer only moves
    on), however long it then follows the stream."""
    with _stream(tmp_path, SCENARIOS[6], seed=29, buffer_steps=20) as (replica, pub, index):
        injector = ReplayInjector(tmp_path, f"ipc://{tmp_path}/replay")
        sub = Subscriber(index, "r0", f"ipc://{tmp_path}/pub", injector.endpoint,
                         resync_after_s=0.0, replay_on_start=False)

        def lose(arrival: int, frames: list[bytes]) -> list[bytes]:
            if 2 <= arrival <= 41:
                frames[1] = b"\x00" * 9
            return frames

        _tamper(sub, lose)
        try:
            published = _publish_some(replica, pub, 1)
            _drive(sub, published)
            assert sub.complete
            published += _publish_some(replica, pub, 40)
            for _ in range(15):
                published += _publish_some(replica, pub, 1)
                _drive(sub, published)
                time.sleep(0.02)
            assert not sub.complete and sub.next_seq == published
            assert sub.stats["resync_gone"] == 1 and sub.stats["resyncs"] == 0, sub.stats
            assert injector.requests == 2, injector.requests  # the gap's, then one rebuild's
            _check("rebuild-gone", sub, replica, index)
        finally:
            sub.close()
            injector.close()


# ---- load ----------------------------------------------------------------------


def test_flood_poll_is_bounded(tmp_path) -> None:
    """3,000 batches queued at once: one ``poll(0)`` returns within a
    generous bound with batches left queued; later polls apply the rest and
    the index is exact."""
    with _stream(tmp_path, SCENARIOS[6], seed=26, buffer_steps=5000) as (replica, pub, index):
        sub = _subscribe(tmp_path, index)
        try:
            published = _publish_some(replica, pub, 1)
            _follow(sub, published)
            published += _publish_some(replica, pub, 3000)
            for _ in range(100):  # until the first of them has arrived
                if sub._sub.poll(50):
                    break
            start = time.monotonic()
            applied = sub.poll(0)
            assert time.monotonic() - start < 5
            assert 1 <= applied and sub.next_seq < published
            for _ in range(200):
                sub.poll(20)
                if sub.next_seq >= published:
                    break
            assert sub.next_seq == published and sub.complete
            _check("flood", sub, replica, index)
        finally:
            sub.close()


@pytest.mark.parametrize("buffer_steps", [5000, 20], ids=["replayed", "reset"])
def test_subscriber_far_behind(tmp_path, buffer_steps) -> None:
    """A subscriber that does not poll while 1,500 batches go by: the high-
    water marks (50 on both sides) drop most of them; the gap is filled from
    the replay when vLLM still buffers it, else the replica is reset."""
    replica = Replica(SCENARIOS[6], random.Random(27))
    index = KVIndex()
    index.add_replica("r0", replica.layout)
    pub = _publisher(tmp_path, buffer_steps=buffer_steps, hwm=50)
    sub = Subscriber(index, "r0", f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay", rcvhwm=50)
    try:
        published = _publish_some(replica, pub, 1)
        _follow(sub, published)
        published += _publish_some(replica, pub, 1500)
        for _ in range(5):  # later batches show the gap
            published += _publish_some(replica, pub, 1)
            _drive(sub, published, rounds=100)
        assert sub.stats["gaps"] >= 1 and sub.next_seq == published
        if buffer_steps > 1500:
            assert sub.complete and sub.stats["resets"] == 0
        else:
            assert not sub.complete and sub.stats["resets"] >= 1
        _check(f"far-behind-{'replayed' if buffer_steps > 1500 else 'reset'}", sub, replica, index)
    finally:
        sub.close()
        pub.shutdown()
        replica.close()


# ---- threads -------------------------------------------------------------------


def test_concurrent_apply_score_add_remove() -> None:
    """One thread applies a real manager's batches, two score, one adds,
    applies to, resets and removes other replicas, all at once on one index
    (thread switches forced often): no exception, and the final scores equal
    a single-threaded replay of the same batches and the manager's own hit."""
    replica = Replica(SCENARIOS[6], random.Random(28), algo="sha256")
    batches = []
    for _ in range(400):
        batch = replica.serve()
        if batch is not None:
            batches.append(msgspec.msgpack.encode(batch))
    prompts = [replica.work.prompt() for _ in range(60)]
    index = KVIndex()
    index.add_replica("r0", replica.layout)
    for k in range(8):  # a longer walk over the replicas for each score
        index.add_replica(f"s{k}", replica.layout)
    errors: list[BaseException] = []

    def guarded(work):
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
        return run

    def apply() -> None:
        for batch in batches:
            index.apply("r0", batch)

    def score() -> None:
        for i in range(1500):
            index.score(prompts[i % len(prompts)])

    def churn() -> None:
        for i in range(1500):
            index.add_replica(f"x{i}", replica.layout)
            index.apply(f"x{i}", batches[i % len(batches)])
            if i % 3 == 0:
                index.reset(f"x{i}")
            index.stats(f"x{i}")
            index.remove_replica(f"x{i}")

    threads = [threading.Thread(target=guarded(w), daemon=True) for w in (apply, score, score, churn)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert not any(thread.is_alive() for thread in threads)
    assert not errors, errors
    assert sorted(index.replicas()) == sorted(["r0"] + [f"s{k}" for k in range(8)])
    alone = KVIndex()
    alone.add_replica("r0", replica.layout)
    for batch in batches:
        alone.apply("r0", batch)
    hits = 0
    for prompt in prompts:
        got, want = index.score(prompt)["r0"], alone.score(prompt)["r0"]
        want_vllm = replica.manager.get_computed_blocks(replica.request("probe", prompt))[1]
        assert got == want == want_vllm
        hits += want > 0
    assert hits > 0
    line = (f"fault=concurrent-apply-score complete=True overcredit=0 of {len(prompts)} probes "
            f"undercredit=0")
    FAULT_LINES.append(line)
    print(line)
    replica.close()
