"""The live load phase: many concurrent completions over shared-prefix
documents, against a server whose KV pool is forced small, so lookups run
while blocks are evicted and cached again.

The workload (seeded, so every run sends the same requests): a handful of
base documents of up to ``document_tokens`` tokens (vocabulary words, one
word = one token, see make_models.py). Each request is a prefix of one
document, cut at a multiple of ``cut_step`` tokens (so the same prefixes
recur and hit the cache fully), followed, except for a ``bare_share`` of the
requests, by a random suffix of 1..``max_suffix`` tokens (so lookups hit
partially: the shared prefix, not the suffix). Generation is
``max_tokens`` greedy tokens: the phase is prefill-bound.

``concurrency`` worker threads send the requests (stdlib urllib, loopback
only), each request with a timeout and the whole phase with a deadline;
past the deadline the requests not yet sent are dropped and the phase is
reported as incomplete (a failure in run_e2e.py).

Evictions are seen two ways (run_e2e.py records both): vLLM's own KV-cache
residency metrics (``--kv-cache-metrics``, sampling every block: the count
of ``vllm:kv_block_lifetime_seconds`` is the number of blocks reallocated
after use), and from the hit pattern: a bare prefix sent again after an
identical request had COMPLETED (so all its blocks were cached) and yet not
served in full (``refetched``) can only mean its blocks were evicted in
between.
"""

import random
import threading
import time
import urllib.error
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import probe


@dataclass(frozen=True)
class LoadWorkload:
    requests: int = 1000
    concurrency: int = 16
    documents: int = 4
    document_tokens: int = 3000
    cut_step: int = 100  # prefix lengths are multiples of this
    max_suffix: int = 64
    bare_share: float = 0.35  # requests that are a bare prefix, no suffix
    max_tokens: int = 1
    vocab_words: int = 510
    seed: int = 4321


@dataclass(frozen=True)
class LoadRequest:
    index: int
    document: int
    prefix_tokens: int
    suffix_tokens: int
    words: tuple[str, ...]


@dataclass
class LoadSample:
    index: int
    document: int
    prefix_tokens: int
    suffix_tokens: int
    prompt_tokens: int
    cached_tokens: int | None
    started: float  # seconds since the phase began
    finished: float


@dataclass
class LoadResult:
    workload: LoadWorkload
    samples: list[LoadSample]
    failures: list[str] = field(default_factory=list)  # first few error messages
    failed: int = 0
    unsent: int = 0  # dropped at the deadline
    wall_s: float = 0.0


def requests(work: LoadWorkload) -> list[LoadRequest]:
    """Every request of the phase, in sending order (deterministic)."""
    rng = random.Random(work.seed)
    docs = [
        [f"w{rng.randrange(work.vocab_words)}" for _ in range(work.document_tokens)]
        for _ in range(work.documents)
    ]
    cuts = work.document_tokens // work.cut_step
    out = []
    for i in range(work.requests):
        d = rng.randrange(work.documents)
        prefix = work.cut_step * rng.randint(1, cuts)
        if rng.random() < work.bare_share:
            suffix = 0
        else:
            suffix = rng.randint(1, work.max_suffix)
            prefix = min(prefix, work.document_tokens - suffix)
        words = docs[d][:prefix] + [f"w{rng.randrange(work.vocab_words)}" for _ in range(suffix)]
        out.append(LoadRequest(i, d, prefix, suffix, tuple(words)))
    return out


def max_prompt_tokens(work: LoadWorkload) -> int:
    return work.document_tokens


def _send(port: int, model: str, req: LoadRequest, max_tokens: int,
          timeout_s: float) -> dict[str, Any]:
    return probe.complete(port, model, " ".join(req.words), max_tokens, timeout_s)


def run(port: int, model: str, work: LoadWorkload, timeout_s: float = 120.0,
        deadline_s: float = 600.0,
        send: Callable[..., dict[str, Any]] = _send) -> LoadResult:
    """Send the whole workload with ``work.concurrency`` requests in flight."""
    reqs = requests(work)
    result = LoadResult(work, [])
    lock = threading.Lock()
    t0 = time.monotonic()
    stop = threading.Event()

    def one(req: LoadRequest) -> None:
        if stop.is_set() or time.monotonic() - t0 > deadline_s:
            stop.set()
            with lock:
                result.unsent += 1
            return
        started = time.monotonic() - t0
        try:
            reply = send(port, model, req, work.max_tokens, timeout_s)
        except (OSError, ValueError, urllib.error.URLError) as exc:
            with lock:
                result.failed += 1
                if len(result.failures) < 5:
                    result.failures.append(f"request {req.index}: {exc!r}")
            return
        finished = time.monotonic() - t0
        usage = reply.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        sample = LoadSample(
            req.index, req.document, req.prefix_tokens, req.suffix_tokens,
            int(usage.get("prompt_tokens", -1)), details.get("cached_tokens"),
            round(started, 4), round(finished, 4),
        )
        with lock:
            result.samples.append(sample)

    with ThreadPoolExecutor(max_workers=work.concurrency,
                            thread_name_prefix="e2e-load") as pool:
        for future in [pool.submit(one, r) for r in reqs]:
            future.result()
    result.samples.sort(key=lambda s: s.index)
    result.wall_s = round(time.monotonic() - t0, 2)
    return result


def full_hit(prompt_tokens: int, block_size: int) -> int:
    """What a lookup serves when every block is cached: vLLM looks for at
    most ``prompt_tokens - 1`` tokens, in whole blocks."""
    return (prompt_tokens - 1) // block_size * block_size


def summary(result: LoadResult, block_size: int) -> dict[str, Any]:
    """Hit pattern of the phase: full / partial / no hits, and the witnesses
    of eviction (see the module docstring)."""
    full = partial = miss = 0
    for s in result.samples:
        if not s.cached_tokens:
            miss += 1
        elif s.cached_tokens >= full_hit(s.prompt_tokens, block_size):
            full += 1
        else:
            partial += 1
    # Bare prefixes: (document, prefix) -> completion times of earlier sends.
    refetched = 0
    done: dict[tuple[int, int], list[float]] = {}
    bare = sorted((s for s in result.samples if s.suffix_tokens == 0),
                  key=lambda s: s.started)
    for s in bare:
        key = (s.document, s.prefix_tokens)
        if any(f < s.started for f in done.get(key, ())) and \
                (s.cached_tokens or 0) < full_hit(s.prompt_tokens, block_size):
            refetched += 1
        done.setdefault(key, []).append(s.finished)
    prompt = sum(s.prompt_tokens for s in result.samples)
    cached = sum(s.cached_tokens or 0 for s in result.samples)
    latencies = sorted(s.finished - s.started for s in result.samples)

    def pct(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 1) \
            if latencies else 0.0

    return {
        "requests": len(result.samples) + result.failed + result.unsent,
        "completed": len(result.samples),
        "failed": result.failed,
        "unsent": result.unsent,
        "failures": result.failures,
        "concurrency": result.workload.concurrency,
        "wall_s": result.wall_s,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "max_prompt_tokens": max((s.prompt_tokens for s in result.samples), default=0),
        "full_hits": full,
        "partial_hits": partial,
        "misses": miss,
        "refetched_after_eviction": refetched,
        "latency_ms_p50": pct(0.5),
        "latency_ms_p99": pct(0.99),
    }


def as_rows(result: LoadResult) -> list[dict[str, Any]]:
    return [asdict(s) for s in result.samples]
