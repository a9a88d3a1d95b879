"""A routing run: the Mooncake conversation trace sent to two engines
behind each balancer, one after another, with the same requests:

* ``dp``: one vLLM server with ``--data-parallel-size 2``: vLLM's front end
  picks the engine core by load alone (its default);
* ``router``: two one-rank vLLM servers behind vLLM's own router,
  ``vllm-router --policy kv_aware`` (the real process from PyPI, fed by
  both servers' KV events: ``--kv-event-source`` / ``--kv-event-replay-source``);
* ``dpx``: the ``dp`` server with ``SWA_PREFIX_CACHE_DP_ROUTING=exact``: the
  front end routes by its exact index of the ranks (swa_prefix_cache/vllm_adapter/dp_routing.py);
* ``router-rr``: the ``router`` set-up with ``--policy round_robin``: the
  control that tells what the router's topology (two API servers and a
  proxy in front of them) costs, apart from how it scores the cache.

Every engine has the plugin on and the same KV pool (``--num-gpu-blocks-
override``), so the engines compute the same hits; only the balancer
differs. Prompts are the trace's first ``--requests`` requests made into
token ids by benchmarks/mooncake.py (every 512-token trace block becomes 32
tokens, lengths divided by 16, prompts capped at ``MAX_PROMPT``, outputs at
``MAX_OUTPUT``), sent open-loop at the trace's arrival times divided by
``--speedup``, streamed (``/v1/completions``, ``ignore_eos``) so the time to
the first token is measured at the client. Per balancer the receipt gives
the prefix-cache hit rate (served ``cached_tokens`` / prompt tokens, from
each reply's usage) and TTFT (mean, p50, p90, p99).

Then, with the router's servers still up, a per-request phase: the next
``--compare`` trace requests one at a time through vllm-router, each scored
before it is sent by our ``KVIndex`` (both servers' events, drained) and
read from vllm-router's debug log (the tokens it credited each worker and
the worker it chose), and, when ``--dynamo`` names a Python with
ai-dynamo-runtime (by default the one beside vllm-router, if it has it),
asked of Dynamo's standalone indexer subscribed to the same servers from
their start, against the ``cached_tokens`` the chosen server served. Checked: our score for the serving replica equals what it served on
every request (0 mismatches), every reply served the prompt sent, every
open-loop request answered, and vllm-router logged a decision per request.
How often vllm-router's credit differs, and how often it chose the replica
with the smaller exact hit (and the tokens recomputed for it), is reported.

Not in ``make check`` (it takes about half an hour); ``make e2e-routing``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import make_models  # noqa: E402
import probe  # noqa: E402
import replicas  # noqa: E402
import run_e2e  # noqa: E402
from run_e2e import SERVED_NAME, Failure  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "upstream" / "routers"))
import _replay  # noqa: E402  (upstream/routers: the reproductions' HTTP and log reading)
import dynamo_indexer  # noqa: E402
from vllm_router_kv_aware import _ANSI, _fields  # noqa: E402

from benchmarks import receipts  # noqa: E402
from benchmarks import mooncake  # noqa: E402
from swa_prefix_cache.kv_index import KVIndex  # noqa: E402

SCALE = 16  # a 512-token trace block becomes 32 tokens: one vLLM block
MAX_PROMPT = replicas.MAX_PROMPT - 32
MAX_OUTPUT = 32
POOL = 1200  # blocks of 32 tokens per engine: the trace's working set does not fit
POOL_ARGS = ("--num-gpu-blocks-override", str(POOL))
BALANCERS = ("dp", "router", "dpx", "router-rr")
POLICIES = {"router": "kv_aware", "router-rr": "round_robin"}  # vllm-router's --policy
ROUTER_ENV = "VLLM_ROUTER"  # the vllm-router executable (make e2e-routing sets it)


@dataclass
class Reply:
    balancer: str
    request: int  # index in the trace
    sent_s: float  # from the run's start
    prompt_tokens: int
    cached_tokens: int
    ttft_s: float
    latency_s: float
    output_tokens: int


@dataclass
class Compared:
    request: int
    prompt_tokens: int
    worker: str  # the replica vllm-router chose
    cached_tokens: int  # what it served
    ours: dict[str, int]  # KVIndex.score before the request
    router_credit: dict[str, int]  # vllm-router's credited prefix tokens per replica
    dynamo: dict[str, int] = field(default_factory=dict)  # Dynamo's indexer, tokens matched per replica


def stream(port: int, ids: list[int], max_tokens: int, timeout_s: float) -> tuple[float, float, dict[str, Any], int]:
    """One streamed completion: (ttft_s, latency_s, usage, output chunks)."""
    body = json.dumps({"model": SERVED_NAME, "prompt": ids, "max_tokens": max_tokens,
                       "temperature": 0.0, "seed": 0, "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection(probe.HOST, port, timeout=timeout_s)
    started = time.monotonic()
    ttft, usage, chunks = None, {}, 0
    try:
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise Failure(f"completion on port {port}: HTTP {resp.status}: {resp.read()[:300]!r}")
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            event = json.loads(data)
            if event.get("choices") and event["choices"][0].get("text") is not None:
                if ttft is None:
                    ttft = time.monotonic() - started
                chunks += 1
            if event.get("usage"):
                usage = event["usage"]
    finally:
        conn.close()
    if ttft is None:
        raise Failure(f"completion on port {port}: no token streamed")
    return ttft, time.monotonic() - started, usage, chunks


class Router:
    """vllm-router (``policy``) in front of the given servers, its debug
    log read for its decisions."""

    def __init__(self, exe: str, policy: str, servers: list[replicas.Server], model_dir: Path,
                 work_dir: Path, startup_timeout_s: float) -> None:
        self.port = run_e2e._free_port()
        work_dir.mkdir(parents=True, exist_ok=True)
        self.log = work_dir / "vllm-router.log"
        self.names = {f"http://{probe.HOST}:{s.port}": s.name for s in servers}
        cmd = [exe, "--host", probe.HOST, "--port", str(self.port), "--policy", policy,
               "--worker-urls", *self.names, "--log-level", "debug"]
        if policy == "kv_aware":
            cmd += ["--kv-event-block-size", str(run_e2e.BLOCK_SIZE), "--kv-event-model", str(model_dir)]
        for s in servers if policy == "kv_aware" else ():
            url = f"http://{probe.HOST}:{s.port}"
            cmd += ["--kv-event-source", f"{url}=tcp://{probe.HOST}:{s.pub}",
                    "--kv-event-replay-source", f"{url}=tcp://{probe.HOST}:{s.replay}"]
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                         cwd=work_dir, start_new_session=True)
        run_e2e._live.append(self.proc)
        run_e2e.wait_healthy(self.proc, self.port, self.log, time.monotonic() + startup_timeout_s,
                             "vllm-router")
        self.offset = 0

    def decisions(self) -> list[dict[str, str]]:
        """The KV decision lines logged since the last call, as key=value maps."""
        with self.log.open("rb") as f:
            f.seek(self.offset)
            text = f.read()
        end = text.rfind(b"\n") + 1
        self.offset += end
        found = []
        for line in text[:end].decode(errors="replace").splitlines():
            line = _ANSI.sub("", line)
            if "KV prefix decision" in line or "KV request selected" in line:
                fields = _fields(line)
                fields["line"] = "selected" if "KV request selected" in line else "prefix"
                found.append(fields)
        return found

    def log_stats(self) -> dict[str, Any]:
        """Over the whole log: requests sent to each replica, and each
        warning vllm-router logged with how often (e.g. event batches it
        could not decode, which it drops whole)."""
        chosen: Counter[str] = Counter()
        warnings: Counter[str] = Counter()
        for line in self.log.read_text(errors="replace").splitlines():
            line = _ANSI.sub("", line)
            if "KV request selected" in line:
                chosen[self.replica(_fields(line).get("worker_url", "?"))] += 1
            elif " WARN " in line:
                warnings[line.split(": ", 2)[-1][:120]] += 1
        return {"chosen": dict(chosen), "warnings": dict(warnings)}

    def replica(self, url: str) -> str:
        return self.names.get(url.rstrip("/"), url)

    def close(self) -> None:
        run_e2e.stop_server(self.proc)


def open_loop(balancer: str, port: int, work: list[tuple[int, mooncake.TraceRequest, list[int]]],
              speedup: float, timeout_s: float, drain: Any) -> list[Reply]:
    """Every request sent at its trace time / speedup, each from its own thread."""
    t0 = time.monotonic() + 0.5
    first_ms = work[0][1].timestamp_ms

    def one(item: tuple[int, mooncake.TraceRequest, list[int]]) -> Reply:
        number, request, ids = item
        at = t0 + (request.timestamp_ms - first_ms) / 1000 / speedup
        time.sleep(max(0.0, at - time.monotonic()))
        sent = time.monotonic() - t0
        out = mooncake.output_tokens(request, scale=SCALE, cap=MAX_OUTPUT)
        ttft, latency, usage, chunks = stream(port, ids, out, timeout_s)
        prompt_tokens, cached = replicas.usage_tokens(usage)
        return Reply(balancer, number, round(sent, 3), prompt_tokens, cached, round(ttft, 4),
                     round(latency, 4), int(usage.get("completion_tokens", chunks)))

    with ThreadPoolExecutor(max_workers=len(work)) as pool:
        futures = [pool.submit(one, item) for item in work]
        while not all(f.done() for f in futures):
            drain()  # keep the subscribers' sockets empty
            time.sleep(0.05)
        replies = [f.result() for f in futures]
    for reply, (_, _, ids) in zip(replies, work):
        if reply.prompt_tokens != len(ids):
            raise Failure(f"{balancer}: request {reply.request} sent {len(ids)} tokens, "
                          f"served {reply.prompt_tokens}")
    return replies


class DynamoIndexer:
    """Dynamo's standalone KV indexer (``python -m dynamo.indexer`` from
    .venv-peers: its ZMQ listener for vLLM's events and its radix tree)
    subscribed to the servers' publishers; ``score`` asks it (``POST
    /query``) for the tokens it matches per replica. Started with the
    servers, before any trace request."""

    def __init__(self, python: str, servers: list[replicas.Server], work_dir: Path,
                 startup_timeout_s: float) -> None:
        self.port = run_e2e._free_port()
        self.ids = {s.name: i + 1 for i, s in enumerate(servers)}  # Dynamo's worker ids
        work_dir.mkdir(parents=True, exist_ok=True)
        self.log = work_dir / "dynamo-indexer.log"
        workers = ",".join(f"{self.ids[s.name]}=tcp://{probe.HOST}:{s.pub}" for s in servers)
        cmd = [python, "-m", "dynamo.indexer", "--port", str(self.port), "--block-size", str(run_e2e.BLOCK_SIZE),
               "--model-name", SERVED_NAME, "--workers", workers, "--threads", "1"]
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=work_dir,
                                         start_new_session=True)
        run_e2e._live.append(self.proc)
        run_e2e.wait_healthy(self.proc, self.port, self.log, time.monotonic() + startup_timeout_s,
                             "dynamo indexer")

    def score(self, ids: list[int]) -> dict[str, int]:
        status, body = _replay.request(self.port, "POST", "/query", {"model_name": SERVED_NAME, "token_ids": ids},
                                       timeout_s=30)
        if status != 200:
            raise Failure(f"dynamo indexer /query: HTTP {status} {body[:200]!r}")
        try:
            return dynamo_indexer.credited(json.loads(body), self.ids)
        except dynamo_indexer.CannotRun as exc:
            raise Failure(str(exc)) from exc

    def close(self) -> None:
        run_e2e.stop_server(self.proc)


def compare(router: Router, servers: list[replicas.Server], index: KVIndex,
            work: list[tuple[int, mooncake.TraceRequest, list[int]]], timeout_s: float,
            dynamo: DynamoIndexer | None = None) -> list[Compared]:
    """One request at a time through vllm-router, scored by every side first."""
    rows = []
    for s in servers:
        s.drain()
    router.decisions()
    for number, _, ids in work:
        ours = index.score(ids)
        theirs = dynamo.score(ids) if dynamo else {}
        prompt_tokens, cached = replicas.send(router.port, ids, timeout_s)
        if prompt_tokens != len(ids):
            raise Failure(f"router: request {number} sent {len(ids)} tokens, served {prompt_tokens}")
        for s in servers:
            s.drain()
        time.sleep(0.05)  # the router logs before it forwards; the log is flushed by now
        lines = router.decisions()
        chosen = [d for d in lines if d["line"] == "selected"]
        if len(chosen) != 1:
            raise Failure(f"router: request {number}: {len(chosen)} 'KV request selected' lines: {lines}")
        worker = router.replica(chosen[0].get("worker_url", chosen[0].get("worker", "?")))
        credit = {router.replica(d.get("worker", "?")): int(d.get("credited_prefix_tokens", 0))
                  for d in lines if d["line"] == "prefix"}
        rows.append(Compared(number, len(ids), worker, cached, ours, credit, theirs))
    return rows


def _ttft(replies: list[Reply]) -> dict[str, float]:
    values = sorted(r.ttft_s for r in replies)

    def q(p: float) -> float:
        return round(values[min(len(values) - 1, int(p * len(values)))], 4)

    return {"mean": round(statistics.fmean(values), 4), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99)}


def summarize(replies: list[Reply]) -> dict[str, Any]:
    prompt = sum(r.prompt_tokens for r in replies)
    cached = sum(r.cached_tokens for r in replies)
    return {"requests": len(replies), "prompt_tokens": prompt, "cached_tokens": cached,
            "hit_rate": round(cached / prompt, 4), "ttft_s": _ttft(replies),
            "wall_s": round(max(r.sent_s + r.latency_s for r in replies), 1)}


def ideal_hit_rate(work: list[tuple[int, mooncake.TraceRequest, list[int]]]) -> float:
    """The hit rate of one engine with an unbounded pool that saw every
    earlier prompt: per request the longest run of full blocks (one trace
    block each) that an earlier prompt also held, under vLLM's cap (at
    most prompt - 1 tokens), over the prompt tokens. What no balancer over
    bounded pools can beat; it sets the hit rates beside it in scale."""
    per_block = mooncake.TRACE_BLOCK // SCALE
    seen: set[tuple[int, ...]] = set()
    cached = prompt = 0
    for _, request, ids in work:
        full = len(ids) // per_block
        chains = [request.hash_ids[:k] for k in range(1, full + 1)]
        hit = 0
        while hit < min(full, (len(ids) - 1) // per_block) and chains[hit] in seen:
            hit += 1
        cached += hit * per_block
        prompt += len(ids)
        seen.update(chains)
    return round(cached / prompt, 4) if prompt else 0.0


def judge(rows: list[Compared]) -> dict[str, Any]:
    """Ours and vllm-router's credit against what the chosen replica served."""
    ours_wrong = [r for r in rows if r.ours.get(r.worker) != r.cached_tokens]
    router_known = [r for r in rows if r.worker in r.router_credit]
    router_wrong = [r for r in router_known if r.router_credit[r.worker] != r.cached_tokens]
    worse = [r for r in rows if max(r.ours.values()) > r.ours.get(r.worker, 0)]
    dynamo_known = [r for r in rows if r.worker in r.dynamo]
    dynamo_wrong = [r for r in dynamo_known if r.dynamo[r.worker] != r.cached_tokens]
    return {
        "requests": len(rows), "ours_mismatches": len(ours_wrong),
        "router_credit_known": len(router_known), "router_credit_wrong": len(router_wrong),
        "router_over_credit": sum(1 for r in router_wrong if r.router_credit[r.worker] > r.cached_tokens),
        "router_under_credit": sum(1 for r in router_wrong if r.router_credit[r.worker] < r.cached_tokens),
        "chose_smaller_hit": len(worse),
        "tokens_recomputed": sum(max(r.ours.values()) - r.ours.get(r.worker, 0) for r in worse),
        "dynamo_credit_known": len(dynamo_known), "dynamo_credit_wrong": len(dynamo_wrong),
        "dynamo_over_credit": sum(1 for r in dynamo_wrong if r.dynamo[r.worker] > r.cached_tokens),
        "dynamo_under_credit": sum(1 for r in dynamo_wrong if r.dynamo[r.worker] < r.cached_tokens),
        "served_cached": sum(r.cached_tokens for r in rows),
        "best_cached": sum(max(r.ours.values()) for r in rows),
    }


def run_model(model: str, model_dir: Path, trace: list[mooncake.TraceRequest], args: argparse.Namespace,
              out_dir: Path) -> dict[str, Any]:
    first, last = replicas.FIRST_TOKEN, replicas.LAST_TOKEN
    work = [(n, r, mooncake.prompt_ids(r, scale=SCALE, first=first, last=last, max_tokens=MAX_PROMPT))
            for n, r in enumerate(trace)]
    sent, tail = work[:args.requests], work[args.requests:]
    result: dict[str, Any] = {"balancers": {}, "ideal_hit_rate": ideal_hit_rate(sent), "replies": []}
    for balancer in args.balancers:
        index = KVIndex()
        if balancer in POLICIES:
            servers = [replicas.Server(index, model, model_dir, (name, replicas.ON, POOL_ARGS, 1, {}),
                                       out_dir, args.startup_timeout, args.request_timeout)
                       for name in ("r0", "r1")]
        else:
            env = {"SWA_PREFIX_CACHE_DP_ROUTING": "exact"} if balancer == "dpx" else {}
            servers = [replicas.Server(index, model, model_dir,
                                       (balancer, replicas.ON, (*replicas.DP_ARGS, *POOL_ARGS), 2, env),
                                       out_dir, args.startup_timeout, args.request_timeout)]
        router = dynamo = None
        try:
            if balancer in POLICIES:
                router = Router(args.router, POLICIES[balancer], servers, model_dir,
                                out_dir / f"{model}-{balancer}", args.startup_timeout)
            if balancer == "router" and args.dynamo:
                dynamo = DynamoIndexer(args.dynamo, servers, out_dir / f"{model}-{balancer}",
                                       args.startup_timeout)
            port = router.port if router else servers[0].port

            def drain() -> None:
                for s in servers:
                    s.drain()

            replies = open_loop(balancer, port, sent, args.speedup, args.request_timeout, drain)
            result["balancers"][balancer] = summarize(replies)
            result["replies"] += [asdict(r) for r in replies]
            print(f"routing {model} {balancer}: {json.dumps(result['balancers'][balancer])}", flush=True)
            if balancer == "router":
                result["router_log_open_loop"] = router.log_stats()
                rows = compare(router, servers, index, tail[:args.compare], args.request_timeout, dynamo)
                result["compared"] = judge(rows)
                result["router_log"] = router.log_stats()
                result["compared_rows"] = [asdict(r) for r in rows]
                print(f"routing {model} per request: {json.dumps(result['compared'])}", flush=True)
                print(f"routing {model} vllm-router log: {json.dumps(result['router_log'])}", flush=True)
        finally:
            for peer in (router, dynamo):
                if peer:
                    peer.close()
            for s in servers:
                s.close()
    if "router" in args.balancers:
        check_compared(model, result["compared"])
    return result


def check_compared(model: str, compared: dict[str, Any]) -> None:
    """The per-request phase's pass criteria (judge's counts)."""
    if not compared.get("requests"):
        raise Failure(f"{model}: no request was compared through vllm-router")
    if compared["ours_mismatches"]:
        raise Failure(f"{model}: our score differs from cached_tokens on "
                      f"{compared['ours_mismatches']} of {compared['requests']} requests")
    if compared["dynamo_credit_known"] not in (0, compared["requests"]):
        raise Failure(f"{model}: Dynamo's indexer scored {compared['dynamo_credit_known']} of "
                      f"{compared['requests']} requests")
    if compared["router_credit_known"] < compared["requests"]:
        raise Failure(f"{model}: vllm-router logged no credit for the chosen worker on "
                      f"{compared['requests'] - compared['router_credit_known']} requests")


def _version(exe: str, package: str) -> str:
    """A package's version, from the venv the executable is in."""
    python = Path(exe).parent / "python"
    got = subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
                         capture_output=True, text=True)
    return got.stdout.strip() or "unknown"


def _beside_router_with_dynamo(router: str) -> str | None:
    """The Python of vllm-router's venv, if ai-dynamo-runtime is in it."""
    python = Path(router).parent / "python"
    return str(python) if python.exists() and _version(router, "ai-dynamo-runtime") != "unknown" else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=run_e2e.ROOT / "build" / "e2e-routing")
    parser.add_argument("--trace", type=Path, default=mooncake.DEFAULT_TRACE)
    parser.add_argument("--models", default="swa,hybrid")
    parser.add_argument("--balancers", default=",".join(BALANCERS))
    parser.add_argument("--requests", type=int, default=400, help="open-loop, per balancer")
    parser.add_argument("--compare", type=int, default=100, help="one at a time through vllm-router")
    parser.add_argument("--speedup", type=float, default=1.0, help="trace time / this")
    parser.add_argument("--router", default=None, help=f"vllm-router executable (or ${ROUTER_ENV})")
    parser.add_argument("--dynamo", default=None,
                        help="a Python with ai-dynamo-runtime: its indexer joins the per-request phase "
                             "(default: the one beside the vllm-router executable, if it has it)")
    parser.add_argument("--startup-timeout", type=float, default=300.0)
    parser.add_argument("--request-timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    args.router = args.router or os.environ.get(ROUTER_ENV) or shutil.which("vllm-router")
    if not args.router:
        print("routing: no vllm-router executable (make e2e-routing installs one)", file=sys.stderr)
        return 2
    args.router = os.path.abspath(args.router)  # the router runs in its own work directory
    args.dynamo = args.dynamo or _beside_router_with_dynamo(args.router)
    args.balancers = args.balancers.split(",")
    if not set(args.balancers) <= set(BALANCERS):
        parser.error(f"--balancers: a comma-separated subset of {','.join(BALANCERS)}")
    if args.requests < 1 or args.compare < 1 or args.speedup <= 0:
        parser.error("--requests and --compare must be positive, --speedup > 0")
    args.out = args.out.resolve()
    run_e2e.stop_servers_on_exit()
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    out_dir = args.out / f"run-{started}"
    t0 = time.monotonic()
    trace = mooncake.load(args.trace, limit=args.requests + args.compare)
    results: dict[str, Any] = {}
    try:
        model_dirs = make_models.build(args.out / "models")
        for model in args.models.split(","):
            results[model] = run_model(model, model_dirs[model], trace, args, out_dir)
    except Failure as exc:
        print(f"routing FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        run_e2e._cleanup()
    path = args.out / f"routing-{started}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    settings = {"requests": args.requests, "compare": args.compare, "speedup": args.speedup,
                "scale": SCALE, "max_prompt": MAX_PROMPT, "max_output": MAX_OUTPUT, "pool": POOL,
                "vllm_router": _version(args.router, "vllm-router"),
                "dynamo": _version(args.dynamo, "ai-dynamo-runtime") if args.dynamo else None}
    receipts.write(path, {"settings": settings, "results": results,
                                "wall_s": round(time.monotonic() - t0, 1)})
    for model, result in results.items():
        for balancer, s in result["balancers"].items():
            print(f"routing {model:6} {balancer:6} hit_rate={s['hit_rate']:.3f} "
                  f"ttft_mean={s['ttft_s']['mean'] * 1000:.0f}ms p90={s['ttft_s']['p90'] * 1000:.0f}ms")
    print(f"routing passed in {time.monotonic() - t0:.0f} s; receipt {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
