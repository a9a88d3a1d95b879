"""Opt-in: vLLM's data-parallel front end routes by exact prefix-cache hit.

With ``--data-parallel-size N`` one API server feeds N engine cores, and
``DPLBAsyncMPClient.get_core_engine_for_request`` picks the engine by load
alone, so a prompt whose prefix one rank holds goes wherever load says and
is recomputed there. With ``SWA_PREFIX_CACHE_DP_ROUTING=exact`` (default
``off``) the front end keeps a ``swa_prefix_cache.kv_index.KVIndex`` of every rank, fed by a
``swa_prefix_cache.kv_index.Subscriber`` on that rank's KV events (``--kv-events-config``
with a replay endpoint), and moves a request from vLLM's choice to another
rank when that rank's exact hit outweighs its extra load
(``swa_prefix_cache.kv_index.balance.choose``: the cost formula and why).

What it assumes, and what it does otherwise:

* vLLM's method runs first, unchanged, for every request; the router only
  moves its bookkeeping (the rank's local waiting count, the in-flight
  count and the abort map) from vLLM's rank to the chosen one. The patch
  applies only where vLLM's method and ``process_engine_outputs`` hash to a
  checked fingerprint (``fingerprint.DP_ROUTING``), else vLLM is left as is,
  said once in the log.
* Each rank reports its lookup rules through a utility method the plugin
  adds to the engine core (``swa_prefix_cache_layout``: group order, kinds,
  block sizes, window, EAGLE, hash block size and algorithm, seed), so the
  index scores as that rank's ``get_computed_blocks`` does. A rank the model
  does not cover (Mamba, context parallelism, hash lookahead, prefix
  replay, a hash seed not shared), ranks on other machines, no KV events or
  no replay endpoint: routing stays vLLM's, with the reason in the log and
  in the stats file.
* Per request vLLM's choice is kept, counted by reason, while the index is
  starting or every rank's was reset (a gap the replay could not fill); a
  rank whose index alone was reset is scored as holding nothing. It is kept
  for requests whose block hashes carry more than the tokens (LoRA,
  multimodal input, cache salt, prompt embeddings, KV hints), pooling
  requests, a rank given by the caller and streaming-input sessions.

Threads. Events are read off the request path: each ``Router`` runs one
daemon thread (``swa-prefix-cache-kv-events``) that owns the subscribers'
zmq sockets: it first replays what each rank published before the router
subscribed, then polls every subscriber in turn with a bounded budget
(``POLL_MAX_BATCHES`` batches, ``POLL_BUDGET_S``), and fills gaps from the
replay sockets (each replay bounded by ``REPLAY_TIMEOUT_MS`` overall). It
stops, and closes the sockets, on ``Router.close()``. A request
(``Router.prepare``, on the front end's event loop) never polls and never
waits on a replay: it reads each subscriber's ``complete`` flag (scoring
a rank whose flag is False as holding nothing, keeping vLLM's choice when
all are, or before the first replay is done) and scores from the index as
it is. The one lock between the two threads is
the ``KVIndex``'s own: ``apply``/``reset`` on the poller and ``score`` on the
request each hold it, so a score sees every batch wholly applied or not at
all; it is held for one batch or one score, never across a replay. The
flags a request reads (``Router.ready``, ``Subscriber.complete``) are single
attribute reads; a subscriber marks itself incomplete before it resets the
index.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from swa_prefix_cache.vllm_adapter import fingerprint, registry
from swa_prefix_cache.vllm_adapter.config import DP_ROUTING_ENV, DpRouting, read_dp_routing, read_tokens_per_load

logger = logging.getLogger("swa_prefix_cache")

_ROUTER_ATTR = "_swa_prefix_cache_router"
# One replay's overall deadline, on the poller thread (never on a request):
# long enough for a full 10,000-batch buffer from the same machine.
REPLAY_TIMEOUT_MS = 2000
# The poller's budget per subscriber and round, and its pause when idle.
POLL_MAX_BATCHES = 200
POLL_BUDGET_S = 0.02
POLL_IDLE_S = 0.005
POLLER_JOIN_S = 5.0


NAME = fingerprint.DP_ROUTING.name
# The engine-core method the plugin adds: each rank's lookup rules.
UTILITY = registry.BY_NAME[NAME].binds[1].attr
_KEPT = "vLLM's data-parallel balancing kept"


@dataclass
class _Routers:
    setting: DpRouting | None = None
    routers: list[Any] = field(default_factory=list)


_routers = _Routers()


def plan() -> registry.Plan:
    """The registry's plan for the routing (its settings, read now): wrap
    vLLM's engine choice and add the layout utility to the engine core
    when the setting asks for it and the build is known."""
    try:
        setting = read_dp_routing()
    except ValueError as exc:
        return registry.Refusal(str(exc), _KEPT, logging.ERROR)
    _routers.setting = setting
    try:
        read_tokens_per_load(0.0)
    except ValueError as exc:
        if setting is not DpRouting.OFF:
            return registry.Refusal(str(exc), _KEPT, logging.ERROR)
        # Unused while the routing is off: said, not refused.
        logger.warning("swa-prefix-cache: %s (unused while %s is off)", exc, DP_ROUTING_ENV)
    if setting is DpRouting.OFF:
        return registry.Refusal("setting off")
    return registry.Build(
        lambda found, originals: (_make_route(originals[0]), _layout_utility), _KEPT,
        said="data-parallel routing by exact hit active on vLLM {VLLM}",
    )


def uninstall() -> None:
    """Put vLLM's method back and close the routers' sockets."""
    with registry.lock:
        if registry.uninstall(NAME):
            for router in _routers.routers:
                router.close()
            _routers.routers = []


def is_installed() -> bool:
    return registry.is_installed(NAME)


def status() -> dict[str, Any]:
    found = registry.state(NAME)
    return {
        "installed": found.installed,
        "setting": _routers.setting.value if _routers.setting else None,
        "reason": found.reason,
        "routers": [router.status() for router in _routers.routers],
    }


# ---- engine side ------------------------------------------------------------


def engine_layout(scheduler: Any, hash_algo: str, none_hash_seed: str | None) -> dict[str, Any]:
    """The rank's lookup rules as plain values (``{"layout": ...}``, the
    fields of ``swa_prefix_cache.kv_index.ReplicaLayout``), or ``{"reason": ...}`` when the
    index does not model this engine. ``none_hash_seed``: the seed the
    engine derived ``NONE_HASH`` from (None: vLLM's fixed default)."""
    from dataclasses import asdict

    from swa_prefix_cache.kv_index.layout import HASH_ALGOS, ReplicaLayout

    manager = getattr(scheduler, "kv_cache_manager", None)
    config = getattr(manager, "kv_cache_config", None)
    if manager is None or config is None:
        return {"reason": "the scheduler has no KV-cache manager"}
    if not getattr(manager, "enable_caching", False):
        return {"reason": "prefix caching is off"}
    if getattr(scheduler, "dcp_world_size", 1) != 1 or getattr(scheduler, "pcp_world_size", 1) != 1:
        return {"reason": "context parallelism"}
    if getattr(scheduler, "num_hash_lookahead_tokens", 0):
        return {"reason": "hash lookahead tokens"}
    if getattr(scheduler, "prefix_replay_tokens", 0):
        return {"reason": "prefix replay groups"}
    if hash_algo not in HASH_ALGOS:
        return {"reason": f"hash algorithm {hash_algo} (kv_index hashes {', '.join(HASH_ALGOS)})"}
    try:
        layout = ReplicaLayout.from_kv_cache_config(
            config,
            hash_block_size=scheduler.hash_block_size,
            use_eagle=bool(manager.use_eagle),
            hash_algo=hash_algo,
            none_hash_seed=none_hash_seed,
        )
    except (TypeError, ValueError) as exc:
        return {"reason": str(exc)}
    return {"layout": asdict(layout)}


def _none_hash_seed() -> str | None:
    """The seed this engine derived NONE_HASH from: vLLM's own record where
    it keeps one (0.33), else PYTHONHASHSEED, which wins when set."""
    try:
        from vllm.v1.core.kv_cache_utils import get_none_hash_seed
    except ImportError:
        return os.environ.get("PYTHONHASHSEED")
    return str(get_none_hash_seed())


def _layout_utility(self: Any) -> dict[str, Any]:
    """EngineCore utility (called by the front end through
    ``call_utility_all_async``): this rank's lookup rules."""
    algo = self.vllm_config.cache_config.prefix_caching_hash_algo
    return engine_layout(self.scheduler, algo, _none_hash_seed())


def layout_from_dict(data: dict[str, Any]) -> Any:
    """``engine_layout``'s ``layout`` back as a ``ReplicaLayout``."""
    from swa_prefix_cache.kv_index.layout import GroupLayout, ReplicaLayout

    groups = tuple(GroupLayout(**g) for g in data["groups"])
    return ReplicaLayout(groups, data["hash_block_size"], data["hash_algo"], data["none_hash_seed"])


# ---- front end --------------------------------------------------------------


def subscribe_endpoint(endpoint: str) -> str | None:
    """Where a subscriber on this machine connects for a rank's publisher
    bound at ``endpoint`` (vLLM binds ``*``, ``::`` and ipc), or None."""
    if endpoint.startswith("ipc://"):
        return endpoint
    for bound in ("tcp://*:", "tcp://[::]:", "tcp://0.0.0.0:"):
        if endpoint.startswith(bound):
            return "tcp://127.0.0.1:" + endpoint[len(bound):]
    return None  # another host, or tcp://127.0.0.1:P, where vLLM connects instead of binding


def request_unsure(client: Any, request: Any) -> str | None:
    """Why this request goes where vLLM sends it whatever the index says,
    or None."""
    if request.request_id in client.reqs_in_flight or getattr(request, "resumable", False):
        return "streaming session"
    if request.data_parallel_rank is not None:
        return "rank given"
    if request.pooling_params is not None:
        return "pooling request"
    if request.prompt_token_ids is None or getattr(request, "prompt_embeds", None) is not None:
        return "no prompt token ids"
    if request.mm_features or request.lora_request is not None or request.cache_salt is not None:
        return "extra hash keys"
    if getattr(request, "kv_hints", None) is not None:
        return "KV hints"
    return None


class Router:
    """One front end's index of its ranks and the decisions it made."""

    def __init__(self, tokens_per_load: float) -> None:
        self.tokens_per_load = tokens_per_load
        self.reason = "starting"
        self.ready = False
        self.names: list[str] = []
        self.subscribers: list[Any] = []
        self.index: Any = None
        self.stats: Counter[str] = Counter()
        self.unsure: Counter[str] = Counter()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    def attach(self, index: Any, names: list[str], subscribers: list[Any]) -> None:
        """Route with ``index`` (replica ``names[i]`` is engine ``i``), kept
        current by ``subscribers``, which the poller thread then owns (their
        first replay is its first job; routing starts after it)."""
        self.index, self.names, self.subscribers = index, names, subscribers
        self.reason = ""
        if not subscribers:
            self.ready = True
            return
        self.reason = "starting"
        self._poller = threading.Thread(
            target=self._poll_events, name="swa-prefix-cache-kv-events", daemon=True
        )
        self._poller.start()

    def _poll_events(self) -> None:
        """The poller thread: replay what was missed, then poll every
        subscriber with a bounded budget until ``close()``; closes the
        subscribers' sockets on the way out."""
        subscribers = list(self.subscribers)  # close() may clear the attribute
        try:
            for sub in subscribers:
                if self._stop.is_set():
                    return
                self._guarded(sub, sub.catch_up)
            if not self._stop.is_set():
                self.ready, self.reason = True, ""
            while not self._stop.is_set():
                applied = 0
                for sub in subscribers:
                    applied += self._guarded(sub, sub.poll, 0, POLL_MAX_BATCHES, POLL_BUDGET_S)
                if not applied:
                    self._stop.wait(POLL_IDLE_S)
        finally:
            for sub in subscribers:
                sub.close()

    def _guarded(self, sub: Any, work: Any, *args: Any) -> int:
        """``work(*args)``'s count; an error (none is expected) marks the
        subscriber incomplete, so its rank keeps vLLM's choice, and is
        logged once."""
        try:
            return work(*args)
        except Exception as exc:
            sub.complete = False
            self.stats["poller_errors"] += 1
            if self.stats["poller_errors"] == 1:
                logger.exception("swa-prefix-cache: KV event poller error (logged once): %s", exc)
            return 0

    def poller_alive(self) -> bool:
        return self._poller is not None and self._poller.is_alive()

    def status(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "reason": self.reason,
            "ranks": self.names,
            "tokens_per_load": self.tokens_per_load,
            "stats": dict(self.stats),
            "unsure": dict(self.unsure),
            "subscribers": [dict(s.stats, complete=s.complete) for s in self.subscribers],
            "poller": self.poller_alive(),
        }

    def close(self) -> None:
        """Stop the poller thread (it closes the sockets), or close them here
        when no thread owns them."""
        self.ready = False
        self._stop.set()
        if self._poller is not None:
            self._poller.join(POLLER_JOIN_S)
            if self._poller.is_alive():
                logger.warning("swa-prefix-cache: KV event poller still running after %.0f s; "
                               "its sockets close when it stops", POLLER_JOIN_S)
        else:
            for sub in self.subscribers:
                sub.close()
        self.subscribers = []

    async def start(self, client: Any) -> None:
        """Ask every rank for its layout and subscribe to its events."""
        try:
            reason = await self._start(client)
        except Exception as exc:  # the router must never hurt serving
            reason = f"{type(exc).__name__}: {exc}"
        if reason:
            self.close()
            self.reason = reason
            logger.warning("swa-prefix-cache: data-parallel routing off: %s; "
                           "vLLM's balancing kept (logged once)", reason)
        else:
            logger.info("swa-prefix-cache: data-parallel routing by exact hit over ranks %s",
                        ", ".join(self.names))

    async def _start(self, client: Any) -> str:
        from swa_prefix_cache.kv_index import KVIndex
        from swa_prefix_cache.kv_index.subscriber import Subscriber

        sources = client.get_kv_event_sources()
        ranks = [int.from_bytes(engine, "little") for engine in client.core_engines]
        parallel = client.vllm_config.parallel_config
        if parallel.data_parallel_size_local != parallel.data_parallel_size:
            return "ranks on other machines (their publishers' hosts are not known here)"
        endpoints = []
        for rank in ranks:
            config = sources.get(rank)
            if config is None or config.publisher != "zmq" or not config.enable_kv_cache_events:
                return f"rank {rank} publishes no KV events (--kv-events-config with publisher zmq)"
            if not config.replay_endpoint:
                return f"rank {rank} has no replay endpoint (replay_endpoint in --kv-events-config)"
            pub, replay = subscribe_endpoint(config.endpoint), subscribe_endpoint(config.replay_endpoint)
            if pub is None or replay is None:
                return f"rank {rank} publishes on {config.endpoint}, which this router cannot reach"
            endpoints.append((pub, replay, config.topic))
        answers = await client.call_utility_all_async(UTILITY)
        index = KVIndex()
        for rank, answer in zip(ranks, answers):
            if "layout" not in answer:
                return f"rank {rank}: {answer.get('reason')}"
            index.add_replica(f"dp{rank}", layout_from_dict(answer["layout"]))
        names = [f"dp{rank}" for rank in ranks]
        subscribers = []
        try:
            for name, (pub, replay, topic) in zip(names, endpoints):
                subscribers.append(Subscriber(
                    index, name, pub, replay, topic,
                    replay_timeout_ms=REPLAY_TIMEOUT_MS, replay_on_start=False,
                ))
        except BaseException:
            for sub in subscribers:
                sub.close()
            raise
        self.attach(index, names, subscribers)
        return ""

    def prepare(self, client: Any, request: Any) -> tuple[list[int], list[float]] | None:
        """The ranks' hits and vLLM load scores for this request, read
        before vLLM's method updates them; None keeps vLLM's choice."""
        from swa_prefix_cache.kv_index.balance import vllm_load_score

        reason = request_unsure(client, request)
        if reason is None and not self.ready:
            reason = "index starting" if self.reason == "starting" else "routing off"
        complete = [True] * len(self.names)
        if reason is None:
            if self.subscribers:
                complete = [sub.complete for sub in self.subscribers]
            if not any(complete):
                reason = "index reset"
            elif len(client.lb_engines) != len(self.names) or len(client.core_engines) != len(self.names):
                reason = "engines changing"
        if reason is not None:
            self.unsure[reason] += 1
            return None
        scores = self.index.score(request.prompt_token_ids)
        # A rank whose index was reset is scored as holding nothing (never
        # above its hit), so the others are still routed by theirs.
        hits = [scores[name] if ok else 0 for name, ok in zip(self.names, complete)]
        for name, ok in zip(self.names, complete):
            if not ok:
                self.unsure[f"{name} index reset: scored 0"] += 1
        loads = []
        for engine, (waiting, running, usage) in zip(client.core_engines, client.lb_engines):
            loads.append(vllm_load_score(
                waiting, running, usage, client.engine_inflight[engine], client.client_count
            ))
        return hits, loads

    def route(self, client: Any, request: Any, engine: Any, hits: list[int],
              loads: list[float]) -> Any:
        """The engine for the request, given vLLM's ``engine``: vLLM's unless
        ``choose`` prefers another, whose bookkeeping then takes the request."""
        from swa_prefix_cache.kv_index.balance import choose

        theirs = client.core_engines.index(engine)
        ours = choose(hits, loads, len(request.prompt_token_ids), theirs, self.tokens_per_load)
        self.stats["decisions"] += 1
        self.stats["hit_tokens"] += hits[ours]
        self.stats["prompt_tokens"] += len(request.prompt_token_ids)
        if ours == theirs:
            return engine
        chosen = client.core_engines[ours]
        client.lb_engines[theirs][0] -= client.client_count
        client.lb_engines[ours][0] += client.client_count
        client.engine_inflight[engine] -= 1
        client.engine_inflight[chosen] += 1
        client.reqs_in_flight[request.request_id] = chosen
        self.stats["moved"] += 1
        self.stats["tokens_saved"] += hits[ours] - hits[theirs]
        return chosen


def _router(client: Any) -> Router | None:
    """The client's router, started on its first request (the front end's
    event loop is running by then). Read with getattr, not through the
    client's __dict__ (instance_attrs.py: that would slow vLLM's own use of
    the client)."""
    router = getattr(client, _ROUTER_ATTR, None)
    if router is None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        default = client.vllm_config.scheduler_config.max_num_batched_tokens
        router = Router(read_tokens_per_load(float(default)))
        setattr(client, _ROUTER_ATTR, router)
        _routers.routers.append(router)
        loop.create_task(router.start(client))
    return router


def _make_route(original: Any) -> Any:
    def get_core_engine_for_request(self: Any, request: Any) -> Any:
        prepared = None
        router = None
        try:
            router = _router(self)
            if router is not None:
                prepared = router.prepare(self, request)
        except Exception as exc:  # the router must never hurt serving
            _on_error(router, exc)
        engine = original(self, request)
        if prepared is None:
            return engine
        try:
            return router.route(self, request, engine, *prepared)
        except Exception as exc:
            _on_error(router, exc)
            return engine

    get_core_engine_for_request.__doc__ = (
        "vLLM's engine choice, moved to the rank with the exact prefix-cache hit "
        "when it outweighs the load (swa-prefix-cache, swa_prefix_cache/vllm_adapter/dp_routing.py)."
    )
    return get_core_engine_for_request


def _on_error(router: Router | None, exc: BaseException) -> None:
    if router is not None:
        router.stats["errors"] += 1
        if router.stats["errors"] > 1:
            return
    logger.exception("swa-prefix-cache: data-parallel routing error (vLLM's choice kept; "
                     "logged once): %s", exc)
