"""End to end: the plugin inside a real vLLM engine (CPU OpenAI server).

For each tiny model (make_models.py: all-SWA Mistral, hybrid Gemma3) the
server is started on 127.0.0.1, each time fresh, with the plugin installed
as users install it: the wheel ``make dist`` built (``--wheel``), installed
into this venv (its ``vllm.general_plugins`` entry point; nothing here
patches vLLM). Before any server starts, a neutral-cwd import in this venv
must find the package in site-packages, installed from that very wheel
(pip's ``direct_url.json`` hash = the wheel's sha256); each engine core that
runs our core must have mapped ``swa_prefix_cache/core/_hotpath*.so`` from there, byte
for byte the file inside the wheel (``/proc/<pid>/maps``).

Probe runs, the same probe (probe.py) against each:

* ``off``: vLLM's own lookup answers (timed only, for the comparison);
* ``on``: our lookup answers (default core: ``SWA_PREFIX_CACHE_CORE``
  unset, so the native extension);
* ``shadow``: both run inside the engine, vLLM's answer is served, every
  disagreement counted (native core, so the C core is checked live too).

The probe ends with a long phase (4 prompts of 7,000 tokens, forward then
reverse); the engine core's counters are read just before it, so its
lookups are also timed on their own. Both lookups the engine core makes
are timed, per manager: the sliding-window one (``calls``/``lookup_ns``)
and the full-attention one (``full_calls``/``full_lookup_ns``: the
extension's full_hit in modes on and shadow, vLLM's own timed in mode off).

Pass criteria of the probe runs, all checked:

* identical ``cached_tokens`` for every request in the three runs, and the
  probe actually hit the cache (no vacuous pass);
* the long prompts stayed cached: each sent again was served at least 90%
  from the cache;
* the plugin ran in the engine-core process: that process's stats file
  (swa_prefix_cache/vllm_adapter/stats_file.py) shows the expected mode and core, a pid other
  than the server's, and at least one sliding-window lookup per request;
* the hybrid model's engine core made at least one full-attention lookup
  per request in every run (ours, replaced, in on and shadow), the all-SWA
  model's none;
* shadow compared every lookup of both kinds (``shadow_compared`` =
  ``calls`` + ``full_calls``), zero shadow mismatches, zero adapter errors.

Then the load phase (load.py), one more fresh server per model in shadow
mode (native core) with the KV pool forced small
(``--num-gpu-blocks-override``): >= 1,000 completions, 16 in flight, over
shared-prefix documents of up to 3,000 tokens. It passes only if every
request completed, blocks were evicted while lookups ran (vLLM's residency
metrics count reallocated blocks; and some bare prefix, sent again after an
identical request had completed, was not served in full: its blocks had
been evicted, so it was computed and cached again), the pattern shows full
and partial hits, the engine core
compared at least one lookup per request with zero mismatches and zero
adapter errors, and the server still answers a final request.

Then the data-parallel run (``--dp-models``, default both): one more
fresh server per model with ``--data-parallel-size 2`` (``mp`` backend,
DP address 127.0.0.1, a free RPC port), shadow mode with the native core,
200 concurrent requests (8 in flight) that vLLM's own front-end load
balancer spreads over the two engine cores. It passes only if both engine
cores (each its own process: its own pid and stats file, neither the API
server) report lookups of their own (the hybrid's full-attention ones too),
each in shadow mode with the installed extension mapped, every lookup
compared, zero mismatches, zero errors, all requests completed, and the
server still answers.

With ``--in-process ROUNDS`` (``make e2e`` passes it), inprocess.py also
times the lookup off vs on with the engine core inside one process
(recorded, not a criterion: it checks only the backend, the mapped
extension, zero errors and, for the hybrid model, that full-attention
lookups were timed too).

The receipt (JSON) has every request's numbers, the engine's KV-cache
groups and managers as seen by the plugin, the ``/metrics`` prefix-cache
counters and the time spent inside the lookups on vs off, per manager.

Every wait is bounded; servers run in their own process group and are
killed (group-wide) on every exit path.
"""

import argparse
import atexit
import datetime as dt
import hashlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inprocess  # noqa: E402
import load  # noqa: E402
import make_models  # noqa: E402
import probe  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SERVED_NAME = "tiny"


def _receipts() -> Any:
    """benchmarks/receipts.py, loaded from its file: the repository root is
    not on this process's path, so that the package imports from the
    installed wheel, not from the work tree."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("receipts", ROOT / "benchmarks" / "receipts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
BLOCK_SIZE = 32  # CPU attention raises 16 to 32 anyway


@dataclass(frozen=True)
class Run:
    mode: str  # off | on | shadow
    core: str  # python | native | "" (SWA_PREFIX_CACHE_CORE unset: the default)
    backend: str  # what the engine-core stats file must say


RUNS = (
    Run("off", "", "vllm"),
    Run("on", "", "native"),
    Run("shadow", "native", "native"),
)
# The load phase's server: shadow, native core, small KV pool.
LOAD_RUN = Run("shadow", "native", "native")
PROBE_PHASES = ("forward", "reverse", "shared", "growth", *probe.LONG_PHASES)
LOAD_BLOCKS = 256  # blocks of 32 tokens: 8,192 tokens, under 3 documents
# The data-parallel run: --data-parallel-size DP_SIZE, shadow, native core,
# requests spread by vLLM's own front-end load balancer (concurrent, so both
# engines get some), default KV pool.
DP_RUN = Run("shadow", "native", "native")
DP_SIZE = 2
DP_WORK = dict(requests=200, concurrency=8)
# The two lookups the engine core makes, as the stats file counts them:
# (name, calls, nanoseconds, slowest single lookup).
MANAGERS = (
    ("sliding_window", "calls", "lookup_ns", "lookup_ns_max"),
    ("full_attention", "full_calls", "full_lookup_ns", "full_lookup_ns_max"),
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
    # The _hotpath extension files the engine core has mapped (/proc maps).
    hotpath_mapped: list[str] = field(default_factory=list)
    # The engine core's stats file read (settled) just before the long
    # phase: engine["stats"] minus this is the long phase's share.
    before_long: dict[str, Any] | None = None


@dataclass
class DpOutcome:
    model: str
    size: int  # --data-parallel-size
    summary: dict[str, Any]  # load.summary()
    engines: list[dict[str, Any]]  # every engine core's stats file
    hotpath_mapped: dict[int, list[str]]  # engine pid -> mapped _hotpath files
    server_pid: int
    final_ok: bool
    startup_s: float
    others: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class LoadOutcome:
    model: str
    blocks: int  # --num-gpu-blocks-override
    summary: dict[str, Any]  # load.summary()
    engine: dict[str, Any]  # the engine core's stats file
    metrics: dict[str, float]  # prefix-cache counters and KV residency counts
    final_ok: bool  # a request after the phase succeeded
    startup_s: float
    hotpath_mapped: list[str] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)


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


def stop_servers_on_exit() -> None:
    """Every process this run starts is stopped at exit, on SIGTERM and on SIGINT."""
    atexit.register(_cleanup)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)


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
                 max_model_len: int, extra_args: tuple[str, ...] = (),
                 max_num_seqs: int = 4) -> tuple[subprocess.Popen, int, Path, float]:
    port = _free_port()
    stats_dir = work_dir / "stats"
    stats_dir.mkdir(parents=True, exist_ok=True)
    log = work_dir / "server.log"
    env = dict(os.environ)
    # The server must import the installed package, never the work tree.
    env.pop("PYTHONPATH", None)
    env.pop("SWA_PREFIX_CACHE_CORE", None)
    env.pop("SWA_PREFIX_CACHE_HOTPATH", None)
    env.pop("PREFIX_CACHE_HOTPATH", None)  # its former name
    if run.core:
        env["SWA_PREFIX_CACHE_CORE"] = run.core
    env.update({
        "SWA_PREFIX_CACHE_MODE": run.mode,
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
        "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs),
        "--seed", "0", "--disable-uvicorn-access-log", *extra_args,
    ]
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work_dir,
            start_new_session=True,
        )
    _live.append(proc)
    wait_healthy(proc, port, log, started + startup_timeout_s, "server")
    return proc, port, stats_dir, time.monotonic() - started


def wait_healthy(proc: subprocess.Popen, port: int, log: Path, deadline: float, what: str) -> None:
    """Until ``GET /health`` on ``port`` answers; a Failure with the log's
    tail if the process exits first or ``deadline`` (monotonic) passes."""
    while True:
        if proc.poll() is not None:
            raise Failure(f"{what} exited with {proc.returncode} during start:\n{_tail(log)}")
        try:
            probe.get_text(port, "/health", timeout_s=2.0)
            return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise Failure(f"{what} not healthy by its deadline:\n{_tail(log)}")
        time.sleep(0.5)


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


def lookups(stats: dict[str, Any]) -> int:
    """Lookups of both managers (sliding window + full attention)."""
    return int(stats["calls"]) + int(stats.get("full_calls", 0))


def settled_engines(stats_dir: Path, server_pid: int, count: int = 1,
                    timeout_s: float = 10.0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The engine-core processes' stats once their counters stop moving
    (``count`` of them: one per data-parallel rank), and the other
    processes' files. An engine core is a process that made lookups; none
    may be the API server itself, and each has its own pid (its own file)."""
    deadline = time.monotonic() + timeout_s
    previous: Any = None
    while True:
        files = _read_stats(stats_dir)
        engines = [f for f in files if lookups(f["stats"]) > 0]
        current = [(f["pid"], f["stats"]["calls"], f["stats"].get("full_calls", 0))
                   for f in engines]
        if len(engines) >= count and current == previous:
            break
        if time.monotonic() > deadline:
            break
        previous = current
        time.sleep(0.6)  # > 2 writer periods
    if len(engines) != count:
        raise Failure(
            f"expected {'one process' if count == 1 else f'{count} processes'} with lookups, "
            f"found {len(engines)}: "
            f"{[(f['pid'], f['process'], f['stats']['calls'], f['stats'].get('full_calls', 0)) for f in files]}"
        )
    if any(e["pid"] == server_pid for e in engines):
        raise Failure("lookups ran in the API server process, not in a separate engine core")
    if len({e["pid"] for e in engines}) != count:
        raise Failure(f"engine cores share a pid: {[e['pid'] for e in engines]}")
    engines.sort(key=lambda e: str(e.get("process", "")))
    return engines, [f for f in files if all(f is not e for e in engines)]


def settled_stats(stats_dir: Path, server_pid: int, timeout_s: float = 10.0) -> tuple[
        dict[str, Any], list[dict[str, Any]]]:
    """The one engine-core process's stats (settled_engines with one
    engine), and the other processes' files."""
    engines, others = settled_engines(stats_dir, server_pid, 1, timeout_s)
    return engines[0], others


def per_manager(stats: dict[str, Any], before: dict[str, Any] | None = None) -> dict[str, Any]:
    """Lookups, mean microseconds per lookup and total milliseconds in
    lookups, per manager (minus ``before``'s counts: a phase's share; the
    slowest lookup only without ``before``)."""
    out = {}
    for name, calls_key, ns_key, max_key in MANAGERS:
        calls = int(stats.get(calls_key, 0)) - int((before or {}).get(calls_key, 0))
        spent = int(stats.get(ns_key, 0)) - int((before or {}).get(ns_key, 0))
        row = {"lookups": calls, "us_mean": round(spent / max(calls, 1) / 1000, 2),
               "total_ms": round(spent / 1e6, 3)}
        if before is None:
            row["max_us"] = round(int(stats.get(max_key, 0) or 0) / 1000, 1)
        out[name] = row
    return out


# ---- the installed artifact ---------------------------------------------------------------

_WHERE = r"""
import importlib.metadata as md, json, sys, sysconfig
import swa_prefix_cache.core, swa_prefix_cache.core._hotpath as hot, swa_prefix_cache.vllm_adapter
dist = md.distribution("swa-prefix-cache")
eps = [e.value for e in dist.entry_points if e.group == "vllm.general_plugins"]
print(json.dumps({
    "site": sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}),
    "vllm_adapter": swa_prefix_cache.vllm_adapter.__file__, "core": swa_prefix_cache.core.__file__,
    "hotpath": hot.__file__, "version": dist.version, "entry_points": eps,
    "direct_url": json.loads(dist.read_text("direct_url.json") or "null"),
}))
"""


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def wheel_info(wheel: Path) -> dict[str, Any]:
    """The wheel's name, sha256, tag and its _hotpath member's sha256."""
    with zipfile.ZipFile(wheel) as z:
        members = [n for n in z.namelist()
                   if n.startswith("swa_prefix_cache/core/_hotpath") and n.endswith(".so")]
        if len(members) != 1:
            raise Failure(f"{wheel.name}: expected one swa_prefix_cache/core/_hotpath*.so, got {members}")
        hot_sha = hashlib.sha256(z.read(members[0])).hexdigest()
        stray = [n for n in z.namelist() if "libprefix_cache" in n]
    if stray:
        raise Failure(f"{wheel.name}: ships {stray}")
    tag = "-".join(wheel.stem.split("-")[-3:])
    if tag.endswith("none-any"):
        raise Failure(f"{wheel.name}: not platform-tagged")
    return {"file": wheel.name, "sha256": sha256_file(wheel), "tag": tag,
            "hotpath_member": members[0], "hotpath_sha256": hot_sha}


def installed_where(python: str = sys.executable) -> dict[str, Any]:
    """Where this venv imports the package from, asked from a neutral cwd
    with the environment the servers get (no PYTHONPATH)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run([python, "-I", "-c", _WHERE], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=120)
    if out.returncode:
        raise Failure(f"the installed package does not import:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_installed(where: dict[str, Any], wheel: dict[str, Any]) -> None:
    """The package the servers import is the wheel's, from site-packages."""
    site = [str(Path(d).resolve()) for d in where["site"]]
    for key in ("vllm_adapter", "core", "hotpath"):
        path = str(Path(where[key]).resolve())
        if not any(path.startswith(d + os.sep) for d in site):
            raise Failure(f"{key} imports from {path}, not from site-packages {site}")
    direct = where.get("direct_url") or {}
    if (direct.get("dir_info") or {}).get("editable") or "archive_info" not in direct:
        raise Failure(f"the package is not installed from a wheel: direct_url {direct}")
    got = (direct["archive_info"].get("hashes") or {}).get("sha256") \
        or direct["archive_info"].get("hash", "").removeprefix("sha256=")
    if got != wheel["sha256"] or not direct.get("url", "").endswith("/" + wheel["file"]):
        raise Failure(f"installed from {direct.get('url')} (sha256 {got}), "
                      f"not {wheel['file']} (sha256 {wheel['sha256']})")
    if sha256_file(Path(where["hotpath"])) != wheel["hotpath_sha256"]:
        raise Failure(f"{where['hotpath']} differs from {wheel['hotpath_member']} in the wheel")
    if "swa_prefix_cache.vllm_adapter.plugin:register" not in where["entry_points"]:
        raise Failure(f"no vllm.general_plugins entry point: {where['entry_points']}")


def mapped_hotpath(pid: int) -> list[str]:
    """The _hotpath extension files mapped into process ``pid``."""
    try:
        lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    except OSError:
        return []
    return sorted({line.split(None, 5)[5] for line in lines
                   if len(line.split(None, 5)) == 6 and "/_hotpath" in line})


def check_mapped(where: str, backend: str, mapped: list[str], installed: dict[str, Any] | None) -> None:
    """An engine core running our native core mapped exactly the installed
    extension (the wheel's), no other."""
    if backend != "native" or installed is None:
        return
    want = str(Path(installed["hotpath"]).resolve())
    if [str(Path(m).resolve()) for m in mapped] != [want]:
        raise Failure(f"{where}: engine core mapped {mapped}, not the installed {want}")


# ---- one model, one run -----------------------------------------------------------------


def run_once(model: str, model_dir: Path, run: Run, work: probe.Workload, out_dir: Path,
             startup_timeout_s: float, request_timeout_s: float) -> Outcome:
    work_dir = out_dir / f"{model}-{run.mode}"
    work_dir.mkdir(parents=True, exist_ok=True)
    max_model_len = probe.max_tokens(work) + 64
    proc, port, stats_dir, startup_s = start_server(
        model_dir, run, work_dir, startup_timeout_s, max_model_len,
    )
    short = tuple(p for p in PROBE_PHASES if p not in probe.LONG_PHASES)
    try:
        samples = probe.run(port, SERVED_NAME, work, timeout_s=request_timeout_s, phases=short)
        before_long = None
        if work.long_prompts:
            before_long, _ = settled_stats(stats_dir, proc.pid)
            samples += probe.run(port, SERVED_NAME, work, timeout_s=request_timeout_s,
                                 phases=probe.LONG_PHASES)
        metrics = probe.prefix_cache_counters(port)
        engine, others = settled_stats(stats_dir, proc.pid)
        mapped = mapped_hotpath(engine["pid"])
    finally:
        stop_server(proc)
    return Outcome(model, run, samples, engine, metrics, startup_s, others, mapped,
                   before_long["stats"] if before_long else None)


def check_outcome(o: Outcome, installed: dict[str, Any] | None = None) -> None:
    """The plugin proves it ran in the engine core, in the asked mode (and,
    given ``installed``, with the installed wheel's extension)."""
    e, where = o.engine, f"{o.model}/{o.run.mode}"
    if not e.get("installed"):
        raise Failure(f"{where}: plugin not active in the engine core: {e.get('reason')!r}")
    if e.get("mode") != o.run.mode or e.get("backend") != o.run.backend:
        raise Failure(f"{where}: engine core runs mode {e.get('mode')} / {e.get('backend')}")
    check_mapped(where, e.get("backend", ""), o.hotpath_mapped, installed)
    stats = e["stats"]
    if stats["calls"] < len(o.samples):
        raise Failure(f"{where}: {stats['calls']} lookups for {len(o.samples)} requests")
    check_full_lookups(where, o.model, o.run.mode, e, len(o.samples))
    if stats["errors"]:
        raise Failure(f"{where}: {stats['errors']} adapter errors")
    if o.run.mode == "shadow":
        check_shadow_counts(where, stats)
    if any(s.cached_tokens is None for s in o.samples):
        raise Failure(f"{where}: responses carry no cached_tokens")


def check_full_lookups(where: str, model: str, mode: str, engine: dict[str, Any],
                       requests: int) -> None:
    """The full-attention lookups are where the model has full attention:
    for a hybrid model the engine core ran at least one per request (ours
    in modes on and shadow: the extension's full_hit replaced vLLM's; vLLM's
    own, timed, in mode off), for an all-SWA model none."""
    full = int(engine["stats"].get("full_calls", 0))
    if make_models.HAS_FULL_ATTENTION.get(model, False):
        replaced = engine.get("full_attention") or {}
        if mode != "off" and not replaced.get("installed"):
            raise Failure(f"{where}: the full-attention lookup is not replaced in the engine "
                          f"core: {replaced.get('reason')!r}")
        if full < requests:
            raise Failure(f"{where}: {full} full-attention lookups for {requests} requests")
    elif full:
        raise Failure(f"{where}: {full} full-attention lookups on a model without "
                      "full-attention layers")


def check_shadow_counts(where: str, stats: dict[str, Any]) -> None:
    """Shadow compared every lookup of both managers, all equal."""
    if stats["shadow_compared"] != lookups(stats):
        raise Failure(f"{where}: compared {stats['shadow_compared']} of {lookups(stats)} "
                      f"lookups ({stats['calls']} sliding-window + "
                      f"{stats.get('full_calls', 0)} full-attention)")
    if stats["shadow_mismatches"]:
        raise Failure(f"{where}: {stats['shadow_mismatches']} shadow mismatches: "
                      f"{stats['last_mismatch']}")


def check_long_phase(o: Outcome, work: probe.Workload) -> None:
    """The long phase mattered: all its prompts were sent, thousands of
    tokens each, and every one sent again (``long_reverse``) was served
    from the cache for at least 90% of its tokens (the pool kept them)."""
    if not work.long_prompts:
        return
    where = f"{o.model}/{o.run.mode}"
    again = [s for s in o.samples if s.phase == "long_reverse"]
    if len(again) != work.long_prompts or \
            sum(s.phase == "long" for s in o.samples) != work.long_prompts:
        raise Failure(f"{where}: the long phase sent {len(again)} of {work.long_prompts} "
                      "prompts again")
    for s in again:
        if s.prompt_tokens < work.long_tokens or (s.cached_tokens or 0) < 0.9 * s.prompt_tokens:
            raise Failure(f"{where}: long_reverse[{s.index}] cached {s.cached_tokens} of "
                          f"{s.prompt_tokens} tokens; the long prompts did not stay cached")
    if o.before_long is not None and lookups(o.engine["stats"]) - lookups(o.before_long) \
            < 2 * work.long_prompts:
        raise Failure(f"{where}: {lookups(o.engine['stats']) - lookups(o.before_long)} "
                      f"lookups in the long phase for {2 * work.long_prompts} requests")


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


# ---- the load phase ---------------------------------------------------------------------

# vLLM's KV-cache residency histograms (--kv-cache-metrics, every block
# sampled): one observation per block handed out again after use.
EVICTION_METRIC = "vllm:kv_block_lifetime_seconds_count"


def load_counters(port: int) -> dict[str, float]:
    """Prefix-cache counters plus the residency count of ``/metrics``."""
    counters = probe.prefix_cache_counters(port)
    for line in probe.get_text(port, "/metrics").splitlines():
        if line.startswith(EVICTION_METRIC):
            name_labels, _, value = line.rpartition(" ")
            name = name_labels.split("{", 1)[0]
            counters[name] = counters.get(name, 0.0) + float(value)
    return counters


def run_load(model: str, model_dir: Path, work: load.LoadWorkload, blocks: int, out_dir: Path,
             startup_timeout_s: float, request_timeout_s: float,
             deadline_s: float) -> LoadOutcome:
    work_dir = out_dir / f"{model}-load"
    work_dir.mkdir(parents=True, exist_ok=True)
    extra = ("--num-gpu-blocks-override", str(blocks),
             "--kv-cache-metrics", "--kv-cache-metrics-sample", "1.0")
    proc, port, stats_dir, startup_s = start_server(
        model_dir, LOAD_RUN, work_dir, startup_timeout_s,
        load.max_prompt_tokens(work) + 64, extra, max_num_seqs=work.concurrency,
    )
    try:
        result = load.run(port, SERVED_NAME, work, timeout_s=request_timeout_s,
                          deadline_s=deadline_s)
        final_ok = _final_request(proc, port, request_timeout_s)
        metrics = load_counters(port) if final_ok else {}
        engine, _ = settled_stats(stats_dir, proc.pid)
        mapped = mapped_hotpath(engine["pid"])
    finally:
        stop_server(proc)
    return LoadOutcome(model, blocks, load.summary(result, BLOCK_SIZE), engine, metrics,
                       final_ok, startup_s, mapped, load.as_rows(result))


def _final_request(proc: subprocess.Popen, port: int, timeout_s: float) -> bool:
    """The server is alive and still answers a request."""
    try:
        reply = probe._post(port, "/v1/completions", {
            "model": SERVED_NAME, "prompt": "w1 w2 w3", "max_tokens": 1,
        }, timeout_s)
        ok = bool(reply.get("choices")) and proc.poll() is None
        probe.get_text(port, "/health", timeout_s=10.0)
        return ok
    except (OSError, ValueError):
        return False


def check_load(o: LoadOutcome, installed: dict[str, Any] | None = None,
               min_requests: int = 1000, min_concurrency: int = 16) -> None:
    """Pass criteria of the load phase (module docstring)."""
    where, s, e = f"{o.model}/load", o.summary, o.engine
    if s["requests"] < min_requests or s["concurrency"] < min_concurrency:
        raise Failure(f"{where}: {s['requests']} requests at concurrency {s['concurrency']}, "
                      f"below {min_requests} at {min_concurrency}")
    if s["failed"] or s["unsent"] or s["completed"] != s["requests"]:
        raise Failure(f"{where}: {s['completed']} of {s['requests']} completed "
                      f"({s['failed']} failed, {s['unsent']} unsent at the deadline): "
                      f"{s['failures']}")
    if not o.final_ok:
        raise Failure(f"{where}: the server did not answer a request after the load")
    if not e.get("installed") or e.get("mode") != LOAD_RUN.mode \
            or e.get("backend") != LOAD_RUN.backend:
        raise Failure(f"{where}: engine core runs {e.get('mode')} / {e.get('backend')} "
                      f"(installed {e.get('installed')}: {e.get('reason')!r})")
    check_mapped(where, e.get("backend", ""), o.hotpath_mapped, installed)
    st = e["stats"]
    if st["errors"]:
        raise Failure(f"{where}: {st['errors']} adapter errors")
    if st["shadow_mismatches"]:
        raise Failure(f"{where}: {st['shadow_mismatches']} shadow mismatches: "
                      f"{st['last_mismatch']}")
    if st["shadow_compared"] < s["requests"] or st["shadow_compared"] != lookups(st):
        raise Failure(f"{where}: shadow compared {st['shadow_compared']} of {lookups(st)} "
                      f"lookups for {s['requests']} requests")
    check_full_lookups(where, o.model, LOAD_RUN.mode, e, s["requests"])
    if o.metrics.get(EVICTION_METRIC, 0) <= 0:
        raise Failure(f"{where}: no block was evicted with {o.blocks} blocks "
                      f"({EVICTION_METRIC} = {o.metrics.get(EVICTION_METRIC)})")
    if not s["refetched_after_eviction"]:
        raise Failure(f"{where}: no bare prefix was computed again after an identical "
                      "request had completed: evictions never reached a lookup")
    if not s["full_hits"] or not s["partial_hits"]:
        raise Failure(f"{where}: {s['full_hits']} full and {s['partial_hits']} partial hits; "
                      "the load must hit both ways")


def load_line(o: LoadOutcome) -> str:
    s, st = o.summary, o.engine["stats"]
    return (
        f"load {o.model}: {s['completed']}/{s['requests']} requests at concurrency "
        f"{s['concurrency']} in {s['wall_s']:.1f} s (p50 {s['latency_ms_p50']} ms, "
        f"p99 {s['latency_ms_p99']} ms), prompts up to {s['max_prompt_tokens']} tokens; "
        f"{o.blocks} blocks: {o.metrics.get(EVICTION_METRIC, 0):.0f} blocks reallocated, "
        f"{s['refetched_after_eviction']} bare prefixes re-computed after eviction; "
        f"hits full {s['full_hits']} / partial {s['partial_hits']} / none {s['misses']}; "
        f"shadow compared {st['shadow_compared']} of {lookups(st)} lookups "
        f"({manager_text(per_manager(st))}), mismatches {st['shadow_mismatches']}, "
        f"errors {st['errors']}; final request {'ok' if o.final_ok else 'FAILED'}"
    )


def manager_text(rows: dict[str, Any]) -> str:
    """'sliding window N x U us = T ms, full attention ...' (managers with lookups)."""
    parts = [f"{name.replace('_', ' ')} {r['lookups']} x {r['us_mean']} us = {r['total_ms']} ms"
             for name, r in rows.items() if r["lookups"]]
    return ", ".join(parts) or "no lookups"


# ---- the data-parallel run ------------------------------------------------------------


def run_dp(model: str, model_dir: Path, work: load.LoadWorkload, size: int, out_dir: Path,
           startup_timeout_s: float, request_timeout_s: float, deadline_s: float) -> DpOutcome:
    """One server with ``--data-parallel-size size`` (shadow, native core):
    ``size`` engine-core processes behind one API server, whose own load
    balancer spreads the concurrent requests. Loopback only: the DP address
    is 127.0.0.1 and its RPC port a free one (not the fixed default, which
    another run on the machine may hold)."""
    work_dir = out_dir / f"{model}-dp{size}"
    work_dir.mkdir(parents=True, exist_ok=True)
    extra = ("--data-parallel-size", str(size), "--data-parallel-backend", "mp",
             "--data-parallel-address", probe.HOST,
             "--data-parallel-rpc-port", str(_free_port()))
    proc, port, stats_dir, startup_s = start_server(
        model_dir, DP_RUN, work_dir, startup_timeout_s,
        load.max_prompt_tokens(work) + 64, extra, max_num_seqs=work.concurrency,
    )
    try:
        result = load.run(port, SERVED_NAME, work, timeout_s=request_timeout_s,
                          deadline_s=deadline_s)
        final_ok = _final_request(proc, port, request_timeout_s)
        engines, others = settled_engines(stats_dir, proc.pid, count=size)
        mapped = {e["pid"]: mapped_hotpath(e["pid"]) for e in engines}
    finally:
        stop_server(proc)
    return DpOutcome(model, size, load.summary(result, BLOCK_SIZE), engines, mapped, proc.pid,
                     final_ok, startup_s, others)


def check_dp(o: DpOutcome, installed: dict[str, Any] | None = None,
             min_requests: int = 1) -> None:
    """Every engine core of the data-parallel server (one process per rank)
    reports its own lookups in its own stats file, in shadow mode with the
    native core (the installed extension mapped), every lookup compared,
    zero mismatches, zero errors; all requests completed and the server
    still answers."""
    where, s = f"{o.model}/dp{o.size}", o.summary
    if s["requests"] < min_requests:
        raise Failure(f"{where}: {s['requests']} requests, below {min_requests}")
    if s["failed"] or s["unsent"] or s["completed"] != s["requests"]:
        raise Failure(f"{where}: {s['completed']} of {s['requests']} completed "
                      f"({s['failed']} failed, {s['unsent']} unsent at the deadline): "
                      f"{s['failures']}")
    if not o.final_ok:
        raise Failure(f"{where}: the server did not answer a request after the load")
    pids = [e["pid"] for e in o.engines]
    if len(o.engines) != o.size or len(set(pids)) != o.size or o.server_pid in pids:
        raise Failure(f"{where}: {len(o.engines)} engine cores with lookups (pids {pids}, "
                      f"server {o.server_pid}), expected {o.size} of their own")
    for e in o.engines:
        at, st = f"{where} engine pid {e['pid']} ({e.get('process')})", e["stats"]
        if not e.get("installed") or e.get("mode") != DP_RUN.mode \
                or e.get("backend") != DP_RUN.backend:
            raise Failure(f"{at}: runs {e.get('mode')} / {e.get('backend')} "
                          f"(installed {e.get('installed')}: {e.get('reason')!r})")
        check_mapped(at, e.get("backend", ""), o.hotpath_mapped.get(e["pid"], []), installed)
        if st["calls"] <= 0:
            raise Failure(f"{at}: no sliding-window lookup: the requests were not spread")
        check_full_lookups(at, o.model, DP_RUN.mode, e, 1)
        if st["errors"]:
            raise Failure(f"{at}: {st['errors']} adapter errors")
        check_shadow_counts(at, st)
    if sum(e["stats"]["calls"] for e in o.engines) < s["requests"]:
        raise Failure(f"{where}: {sum(e['stats']['calls'] for e in o.engines)} sliding-window "
                      f"lookups for {s['requests']} requests")


def dp_line(o: DpOutcome) -> str:
    s = o.summary
    engines = "; ".join(
        f"{e.get('process')} pid {e['pid']}: {lookups(e['stats'])} lookups "
        f"({manager_text(per_manager(e['stats']))}), compared {e['stats']['shadow_compared']}, "
        f"mismatches {e['stats']['shadow_mismatches']}, errors {e['stats']['errors']}"
        for e in o.engines)
    return (f"dp{o.size} {o.model}: {s['completed']}/{s['requests']} requests at concurrency "
            f"{s['concurrency']} in {s['wall_s']:.1f} s (p50 {s['latency_ms_p50']} ms); "
            f"server pid {o.server_pid}; {engines}; "
            f"final request {'ok' if o.final_ok else 'FAILED'}")


# ---- report ----------------------------------------------------------------------------


def table(outcomes: list[Outcome]) -> str:
    by_mode = {o.run.mode: o for o in outcomes}
    head = f"{'phase':12} {'i':>2} {'tokens':>6} | " + " | ".join(
        f"{m + ' cached':>13} {'ms':>7}" for m in by_mode
    )
    lines = [head, "-" * len(head)]
    for k, s in enumerate(outcomes[0].samples):
        cells = " | ".join(
            f"{o.samples[k].cached_tokens:>13} {o.samples[k].latency_ms:>7.1f}"
            for o in by_mode.values()
        )
        lines.append(f"{s.phase:12} {s.index:>2} {s.prompt_tokens:>6} | {cells}")
    lines.append("")
    for o in outcomes:
        st = o.engine["stats"]
        lines.append(
            f"{o.run.mode:6} ({o.engine['backend']:6}) engine pid {o.engine['pid']}: "
            f"{lookups(st)} lookups ({manager_text(per_manager(st))}); "
            + (f"long phase only: {manager_text(per_manager(st, o.before_long))}; "
               if o.before_long is not None else "")
            + f"shadow compared {st['shadow_compared']}, "
            f"mismatches {st['shadow_mismatches']}; server start {o.startup_s:.0f} s"
        )
    return "\n".join(lines)


def lookup_times(outcomes: list[Outcome], long_only: bool = False) -> dict[str, Any]:
    """Per manager, per run mode: lookups, mean microseconds per lookup,
    total milliseconds in lookups (the whole probe, or the long phase)."""
    out: dict[str, Any] = {name: {} for name, *_ in MANAGERS}
    for o in outcomes:
        if long_only and o.before_long is None:
            continue
        rows = per_manager(o.engine["stats"], o.before_long if long_only else None)
        for name, row in rows.items():
            out[name][o.run.mode] = row
    return out


LOAD_COLUMNS = ("index", "document", "prefix_tokens", "suffix_tokens", "prompt_tokens",
                "cached_tokens", "started", "finished")


def measure_in_process(model: str, model_dir: Path, rounds: int,
                       installed: dict[str, Any] | None = None) -> dict[str, Any]:
    """Lookup time with the engine core in one process (inprocess.py), off
    then on; checked only for the right backend and zero errors (the times
    are a measurement, not a criterion)."""
    out = {}
    for mode, backend in (("off", "vllm"), ("on", "native")):
        try:
            got = inprocess.measure(model_dir, mode, rounds)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            raise Failure(f"{model}/in-process {mode}: {exc}") from exc
        if not got["installed"] or got["backend"] != backend or got["errors"] \
                or not got["lookups"]:
            raise Failure(f"{model}/in-process {mode}: {got}")
        has_full = make_models.HAS_FULL_ATTENTION.get(model, False)
        if has_full and (not got.get("full_lookups")
                         or not (got.get("full_attention") or {}).get("installed")):
            raise Failure(f"{model}/in-process {mode}: no full-attention lookup timed: {got}")
        check_mapped(f"{model}/in-process {mode}", got["backend"], got["hotpath_mapped"],
                     installed)
        out[mode] = got
    return out


def receipt(all_outcomes: dict[str, list[Outcome]], loads: dict[str, LoadOutcome],
            work: probe.Workload, load_work: load.LoadWorkload | None, started: str,
            wall_s: float, wheel: dict[str, Any] | None,
            installed: dict[str, Any] | None,
            in_process: dict[str, dict[str, Any]] | None = None,
            dps: dict[str, DpOutcome] | None = None,
            dp_work: load.LoadWorkload | None = None) -> dict[str, Any]:
    import vllm

    from swa_prefix_cache.vllm_adapter import fingerprint

    found = fingerprint.check(fingerprint.SLIDING_WINDOW)
    known, digest = found.known, found.variant or "changed: " + ", ".join(found.changed)
    models: dict[str, Any] = {}
    for model, outcomes in all_outcomes.items():
        engine = outcomes[0].engine
        models[model] = {
            "kv_cache": engine.get("observed", []),
            # per manager, per mode: lookups, us_mean, total_ms, max_us
            "lookup_times": lookup_times(outcomes),
            "long_phase_lookup_times": lookup_times(outcomes, long_only=True),
            "long_reverse_cached_tokens": {
                o.run.mode: [x.cached_tokens for x in o.samples if x.phase == "long_reverse"]
                for o in outcomes
            },
            "runs": [
                {
                    "mode": o.run.mode, "core": o.run.core or "(default)",
                    "backend": o.engine["backend"],
                    "engine_pid": o.engine["pid"], "engine_process": o.engine["process"],
                    "engine_hotpath_mapped": o.hotpath_mapped,
                    "startup_s": round(o.startup_s, 1),
                    "lookups": o.engine["stats"]["calls"],
                    "lookup_ns": o.engine["stats"]["lookup_ns"],
                    "lookup_ns_max": o.engine["stats"].get("lookup_ns_max"),
                    "full_lookups": o.engine["stats"].get("full_calls", 0),
                    "full_lookup_ns": o.engine["stats"].get("full_lookup_ns", 0),
                    "full_lookup_ns_max": o.engine["stats"].get("full_lookup_ns_max", 0),
                    "full_attention": o.engine.get("full_attention"),
                    "stats_before_long_phase": o.before_long,
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
    for model, lo in loads.items():
        st = lo.engine["stats"]
        models.setdefault(model, {})["load"] = {
            **lo.summary,
            "num_gpu_blocks_override": lo.blocks,
            "blocks_reallocated": lo.metrics.get(EVICTION_METRIC),
            "metrics": lo.metrics,
            "final_request_ok": lo.final_ok,
            "startup_s": round(lo.startup_s, 1),
            "engine_pid": lo.engine["pid"], "backend": lo.engine["backend"],
            "mode": lo.engine["mode"], "engine_hotpath_mapped": lo.hotpath_mapped,
            "lookups": st["calls"], "lookup_ns": st["lookup_ns"],
            "lookup_ns_max": st.get("lookup_ns_max"),
            "full_lookups": st.get("full_calls", 0), "full_lookup_ns": st.get("full_lookup_ns", 0),
            "lookup_times": per_manager(st),
            "shadow_compared": st["shadow_compared"],
            "shadow_mismatches": st["shadow_mismatches"], "errors": st["errors"],
            "columns": list(LOAD_COLUMNS),
            "rows": [",".join(str(r[c]) for c in LOAD_COLUMNS) for r in lo.samples],
        }
    for model, runs in (in_process or {}).items():
        models.setdefault(model, {})["in_process"] = runs
    for model, dp in (dps or {}).items():
        models.setdefault(model, {})["data_parallel"] = {
            **dp.summary,
            "data_parallel_size": dp.size, "server_pid": dp.server_pid,
            "final_request_ok": dp.final_ok, "startup_s": round(dp.startup_s, 1),
            "engines": [
                {"pid": e["pid"], "process": e.get("process"), "mode": e.get("mode"),
                 "backend": e.get("backend"), "hotpath_mapped": dp.hotpath_mapped.get(e["pid"]),
                 "lookups": e["stats"]["calls"], "full_lookups": e["stats"].get("full_calls", 0),
                 "lookup_times": per_manager(e["stats"]),
                 "shadow_compared": e["stats"]["shadow_compared"],
                 "shadow_mismatches": e["stats"]["shadow_mismatches"],
                 "errors": e["stats"]["errors"]}
                for e in dp.engines
            ],
            "other_processes": [{"pid": p["pid"], "process": p["process"]} for p in dp.others],
        }
    return {
        "started": started,
        "wall_s": round(wall_s, 1),
        "vllm_version": getattr(vllm, "__version__", "?"),
        "fingerprint": digest,  # the known variant's name (its releases)
        "fingerprint_known": known,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "wheel": wheel,
        "installed": installed,
        "workload": asdict(work),
        "load_workload": asdict(load_work) if load_work else None,
        "dp_workload": asdict(dp_work) if dp_work else None,
        "block_size": BLOCK_SIZE,
        "window_tokens": make_models.WINDOW,
        "models": models,
        "passed": True,
    }


def summary_lines(data: dict[str, Any]) -> list[str]:
    """Per model and manager: us per lookup and total ms in lookups, off /
    on / shadow (the whole probe, then the long phase alone), and in one
    process off / on."""
    lines = ["time inside the prefix-cache lookups, per manager (us per lookup / total ms):"]
    for model, m in data["models"].items():
        for key, label in (("lookup_times", "server, probe"),
                           ("long_phase_lookup_times", "server, long phase")):
            for manager, modes in (m.get(key) or {}).items():
                if any(r["lookups"] for r in modes.values()):
                    lines.append(f"  {model:6} {manager:14} {label:18} " + ", ".join(
                        f"{mode} {r['us_mean']} us / {r['total_ms']} ms ({r['lookups']})"
                        for mode, r in modes.items()))
        for manager, calls, ns in (("sliding_window", "lookups", "lookup_ns"),
                                   ("full_attention", "full_lookups", "full_lookup_ns")):
            runs = m.get("in_process") or {}
            if any(r.get(calls) for r in runs.values()):
                lines.append(f"  {model:6} {manager:14} {'one process':18} " + ", ".join(
                    f"{mode} {r[ns] / max(r[calls], 1) / 1000:.2f} us / {r[ns] / 1e6:.3f} ms "
                    f"({r[calls]})" for mode, r in runs.items()))
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "e2e")
    parser.add_argument("--wheel", type=Path,
                        help="the wheel installed in this venv (make dist); checked to be "
                        "what the servers import. Without it that check is skipped.")
    parser.add_argument("--models", default="swa,hybrid")
    parser.add_argument("--prompts", type=int, default=probe.Workload.prompts)
    parser.add_argument("--prompt-tokens", type=int, default=probe.Workload.prompt_tokens)
    parser.add_argument("--long-prompts", type=int, default=probe.Workload.long_prompts,
                        help="prompts of the long phase (0: no long phase)")
    parser.add_argument("--long-tokens", type=int, default=probe.Workload.long_tokens)
    parser.add_argument("--startup-timeout", type=float, default=300.0)
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument("--no-probe", action="store_true", help="load phase only")
    parser.add_argument("--in-process", type=int, default=0, metavar="ROUNDS",
                        help="also time the lookup off vs on with the engine core in one "
                        "process (inprocess.py), sending the probe ROUNDS times")
    parser.add_argument("--no-load", action="store_true", help="probe runs only")
    parser.add_argument("--load-requests", type=int, default=load.LoadWorkload.requests)
    parser.add_argument("--load-concurrency", type=int, default=load.LoadWorkload.concurrency)
    parser.add_argument("--load-blocks", type=int, default=LOAD_BLOCKS,
                        help="--num-gpu-blocks-override of the load server")
    parser.add_argument("--load-deadline", type=float, default=420.0,
                        help="seconds for one model's load phase")
    parser.add_argument("--dp-models", default="swa,hybrid",
                        help="models run with --data-parallel-size (empty: none)")
    parser.add_argument("--dp-size", type=int, default=DP_SIZE)
    parser.add_argument("--dp-requests", type=int, default=DP_WORK["requests"])
    parser.add_argument("--dp-concurrency", type=int, default=DP_WORK["concurrency"])
    args = parser.parse_args(argv)
    args.out = args.out.resolve()  # the servers run in their own work directories

    stop_servers_on_exit()

    work = probe.Workload(
        prompts=args.prompts, prompt_tokens=args.prompt_tokens,
        shared_tokens=args.prompt_tokens * 9 // 10,
        long_prompts=args.long_prompts, long_tokens=args.long_tokens,
    )
    dp_models = [m for m in args.dp_models.split(",") if m]
    dp_work = load.LoadWorkload(requests=args.dp_requests, concurrency=args.dp_concurrency) \
        if dp_models else None
    load_work = None if args.no_load else load.LoadWorkload(
        requests=args.load_requests, concurrency=args.load_concurrency,
    )
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    out_dir = args.out / f"run-{started}"
    t0 = time.monotonic()
    all_outcomes: dict[str, list[Outcome]] = {}
    loads: dict[str, LoadOutcome] = {}
    in_process: dict[str, dict[str, Any]] = {}
    dps: dict[str, DpOutcome] = {}
    wheel = installed = None
    try:
        if args.wheel is not None:
            wheel = wheel_info(args.wheel)
            installed = installed_where()
            check_installed(installed, wheel)
            print(f"e2e: servers import {wheel['file']} (sha256 {wheel['sha256'][:16]}...) "
                  f"from {Path(installed['vllm_adapter']).parent.parent.parent}", flush=True)
        else:
            print("e2e: no --wheel given: NOT checking what the servers import", flush=True)
        model_dirs = make_models.build(args.out / "models")
        for model in args.models.split(","):
            if not args.no_probe:
                outcomes = []
                for run in RUNS:
                    print(f"e2e: {model} / {run.mode} ...", flush=True)
                    outcome = run_once(
                        model, model_dirs[model], run, work, out_dir,
                        args.startup_timeout, args.request_timeout,
                    )
                    check_outcome(outcome, installed)
                    check_long_phase(outcome, work)
                    outcomes.append(outcome)
                compare(outcomes)
                all_outcomes[model] = outcomes
                print(f"\n== {model}: {json.dumps(outcomes[0].engine.get('observed', []))}")
                print(table(outcomes), flush=True)
            if args.in_process:
                print(f"e2e: {model} / in-process off, on ...", flush=True)
                in_process[model] = measure_in_process(model, model_dirs[model],
                                                       args.in_process, installed)
                print("in-process " + model + ": " + "; ".join(
                    f"{m} ({r['backend']}) sliding window {r['lookups']} x "
                    f"{r['lookup_us_mean']} us, full attention {r['full_lookups']} x "
                    f"{r['full_lookup_us_mean']} us"
                    for m, r in in_process[model].items()), flush=True)
            if load_work is not None:
                print(f"e2e: {model} / load ({load_work.requests} requests, "
                      f"{load_work.concurrency} in flight, {args.load_blocks} blocks) ...",
                      flush=True)
                lo = run_load(model, model_dirs[model], load_work, args.load_blocks, out_dir,
                              args.startup_timeout, args.request_timeout, args.load_deadline)
                print(load_line(lo), flush=True)
                check_load(lo, installed, min_requests=load_work.requests,
                           min_concurrency=load_work.concurrency)
                loads[model] = lo
            if dp_work is not None and model in dp_models:
                print(f"e2e: {model} / --data-parallel-size {args.dp_size} ({dp_work.requests} "
                      f"requests, {dp_work.concurrency} in flight, shadow) ...", flush=True)
                dp = run_dp(model, model_dirs[model], dp_work, args.dp_size, out_dir,
                            args.startup_timeout, args.request_timeout, args.load_deadline)
                print(dp_line(dp), flush=True)
                check_dp(dp, installed, min_requests=dp_work.requests)
                dps[model] = dp
    except Failure as exc:
        print(f"e2e FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        _cleanup()
    data = receipt(all_outcomes, loads, work, load_work, started, time.monotonic() - t0,
                   wheel, installed, in_process, dps, dp_work)
    path = args.out / f"receipt-{started}.json"
    _receipts().write(path, data)
    print()
    for line in summary_lines(data):
        print(line)
    if wheel:
        print(f"wheel {wheel['file']} sha256 {wheel['sha256']}")
    print(f"\ne2e passed in {data['wall_s']} s; receipt {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
