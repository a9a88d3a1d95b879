"""What the router reproductions share: the fixture, vLLM's event stream
replayed on ZMQ, the processes, the verdict. The standard library and
pyzmq only.

A fixture (``fixtures/*.json``, made by ``record.py`` from two live vLLM
servers) holds, per replica, every KV event batch that replica published
(base64 of the msgpack payload vLLM sent, ``seq`` 0, 1, ...) and one probe
prompt with the ``cached_tokens`` each replica served for it: vLLM's own
answer to "how much of this prompt is cached here".
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
SETTLE_S = 2.0  # after the last batch: the router's subscribers have applied it by then


class CannotRun(Exception):
    """The reproduction could not run (exit 2), as opposed to a mis-score (exit 1)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def load_fixture(path: Path) -> dict[str, Any]:
    try:
        fixture = json.loads(path.read_text())
        replicas = list(fixture["batches"])
        served = fixture["probe"]["served_cached_tokens"]
        if len(replicas) < 2 or set(served) != set(replicas) or not fixture["probe"]["prompt_token_ids"]:
            raise ValueError("needs two or more replicas, each with a served count, and a probe")
        int(fixture["block_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CannotRun(f"fixture {path}: {exc!r}") from exc
    return fixture


def describe(fixture: dict[str, Any]) -> None:
    groups = ", ".join(g["kind"] + (f" ({g['sliding_window']} tokens)" if g.get("sliding_window") else "")
                       for g in fixture["groups"])
    print(f"fixture: vLLM {fixture['vllm']}, model {fixture['model']} (KV-cache groups: {groups}), "
          f"block {fixture['block_size']} tokens; probe {len(fixture['probe']['prompt_token_ids'])} tokens")
    for r, batches in fixture["batches"].items():
        print(f"  {r}: {len(batches)} event batches; vLLM served the probe "
              f"{fixture['probe']['served_cached_tokens'][r]} cached tokens")


class Publishers:
    """One ZMQ publisher per replica, framing batches as vLLM's
    ``ZmqEventPublisher`` does: (topic, 8-byte big-endian seq, payload).
    XPUB sockets, so the reproduction sees when the router has subscribed
    (a PUB socket drops what it sends before that)."""

    def __init__(self, replicas: list[str]) -> None:
        import zmq

        self._ctx = zmq.Context.instance()
        self.replicas = replicas
        self._socks = {}
        self.ports = {}
        for r in replicas:
            sock = self._ctx.socket(zmq.XPUB)
            self.ports[r] = sock.bind_to_random_port(f"tcp://{HOST}")
            self._socks[r] = sock

    def endpoint(self, replica: str) -> str:
        return f"tcp://{HOST}:{self.ports[replica]}"

    def wait_subscribed(self, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
        pending = set(self.replicas)
        deadline = time.monotonic() + timeout_s
        while pending:
            check_alive(proc, log)
            if time.monotonic() > deadline:
                raise CannotRun(f"the router did not subscribe to the events of {sorted(pending)}")
            for r in list(pending):
                sock = self._socks[r]
                if sock.poll(100) and sock.recv()[:1] == b"\x01":  # XPUB: 0x01 + topic = subscribe
                    pending.discard(r)

    def publish(self, fixture: dict[str, Any]) -> None:
        """Every recorded batch of every replica, in seq order, then
        ``SETTLE_S`` for the router to apply them."""
        for r in self.replicas:
            for seq, payload in enumerate(fixture["batches"][r]):
                self._socks[r].send_multipart((b"", seq.to_bytes(8, "big"), base64.b64decode(payload)))
        time.sleep(SETTLE_S)

    def close(self) -> None:
        for sock in self._socks.values():
            sock.close(linger=0)


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def check_alive(proc: subprocess.Popen, log: Path) -> None:
    if proc.poll() is not None:
        raise CannotRun(f"{proc.args[0]} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")


def request(port: int, method: str, path: str, body: Any = None, timeout_s: float = 60) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout_s)
    try:
        conn.request(method, path, None if body is None else json.dumps(body),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def wait_healthy(port: int, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        check_alive(proc, log)
        try:
            if request(port, "GET", "/health", timeout_s=2)[0] == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise CannotRun(f"{proc.args[0]} not healthy within {timeout_s:.0f} s")
        time.sleep(0.3)


def verdict(fixture: dict[str, Any], credited: dict[str, int], chosen: str | None = None) -> int:
    """0 when every credited count equals what vLLM served (and the chosen
    replica, if any, is one holding the most); 1 otherwise (the mis-score)."""
    served = {r: int(v) for r, v in fixture["probe"]["served_cached_tokens"].items()}
    best = max(served.values())
    wrong = [f"credited {r} {credited[r]} tokens where vLLM serves {served[r]}"
             for r in credited if credited[r] != served[r]]
    if chosen is not None and served[chosen] < best:
        wrong.append(f"sent the probe to {chosen} ({served[chosen]} cached) while a replica holds {best}: "
                     f"{best - served[chosen]} prompt tokens recomputed")
    if wrong:
        print("MIS-SCORE: " + "; ".join(wrong))
        return 1
    print("exact: every credit is what vLLM serves" + ("" if chosen is None else
          ", and the probe went to a replica holding the most"))
    return 0
