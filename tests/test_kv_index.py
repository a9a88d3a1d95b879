"""kv_index against vLLM's own code: its hash chain, its event encoding, and
above all its lookup: a real ``KVCacheManager`` (events on) serves random
prefix-sharing requests (prefill, some decode steps, frees, evictions on a
small pool); after every request its events go to a ``KVIndex`` (as the
objects or as the msgpack bytes vLLM's publisher sends), and for random
probe prompts ``index.score`` must equal the manager's own
``get_computed_blocks`` hit, every time.

``PREFIX_CACHE_KV_INDEX_CASES`` sets the number of compared probes of the
main test (default 3,000).
"""

from __future__ import annotations

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

from kv_index import GroupLayout, KVIndex, ReplicaLayout  # noqa: E402
from kv_index.events import read_batch  # noqa: E402
from kv_index.hashing import event_key, none_hash, prompt_block_hashes  # noqa: E402

CASES = int(os.environ.get("PREFIX_CACHE_KV_INDEX_CASES", "3000"))
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


def _layout(scenario: Scenario, num_blocks: int) -> ReplicaLayout:
    config = scenario.kv_cache_config(num_blocks)
    layout = ReplicaLayout.from_kv_cache_config(
        config, hash_block_size=scenario.hash_block_size, use_eagle=scenario.use_eagle,
        hash_algo="sha256_cbor", none_hash_seed=kv_cache_utils.get_none_hash_seed(),
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


def _ship(index: KVIndex, manager: KVCacheManager, rng: random.Random) -> None:
    """The manager's new events to the index, as vLLM's publisher would."""
    events = manager.take_events()
    if not events:
        return
    batch = KVEventBatch(ts=0.0, events=events)
    index.apply("r0", msgspec.msgpack.encode(batch) if rng.random() < 0.5 else batch)


def _run(scenario: Scenario, rng: random.Random, probes: int) -> tuple[int, int]:
    """Serve and probe one replica; returns (probes compared, probes that hit)."""
    kv_cache_utils.init_none_hash(sha256_cbor)
    h = scenario.hash_block_size
    num_blocks = rng.randint(20, 200)
    manager = KVCacheManager(
        kv_cache_config=scenario.kv_cache_config(num_blocks),
        max_model_len=64 * h, scheduler_block_size=scenario.scheduler_block_size,
        hash_block_size=h, enable_caching=True, use_eagle=scenario.use_eagle,
        enable_kv_cache_events=True,
    )
    index = KVIndex()
    index.add_replica("r0", _layout(scenario, num_blocks))
    work = Workload(rng, h)
    live: list = []
    done = hits = 0
    for step in range(probes):
        request = _make_request(rng, f"s{step}", 0, h, work.prompt())
        blocks, hit, _ = manager.get_computed_blocks(request)
        if manager.allocate_slots(request, request.num_tokens - hit, hit, blocks) is not None:
            live.append(request)
            if rng.random() < 0.3:  # a decode step or two: SWA frees what left the window
                request.num_computed_tokens = request.num_tokens
                for _ in range(rng.randint(1, 2 * h)):
                    request.append_output_token_ids(rng.randrange(32_000))
                manager.allocate_slots(request, request.num_tokens - request.num_computed_tokens)
        while len(live) > rng.randint(0, 3):
            manager.free(live.pop(rng.randrange(len(live))))
        _ship(index, manager, rng)
        for _ in range(2):
            prompt = work.prompt()
            probe = _make_request(rng, f"p{step}", 0, h, prompt)
            want = manager.get_computed_blocks(probe)[1]
            got = index.score(prompt)["r0"]
            assert got == want, (
                f"{scenario} step {step}: index {got} != vLLM {want} for a {len(prompt)}-token prompt"
            )
            done += 1
            hits += want > 0
    for request in live:
        manager.free(request)
    REMOVED[0] += index.stats("r0").get("removed", 0)
    return done, hits


def test_index_scores_what_get_computed_blocks_returns() -> None:
    rng = random.Random(20261202)
    done = hits = 0
    while done < CASES:
        for scenario in SCENARIOS:
            d, k = _run(scenario, rng, max(10, min(60, (CASES - done) // 2)))
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
