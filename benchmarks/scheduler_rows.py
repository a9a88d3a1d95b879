"""The scheduler rows: both lookups as vLLM's scheduler runs them.

``KVCacheManager.get_computed_blocks`` runs the full-attention lookup, itself
``O(N)``, before the sliding-window one, so a hybrid model's scheduler gains
only what both lookups together save. With the native core the plugin
replaces both (the python core only the sliding-window lookup; its column
shows what that replacement alone gives).

* ``scheduler_bench``: ``get_computed_blocks`` for a batch of 64 waiting
  32K-token requests on a hybrid config (full attention + one
  sliding-window group, and + three of one spec), every block cached in
  full attention and 5% at random in the sliding-window groups;
* ``scheduler_step_bench``: one step of vLLM's real ``Scheduler.schedule()``
  (built as vLLM's own tests build it, no model) admitting 64 waiting
  requests of 8K..32K cached tokens over shared documents, plugin off vs on.

Each row is timed next to the same work with both lookups answered from a
table (``both_free``): the floor that any lookup, however fast, leaves, so
the row shows the ceiling of the speedup as well as the speedup. Every
answer is checked against vLLM's first.
"""

from __future__ import annotations

import gc
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager, SlidingWindowManager

from benchmarks.harness import (
    BS,
    HYBRID_ORIGINAL,
    VLLM_PATCH,
    Impls,
    Patch,
    call_checked,
    same_result,
    use,
)
from benchmarks.kv_cache_configs import hybrid_kv_cache_config, hybrid_manager
from benchmarks.probes import contiguous_need
from benchmarks.side_by_side import (
    NO_AHEAD,
    Job,
    other_keys,
    quartiles_us,
    read_ahead_off,
    time_interleaved,
)
from vllm_support import count_get_cached_block, count_native

from swa_prefix_cache.vllm_adapter.lookup_memo import SEEN_WINDOW

# scripts/vllm_upstream/triton_guard.py: the one pass over vLLM 0.34's x86
# "requires Triton" config guard (vLLM's own test sessions use it too).
_TRITON_GUARD_DIR = str(Path(__file__).resolve().parents[1] / "scripts" / "vllm_upstream")
if _TRITON_GUARD_DIR not in sys.path:
    sys.path.append(_TRITON_GUARD_DIR)
import triton_guard  # noqa: E402

SCHED_SPEEDUP = 15.0  # target: get_computed_blocks on the hybrid batch, ours vs vLLM
SCHED_CEILING_SHARE = 0.20  # ... or this share of the ceiling (both lookups free), where 15x is not
MEMO_COST_MAX = 1.03  # target: the batch with the lookup memory on, against it off
MEMO = "ours+memory"  # the column of ours as install() leaves vLLM: the lookup memory on
MEMO_OFF = "ours, memory's pair"  # ours again, timed in turn with MEMO (its own group)

# Qwen3-0.6B's public config.json cut down to the fields vLLM's ModelConfig
# reads (the same cut as scripts/vllm_upstream/hf_offline_cache.py, which
# vLLM's own scheduler tests run against here); copied, so this script does
# not depend on that file. Only max_model_len (<= 40,960) matters here: the
# KV-cache config is ours.
SCHED_MODEL_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02,
    "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936,
}


def _free_lookups(record_from: Patch) -> tuple[Patch, Patch]:
    """(recording, free): ``recording`` answers with ``record_from``'s two
    lookups and keeps each answer; ``free`` returns a copy of the kept
    answer at once (the lists are copied: vLLM trims the full-attention
    lists in place). The batch with ``free`` on is the floor of what any
    lookup, however fast, leaves: the coordinator, the manager and building
    the answer lists."""
    answers: dict[tuple[Any, ...], Any] = {}

    def key_of(owner: type, block_hashes: Any, max_length: int, kw: dict[str, Any]) -> tuple[Any, ...]:
        # The last hash names the whole prefix (hashes are chained), so a
        # new request over the same prompt finds the kept answer.
        return (owner, len(block_hashes), block_hashes[-1] if len(block_hashes) else None,
                max_length, tuple(kw["kv_cache_group_ids"]))

    def recorder(base: Any, owner: type) -> Any:
        original = base.__get__(None, owner)

        def recording(cls: type, block_hashes: Any, max_length: int, **kw: Any) -> Any:
            key = key_of(owner, block_hashes, max_length, kw)
            answers[key] = original(block_hashes=block_hashes, max_length=max_length, **kw)
            blocks, length = answers[key]
            return tuple(list(b) for b in blocks), length

        return classmethod(recording)

    def free(owner: type) -> Any:
        def free_lookup(cls: type, block_hashes: Any, max_length: int, **kw: Any) -> Any:
            blocks, length = answers[key_of(owner, block_hashes, max_length, kw)]
            return tuple(list(b) for b in blocks), length

        return classmethod(free_lookup)

    return (Patch(recorder(record_from.swa, SlidingWindowManager),
                  recorder(record_from.full, FullAttentionManager)),
            Patch(free(SlidingWindowManager), free(FullAttentionManager)))


def _batch_ratios(impls: Impls, med: dict[str, float]) -> dict[str, Any]:
    """A scheduler-level row's medians (ms) and ratios: ours and each core
    against vLLM, and vLLM against the same batch with its lookups free."""
    others = other_keys(impls, med)
    return {
        "median_ms": med,
        "core": impls.backend,
        "speedup": med["vllm"] / med["ours"],
        "other_core": impls.other,
        "other_speedup": others["other_speedup"],
        "python_speedup": others["python_speedup"],
        "native_speedup": others["native_speedup"],
        "lookups_share_of_vllm": 1 - med["both_free"] / med["vllm"],
        "ceiling_speedup": med["vllm"] / med["both_free"],
    }


def _quartiles_ms(samples: dict[str, list[float]]) -> dict[str, list[float]]:
    return {k: [v[0] / 1000, v[1] / 1000] for k, v in quartiles_us(samples).items()}


def _request_block_hasher() -> Callable[[Any], list[Any]]:
    """vLLM's block hasher for a request's prompt (sha256)."""
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    init_none_hash(sha256)
    return get_request_block_hasher(BS, sha256)


def _make_request(request_id: str, tokens: list[int], block_hasher: Callable[[Any], list[Any]]) -> Any:
    """A waiting request for ``tokens`` that wants one output token."""
    from vllm import SamplingParams
    from vllm.v1.request import Request

    return Request(request_id, tokens, SamplingParams(max_tokens=1), None, block_hasher=block_hasher)


def scheduler_bench(impls: Impls, window: int, n_requests: int, context: int, hit_rate: float,
                    rounds: int, rng: random.Random, swa_groups: int = 1) -> dict[str, Any]:
    """``KVCacheManager.get_computed_blocks`` for a batch of waiting requests
    on a hybrid config: one full-attention group and ``swa_groups``
    sliding-window groups of one spec (vLLM's ``HybridKVCacheCoordinator``
    merges groups of one spec into one lookup over their group ids, as it
    does for a model with three sliding-window layers per full one).

    Full attention has every block of every prompt cached (a long shared
    document, say), the sliding-window groups a random ``hit_rate`` of them
    (a block is cached in all of them or in none: its blocks outside the
    window were freed and most evicted), so the coordinator runs the
    full-attention lookup over the whole prompt (2,048 cached blocks) and
    then one sliding-window lookup over it. ``both_free``: the same batch
    with both lookups answered from a table (``_free_lookups``)."""
    from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id

    n = context // BS
    swa_ids = list(range(1, 1 + swa_groups))
    num_blocks = 1 + n_requests * n + int(n_requests * n * hit_rate * 2) * swa_groups + 64
    manager = hybrid_manager(num_blocks, context + BS, window, swa_groups)
    coordinator = type(manager.coordinator).__name__
    hasher = _request_block_hasher()
    requests = []
    for r in range(n_requests):
        tokens = [rng.randrange(32_000) for _ in range(context)]
        requests.append(_make_request(f"req-{r}", tokens, hasher))
    pool = manager.block_pool
    free = iter(b for b in pool.blocks if b is not pool.null_block)
    swa_cached = 0
    for req in requests:
        assert len(req.block_hashes) == n and len(req.block_hashes[0]) == 32
        for h in req.block_hashes:
            pool.cached_block_hash_to_block.insert(make_block_hash_with_group_id(h, 0), next(free))
            if rng.random() < hit_rate:
                for g in swa_ids:
                    pool.cached_block_hash_to_block.insert(make_block_hash_with_group_id(h, g),
                                                           next(free))
                swa_cached += 1

    def batch() -> list[Any]:
        return [manager.get_computed_blocks(req) for req in requests]

    recording, both_free = _free_lookups(VLLM_PATCH)
    with use(recording):
        batch()

    names = list(impls.table)
    results, probes = {}, {}
    for name in names:
        # Counted through a wrapped get_cached_block, which sends the
        # extension to its Python fallback (vLLM's own method for the
        # full-attention lookup): the native core's count is that of the
        # sliding-window Python search plus vLLM's full-attention scan (the
        # same probes; checked per cell on the C search).
        with use(impls.table[name]), count_get_cached_block(pool) as counter:
            results[name] = batch()
        probes[name] = counter[0]
        # Natively: every request is answered in C (one sliding-window
        # lookup, plus one full-attention lookup when ours replaces it).
        per_request = 1 + (impls.table[name].full_replaced and impls.core_of(name) == "native")
        results[f"{name} (timed path)"] = call_checked(
            impls.table[name], impls.core_of(name), batch, n_requests * per_request)
    # Ours as install() leaves vLLM (the lookup memory on the hybrid
    # coordinator): with the batch longer than the memory's window, every
    # lookup of it is a first one, so the memory must cost ~nothing. A
    # batch within the window would be remembered, not looked up: then the
    # column is left out (the quick runs' small batches).
    memo = impls.installed if impls.installed.hybrid is not HYBRID_ORIGINAL else None
    if n_requests <= SEEN_WINDOW:
        memo = None
    if memo is not None:
        per_request = 1 + (memo.full_replaced and impls.backend == "native")
        results[MEMO] = call_checked(memo, impls.backend, batch, n_requests * per_request)
    results["both_free"] = call_checked(both_free, None, batch)
    # The same native lookups with the pool probe's read-ahead off: what the
    # prefetching is worth here.
    ahead_off = read_ahead_off(impls, batch)
    if ahead_off is not None:
        per_request = 1 + impls.table["ours"].full_replaced
        results[NO_AHEAD] = call_checked(impls.table["ours"], "native", ahead_off, n_requests * per_request)
    ref = results["vllm"]
    for name in results:
        for (blocks_a, tok_a, _), (blocks_b, tok_b, _) in zip(results[name], ref):
            if tok_a != tok_b or not same_result((blocks_a.blocks, tok_a), (blocks_b.blocks, tok_b)):
                raise AssertionError(f"scheduler level: {name} disagrees with vLLM")
    jobs: dict[str, Job] = {name: (impls.table[name], batch) for name in names}
    jobs["both_free"] = (both_free, batch)
    if ahead_off is not None:
        jobs[NO_AHEAD] = (impls.table["ours"], ahead_off)
    groups = [jobs]
    if memo is not None:
        # Its own pair, each run first in every other round: in one rotated
        # group, each column always follows the same other column, whose
        # reads leave the caches warmer or colder for it.
        groups.append({MEMO_OFF: (impls.table["ours"], batch), MEMO: (memo, batch)})
    samples, _ = time_interleaved(groups, rounds, 0.0)
    med = {k: statistics.median(v) / 1e6 for k, v in samples.items()}
    row = {
        "api": "KVCacheManager.get_computed_blocks",
        "coordinator": coordinator,
        "groups": f"full attention + {swa_groups} sliding window",
        "swa_groups": swa_groups,
        "window_tokens": window,
        "context_tokens": context,
        "requests": n_requests,
        "swa_hit_rate": hit_rate,
        "swa_cached_blocks": swa_cached,
        "hit_tokens": [x[1] for x in ref[:4]],
        "probes_per_batch": probes,
        "full_replaced": {k: v.full_replaced for k, v in impls.table.items()},
        **_batch_ratios(impls, med),
        # What a lookup costs per block of the batch (all of them distinct:
        # requests x blocks, far beyond the CPU caches), over the floor.
        "lookup_ns_per_block": {k: (v - med["both_free"]) * 1e6 / (n_requests * n)
                                for k, v in med.items() if k != "both_free"},
        "quartiles_ms": _quartiles_ms(samples),
        "read_ahead_speedup": med[NO_AHEAD] / med["ours"] if NO_AHEAD in med else None,
        "memory_cost": med[MEMO] / med[MEMO_OFF] if MEMO in med else None,
    }
    row["share_of_ceiling"] = row["speedup"] / row["ceiling_speedup"]
    row["target"] = {"want": SCHED_SPEEDUP, "or_share_of_ceiling": SCHED_CEILING_SHARE,
                     "ok": row["speedup"] >= SCHED_SPEEDUP or row["share_of_ceiling"] >= SCHED_CEILING_SHARE}
    return row


def _scheduler_model_dir() -> str:
    """A local model folder holding only ``SCHED_MODEL_CONFIG``."""
    from benchmarks.replay_layouts import config_only_model_dir

    return config_only_model_dir(SCHED_MODEL_CONFIG, "bench-vllm-model-")


def _make_scheduler(num_blocks: int, max_model_len: int, max_num_seqs: int, budget: int,
                   window: int, swa_groups: int) -> tuple[Any, bool]:
    """(scheduler, guard passed): vLLM's ``Scheduler`` built as vLLM's tests build one
    (tests/v1/core/utils.py ``create_scheduler``: ModelConfig,
    SchedulerConfig, CacheConfig with prefix caching, VllmConfig,
    ``register_all_kvcache_specs``), with our hybrid KV-cache config (one
    full-attention group + ``swa_groups`` sliding-window groups) instead of
    its single full-attention group. No model, no workers.

    vLLM's configs depend on the platform resolved when vLLM is first
    imported: the process must set ``VLLM_TARGET_DEVICE=cpu`` (and
    ``HF_HUB_OFFLINE=1``) before that, as bench_vllm.py does. Where vLLM
    (0.34+) refuses that config on an x86 CPU without Triton, it is built
    again past that one guard (``triton_guard.triton_guard_passed``,
    scripts/vllm_upstream/triton_guard.py: the guard protects the model
    runner's kernels and the scheduler runs no model, so the config is the
    one 0.33 built) and the second value is True."""
    import logging

    from vllm.config import CacheConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig
    from vllm.platforms import current_platform
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.structured_output import StructuredOutputManager

    if not current_platform.is_cpu():
        raise RuntimeError(f"the scheduler step needs vLLM's CPU platform, this process resolved "
                           f"{type(current_platform).__name__}")
    logging.getLogger("vllm").setLevel(logging.ERROR)

    def build() -> tuple[Any, Any]:
        model_config = ModelConfig(model=_scheduler_model_dir(), dtype="float16", seed=42,
                                   skip_tokenizer_init=True, max_model_len=max_model_len)
        scheduler_config = SchedulerConfig(
            max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, max_model_len=max_model_len,
            enable_chunked_prefill=True, is_encoder_decoder=False, watermark=0.0)
        cache_config = CacheConfig(block_size=BS, gpu_memory_utilization=0.9, cache_dtype="auto",
                                   enable_prefix_caching=True)
        vllm_config = VllmConfig(scheduler_config=scheduler_config, model_config=model_config,
                                 cache_config=cache_config, parallel_config=ParallelConfig())
        return vllm_config, cache_config

    guard_passed = False
    try:
        vllm_config, cache_config = build()
    except RuntimeError as exc:
        if triton_guard.TRITON_REFUSAL not in str(exc):
            raise
        with triton_guard.triton_guard_passed() as guard_passed:
            if not guard_passed:
                raise
            vllm_config, cache_config = build()
    kv_cache_config = hybrid_kv_cache_config(num_blocks, window, swa_groups)
    cache_config.num_gpu_blocks = num_blocks
    register_all_kvcache_specs(vllm_config)
    scheduler = Scheduler(vllm_config=vllm_config, kv_cache_config=kv_cache_config, block_size=BS,
                          log_stats=True, structured_output_manager=StructuredOutputManager(vllm_config))
    return scheduler, guard_passed


def scheduler_step_bench(impls: Impls, n_requests: int, docs: int, min_tokens: int, max_tokens: int,
                         window: int, swa_groups: int, budget: int, rounds: int,
                         rng: random.Random) -> dict[str, Any]:
    """One ``Scheduler.schedule()`` call of vLLM's real scheduler
    (``_make_scheduler``) with ``n_requests`` waiting requests and none
    running: request r continues document ``r % docs`` (a prompt of
    ``min_tokens``..``max_tokens`` tokens, a multiple of 16, whose every
    block is cached in full attention and whose last window of blocks is
    cached in the sliding-window groups: a multi-turn conversation whose
    previous turn ended there) with 1..15 new tokens of its own. So
    ``schedule()`` admits every request (``max_num_seqs`` = ``n_requests``,
    the budget covers the new tokens), running ``get_computed_blocks``
    (full-attention lookup over the whole prompt, sliding-window lookup)
    and ``allocate_slots`` (which touches every hit block) per request.

    Per sample: fresh ``Request`` objects (their block hashes precomputed:
    vLLM's hasher would dominate the setup) are added, ONE ``schedule()``
    is timed, then all are aborted and an empty ``schedule()`` flushes them
    (neither timed). No block of the new tokens is full, so the cached
    blocks are the same for every sample. The pool's first blocks are free
    and never cached, so allocations never evict the planted blocks.
    Implementations (plugin off = vLLM's own lookups, on = ours) are
    interleaved per round, in rotating order, with ``both_free`` (both
    lookups answered from a table, ``_free_lookups``): the floor, what
    ``schedule()`` costs besides the lookups. Answers: every request's hit,
    scheduled tokens and hit block ids per group must be vLLM's."""
    from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id
    from vllm.v1.request import RequestStatus

    started = time.perf_counter()
    hasher = _request_block_hasher()
    need = contiguous_need(window, False)
    doc_tokens = [[rng.randrange(32_000) for _ in range(max_tokens)] for _ in range(docs)]
    doc_hashes = [_make_request(f"doc-{d}", t, hasher).block_hashes for d, t in enumerate(doc_tokens)]
    prompts = []  # (doc, cached prefix tokens)
    for r in range(n_requests):
        prompts.append((r % docs, BS * rng.randrange(min_tokens // BS, max_tokens // BS + 1)))
    new_tokens = [rng.randint(1, BS - 1) for _ in prompts]  # the same in every sample
    swa_ids = list(range(1, 1 + swa_groups))
    planted_swa = {(d, i) for d, length in prompts
                   for i in range(max(length // BS - need, 0), length // BS)}
    planted = docs * (max_tokens // BS) + len(planted_swa) * swa_groups
    spare = 64 * n_requests * (1 + swa_groups) * 4  # never-cached blocks allocations come from
    num_blocks = 1 + spare + planted
    scheduler, guard_passed = _make_scheduler(num_blocks, max_tokens + 2 * BS, n_requests, budget,
                                              window, swa_groups)
    manager = scheduler.kv_cache_manager
    pool = manager.block_pool
    # Plant at the END of the free queue, with the block's hash set as vLLM
    # sets it (so an eviction, were there one, would be vLLM's own).
    tail = iter(pool.blocks[1 + spare:])

    def plant(h: Any, g: int, i: int) -> None:
        block = next(tail)
        key = make_block_hash_with_group_id(h, g)
        block.set_block_hash(key, BS * (i + 1))
        pool.cached_block_hash_to_block.insert(key, block)

    for d in range(docs):
        for i, h in enumerate(doc_hashes[d]):
            plant(h, 0, i)
    for d, i in sorted(planted_swa):
        for g in swa_ids:
            plant(doc_hashes[d][i], g, i)
    setup_s = time.perf_counter() - started

    serial = iter(range(1 << 30))

    doc_of: dict[str, int] = {}

    def memo_hasher(req: Any) -> list[Any]:
        """vLLM's hashes of the request's new full blocks (precomputed)."""
        return doc_hashes[doc_of[req.request_id]][len(req.block_hashes): req.num_tokens // BS]

    def fresh_requests() -> list[Any]:
        reqs = []
        for (d, length), extra in zip(prompts, new_tokens):
            tokens = doc_tokens[d][:length] + [rng.randrange(32_000) for _ in range(extra)]
            rid = f"step-{next(serial)}"
            doc_of[rid] = d
            reqs.append(_make_request(rid, tokens, memo_hasher))
        return reqs

    def one_step() -> tuple[float, Any, list[Any]]:
        reqs = fresh_requests()
        for req in reqs:
            scheduler.add_request(req)
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter_ns()
            out = scheduler.schedule()
            spent = time.perf_counter_ns() - start
        finally:
            gc.enable()
        # Per request, in order: its prefix hit, its scheduled tokens and the
        # ids of its hit blocks per group (planted blocks: the same for every
        # implementation and sample; 0 is vLLM's null block).
        order = {req.request_id: k for k, req in enumerate(reqs)}
        answer = sorted(
            (order[nr.req_id], nr.num_computed_tokens, out.num_scheduled_tokens[nr.req_id],
             tuple(tuple(ids[: nr.num_computed_tokens // BS]) for ids in nr.block_ids))
            for nr in out.scheduled_new_reqs)
        answer = [a[1:] for a in answer]
        scheduler.finish_requests(None, RequestStatus.FINISHED_ABORTED)
        scheduler.schedule()  # flush the aborted requests (untimed)
        return spent, answer, reqs

    names = list(impls.table)
    answers = {}
    for name in names:
        with use(impls.table[name]):
            if impls.core_of(name) == "native" and impls.table[name].full_replaced:
                with count_native() as counted:
                    _, answers[name], reqs = one_step()
                if counted["delegated"] or counted["native"] < 2 * n_requests:
                    raise AssertionError(f"scheduler step: the extension did not answer in C: {counted}")
            else:
                _, answers[name], reqs = one_step()
    recording, both_free = _free_lookups(VLLM_PATCH)
    with use(recording):
        one_step()
    with use(both_free):
        _, answers["both_free"], _ = one_step()
    ref = answers["vllm"]
    scheduled = len(ref)
    if scheduled != n_requests:
        raise AssertionError(f"scheduler step: {scheduled} of {n_requests} requests scheduled")
    expect = [length for _, length in prompts]
    if [a[0] for a in ref] != expect:
        raise AssertionError(f"scheduler step: vLLM hits {[a[0] for a in ref][:4]}..., the setup "
                             f"wants the whole cached prompt {expect[:4]}...")
    for name in answers:
        if answers[name] != ref:
            k = next(k for k, (x, y) in enumerate(zip(answers[name], ref)) if x != y)
            raise AssertionError(f"scheduler step: {name} schedules differently from vLLM: request "
                                 f"{k}: hit, scheduled tokens {answers[name][k][:2]} vs {ref[k][:2]}, "
                                 f"{[len(x) for x in answers[name][k][2]]} vs {[len(x) for x in ref[k][2]]} "
                                 f"hit block ids (first {[x[:4] for x in answers[name][k][2]]} vs "
                                 f"{[x[:4] for x in ref[k][2]]})")
    table: dict[str, Any] = {**impls.table, "both_free": both_free}
    timed = list(table)
    samples: dict[str, list[float]] = {name: [] for name in timed}
    for r in range(rounds):
        k = r % len(timed)
        for name in timed[k:] + timed[:k]:
            with use(table[name]):
                spent, answer, _ = one_step()
            if [a[:2] for a in answer] != [a[:2] for a in ref]:
                raise AssertionError(f"scheduler step: {name} scheduled differently in round {r}")
            samples[name].append(spent)
    med = {k: statistics.median(v) / 1e6 for k, v in samples.items()}
    prompt_blocks = [length // BS for _, length in prompts]
    row = {
        "api": "Scheduler.schedule",
        "scheduler": f"{type(scheduler).__module__}.{type(scheduler).__name__}",
        "coordinator": type(manager.coordinator).__name__,
        "groups": f"full attention + {swa_groups} sliding window",
        "model_config": "Qwen3-0.6B config.json only (SCHED_MODEL_CONFIG; no weights, no tokenizer)",
        "requests": n_requests, "documents": docs, "window_tokens": window,
        "prompt_tokens": [min(length for _, length in prompts), max(length for _, length in prompts)],
        "mean_prompt_blocks": statistics.mean(prompt_blocks),
        "max_num_batched_tokens": budget, "num_blocks": num_blocks,
        "scheduled_requests": scheduled, "scheduled_tokens": sum(a[1] for a in ref),
        "hit_tokens": sum(a[0] for a in ref), "hit_tokens_first": [a[0] for a in ref[:4]],
        **_batch_ratios(impls, med),
        "quartiles_ms": _quartiles_ms(samples),
        "rounds": rounds, "setup_s": setup_s,
        # vLLM 0.34+ on an x86 CPU without triton-cpu: its VllmConfig was
        # built past the model runner's Triton guard (triton_guard.py).
        "triton_guard_passed": guard_passed,
        "async_scheduling": bool(scheduler.scheduler_config.async_scheduling),
    }
    row["target"] = None  # no target: reported
    return row
