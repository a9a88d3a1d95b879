"""Lookup time inside one process: vLLM's offline engine with
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (the engine core runs in this
process), the plugin loaded through its entry point as in the server.

Each (model, mode) runs in a fresh child process (the plugin installs once
per process): the probe's prompts (probe.py) go through ``LLM.generate``
one at a time, ``rounds`` times over, and the child prints the plugin's
counters (``swa_prefix_cache.vllm_adapter.stats()``: lookups and the time spent inside
them, per manager: the sliding-window lookup's ``calls``/``lookup_ns``,
the full-attention lookup's ``full_calls``/``full_lookup_ns``). Mode
``off`` times vLLM's own lookups, ``on`` ours (default core: the
extension, both managers).

This is the issue's "in-process lookup time, plugin on <= off", measured
without the cross-process hop; run_e2e.py's ``--in-process`` records it in
the receipt. It is a measurement, not a pass criterion: lookups of a few
microseconds are at the mercy of a shared, loaded machine.

Usage (inside .venv-e2e): python e2e/inprocess.py MODEL_DIR MODE
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import probe  # noqa: E402


def child(model_dir: str, mode: str, rounds: int) -> dict[str, Any]:
    from vllm import LLM, SamplingParams

    from swa_prefix_cache import vllm_adapter

    work = probe.Workload()
    prompts = [" ".join(words) for _, _, words in probe.requests(work)]
    llm = LLM(
        model=model_dir, enable_prefix_caching=True, block_size=32, enforce_eager=True,
        dtype="float32", max_model_len=probe.max_tokens(work) + 64,
        max_num_seqs=4, seed=0,
    )
    params = SamplingParams(max_tokens=1, temperature=0.0)
    for _ in range(rounds):
        for prompt in prompts:
            llm.generate([prompt], params, use_tqdm=False)
    status = vllm_adapter.status()
    maps = Path("/proc/self/maps").read_text().splitlines()
    mapped = sorted({line.split(None, 5)[5] for line in maps
                     if len(line.split(None, 5)) == 6 and "/_hotpath" in line})
    stats = vllm_adapter.stats()
    full_calls = getattr(stats, "full_calls", 0)
    full_ns = getattr(stats, "full_lookup_ns", 0)
    return {
        "mode": mode, "backend": status.get("backend"), "installed": status.get("installed"),
        "full_attention": status.get("full_attention"),
        "pid": os.getpid(), "hotpath_mapped": mapped, "lookups": stats.calls, "lookup_ns": stats.lookup_ns,
        "lookup_ns_max": stats.lookup_ns_max, "errors": stats.errors,
        "lookup_us_mean": round(stats.lookup_ns / max(stats.calls, 1) / 1000, 2),
        "full_lookups": full_calls, "full_lookup_ns": full_ns,
        "full_lookup_ns_max": getattr(stats, "full_lookup_ns_max", 0),
        "full_lookup_us_mean": round(full_ns / max(full_calls, 1) / 1000, 2),
    }


def measure(model_dir: Path, mode: str, rounds: int = 4, timeout_s: float = 300.0) -> dict[str, Any]:
    """Run one child; return its counters (raises RuntimeError on failure)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "SWA_PREFIX_CACHE_CORE", "SWA_PREFIX_CACHE_HOTPATH",
                        "PREFIX_CACHE_HOTPATH")}
    with tempfile.TemporaryDirectory() as stats_dir:
        env.update({
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "SWA_PREFIX_CACHE_MODE": mode,
            # Set, so the plugin times every lookup (mode off: vLLM's own).
            "SWA_PREFIX_CACHE_STATS_DIR": stats_dir,
            "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        })
        proc = subprocess.Popen(
            [sys.executable, __file__, str(model_dir.resolve()), mode, str(rounds)],
            env=env, cwd=stats_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True,
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        finally:  # timeout, Ctrl-C, anything: no child outlives this call
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise RuntimeError(f"in-process {mode} on {model_dir.name} failed "
                           f"({proc.returncode}):\n{stderr[-2000:]}")
    return json.loads(lines[-1])


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 4)),
          flush=True)
