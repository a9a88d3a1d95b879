"""Reproduce: NVIDIA Dynamo's KV indexer scores a vLLM replica's
prefix-cache hit differently from the one vLLM serves, on sliding-window
and hybrid models.

Stand-alone: the standard library, pyzmq and the stock Dynamo runtime from
PyPI (``pip install ai-dynamo-runtime==1.6.1 pyzmq``); no vLLM, no GPU.

    python dynamo_indexer.py fixtures/swa.json

Dynamo's standalone indexer (``python -m dynamo.indexer``: its ZMQ
listener for vLLM's events and its radix tree, the indexing layer of its
KV router) subscribes to one event source per replica (``--workers
1=tcp://...,2=tcp://...``). Each replica's recorded batches are published
there as vLLM publishes them, then the probe is asked of the indexer
(``POST /query``); its ``scores`` give the tokens matched per worker.

Exit status: 0 when every replica's score equals what vLLM served it; 1
when not (the mis-score); 2 when the reproduction could not run.

The indexer binds its HTTP port on all interfaces (it has no host option);
``make upstream-routers`` runs this in a network namespace with loopback
only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _replay import CannotRun, Publishers, describe, free_port, load_fixture  # noqa: E402
from _replay import request, start, stop, verdict, wait_healthy  # noqa: E402

MODEL = "tiny"


def credited(reply: dict[str, Any], ids: dict[str, int]) -> dict[str, int]:
    """Tokens matched per replica, from ``/query``'s ``scores``
    (``{worker_id: {dp_rank: tokens}}``); a worker it does not list
    matched nothing."""
    scores = reply.get("scores")
    if not isinstance(scores, dict):
        raise CannotRun(f"/query answered without scores: {reply!r}")
    return {r: int(sum((scores.get(str(i)) or {}).values())) for r, i in ids.items()}


def run(python: str, fixture: dict[str, Any], work: Path) -> int:
    replicas = list(fixture["batches"])
    ids = {r: i + 1 for i, r in enumerate(replicas)}  # Dynamo's worker ids
    pubs = Publishers(replicas)
    port = free_port()
    log = work / "dynamo-indexer.log"
    workers = ",".join(f"{ids[r]}={pubs.endpoint(r)}" for r in replicas)
    proc = start([python, "-m", "dynamo.indexer", "--port", str(port), "--block-size",
                  str(fixture["block_size"]), "--model-name", MODEL, "--workers", workers, "--threads", "1"], log)
    try:
        wait_healthy(port, proc, log, 60)
        pubs.wait_subscribed(proc, log, 60)
        pubs.publish(fixture)
        status, body = request(port, "POST", "/query", {
            "model_name": MODEL, "token_ids": fixture["probe"]["prompt_token_ids"]})
        if status != 200:
            raise CannotRun(f"/query: HTTP {status} {body[:200]!r}")
        scores = credited(json.loads(body), ids)
    finally:
        stop(proc)
        pubs.close()
    describe(fixture)
    print("Dynamo's indexer scores the probe " + ", ".join(f"{r}: {scores[r]} tokens" for r in replicas))
    return verdict(fixture, scores)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixture", type=Path)
    parser.add_argument("--python", default=sys.executable,
                        help="a Python with ai-dynamo-runtime installed (default: this one)")
    args = parser.parse_args(argv)
    try:
        fixture = load_fixture(args.fixture)
        with tempfile.TemporaryDirectory(prefix="dynamo-repro-") as work:
            return run(args.python, fixture, Path(work))
    except CannotRun as exc:
        print(f"could not run: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 -- exit 1 must mean the mis-score, nothing else
        print(f"could not run: {exc!r}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
