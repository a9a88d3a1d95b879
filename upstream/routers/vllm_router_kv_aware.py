"""Reproduce: vllm-router's ``kv_aware`` policy credits a replica with a
prefix-cache hit different from the one vLLM serves, on sliding-window and
hybrid models, and routes by it.

Stand-alone: the standard library, pyzmq and the stock vllm-router from
PyPI (``pip install vllm-router==0.1.17 pyzmq``); no vLLM, no GPU.

    python vllm_router_kv_aware.py [--router PATH] fixtures/swa.json

vllm-router (``--policy kv_aware``, debug log) runs in front of two
stand-in workers (HTTP servers answering health checks and completions:
the router scores without a real engine), subscribed to one event source
per worker. Each replica's recorded batches are published there as vLLM
publishes them, the probe is sent through the router, and its debug log
gives the worker it chose and the prefix tokens it credited that worker
(``KV prefix decision ... credited_prefix_tokens=``).

Exit status: 0 when the credit equals what vLLM served that replica, no
replica holds more, and vllm-router took in every batch; 1 when not (the
mis-score, or batches it could not decode: it drops the whole batch); 2
when the reproduction could not run.
"""

from __future__ import annotations

import argparse
import http.server
import json
import re
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _replay import HOST, CannotRun, Publishers, describe, free_port, load_fixture  # noqa: E402
from _replay import request, start, stop, verdict, wait_healthy  # noqa: E402

MODEL = "tiny"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_KV = re.compile(r'(\w+)=("[^"]*"|\S+)')


class StandInWorker(http.server.ThreadingHTTPServer):
    """Answers every GET with ``{}`` (``/v1/models``: one model) and every
    POST with a one-token completion. What is cached comes from the
    fixture, not from here."""

    def __init__(self) -> None:
        super().__init__((HOST, free_port()), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    def _reply(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        models = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
        self._reply(models if self.path.startswith("/v1/models") else {})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._reply({"id": "cmpl-0", "object": "text_completion", "model": MODEL,
                     "choices": [{"index": 0, "text": " x", "finish_reason": "length"}],
                     "usage": {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1}})

    def log_message(self, *args: Any) -> None:
        pass


def _fields(line: str) -> dict[str, str]:
    return {k: v.strip('"') for k, v in _KV.findall(line)}


def read_log(log: Path, names: dict[str, str]) -> tuple[str, int | None, Counter[str]]:
    """(the replica chosen, the tokens credited to it, warnings by text)."""
    chosen, credit, warnings = None, None, Counter()
    for line in log.read_text(errors="replace").splitlines():
        line = _ANSI.sub("", line)
        if "KV request selected" in line:
            chosen = names.get(_fields(line).get("worker_url", "").rstrip("/"))
        elif "KV prefix decision" in line and "credited_prefix_tokens" in line:
            credit = int(_fields(line)["credited_prefix_tokens"])
        elif " WARN " in line:
            warnings[line.split(": ", 2)[-1][:100]] += 1
    if chosen is None or credit is None:
        raise CannotRun("vllm-router logged no KV decision for the probe (is --log-level debug honoured?)")
    return chosen, credit, warnings


def run(router: str, fixture: dict[str, Any], work: Path) -> int:
    replicas = list(fixture["batches"])
    workers = {r: StandInWorker() for r in replicas}
    names = {w.url: r for r, w in workers.items()}
    pubs = Publishers(replicas)
    port = free_port()
    log = work / "vllm-router.log"
    cmd = [router, "--host", HOST, "--port", str(port), "--policy", "kv_aware", "--log-level", "debug",
           "--worker-urls", *(workers[r].url for r in replicas),
           "--kv-event-block-size", str(fixture["block_size"]), "--kv-event-model", MODEL]
    for r in replicas:
        cmd += ["--kv-event-source", f"{workers[r].url}={pubs.endpoint(r)}"]
    proc = start(cmd, log)
    try:
        wait_healthy(port, proc, log, 60)
        pubs.wait_subscribed(proc, log, 60)
        pubs.publish(fixture)
        status, body = request(port, "POST", "/v1/completions", {
            "model": MODEL, "prompt": fixture["probe"]["prompt_token_ids"], "max_tokens": 1})
        if status != 200:
            raise CannotRun(f"the probe through vllm-router: HTTP {status} {body[:200]!r}")
        time.sleep(0.3)  # the decision is logged before the forward; let the log reach the file
        chosen, credit, warnings = read_log(log, names)
    finally:
        stop(proc)
        pubs.close()
        for w in workers.values():
            w.shutdown()
    describe(fixture)
    print(f"vllm-router kv_aware sent the probe to {chosen}, crediting it {credit} cached tokens")
    for text, count in warnings.most_common():
        print(f"  vllm-router warned {count}x: {text}")
    scored = verdict(fixture, {chosen: credit}, chosen)
    rejected = sum(count for text, count in warnings.items() if "decode batch" in text)
    if rejected:
        print(f"REJECTED: vllm-router dropped {rejected} of the {sum(map(len, fixture['batches'].values()))} "
              "batches vLLM published, every event in them (a batch holds one engine step's events)")
        return 1
    return scored


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixture", type=Path)
    parser.add_argument("--router", default=shutil.which("vllm-router"), help="the vllm-router executable")
    args = parser.parse_args(argv)
    try:
        if not args.router:
            raise CannotRun("no vllm-router executable (pip install vllm-router, or --router PATH)")
        fixture = load_fixture(args.fixture)
        with tempfile.TemporaryDirectory(prefix="vllm-router-repro-") as work:
            return run(args.router, fixture, Path(work))
    except CannotRun as exc:
        print(f"could not run: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 -- exit 1 must mean the mis-score, nothing else
        print(f"could not run: {exc!r}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
