"""upstream/routers/: the recorded fixtures and the reproductions' own
logic, without the routers (``make upstream-routers`` runs those).

* Each fixture is what its recording says: ``kv_index`` rebuilt from its
  event batches alone scores the probe at exactly the ``cached_tokens``
  each vLLM replica served. So the events do carry the exact hit, and a
  router that credits anything else is wrong, not under-informed.
* The sliding-window fixtures are a real test of a router: the served
  counts differ between the replicas and from the full-attention prefix
  the events list (what a prefix-only index credits).
* The verdict, the fixture check and vllm-router's log reading, on made-up
  input.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from swa_prefix_cache.kv_index import GroupLayout, KVIndex, ReplicaLayout

ROUTERS = Path(__file__).resolve().parents[1] / "upstream" / "routers"
sys.path.insert(0, str(ROUTERS))

import _replay  # noqa: E402
import vllm_router_kv_aware  # noqa: E402

FIXTURES = sorted((ROUTERS / "fixtures").glob("*.json"))


def _fixture(name: str) -> dict:
    return json.loads((ROUTERS / "fixtures" / f"{name}.json").read_text())


def test_the_three_fixtures_are_there() -> None:
    assert {p.stem for p in FIXTURES} == {"swa", "hybrid", "dense"}


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_kv_index_from_the_fixture_scores_what_vllm_served(path: Path) -> None:
    fixture = json.loads(path.read_text())
    layout = ReplicaLayout(tuple(GroupLayout(**g) for g in fixture["groups"]),
                           hash_block_size=fixture["block_size"])
    index = KVIndex()
    for replica, batches in fixture["batches"].items():
        index.add_replica(replica, layout)
        for payload in batches:
            index.apply(replica, base64.b64decode(payload))
    assert index.score(fixture["probe"]["prompt_token_ids"]) == fixture["probe"]["served_cached_tokens"]


@pytest.mark.parametrize("name", ["swa", "hybrid"])
def test_sliding_window_fixtures_tell_routers_apart(name: str) -> None:
    """The replicas served different hits, and the longer one is shorter
    than the prefix of stored blocks the probe shares (an index of
    prefixes alone over-credits it)."""
    fixture = _fixture(name)
    served = fixture["probe"]["served_cached_tokens"]
    assert len(set(served.values())) == len(served)
    block = fixture["block_size"]
    probe = fixture["probe"]["prompt_token_ids"]
    shared = 0  # whole blocks of the probe some earlier request of r0 carried
    for payload in fixture["batches"]["r0"]:
        for event in _events(payload):
            tokens = event.get("token_ids") or []
            n = 0
            while n + block <= min(len(tokens), len(probe)) and tokens[n:n + block] == probe[n:n + block]:
                n += block
            if event.get("parent_block_hash") is None:
                shared = max(shared, n)
    assert max(served.values()) < shared


@pytest.mark.parametrize("name", ["swa", "hybrid"])
def test_sliding_window_fixtures_hold_a_store_without_hashes(name: str) -> None:
    """vLLM publishes a sliding-window group's store with no hash when
    none of its new full blocks can serve a hit (r1's decode step); the
    reproduction of vllm-router's batch decoding rests on it."""
    empty = [e for payload in _fixture(name)["batches"]["r1"] for e in _events(payload)
             if e.get("type") == "BlockStored" and not e["block_hashes"]]
    assert empty and all(e["kv_cache_spec_kind"] == "sliding_window" for e in empty)


def _events(payload: str) -> list[dict]:
    msgspec = pytest.importorskip("msgspec")
    batch = msgspec.msgpack.decode(base64.b64decode(payload))
    return [e for e in batch[1] if isinstance(e, dict)]


def test_verdict() -> None:
    fixture = {"probe": {"served_cached_tokens": {"r0": 512, "r1": 96}}}
    assert _replay.verdict(fixture, {"r0": 512, "r1": 96}) == 0
    assert _replay.verdict(fixture, {"r0": 512}, chosen="r0") == 0
    assert _replay.verdict(fixture, {"r0": 576, "r1": 96}) == 1  # over-credit
    assert _replay.verdict(fixture, {"r1": 96}, chosen="r1") == 1  # right credit, worse replica
    assert _replay.verdict(fixture, {"r0": 64}, chosen="r0") == 1


def test_bad_fixture_cannot_run(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"batches": {"r0": []}, "probe": {}}))
    with pytest.raises(_replay.CannotRun, match="bad.json"):
        _replay.load_fixture(bad)
    bad.write_text("{")
    with pytest.raises(_replay.CannotRun, match="bad.json"):
        _replay.load_fixture(bad)
    assert _replay.load_fixture(FIXTURES[0])["block_size"] > 0


def test_vllm_router_log_reading(tmp_path: Path) -> None:
    """Lines as vllm-router 0.1.17 logs them (colours included)."""
    log = tmp_path / "vllm-router.log"
    log.write_text(
        "2026-12-04 03:34:02 DEBUG vllm_router_rs::policies::kv_aware: src/policies/kv_aware.rs:1314: "
        'KV prefix decision outcome="prefix_cost" worker="http://127.0.0.1:9" input_tokens=34 '
        "new_prefill_tokens=2 credited_prefix_tokens=32 used_binding=false\n"
        "\x1b[2m2026-12-04 03:34:02\x1b[0m DEBUG vllm_router_rs::routers::http::router: "
        'src/routers/http/router.rs:1675: KV request selected attempt=0 worker_url="http://127.0.0.1:9" '
        "target=http://127.0.0.1:9 rank=0 new_prefill_tokens=2 input_known=false\n"
        "2026-12-04 01:19:51  WARN vllm_router_rs::kv_index::subscriber: src/kv_index/subscriber.rs:427: "
        "kv_index decode batch: KV event hashes must be a nonempty array\n")
    chosen, credit, warnings = vllm_router_kv_aware.read_log(log, {"http://127.0.0.1:9": "r1"})
    assert (chosen, credit) == ("r1", 32)
    assert warnings == {"kv_index decode batch: KV event hashes must be a nonempty array": 1}
    log.write_text("nothing decided\n")
    with pytest.raises(_replay.CannotRun, match="no KV decision"):
        vllm_router_kv_aware.read_log(log, {})


def test_dynamo_scores_reading() -> None:
    """``/query``'s answer as Dynamo 1.6.1's indexer gives it: tokens per
    worker id and data-parallel rank; an unlisted worker matched nothing."""
    import dynamo_indexer

    reply = {"scores": {"2": {"0": 96}, "1": {"0": 768}}, "frequencies": [], "instances": {}}
    assert dynamo_indexer.credited(reply, {"r0": 1, "r1": 2}) == {"r0": 768, "r1": 96}
    assert dynamo_indexer.credited({"scores": {}}, {"r0": 1, "r1": 2}) == {"r0": 0, "r1": 0}
    with pytest.raises(_replay.CannotRun, match="scores"):
        dynamo_indexer.credited({"error": "x"}, {"r0": 1})
