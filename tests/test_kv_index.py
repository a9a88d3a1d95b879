"""kv_index against vLLM's own code: its hash chain, its event encoding, and
above all its lookup: a real ``KVCacheManager`` (events on) serves random
prefix-sharing requests (prefill, some decode steps, frees, evictions on a
small pool); after every request its events go to a ``KVIndex`` (as the
objects or as the msgpack bytes vLLM's publisher sends), and for random
probe prompts ``index.score`` must equal the manager's own
``get_computed_blocks`` hit, every time.

The index scores with its production core, the native one
(swa_prefix_cache.kv_index._kvnative: C chain, C key sets, the proved joint.c) when it is
built (required under ``SWA_PREFIX_CACHE_STRICT_NATIVE=1``); half the replicas
hash with sha256 (the chain in C), half with sha256_cbor (the chain in
Python). ``PREFIX_CACHE_KV_INDEX_CASES`` sets the number of compared probes
of the main test (default 3,000).
"""

from __future__ import annotations

import contextlib
import os
import random

import pytest

pytest.importorskip("vllm")

import msgspec  # noqa: E402
from conftest import CASE_COUNTS  # noqa: E402
from test_coordinators import FIXED_HYBRIDS, Group, Scenario, _make_request  # noqa: E402
from vllm.distributed.kv_events import (  # noqa: E402
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
)
from vllm.utils.hashing import sha256, sha256_cbor  # noqa: E402
from vllm.v1.core import kv_cache_utils  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402

from swa_prefix_cache.kv_index import GroupLayout, KVIndex, ReplicaLayout  # noqa: E402
from swa_prefix_cache.kv_index.events import read_batch  # noqa: E402
from swa_prefix_cache.kv_index.hashing import event_key, none_hash, prompt_block_hashes  # noqa: E402
from swa_prefix_cache.kv_index.native import load as load_native  # noqa: E402

CASES = int(os.environ.get("PREFIX_CACHE_KV_INDEX_CASES", "3000"))
NATIVE = load_native()  # None: not built (then the reference answers), logged
NATIVE_SHA256 = ["portable"] + (["sha-ni"] if NATIVE is not None
                                and NATIVE.sha256_impl() == "sha-ni" else [])
REMOVED = [0]  # BlockRemoved keys the index applied (evictions happened)
ALGOS = {"sha256": sha256, "sha256_cbor": sha256_cbor}


# ---- the transcribed pieces -------------------------------------------------


@pytest.mark.parametrize("algo", list(ALGOS))
def test_hash_chain_is_vllms(algo: str) -> None:
    """NONE_HASH and every block hash of random prompts, as vLLM's
    ``get_request_block_hasher`` computes them on a real Request."""
    fn = ALGOS[algo]
    kv_cache_utils.init_none_hash(fn)
    seed = kv_cache_utils.get_none_hash_seed()
    assert none_hash(algo, seed) == kv_cache_utils.NONE_HASH
    rng = random.Random(5)
    for case in range(40):
        h = rng.choice((1, 2, 16, 32))
        request = _make_request(rng, f"hash-{case}", rng.randint(0, 12 * h + 3), h)
        if algo != "sha256_cbor":  # _make_request hashes with sha256_cbor
            hasher = kv_cache_utils.get_request_block_hasher(h, fn)
            request.block_hashes = []
            request.block_hashes = hasher(request)
        got = prompt_block_hashes(request.prompt_token_ids, h, algo, seed)
        assert got == list(request.block_hashes)
        if algo == "sha256" and NATIVE is not None:  # the C chain, both SHA-256 codes
            for impl in NATIVE_SHA256:
                before = NATIVE.use_sha256(impl)
                try:
                    native = NATIVE.prompt_block_hashes(request.prompt_token_ids, h,
                                                        none_hash(algo, seed))
                finally:
                    NATIVE.use_sha256(before)
                assert native == list(request.block_hashes), impl
    kv_cache_utils.init_none_hash(sha256_cbor)


def test_event_keys_are_vllms(monkeypatch) -> None:
    rng = random.Random(1)
    for _ in range(200):
        digest = rng.randbytes(32)
        monkeypatch.setenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1")
        as_int = kv_cache_utils.maybe_convert_block_hash(digest)
        assert event_key(as_int) == event_key(digest) == as_int
    with pytest.raises(TypeError, match="block hash"):
        event_key("abc")


def test_batches_read_the_same_as_objects_and_bytes() -> None:
    batch = KVEventBatch(ts=1.0, events=[
        BlockStored(block_hashes=[b"\x01" * 32, 7], parent_block_hash=None, token_ids=[1, 2],
                    block_size=2, lora_id=None, medium="GPU", lora_name=None, group_idx=1),
        BlockRemoved(block_hashes=[7], medium="GPU", group_idx=0),
        AllBlocksCleared(),
    ], data_parallel_rank=3)
    as_object = read_batch(batch)
    assert read_batch(msgspec.msgpack.encode(batch)) == as_object
    assert as_object[1] == 3
    assert [e.kind for e in as_object[0]] == ["BlockStored", "BlockRemoved", "AllBlocksCleared"]


# ---- the lookup: a real KVCacheManager against the index ---------------------


SCENARIOS = [
    Scenario((Group(16),), 16, False),
    Scenario((Group(16),), 16, True),
    Scenario((Group(16, 48),), 16, False),
    Scenario((Group(16, 100),), 16, True),
    *[Scenario(groups, h, eagle) for groups, h in FIXED_HYBRIDS for eagle in (False, True)],
]


def _layout(scenario: Scenario, num_blocks: int, algo: str) -> ReplicaLayout:
    config = scenario.kv_cache_config(num_blocks)
    layout = ReplicaLayout.from_kv_cache_config(
        config, hash_block_size=scenario.hash_block_size, use_eagle=scenario.use_eagle,
        hash_algo=algo, none_hash_seed=kv_cache_utils.get_none_hash_seed(),
    )
    assert layout.alignment_tokens == scenario.scheduler_block_size
    return layout


class Workload:
    """Prompts that share prefixes: a few documents, each request a
    document's prefix plus its own suffix."""

    def __init__(self, rng: random.Random, h: int) -> None:
        self.rng = rng
        self.docs = [[rng.randrange(32_000) for _ in range(rng.randint(4, 40) * h)]
                     for _ in range(rng.randint(2, 5))]

    def prompt(self) -> list[int]:
        doc = self.rng.choice(self.docs)
        cut = self.rng.randint(0, len(doc))
        tail = [self.rng.randrange(32_000) for _ in range(self.rng.choice((0, 0, 1, 7, 40)))]
        return doc[:cut] + tail or [self.rng.randrange(32_000)]


class Replica:
    """A real ``KVCacheManager`` (events on) serving a prefix-sharing
    workload: prefill, sometimes a few decode steps (a sliding-window group
    then frees what left the window), frees, evictions on a small pool."""

    def __init__(self, scenario: Scenario, rng: random.Random, algo: str = "sha256_cbor") -> None:
        kv_cache_utils.init_none_hash(ALGOS[algo])  # read by vLLM's hasher at each call
        self.scenario, self.rng, self.algo = scenario, rng, algo
        h = scenario.hash_block_size
        num_blocks = rng.randint(20, 200)
        self.manager = KVCacheManager(
            kv_cache_config=scenario.kv_cache_config(num_blocks),
            max_model_len=64 * h, scheduler_block_size=scenario.scheduler_block_size,
            hash_block_size=h, enable_caching=True, use_eagle=scenario.use_eagle,
            enable_kv_cache_events=True,
        )
        self.layout = _layout(scenario, num_blocks, algo)
        self.work = Workload(rng, h)
        self.live: list = []
        self.served = 0

    def request(self, request_id: str, prompt: list[int]):  # noqa: ANN201
        """A real Request of ``prompt``, hashed by vLLM's hasher with this
        replica's algorithm."""
        h = self.scenario.hash_block_size
        request = _make_request(self.rng, request_id, 0, h, prompt)  # sha256_cbor
        if self.algo != "sha256_cbor":
            request._block_hasher = kv_cache_utils.get_request_block_hasher(h, ALGOS[self.algo])
            request.block_hashes = []
            request.update_block_hashes()
        return request

    def serve(self) -> KVEventBatch | None:
        """One request in, a few out; the events they made, as a batch."""
        rng, manager, h = self.rng, self.manager, self.scenario.hash_block_size
        self.served += 1
        request = self.request(f"s{self.served}", self.work.prompt())
        blocks, hit, _ = manager.get_computed_blocks(request)
        if manager.allocate_slots(request, request.num_tokens - hit, hit, blocks) is not None:
            self.live.append(request)
            if rng.random() < 0.3:
                request.num_computed_tokens = request.num_tokens
                for _ in range(rng.randint(1, 2 * h)):
                    request.append_output_token_ids(rng.randrange(32_000))
                manager.allocate_slots(request, request.num_tokens - request.num_computed_tokens)
        while len(self.live) > rng.randint(0, 3):
            manager.free(self.live.pop(rng.randrange(len(self.live))))
        events = manager.take_events()
        return KVEventBatch(ts=0.0, events=events) if events else None

    def probe(self) -> tuple[list[int], int]:
        """A prompt and the hit vLLM's ``get_computed_blocks`` gives it now."""
        prompt = self.work.prompt()
        probe = self.request("probe", prompt)
        return prompt, self.manager.get_computed_blocks(probe)[1]

    def close(self) -> None:
        for request in self.live:
            self.manager.free(request)


def _run(scenario: Scenario, rng: random.Random, probes: int, algo: str) -> tuple[int, int]:
    """Serve and probe one replica; returns (probes compared, probes that hit)."""
    replica = Replica(scenario, rng, algo)
    index = KVIndex()
    assert index.core == ("python" if NATIVE is None else "native")
    index.add_replica("r0", replica.layout)
    done = hits = 0
    for step in range(probes // 2):
        batch = replica.serve()
        if batch is not None:  # as the object, or as the bytes vLLM's publisher sends
            index.apply("r0", msgspec.msgpack.encode(batch) if rng.random() < 0.5 else batch)
        for _ in range(2):
            prompt, want = replica.probe()
            got = index.score(prompt)["r0"]
            assert got == want, (
                f"{scenario} step {step}: index {got} != vLLM {want} for a {len(prompt)}-token prompt"
            )
            done += 1
            hits += want > 0
    replica.close()
    REMOVED[0] += index.stats("r0").get("removed", 0)
    return done, hits


def test_index_scores_what_get_computed_blocks_returns() -> None:
    rng = random.Random(20261202)
    done = hits = runs = 0
    while done < CASES:
        for scenario in SCENARIOS:
            runs += 1
            algo = ("sha256", "sha256_cbor")[runs % 2]
            d, k = _run(scenario, rng, max(10, min(60, (CASES - done) // 2)), algo)
            done, hits = done + d, hits + k
            if done >= CASES:
                break
    assert hits > done // 5, f"only {hits} of {done} probes hit: the comparison says little"
    assert REMOVED[0] > done // 10, f"only {REMOVED[0]} keys removed: too few evictions"
    CASE_COUNTS["kv_index vs get_computed_blocks"] += done


def test_bad_input_is_refused() -> None:
    index = KVIndex()
    layout = ReplicaLayout((GroupLayout("full_attention", 16),), 16)
    index.add_replica("r0", layout)
    with pytest.raises(ValueError, match="name"):
        index.add_replica("r0", layout)
    with pytest.raises(ValueError, match="name"):
        index.apply("nope", KVEventBatch(ts=0.0, events=[]))
    with pytest.raises(TypeError, match="batch"):
        index.apply("r0", object())
    with pytest.raises(ValueError, match="group_idx"):
        index.apply("r0", KVEventBatch(ts=0.0, events=[
            BlockRemoved(block_hashes=[1], medium="GPU", group_idx=4)]))
    with pytest.raises(TypeError, match="prompt_token_ids"):
        index.score("hello")
    with pytest.raises(TypeError, match="prompt_token_ids"):
        index.score([1, 2.5])
    with pytest.raises(ValueError, match="kind"):
        GroupLayout("mamba", 16)
    with pytest.raises(ValueError, match="hash_block_size"):
        ReplicaLayout((GroupLayout("full_attention", 16), GroupLayout("sliding_window", 24, 64)), 16)
    with pytest.raises(ValueError, match="hash_algo"):
        ReplicaLayout((GroupLayout("full_attention", 16),), 16, hash_algo="md5")


# ---- the subscriber, on vLLM's own publisher -----------------------------------


def _publisher(tmp_path, buffer_steps: int):
    from vllm.distributed.kv_events import ZmqEventPublisher

    return ZmqEventPublisher(
        0, endpoint=f"ipc://{tmp_path}/pub", replay_endpoint=f"ipc://{tmp_path}/replay",
        buffer_steps=buffer_steps,
    )


def _follow(sub, published: int) -> None:
    """Poll until the subscriber has applied every published batch (a
    batch sent before the subscription reached the publisher is lost, as
    PUB does: ``catch_up`` replays it)."""
    for _ in range(200):
        sub.poll(50)
        if sub.next_seq >= published:
            return
        sub.catch_up()
    raise AssertionError(f"subscriber at seq {sub.next_seq} of {published} published")


def _publish_some(replica: Replica, pub, count: int) -> int:
    """``count`` batches, sent by the publisher's thread before this returns
    (so a subscriber that connects afterwards has missed them)."""
    published = 0
    while published < count:
        batch = replica.serve()
        if batch is not None:
            pub.publish(batch)
            published += 1
    pub._event_queue.join()
    return published


@contextlib.contextmanager
def _stream(tmp_path, scenario: Scenario, seed: int, buffer_steps: int):
    """A replica serving requests, vLLM's publisher for its events, and an
    index that knows the replica; torn down on exit."""
    replica = Replica(scenario, random.Random(seed))
    pub = _publisher(tmp_path, buffer_steps)
    index = KVIndex()
    index.add_replica("r0", replica.layout)
    try:
        yield replica, pub, index
    finally:
        pub.shutdown()
        replica.close()


def _subscribe(tmp_path, index: KVIndex):
    from swa_prefix_cache.kv_index.subscriber import Subscriber

    return Subscriber(index, "r0", f"ipc://{tmp_path}/pub", f"ipc://{tmp_path}/replay")


@pytest.mark.parametrize("scenario", [SCENARIOS[2], SCENARIOS[6]], ids=["swa", "hybrid"])
def test_subscriber_joins_late_and_replays_what_it_missed(tmp_path, scenario) -> None:
    """A subscriber that connects after 15 batches replays 0.. from vLLM's
    ROUTER socket, then follows the stream; the index is exact on every
    probe."""
    with _stream(tmp_path, scenario, seed=3, buffer_steps=1000) as (replica, pub, index):
        published = _publish_some(replica, pub, 15)
        sub = _subscribe(tmp_path, index)
        try:
            for _ in range(40):
                published += _publish_some(replica, pub, 1)
                _follow(sub, published)
                for _ in range(3):
                    prompt, want = replica.probe()
                    assert index.score(prompt)["r0"] == want
            assert sub.complete and sub.stats["replayed"] >= 15
            assert sub.stats["resets"] == 0
        finally:
            sub.close()


def test_subscriber_resets_when_the_replay_cannot_fill_the_gap(tmp_path) -> None:
    """vLLM keeps 2 batches for replay; a subscriber 20 batches late cannot
    be filled: the replica is reset, ``complete`` turns False, and from then
    on the index never credits more than the replica serves."""
    with _stream(tmp_path, SCENARIOS[6], seed=4, buffer_steps=2) as (replica, pub, index):
        published = _publish_some(replica, pub, 20)
        sub = _subscribe(tmp_path, index)
        try:
            under = 0
            for _ in range(30):
                published += _publish_some(replica, pub, 1)
                _follow(sub, published)
                for _ in range(3):
                    prompt, want = replica.probe()
                    got = index.score(prompt)["r0"]
                    assert got <= want
                    under += got < want
            assert not sub.complete and sub.stats["resets"] == 1
            assert index.stats("r0")["resets"] == 1
        finally:
            sub.close()


def test_subscriber_fills_dropped_batches_from_the_replay(tmp_path) -> None:
    """Every fourth live batch is dropped on arrival (as a lost message
    would be): each gap is seen and filled from the replay socket, and the
    index stays exact."""
    with _stream(tmp_path, SCENARIOS[7], seed=5, buffer_steps=1000) as (replica, pub, index):
        sub = _subscribe(tmp_path, index)
        receive = sub._sub.recv_multipart
        arrivals = [0]

        def lossy():
            frames = receive()
            arrivals[0] += 1
            return frames if arrivals[0] % 4 else [b"lost"]  # skipped as malformed

        sub._sub.recv_multipart = lossy
        try:
            published = 0
            for _ in range(40):
                published += _publish_some(replica, pub, 1)
                for _ in range(100):  # a dropped batch is seen at the next one
                    sub.poll(20)
                    if sub.next_seq >= published - 1:
                        break
                for _ in range(2):
                    prompt, want = replica.probe()
                    if sub.next_seq >= published:
                        assert index.score(prompt)["r0"] == want
            assert sub.stats["gaps"] >= 5 and sub.complete and sub.stats["resets"] == 0
        finally:
            sub.close()
