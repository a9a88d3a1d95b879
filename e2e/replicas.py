"""kv_index against live vLLM servers: the score for the replica that serves
a request equals the ``cached_tokens`` that replica served.

For each tiny model (make_models.py: all-SWA, hybrid) four fresh servers,
one after another (on two cores an idle engine core starves the busy one),
publish their KV events on ZMQ (``--kv-events-config``, tcp on loopback,
with the replay socket):

* ``r0``: plugin off (vLLM's own lookup), the default KV pool;
* ``r1``: plugin on (native core), a small pool (``--num-gpu-blocks-override``)
  so its blocks are evicted and reused while the run goes on;
* ``dp``: one server with ``--data-parallel-size 2``, plugin on: vLLM's
  front end picks the engine core; each rank publishes on its own port
  (vLLM offsets the port by the rank), so the index has replicas ``dp0``
  and ``dp1``;
* ``dpx``: the same with ``SWA_PREFIX_CACHE_DP_ROUTING=exact``: the front
  end routes by its own index of the ranks (swa_prefix_cache/vllm_adapter/dp_routing.py).

One ``KVIndex`` per model holds every replica, each fed by its own
``swa_prefix_cache.kv_index.Subscriber``. A replica's layout (group order, kinds, block
sizes, window) is what the plugin recorded from the engine's coordinator
(its stats file, after warm-up requests); the subscriber then joins late
and catches up from ``seq`` 0 through vLLM's replay socket.

Requests are sent one at a time as token ids (``/v1/completions``,
``max_tokens`` 1), drawn from prefix-sharing patterns that carry over from
server to server: new prompts, exact resends, extensions of an earlier
prompt, an earlier prompt cut anywhere with a new tail. On ``dp`` vLLM
chooses the rank, and the serving rank is the one whose events arrive for
the request. Before each request the replicas are scored; after it, the
subscribers are drained until quiet. Pass criteria, all checked: zero
mismatches between the score of the serving replica and the served
``cached_tokens``; the served prompt length is the sent one; ``r1``
evicted blocks (BlockRemoved events applied); hits both full and partial;
every subscriber complete (no reset); the serving rank identified for at
least three ``dp`` requests in four; ``dpx``'s front end routed every
request by its index (ready, no error). The hit rate and how often the
serving rank held the best hit are reported for ``dp`` and ``dpx``.

Then a concurrent phase on ``r0`` and on ``r1`` (8 in flight, scored at send
time): how often and by how much the score differs from what was served
while events are in flight is reported, not asserted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import socket
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import receipts  # noqa: E402

import load  # noqa: E402
import make_models  # noqa: E402
import probe  # noqa: E402
import run_e2e  # noqa: E402
from run_e2e import SERVED_NAME, Failure, Run  # noqa: E402

from swa_prefix_cache.kv_index import GroupLayout, KVIndex, ReplicaLayout  # noqa: E402
from swa_prefix_cache.kv_index.layout import SLIDING_WINDOW, SPEC_KINDS  # noqa: E402
from swa_prefix_cache.kv_index.subscriber import Subscriber  # noqa: E402

OFF = Run("off", "", "vllm")
ON = Run("on", "", "native")
SMALL_POOL = 110  # blocks of 32 tokens for r1: evictions within the run
MAX_PROMPT = 1500  # tokens; 110 blocks hold it in both groups of the hybrid
FIRST_TOKEN, LAST_TOKEN = 3, make_models.VOCAB - 1  # ids of ordinary words
PATTERNS = ("new", "resend", "extend", "cut")
QUIET_MS = 60  # no batch for this long after a reply: the index is current
SETTLE_S = 5.0  # at most this long


@dataclass
class Row:
    model: str
    phase: str  # sequential | concurrent
    pattern: str
    replica: str  # the replica that served (dp: "dp?" when not identified)
    prompt_tokens: int
    cached_tokens: int
    score: int | None  # the serving replica's score before the request
    scores: dict[str, int]


def layout_from_stats(stats: dict[str, Any]) -> ReplicaLayout:
    """The replica's layout as the plugin recorded it from the coordinator
    that made the lookups (report.observe)."""
    observed = stats.get("observed") or []
    if not observed:
        raise Failure(f"the engine's stats file recorded no coordinator: {stats.get('process')}")
    groups = []
    for g in observed[0]["groups"]:
        kind = SPEC_KINDS.get(g["spec"])
        if kind is None:
            raise Failure(f"the engine reports a {g['spec']} group, which kv_index does not model")
        window = g["sliding_window"] if kind == SLIDING_WINDOW else None
        groups.append(GroupLayout(kind, g["block_size"], window))
    return ReplicaLayout(tuple(groups), hash_block_size=run_e2e.BLOCK_SIZE)


def _free_port_pair() -> int:
    """A port P with P + 1 free too (a data-parallel rank publishes on P + rank)."""
    for _ in range(50):
        port = run_e2e._free_port()
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((probe.HOST, port + 1))
        except OSError:
            continue
        return port
    raise Failure("no two adjacent free ports on 127.0.0.1")


def events_args(pub: int, replay: int) -> tuple[str, ...]:
    config = {
        "enable_kv_cache_events": True, "publisher": "zmq",
        "endpoint": f"tcp://*:{pub}", "replay_endpoint": f"tcp://*:{replay}",
        "buffer_steps": 100000, "topic": "",
    }
    return ("--kv-events-config", json.dumps(config))


def usage_tokens(usage: dict[str, Any]) -> tuple[int, int]:
    """(prompt_tokens, cached_tokens) of a reply's ``usage`` (-1: no prompt count)."""
    details = usage.get("prompt_tokens_details") or {}
    return int(usage.get("prompt_tokens", -1)), int(details.get("cached_tokens") or 0)


def send(port: int, ids: list[int], timeout_s: float) -> tuple[int, int]:
    """(prompt_tokens, cached_tokens) of one completion of ``ids``."""
    reply = probe.complete(port, SERVED_NAME, ids, 1, timeout_s)
    return usage_tokens(reply.get("usage") or {})


class Prompts:
    """Prompts drawn from prefix-sharing patterns over what was sent before."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.sent: list[list[int]] = []

    def _tokens(self, count: int) -> list[int]:
        return [self.rng.randint(FIRST_TOKEN, LAST_TOKEN) for _ in range(count)]

    def draw(self) -> tuple[str, list[int]]:
        rng = self.rng
        pattern = "new" if not self.sent else rng.choice(PATTERNS)
        if pattern == "new":
            ids = self._tokens(rng.randint(8, MAX_PROMPT))
        else:
            base = rng.choice(self.sent[-40:])
            if pattern == "resend":
                ids = list(base)
            elif pattern == "extend":
                ids = base + self._tokens(rng.randint(1, 300))
            else:  # cut
                ids = base[:rng.randint(1, len(base))] + self._tokens(rng.randint(1, 200))
        ids = ids[:MAX_PROMPT]
        self.sent.append(ids)
        return pattern, ids


DP_ARGS = ("--data-parallel-size", "2", "--data-parallel-backend", "mp",
           "--data-parallel-address", probe.HOST)
# (name, plugin run, extra server arguments, data-parallel ranks, environment)
SERVERS = (
    ("r0", OFF, (), 1, {}),
    ("r1", ON, ("--num-gpu-blocks-override", str(SMALL_POOL)), 1, {}),
    ("dp", ON, DP_ARGS, 2, {}),
    ("dpx", ON, DP_ARGS, 2, {"SWA_PREFIX_CACHE_DP_ROUTING": "exact"}),
)


class Server:
    """One live server (one replica, or one per data-parallel rank) in the
    shared index, with a subscriber per rank."""

    def __init__(self, index: KVIndex, model: str, model_dir: Path, spec: tuple[Any, ...],
                 out_dir: Path, startup_timeout_s: float, request_timeout_s: float,
                 layout: ReplicaLayout | None = None) -> None:
        """``layout``: the replica's layout when known beforehand (a model
        without sliding window: the plugin records no coordinator for it);
        otherwise read from the plugin's stats file."""
        name, run, extra, ranks, env = spec
        self.index, self.model, self.name = index, model, name
        self.timeout_s = request_timeout_s
        self.subs: dict[str, Subscriber] = {}
        self.layouts: dict[str, list[dict[str, Any]]] = {}  # for the receipt
        pub, replay = _free_port_pair(), _free_port_pair()
        self.pub, self.replay = pub, replay  # rank r publishes on pub + r, replays on replay + r
        if ranks > 1:
            extra = (*extra, "--data-parallel-rpc-port", str(run_e2e._free_port()))
        work_dir = out_dir / f"{model}-{name}"
        work_dir.mkdir(parents=True, exist_ok=True)
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            self.proc, self.port, stats_dir, startup_s = run_e2e.start_server(
                model_dir, run, work_dir, startup_timeout_s, MAX_PROMPT + 64,
                (*extra, *events_args(pub, replay)), max_num_seqs=8,
            )
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.stats_dir = stats_dir
        print(f"replicas: {model} {name} up in {startup_s:.0f} s", flush=True)
        # Warm-up requests so every engine core records its layout.
        for i in range(4 * ranks):
            send(self.port, Prompts(1000 + i)._tokens(40), request_timeout_s)
        if layout is None:
            engines, _ = run_e2e.settled_engines(stats_dir, self.proc.pid, count=ranks)
        self.replicas = [name] if ranks == 1 else [f"{name}{r}" for r in range(ranks)]
        for rank, replica in enumerate(self.replicas):
            known = layout or layout_from_stats(engines[rank])
            index.add_replica(replica, known)
            self.layouts[replica] = [asdict(g) for g in known.groups]
            self.subs[replica] = Subscriber(
                index, replica, f"tcp://{probe.HOST}:{pub + rank}",
                f"tcp://{probe.HOST}:{replay + rank}",
            )

    def drain(self) -> dict[str, int]:
        """Apply every batch until no subscriber has seen one for QUIET_MS;
        returns the batches applied per replica."""
        applied: Counter[str] = Counter()
        deadline = time.monotonic() + SETTLE_S
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            got = 0
            for name, sub in self.subs.items():
                n = sub.poll(0)
                applied[name] += n
                got += n
            now = time.monotonic()
            if got:
                quiet_since = now
            elif now - quiet_since >= QUIET_MS / 1000:
                break
            time.sleep(0.005)
        return dict(applied)

    def routers(self, decisions: int = 0, timeout_s: float = 20.0) -> list[dict[str, Any]]:
        """The front end's data-parallel routers, from its stats file, once
        one of them reports at least ``decisions`` routed requests or
        ``timeout_s`` has passed. The file is rewritten by a daemon thread
        at most every 0.2 s; on a loaded machine that thread can lag the
        requests by many seconds (seen: 10 of 156 decisions after 0.5 s)."""
        deadline = time.monotonic() + timeout_s
        while True:
            time.sleep(0.5)
            found = []
            for path in self.stats_dir.glob("stats-*.json"):
                data = json.loads(path.read_text())
                found += data.get("dp_routing", {}).get("routers", [])
            done = max((r.get("stats", {}).get("decisions", 0) for r in found), default=0)
            if done >= decisions or time.monotonic() >= deadline:
                return found

    def close(self) -> None:
        for sub in self.subs.values():
            sub.close()
        run_e2e.stop_server(self.proc)


def sequential(server: Server, prompts: Prompts, requests: int) -> list[Row]:
    """Requests one at a time; the serving replica's score is taken with
    the index current (drained after the previous reply)."""
    rows = []
    server.drain()
    for _ in range(requests):
        pattern, ids = prompts.draw()
        scores = server.index.score(ids)
        prompt_tokens, cached = send(server.port, ids, server.timeout_s)
        if prompt_tokens != len(ids):
            raise Failure(f"{server.model}: sent {len(ids)} token ids, served {prompt_tokens}")
        applied = server.drain()
        ranks = [r for r in server.replicas if applied.get(r)]
        if len(server.replicas) == 1:
            served_by = server.replicas[0]
        else:  # vLLM's front end chose: the rank whose events arrived
            served_by = ranks[0] if len(ranks) == 1 else f"{server.name}?"
        rows.append(Row(server.model, "sequential", pattern, served_by, len(ids), cached,
                        scores.get(served_by), scores))
    return rows


def concurrent(server: Server, prompts: Prompts, requests: int, in_flight: int = 8) -> list[Row]:
    """Requests 8 at a time on a one-rank server, each scored when sent."""
    (replica,) = server.replicas
    work = [prompts.draw() for _ in range(requests)]

    def one(item: tuple[str, list[int]]) -> Row:
        pattern, ids = item
        scores = server.index.score(ids)  # the index is updated by the main thread
        prompt_tokens, cached = send(server.port, ids, server.timeout_s)
        return Row(server.model, "concurrent", pattern, replica, prompt_tokens, cached,
                   scores[replica], scores)

    with ThreadPoolExecutor(in_flight) as pool:
        futures = [pool.submit(one, item) for item in work]
        while not all(f.done() for f in futures):
            server.drain()
        rows = [f.result() for f in futures]
    server.drain()
    return rows


def data_parallel(rows: list[Row], name: str) -> dict[str, Any]:
    """One data-parallel server's sequential requests: the hit rate (cached
    / prompt tokens) and how often the serving rank held the best hit."""
    mine = [r for r in rows if r.phase == "sequential" and r.replica.rstrip("0123456789?") == name]
    known = [r for r in mine if r.score is not None]
    ranks = [r for r in known if len({v for k, v in r.scores.items()
                                      if k.rstrip("0123456789") == name}) > 1]
    best = sum(1 for r in ranks if r.score == max(v for k, v in r.scores.items()
                                                  if k.rstrip("0123456789") == name))
    prompt = sum(r.prompt_tokens for r in mine)
    return {"requests": len(mine), "hit_rate": round(sum(r.cached_tokens for r in mine)
                                                      / prompt, 4) if prompt else 0.0,
            "ranks_differ": len(ranks), "served_best_hit": best}


def check(model: str, rows: list[Row], index: KVIndex,
          subs: dict[str, dict[str, Any]], routers: list[dict[str, Any]]) -> dict[str, Any]:
    seq = [r for r in rows if r.phase == "sequential"]
    known = [r for r in seq if r.score is not None]
    wrong = [r for r in known if r.score != r.cached_tokens]
    unknown = [r for r in seq if r.score is None]
    removed = index.stats("r1").get("removed", 0)
    whole = [load.full_hit(r.prompt_tokens, run_e2e.BLOCK_SIZE) for r in known]
    full = sum(1 for r, w in zip(known, whole) if 0 < r.cached_tokens == w)
    partial = sum(1 for r, w in zip(known, whole) if 0 < r.cached_tokens < w)
    conc = [r for r in rows if r.phase == "concurrent"]
    off = [r for r in conc if r.score != r.cached_tokens]
    summary = {
        "requests": len(seq), "compared": len(known), "mismatches": len(wrong),
        "dp_rank_unknown": len(unknown),
        # an unknown rank's request: served cached_tokens is some rank's score
        "dp_unknown_matching_a_rank": sum(
            1 for r in unknown
            if r.cached_tokens in {v for k, v in r.scores.items() if k.startswith("dp")}),
        "served_by": dict(Counter(r.replica for r in seq)),
        "full_hits": full, "partial_hits": partial, "r1_removed": removed,
        "subscribers": subs,
        "dp": data_parallel(rows, "dp"), "dpx": data_parallel(rows, "dpx"),
        "dpx_routers": routers,
        "concurrent": {"requests": len(conc), "differ": len(off),
                       "over_credit": sum(1 for r in off if r.score > r.cached_tokens),
                       "tokens_off_mean": round(sum(abs(r.score - r.cached_tokens) for r in off)
                                                / len(off), 1) if off else 0.0},
    }
    print(f"replicas {model}: {json.dumps(summary)}", flush=True)
    for r in wrong[:5]:
        print(f"  mismatch: {r}", flush=True)
    if wrong:
        raise Failure(f"{model}: {len(wrong)} of {len(known)} scores differ from cached_tokens")
    if not known or not full or not partial:
        raise Failure(f"{model}: the run needs full and partial hits ({full}, {partial})")
    if removed == 0:
        raise Failure(f"{model}: r1 applied no BlockRemoved: its small pool was never evicted")
    if len(unknown) * 4 > sum(1 for r in seq if r.replica.startswith("dp")):
        raise Failure(f"{model}: the serving rank was unknown for {len(unknown)} dp requests")
    if not all(s["complete"] for s in subs.values()):
        raise Failure(f"{model}: a subscriber had to reset: {subs}")
    live = [r for r in routers if r["ready"] and r["stats"].get("decisions")]
    if len(live) != 1 or live[0]["stats"].get("errors") \
            or live[0]["stats"]["decisions"] < summary["dpx"]["requests"]:
        raise Failure(f"{model}: dpx's front end did not route every request by its index: {routers}")
    return summary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=run_e2e.ROOT / "build" / "e2e-replicas")
    parser.add_argument("--models", default="swa,hybrid")
    parser.add_argument("--requests", type=int, default=600, help="sequential, per model")
    parser.add_argument("--concurrent", type=int, default=120, help="per model (0: none)")
    parser.add_argument("--startup-timeout", type=float, default=300.0)
    parser.add_argument("--request-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    run_e2e.stop_servers_on_exit()
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    out_dir = args.out / f"run-{started}"
    t0 = time.monotonic()
    results: dict[str, Any] = {}
    all_rows: list[Row] = []
    try:
        model_dirs = make_models.build(args.out / "models")
        for n, model in enumerate(args.models.split(",")):
            # One server alive at a time: on two cores an idle engine core
            # starves the busy one. The prompts carry over from server to
            # server, so each also sees prompts first sent elsewhere.
            index, prompts = KVIndex(), Prompts(seed=n)
            rows, subs, layouts, routers = [], {}, {}, []
            for spec in SERVERS:
                server = Server(index, model, model_dirs[model], spec, out_dir,
                                args.startup_timeout, args.request_timeout)
                try:
                    sent = args.requests // len(SERVERS)
                    rows += sequential(server, prompts, sent)
                    if args.concurrent and len(server.replicas) == 1:
                        rows += concurrent(server, prompts, args.concurrent // 2)
                    if spec[4]:
                        routers = server.routers(decisions=sent)
                finally:
                    server.close()
                subs.update({r: dict(s.stats, complete=s.complete)
                             for r, s in server.subs.items()})
                layouts.update(server.layouts)
            results[model] = {"layouts": layouts, "summary": check(model, rows, index, subs, routers)}
            all_rows += rows
    except Failure as exc:
        print(f"replicas FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        run_e2e._cleanup()
    total = sum(r["summary"]["compared"] for r in results.values())
    path = args.out / f"receipt-{started}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    receipts.write(path, {"results": results, "wall_s": round(time.monotonic() - t0, 1),
                                "rows": [asdict(r) for r in all_rows]})
    print(f"replicas passed: {total} requests scored exactly (0 mismatches) in "
          f"{time.monotonic() - t0:.0f} s; receipt {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
