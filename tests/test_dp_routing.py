"""Data-parallel routing by exact hit, against vLLM's real front end.

* ``vllm_load_score`` is vLLM's: on random engine states the engine vLLM's
  own ``DPLBAsyncMPClient.get_core_engine_for_request`` picks is the first
  least-score engine in its rotated scan order.
* The wrapped method on a real ``DPLBAsyncMPClient`` instance, its index
  fed by real ``KVCacheManager`` s (one per rank), sends each request where
  ``choose`` says, and the client's bookkeeping (local waiting counts,
  in-flight counts, abort map) is what vLLM's would be had it chosen that
  rank; vLLM's ``process_engine_outputs`` then unwinds it to zero.
* Requests the index cannot score keep vLLM's choice, counted by reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections import Counter

import pytest

pytest.importorskip("vllm")

from conftest import CASE_COUNTS  # noqa: E402
from test_kv_index import SCENARIOS, Replica  # noqa: E402
from vllm.v1.engine import EngineCoreRequest  # noqa: E402
from vllm.v1.engine.core_client import DPLBAsyncMPClient  # noqa: E402
from vllm.v1.engine import EngineCoreOutputs  # noqa: E402

from swa_prefix_cache.kv_index import KVIndex  # noqa: E402
from swa_prefix_cache.kv_index.balance import choose, costs, vllm_load_score  # noqa: E402
from swa_prefix_cache.kv_index.subscriber import Subscriber  # noqa: E402
from swa_prefix_cache.vllm_adapter import dp_routing, registry  # noqa: E402

ORIGINAL = registry.original(dp_routing.NAME)
ROUTE = dp_routing._make_route(ORIGINAL)


def _client(num_engines: int, client_count: int = 1, start: int = 0) -> DPLBAsyncMPClient:
    """vLLM's client with the state its engine choice reads (no engines)."""
    client = object.__new__(DPLBAsyncMPClient)
    client.client_count = client_count
    client.reqs_in_flight = {}
    client.streaming_reqs = set()
    client.engine_inflight = Counter()
    client.core_engines = [rank.to_bytes(2, "little") for rank in range(num_engines)]
    client.lb_engines = [[0, 0, 0.0] for _ in range(num_engines)]
    client.eng_start_index = start
    return client


def _request(request_id: str, prompt: list[int], **fields) -> EngineCoreRequest:
    args = dict(request_id=request_id, prompt_token_ids=prompt, mm_features=None,
                sampling_params=None, pooling_params=None, arrival_time=0.0,
                lora_request=None, cache_salt=None, data_parallel_rank=None)
    args.update(fields)
    return EngineCoreRequest(**args)


def _loads(client: DPLBAsyncMPClient) -> list[float]:
    return [vllm_load_score(w, r, u, client.engine_inflight[e], client.client_count)
            for e, (w, r, u) in zip(client.core_engines, client.lb_engines)]


def test_load_score_is_vllms() -> None:
    rng = random.Random(7)
    for case in range(3000):
        n = rng.randint(2, 6)
        client = _client(n, rng.randint(1, 3), rng.randrange(n))
        for i in range(n):
            client.lb_engines[i] = [rng.randint(0, 5), rng.randint(0, 5),
                                    rng.choice((0.0, 0.3, 0.6, 0.9, rng.random()))]
            client.engine_inflight[client.core_engines[i]] = rng.randint(0, 6)
        loads, start = _loads(client), client.eng_start_index
        order = [(start + i) % n for i in range(n)]
        expected = min(order, key=lambda idx: (loads[idx], order.index(idx)))
        engine = ORIGINAL(client, _request(f"r{case}", [1, 2, 3]))
        assert client.core_engines.index(engine) == expected, (case, loads, start)
        # With equal hits the cost orders engines as vLLM does: its choice stays.
        same = [rng.randint(0, 3)] * n
        assert choose(same, loads, 3, expected, rng.choice((0, 1, 512, 8192))) == expected
    CASE_COUNTS["dp routing: load score vs vLLM"] += 3000


def test_choose_trades_hit_against_load() -> None:
    assert costs([0, 600], [0, 1], 1000, 512) == [1000, 912]
    assert choose([0, 600], [0, 1], 1000, 0, 512) == 1  # 600 cached tokens beat one request ahead
    assert choose([0, 400], [0, 1], 1000, 0, 512) == 0  # 400 do not
    assert choose([0, 512], [0, 1], 1000, 0, 512) == 0  # a tie keeps vLLM's choice
    assert choose([900, 900, 0], [2, 1, 0], 1000, 2, 100) == 1  # cheapest, then the lower load
    assert choose([5, 5], [0, 0], 10, 1, 0) == 1
    for bad in (dict(hits=[1], loads=[0, 0]), dict(prompt_tokens=-1), dict(vllm_choice=2),
                dict(tokens_per_load=float("nan")), dict(loads=[0, float("inf")]),
                dict(hits=[0, 11]), dict(tokens_per_load=True)):
        args = dict(hits=[0, 1], loads=[0, 0], prompt_tokens=10, vllm_choice=0, tokens_per_load=1)
        args.update(bad)
        with pytest.raises(ValueError):
            choose(**args)


def _ranks(scenario, rng: random.Random, steps: int):
    """Two real KVCacheManagers that served different work, and an index of both."""
    index = KVIndex()
    replicas = [Replica(scenario, rng) for _ in range(2)]
    for rank, replica in enumerate(replicas):
        index.add_replica(f"dp{rank}", replica.layout)
        for _ in range(steps):
            batch = replica.serve()
            if batch is not None:
                index.apply(f"dp{rank}", batch)
    return index, replicas


@pytest.mark.parametrize("scenario", SCENARIOS[:4] + SCENARIOS[-2:], ids=str)
def test_wrapped_choice_and_bookkeeping(scenario) -> None:
    rng = random.Random(f"dp-{scenario}")  # str seeds are not hash()-randomized
    index, replicas = _ranks(scenario, rng, 30)
    client = _client(2, client_count=rng.randint(1, 2))
    router = dp_routing.Router(tokens_per_load=float(rng.choice((0, 16, 64, 512))))
    router.attach(index, ["dp0", "dp1"], [])
    client.__dict__[dp_routing._ROUTER_ATTR] = router
    sent: list[tuple[str, bytes]] = []
    moved = 0
    for step in range(120):
        prompt, _ = replicas[rng.randrange(2)].probe()
        hits = [replica.manager.get_computed_blocks(
            _request_for(replica, prompt))[1] for replica in replicas]
        assert [index.score(prompt)[f"dp{r}"] for r in range(2)] == hits
        loads, counts = _loads(client), [c[0] for c in client.lb_engines]
        theirs = (client.eng_start_index if loads[0] == loads[1] else loads.index(min(loads)))
        want = choose(hits, loads, len(prompt), theirs, router.tokens_per_load)
        request_id = f"q{step}"
        engine = ROUTE(client, _request(request_id, prompt))
        assert engine == client.core_engines[want], (step, hits, loads)
        moved += want != theirs
        counts[want] += client.client_count
        assert [c[0] for c in client.lb_engines] == counts
        assert client.reqs_in_flight[request_id] == engine
        sent.append((request_id, engine))
        assert sum(client.engine_inflight.values()) == len(sent)
        if rng.random() < 0.4:  # vLLM's own output handling unwinds one request
            done, _ = sent.pop(rng.randrange(len(sent)))
            outputs = EngineCoreOutputs(finished_requests={done})
            asyncio.run(DPLBAsyncMPClient.process_engine_outputs(client, outputs))
        for e in client.core_engines:
            assert client.engine_inflight[e] == sum(1 for _, s in sent if s == e)
    assert router.stats["decisions"] == 120 and router.stats["moved"] == moved
    CASE_COUNTS["dp routing: moved from vLLM's choice"] += moved
    for replica in replicas:
        replica.close()
    CASE_COUNTS["dp routing: routed requests"] += 120


def _request_for(replica, prompt):
    from test_coordinators import _make_request

    return _make_request(random.Random(0), "probe", 0, replica.scenario.hash_block_size, prompt)


def test_unsure_requests_keep_vllms_choice() -> None:
    index, replicas = _ranks(SCENARIOS[0], random.Random(3), 20)
    prompt, _ = replicas[1].probe()
    for fields, reason in ((dict(data_parallel_rank=0), "rank given"),
                           (dict(cache_salt="s"), "extra hash keys"),
                           (dict(prompt_token_ids=None), "no prompt token ids")):
        client = _client(2)
        router = dp_routing.Router(tokens_per_load=0.0)
        router.attach(index, ["dp0", "dp1"], [])
        client.__dict__[dp_routing._ROUTER_ATTR] = router
        twin = _client(2)
        assert ROUTE(client, _request("a", prompt, **fields)) == ORIGINAL(twin, _request("a", prompt, **fields))
        assert router.unsure[reason] == 1 and router.stats["decisions"] == 0
        assert client.lb_engines == twin.lb_engines
    # A router that has not started yet (no running event loop here) keeps vLLM's choice too.
    client, twin = _client(2), _client(2)
    assert ROUTE(client, _request("b", prompt)) == ORIGINAL(twin, _request("b", prompt))
    for replica in replicas:
        replica.close()


def test_engine_layout_is_the_managers() -> None:
    from types import SimpleNamespace

    for scenario in SCENARIOS:
        replica = Replica(scenario, random.Random(5))
        scheduler = SimpleNamespace(kv_cache_manager=replica.manager,
                                    hash_block_size=scenario.hash_block_size)
        answer = dp_routing.engine_layout(scheduler, "sha256_cbor", replica.layout.none_hash_seed)
        assert dp_routing.layout_from_dict(answer["layout"]) == replica.layout
        assert "reason" in dp_routing.engine_layout(scheduler, "xxhash", None)
        replica.close()


def test_subscribe_endpoint() -> None:
    assert dp_routing.subscribe_endpoint("tcp://*:5557") == "tcp://127.0.0.1:5557"
    assert dp_routing.subscribe_endpoint("ipc:///tmp/kv") == "ipc:///tmp/kv"
    assert dp_routing.subscribe_endpoint("tcp://10.0.0.2:5557") is None


# ---- events off the request path -------------------------------------------------


class CountingSubscriber(Subscriber):
    """The project's Subscriber, counting its polls and replays per thread."""

    def __init__(self, *args, **kwargs) -> None:
        self.calls: Counter[str] = Counter()
        super().__init__(*args, **kwargs)

    def poll(self, *args, **kwargs) -> int:
        self.calls["poll@" + threading.current_thread().name] += 1
        return super().poll(*args, **kwargs)

    def catch_up(self) -> int:
        self.calls["catch_up@" + threading.current_thread().name] += 1
        return super().catch_up()


def _wait(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@contextlib.contextmanager
def publishing_ranks(tmp_path, scenario, rng: random.Random, subscriber: type = Subscriber):
    """Two ranks, each a real ``KVCacheManager`` behind vLLM's real
    ``ZmqEventPublisher`` (ipc), an index of both, a subscriber per rank
    that has not replayed yet and a router; torn down on exit."""
    from vllm.distributed.kv_events import ZmqEventPublisher

    replicas = [Replica(scenario, rng) for _ in range(2)]
    pubs = [ZmqEventPublisher(0, endpoint=f"ipc://{tmp_path}/pub{r}",
                              replay_endpoint=f"ipc://{tmp_path}/replay{r}", buffer_steps=1000)
            for r in range(2)]
    router = dp_routing.Router(tokens_per_load=0.0)
    try:
        index = KVIndex()
        for r, replica in enumerate(replicas):
            index.add_replica(f"dp{r}", replica.layout)
        subs = [subscriber(index, f"dp{r}", f"ipc://{tmp_path}/pub{r}",
                           f"ipc://{tmp_path}/replay{r}", replay_on_start=False)
                for r in range(2)]
        yield replicas, pubs, index, subs, router
    finally:
        router.close()
        for pub in pubs:
            pub.shutdown()
        for replica in replicas:
            replica.close()


def test_events_are_read_on_the_poller_thread(tmp_path) -> None:
    """Two ranks, each a real ``KVCacheManager`` behind vLLM's real
    ``ZmqEventPublisher``: the router's poller thread replays what was sent
    before it subscribed and follows the streams; requests routed meanwhile
    never poll or replay on the request thread; the index ends equal to the
    managers; ``close()`` stops the thread and closes the sockets."""
    from test_kv_index import _publish_some

    rng = random.Random(31)
    with publishing_ranks(tmp_path, SCENARIOS[0], rng, CountingSubscriber) as (replicas, pubs, index, subs, router):
        published = [_publish_some(replicas[r], pubs[r], 5) for r in range(2)]
        router.attach(index, ["dp0", "dp1"], subs)
        client = _client(2)
        client.__dict__[dp_routing._ROUTER_ATTR] = router
        assert _wait(lambda: router.ready)
        for step in range(40):
            rank = rng.randrange(2)
            published[rank] += _publish_some(replicas[rank], pubs[rank], 1)
            prompt, _ = replicas[rng.randrange(2)].probe()
            ROUTE(client, _request(f"q{step}", prompt))
        assert _wait(lambda: all(sub.next_seq >= n for sub, n in zip(subs, published)))
        assert all(sub.complete for sub in subs)
        for _ in range(20):
            prompt, _ = replicas[rng.randrange(2)].probe()
            hits = [replica.manager.get_computed_blocks(_request_for(replica, prompt))[1]
                    for replica in replicas]
            assert [index.score(prompt)[f"dp{r}"] for r in range(2)] == hits
        main = threading.current_thread().name
        for sub in subs:
            assert sub.calls["poll@" + main] == 0 and sub.calls["catch_up@" + main] == 0
            assert sub.calls["poll@swa-prefix-cache-kv-events"] > 0
            assert sub.calls["catch_up@swa-prefix-cache-kv-events"] == 1
            assert sub.stats["replayed"] >= 5
        assert router.stats["decisions"] + sum(router.unsure.values()) == 40
        assert router.stats["decisions"] > 0
        assert router.status()["poller"]
        router.close()
        assert not router.poller_alive()
        assert all(sub._sub.closed for sub in subs)


def test_prepare_never_waits_on_a_replay(tmp_path) -> None:
    """A replay socket that never answers holds the poller thread in its
    first replay (3 s): requests meanwhile keep vLLM's choice ("index
    starting") without waiting for it, and ``close()`` still stops the
    thread once that replay gives up."""
    import zmq

    index, replicas = _ranks(SCENARIOS[0], random.Random(32), 5)
    silent = zmq.Context.instance().socket(zmq.ROUTER)
    silent.bind(f"ipc://{tmp_path}/silent")
    router = dp_routing.Router(tokens_per_load=0.0)
    try:
        subs = [CountingSubscriber(index, f"dp{r}", f"ipc://{tmp_path}/nopub{r}",
                                   f"ipc://{tmp_path}/silent", replay_timeout_ms=3000,
                                   replay_on_start=False)
                for r in range(2)]
        router.attach(index, ["dp0", "dp1"], subs)
        client, twin = _client(2), _client(2)
        client.__dict__[dp_routing._ROUTER_ATTR] = router
        prompt, _ = replicas[0].probe()
        start = time.monotonic()
        for step in range(20):
            request = _request(f"s{step}", prompt)
            assert ROUTE(client, request) == ORIGINAL(twin, _request(f"s{step}", prompt))
        assert time.monotonic() - start < 2.0  # the replay under way takes 3 s
        assert router.unsure["index starting"] == 20 and not router.ready
        assert router.poller_alive()
        router.close()
        assert not router.poller_alive()
        assert all(sub.calls["poll@" + threading.current_thread().name] == 0 for sub in subs)
    finally:
        router.close()
        silent.close(linger=0)
        for replica in replicas:
            replica.close()


def test_a_reset_rank_is_scored_zero_and_the_others_still_route() -> None:
    """Issue 44: one rank whose index was reset (its subscriber not
    complete) no longer sends every request to vLLM's balancer: the request
    is routed by the index, that rank scored as holding nothing (never above
    its hit), and the router counts it. With every rank reset, vLLM's
    choice stays."""
    from types import SimpleNamespace

    index, replicas = _ranks(SCENARIOS[0], random.Random(5), 30)
    prompt, _ = replicas[1].probe()
    scores = index.score(prompt)
    assert scores["dp1"] > 0
    for complete, want_hits in (((True, False), [scores["dp0"], 0]), ((False, True), [0, scores["dp1"]])):
        client = _client(2)
        router = dp_routing.Router(tokens_per_load=0.0)
        router.attach(index, ["dp0", "dp1"], [])
        router.subscribers = [SimpleNamespace(complete=ok) for ok in complete]
        prepared = router.prepare(client, _request("a", prompt))
        assert prepared is not None and prepared[0] == want_hits
        reset = "dp0" if not complete[0] else "dp1"
        assert router.unsure[f"{reset} index reset: scored 0"] == 1
    router.subscribers = [SimpleNamespace(complete=False), SimpleNamespace(complete=False)]
    assert router.prepare(_client(2), _request("b", prompt)) is None
    assert router.unsure["index reset"] == 1
    for replica in replicas:
        replica.close()
