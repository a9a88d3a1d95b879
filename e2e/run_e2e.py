"""End to end: the plugin inside a real vLLM engine (CPU OpenAI server).

For each tiny model (make_models.py: all-SWA Mistral, hybrid Gemma3) the
server is started three times on 127.0.0.1, each time fresh, with the
plugin installed as a package (its ``vllm.general_plugins`` entry point;
nothing here patches vLLM):

* ``off``: vLLM's own lookup answers (timed only, for the comparison);
* ``on``: our lookup answers (default core);
* ``shadow``: both run inside the engine, vLLM's answer is served, every
  disagreement counted (native core, so the C core is checked live too).

The same probe (probe.py) runs against each. Pass criteria, all checked:

* identical ``cached_tokens`` for every request in the three runs, and the
  probe actually hit the cache (no vacuous pass);
* the plugin ran in the engine-core process: that process's stats file
  (vllm_adapter/report.py) shows the expected mode and core, a pid other
  than the server's, and at least one lookup per request;
* zero shadow mismatches, zero adapter errors.

The receipt (JSON) has every request's numbers, the engine's KV-cache
groups and managers as seen by the plugin, the ``/metrics`` prefix-cache
counters and the time spent inside the lookup on vs off.

Every wait is bounded; servers run in their own process group and are
killed (group-wide) on every exit path.
"""

import argparse
import atexit
import datetime as dt
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_models  # noqa: E402
import probe  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SERVED_NAME = "tiny"
BLOCK_SIZE = 32  # CPU attention raises 16 to 32 anyway


@dataclass(frozen=True)
class Run:
    mode: str  # off | on | shadow
    core: str  # python | native (ignored by off)
    backend: str  # what the engine-core stats file must say


RUNS = (
    Run("off", "python", "vllm"),
    Run("on", "python", "python"),
    Run("shadow", "native", "native"),
)


@dataclass
class Outcome:
    model: str
    run: Run
    samples: list[probe.Sample]
    engine: dict[str, Any]
    metrics: dict[str, float]
    startup_s: float
    other_processes: list[dict[str, Any]] = field(default_factory=list)


class Failure(Exception):
    """A pass criterion failed (message says which)."""


# ---- server lifecycle ---------------------------------------------------------------

_live: list[subprocess.Popen] = []


def _kill_group(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:  # the engine core may outlive the API server briefly
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if proc.poll() is None:
        proc.wait(timeout=10)


def _cleanup() -> None:
    while _live:
        _kill_group(_live.pop())


def _on_signal(signum: int, _frame: Any) -> None:
    _cleanup()
    sys.exit(128 + signum)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((probe.HOST, 0))
        return int(s.getsockname()[1])


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start_server(model_dir: Path, run: Run, work_dir: Path, startup_timeout_s: float,
                 max_model_len: int) -> tuple[subprocess.Popen, int, Path, float]:
    port = _free_port()
    stats_dir = work_dir / "stats"
    stats_dir.mkdir(parents=True, exist_ok=True)
    log = work_dir / "server.log"
    env = dict(os.environ)
    env.update({
        "SWA_PREFIX_CACHE_MODE": run.mode,
        "SWA_PREFIX_CACHE_CORE": run.core,
        "SWA_PREFIX_CACHE_STATS_DIR": str(stats_dir),
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    })
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--served-model-name", SERVED_NAME,
        "--host", probe.HOST, "--port", str(port),
        "--enable-prefix-caching", "--enable-prompt-tokens-details",
        "--block-size", str(BLOCK_SIZE), "--enforce-eager", "--dtype", "float32",
        "--max-model-len", str(max_model_len), "--max-num-seqs", "4",
        "--seed", "0", "--disable-uvicorn-access-log",
    ]
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work_dir,
            start_new_session=True,
        )
    _live.append(proc)
    deadline = started + startup_timeout_s
    while True:
        if proc.poll() is not None:
            raise Failure(f"server exited with {proc.returncode} during start:\n{_tail(log)}")
        try:
            probe.get_text(port, "/health", timeout_s=2.0)
            break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise Failure(f"server not healthy after {startup_timeout_s:.0f} s:\n{_tail(log)}")
        time.sleep(0.5)
    return proc, port, stats_dir, time.monotonic() - started


def stop_server(proc: subprocess.Popen) -> None:
    if proc in _live:
        _live.remove(proc)
    _kill_group(proc)


# ---- reading the plugin's stats files ------------------------------------------------


def _read_stats(stats_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted(stats_dir.glob("stats-*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue  # being replaced right now; read again
    return out


def settled_stats(stats_dir: Path, server_pid: int, timeout_s: float = 10.0) -> tuple[
        dict[str, Any], list[dict[str, Any]]]:
    """The engine-core process's stats once its counters stop moving, and
    the other processes' files. The engine core is the process that made
    lookups; it must not be the API server itself."""
    deadline = time.monotonic() + timeout_s
    previous: Any = None
    while True:
        files = _read_stats(stats_dir)
        engines = [f for f in files if f["stats"]["calls"] > 0]
        current = [(f["pid"], f["stats"]["calls"]) for f in engines]
        if engines and current == previous:
            break
        if time.monotonic() > deadline:
            break
        previous = current
        time.sleep(0.6)  # > 2 writer periods
    if len(engines) != 1:
        raise Failure(
            f"expected one process with lookups, found {len(engines)}: "
            f"{[(f['pid'], f['process'], f['stats']['calls']) for f in files]}"
        )
    engine = engines[0]
    if engine["pid"] == server_pid:
        raise Failure("lookups ran in the API server process, not in a separate engine core")
    return engine, [f for f in files if f is not engine]


# ---- one model, one run -----------------------------------------------------------------


def run_once(model: str, model_dir: Path, run: Run, work: probe.Workload, out_dir: Path,
             startup_timeout_s: float, request_timeout_s: float) -> Outcome:
    work_dir = out_dir / f"{model}-{run.mode}"
    work_dir.mkdir(parents=True, exist_ok=True)
    max_model_len = max(work.prompt_tokens, work.growth_step * work.growth_turns) + 64
    proc, port, stats_dir, startup_s = start_server(
        model_dir, run, work_dir, startup_timeout_s, max_model_len,
    )
    try:
        samples = probe.run(port, SERVED_NAME, work, timeout_s=request_timeout_s)
        metrics = probe.prefix_cache_counters(port)
        engine, others = settled_stats(stats_dir, proc.pid)
    finally:
        stop_server(proc)
    return Outcome(model, run, samples, engine, metrics, startup_s, others)


def check_outcome(o: Outcome) -> None:
    """The plugin proves it ran in the engine core, in the asked mode."""
    e, where = o.engine, f"{o.model}/{o.run.mode}"
    if not e.get("installed"):
        raise Failure(f"{where}: plugin not active in the engine core: {e.get('reason')!r}")
    if e.get("mode") != o.run.mode or e.get("backend") != o.run.backend:
        raise Failure(f"{where}: engine core runs mode {e.get('mode')} / {e.get('backend')}")
    stats = e["stats"]
    if stats["calls"] < len(o.samples):
        raise Failure(f"{where}: {stats['calls']} lookups for {len(o.samples)} requests")
    if stats["errors"]:
        raise Failure(f"{where}: {stats['errors']} adapter errors")
    if o.run.mode == "shadow":
        if stats["shadow_compared"] != stats["calls"]:
            raise Failure(f"{where}: compared {stats['shadow_compared']} of {stats['calls']}")
        if stats["shadow_mismatches"]:
            raise Failure(f"{where}: shadow mismatch: {stats['last_mismatch']}")
    if any(s.cached_tokens is None for s in o.samples):
        raise Failure(f"{where}: responses carry no cached_tokens")


def compare(outcomes: list[Outcome]) -> None:
    """Same cached_tokens for every request and the same /metrics
    prefix-cache counters in every run; the probe hit."""
    base = outcomes[0]
    for other in outcomes[1:]:
        for a, b in zip(base.samples, other.samples, strict=True):
            if (a.phase, a.index, a.cached_tokens) != (b.phase, b.index, b.cached_tokens):
                raise Failure(
                    f"{base.model}: {a.phase}[{a.index}] cached {a.cached_tokens} with "
                    f"{base.run.mode}, {b.cached_tokens} with {other.run.mode}"
                )
        if other.metrics != base.metrics:
            raise Failure(
                f"{base.model}: /metrics prefix-cache counters {base.metrics} with "
                f"{base.run.mode}, {other.metrics} with {other.run.mode}"
            )
    if not any(s.cached_tokens for s in base.samples if s.phase == "reverse"):
        raise Failure(f"{base.model}: no request hit the cache; the comparison proves nothing")


# ---- report ----------------------------------------------------------------------------


def table(outcomes: list[Outcome]) -> str:
    by_mode = {o.run.mode: o for o in outcomes}
    head = f"{'phase':8} {'i':>2} {'tokens':>6} | " + " | ".join(
        f"{m + ' cached':>13} {'ms':>7}" for m in by_mode
    )
    lines = [head, "-" * len(head)]
    for k, s in enumerate(outcomes[0].samples):
        cells = " | ".join(
            f"{o.samples[k].cached_tokens:>13} {o.samples[k].latency_ms:>7.1f}"
            for o in by_mode.values()
        )
        lines.append(f"{s.phase:8} {s.index:>2} {s.prompt_tokens:>6} | {cells}")
    lines.append("")
    for o in outcomes:
        st = o.engine["stats"]
        per = st["lookup_ns"] / max(st["calls"], 1) / 1000
        lines.append(
            f"{o.run.mode:6} ({o.engine['backend']:6}) engine pid {o.engine['pid']}: "
            f"{st['calls']} lookups, {st['lookup_ns'] / 1e6:.3f} ms inside the lookup "
            f"({per:.1f} us each, slowest {st.get('lookup_ns_max', 0) / 1000:.0f} us); "
            f"shadow compared {st['shadow_compared']}, "
            f"mismatches {st['shadow_mismatches']}; server start {o.startup_s:.0f} s"
        )
    return "\n".join(lines)


def receipt(all_outcomes: dict[str, list[Outcome]], work: probe.Workload,
            started: str, wall_s: float) -> dict[str, Any]:
    import vllm

    from vllm_adapter import fingerprint

    known, version, digest = fingerprint.check_installed()
    models = {}
    for model, outcomes in all_outcomes.items():
        engine = outcomes[0].engine
        models[model] = {
            "kv_cache": engine.get("observed", []),
            "runs": [
                {
                    "mode": o.run.mode, "core": o.run.core, "backend": o.engine["backend"],
                    "engine_pid": o.engine["pid"], "engine_process": o.engine["process"],
                    "startup_s": round(o.startup_s, 1),
                    "lookups": o.engine["stats"]["calls"],
                    "lookup_ns": o.engine["stats"]["lookup_ns"],
                    "lookup_ns_max": o.engine["stats"].get("lookup_ns_max"),
                    "shadow_compared": o.engine["stats"]["shadow_compared"],
                    "shadow_mismatches": o.engine["stats"]["shadow_mismatches"],
                    "errors": o.engine["stats"]["errors"],
                    "metrics": o.metrics,
                    "requests": probe.as_rows(o.samples),
                    "other_processes": [
                        {"pid": p["pid"], "process": p["process"], "installed": p["installed"]}
                        for p in o.other_processes
                    ],
                }
                for o in outcomes
            ],
        }
    return {
        "started": started,
        "wall_s": round(wall_s, 1),
        "vllm_version": getattr(vllm, "__version__", "?"),
        "fingerprint": digest,
        "fingerprint_known": known,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "workload": asdict(work),
        "block_size": BLOCK_SIZE,
        "window_tokens": make_models.WINDOW,
        "models": models,
        "passed": True,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "e2e")
    parser.add_argument("--models", default="swa,hybrid")
    parser.add_argument("--prompts", type=int, default=probe.Workload.prompts)
    parser.add_argument("--prompt-tokens", type=int, default=probe.Workload.prompt_tokens)
    parser.add_argument("--startup-timeout", type=float, default=300.0)
    parser.add_argument("--request-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)

    atexit.register(_cleanup)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)

    work = probe.Workload(
        prompts=args.prompts, prompt_tokens=args.prompt_tokens,
        shared_tokens=args.prompt_tokens * 9 // 10,
    )
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    out_dir = args.out / f"run-{started}"
    model_dirs = make_models.build(args.out / "models")
    t0 = time.monotonic()
    all_outcomes: dict[str, list[Outcome]] = {}
    try:
        for model in args.models.split(","):
            outcomes = []
            for run in RUNS:
                print(f"e2e: {model} / {run.mode} ...", flush=True)
                outcome = run_once(
                    model, model_dirs[model], run, work, out_dir,
                    args.startup_timeout, args.request_timeout,
                )
                check_outcome(outcome)
                outcomes.append(outcome)
            compare(outcomes)
            all_outcomes[model] = outcomes
            print(f"\n== {model}: {json.dumps(outcomes[0].engine.get('observed', []))}")
            print(table(outcomes), flush=True)
    except Failure as exc:
        print(f"e2e FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        _cleanup()
    data = receipt(all_outcomes, work, started, time.monotonic() - t0)
    path = args.out / f"receipt-{started}.json"
    path.write_text(json.dumps(data, indent=1))
    print(f"\ne2e passed in {data['wall_s']} s; receipt {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
