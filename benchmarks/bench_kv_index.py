"""kv_index against vLLM's own way to the same numbers, side by side in one run.

    python benchmarks/bench_kv_index.py [--quick]

Eight replicas, each a real ``KVCacheManager`` (full attention + one
sliding-window group, block 16, window 1,024 tokens, events on) that has
served one 32K-token prompt; their events fill one ``KVIndex``. Then, timed
interleaved (medians):

* ``vllm``: what a router must do with vLLM's code to learn the same: a
  ``Request`` hashed by vLLM's ``get_request_block_hasher`` (sha256) and one
  ``KVCacheManager.get_computed_blocks`` per replica (vLLM's own lookups);
* ``kv_index``: ``index.score(prompt)`` on its production core, the native
  one (swa_prefix_cache.kv_index._kvnative: the hash chain in C, SHA-NI when the CPU has it;
  the per-group key sets in C; the masks and the proved joint_lookup of
  swa_prefix_cache/core/proved/joint.c), or, when the extension is not built, the
  pure-Python reference (swa_prefix_cache/kv_index/hashing.py and pyspec). The output says
  which core answered; ``SWA_PREFIX_CACHE_STRICT_NATIVE=1`` makes a missing
  extension an error.

Both answer the same eight hits (checked first). Also timed: ingestion,
``KVIndex.apply`` of the replicas' own ``BlockStored`` batches as msgpack
bytes (what the subscriber receives), in stored blocks per second.

The targets: score <= 1 ms and >= 5x vLLM's way; ingestion >=
200,000 stored blocks/s. Writes benchmarks/results/kv-index-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

import msgspec  # noqa: E402
import torch  # noqa: E402
from vllm.distributed.kv_events import KVEventBatch  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import sha256  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.request import Request  # noqa: E402

from benchmarks import receipts  # noqa: E402
from benchmarks.timing import interleaved  # noqa: E402
from swa_prefix_cache.kv_index import KVIndex, ReplicaLayout  # noqa: E402
from swa_prefix_cache.kv_index import native as kv_native  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
BS, WINDOW = 16, 1024
SCORE_MAX_MS, SCORE_SPEEDUP, INGEST_MIN = 1.0, 5.0, 200_000


def kv_cache_config(num_blocks: int) -> KVCacheConfig:
    specs = [FullAttentionSpec(block_size=BS, num_kv_heads=1, head_size=1, dtype=torch.float32),
             SlidingWindowSpec(block_size=BS, num_kv_heads=1, head_size=1, dtype=torch.float32,
                               sliding_window=WINDOW)]
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                         kv_cache_groups=[KVCacheGroupSpec([f"l{i}"], s) for i, s in enumerate(specs)])


def request(request_id: str, prompt: list[int]) -> Request:
    params = SamplingParams(max_tokens=1)
    params.update_from_generation_config({}, eos_token_id=0)
    return Request(request_id=request_id, prompt_token_ids=prompt, sampling_params=params,
                   pooling_params=None, block_hasher=get_request_block_hasher(BS, sha256))


def replica(prompt: list[int], cached_tokens: int) -> tuple[KVCacheManager, list[bytes]]:
    """A manager that has served ``prompt[:cached_tokens]`` (then freed it:
    its blocks stay cached), and its events as msgpack batches."""
    blocks = 2 * (len(prompt) // BS) + 8
    manager = KVCacheManager(kv_cache_config=kv_cache_config(blocks), max_model_len=len(prompt) + BS,
                             scheduler_block_size=BS, hash_block_size=BS, enable_caching=True,
                             use_eagle=False, enable_kv_cache_events=True)
    served = request("served", prompt[:cached_tokens])
    hit_blocks, hit, _ = manager.get_computed_blocks(served)
    assert manager.allocate_slots(served, served.num_tokens - hit, hit, hit_blocks) is not None
    manager.free(served)
    return manager, [msgspec.msgpack.encode(KVEventBatch(ts=0.0, events=manager.take_events()))]


def medians_ms(fns: dict[str, Callable[[], object]], rounds: int, reps: int) -> dict[str, float]:
    """Median ms per call of each function, the functions interleaved."""
    samples = interleaved([fns], rounds, {name: reps for name in fns})
    return {name: statistics.median(v) / 1e6 for name, v in samples.items()}


def core_line(core: str) -> str:
    """Which kv_index core the timed score ran on."""
    if core == "native":
        return (f"native (swa_prefix_cache.kv_index._kvnative: C chain, SHA-256 {kv_native.load().sha256_impl()}; "
                "C key sets; proved joint.c lookups)")
    return "python (pyspec reference: swa_prefix_cache.kv_index._kvnative is not built)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes; smoke test only")
    args = parser.parse_args()
    tokens, replicas, rounds, reps = (2048, 2, 3, 2) if args.quick else (32768, 8, 15, 3)
    init_none_hash(sha256)
    import random

    rng = random.Random(20261202)
    prompt = [rng.randrange(32_000) for _ in range(tokens)]
    layout = ReplicaLayout.from_kv_cache_config(kv_cache_config(1), hash_block_size=BS)
    index = KVIndex()
    managers = []
    batches: list[bytes] = []
    for r in range(replicas):
        # Replica r holds a different share of the prompt (all of it to none).
        manager, events = replica(prompt, tokens * (replicas - r) // replicas)
        managers.append(manager)
        batches += events
        index.add_replica(f"r{r}", layout)
        for batch in events:
            index.apply(f"r{r}", batch)

    def vllms_way() -> list[int]:
        req = request("probe", prompt)
        return [m.get_computed_blocks(req)[1] for m in managers]

    def kv_index_way() -> list[int]:
        return list(index.score(prompt).values())

    want = vllms_way()
    assert kv_index_way() == want, (kv_index_way(), want)
    med = medians_ms({"vllm": vllms_way, "kv_index": kv_index_way}, rounds, reps)
    stored = sum(index.stats(f"r{r}")["stored"] for r in range(replicas))
    fresh = KVIndex()
    for r in range(replicas):
        fresh.add_replica(f"r{r}", layout)

    def ingest() -> None:
        for r, batch in enumerate(batches):
            fresh.reset(f"r{r}")
            fresh.apply(f"r{r}", batch)

    ingest_ms = medians_ms({"ingest": ingest}, rounds, 1)["ingest"]
    rate = stored / (ingest_ms / 1e3)
    speedup = med["vllm"] / med["kv_index"]
    print(f"{replicas} replicas (full attention + sliding window {WINDOW}, block {BS}), "
          f"a {tokens:,}-token prompt, hits {want}" + (" [QUICK: timings mean nothing]" if args.quick else ""))
    print(f"  vLLM's way (hasher + {replicas} x get_computed_blocks): {med['vllm']:.2f} ms")
    print(f"  swa_prefix_cache.kv_index.score:                                     {med['kv_index']:.2f} ms "
          f"({speedup:.1f}x) target <= {SCORE_MAX_MS} ms and >= {SCORE_SPEEDUP}x: "
          f"{'PASS' if med['kv_index'] <= SCORE_MAX_MS and speedup >= SCORE_SPEEDUP else 'MISS'}")
    print(f"  core that answered: {core_line(index.core)}")
    print(f"  ingestion: {stored:,} stored blocks in {ingest_ms:.2f} ms = {rate:,.0f} blocks/s, "
          f"target >= {INGEST_MIN:,}: {'PASS' if rate >= INGEST_MIN else 'MISS'}")
    RESULTS.mkdir(exist_ok=True)
    stem = "kv-index-quick" if args.quick else f"kv-index-{time.strftime('%Y%m%dT%H%M%S')}"
    out = RESULTS / f"{stem}.json"
    receipts.write(out, {
        "benchmark": "benchmarks/bench_kv_index.py", "quick": args.quick, "tokens": tokens,
        "replicas": replicas, "hits": want, "median_ms": med, "speedup": speedup,
        "core": index.core, "sha256": kv_native.load().sha256_impl() if index.core == "native" else None,
        "stored_blocks": stored, "ingest_ms": ingest_ms, "ingest_blocks_per_s": rate,
        "python": platform.python_version(),
    })
    print(f"receipt: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
