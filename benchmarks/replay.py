"""A production trace replayed through vLLM 0.33.0's real scheduler on a
real model layout, plugin off and on, side by side in one process.

    python -m benchmarks.replay --trace FILE --layout NAME [--requests N] [--json OUT]
        [--offload-gb GIB [--store stock|corrected] [--link-gb-s GB_S]]

The last line printed is

    replay layout=NAME [offload_gib=G store=S] requests=N steps=S identical=yes|no
        sched_ms_off=X sched_ms_on=Y speedup=Z hit_rate=H gpu_hit_rate=P tier_hit_rate=T

(one line: total scheduler milliseconds over the run, off and on; speedup =
X / Y; hit tokens of the requests' first admissions over prompt tokens, all,
from the GPU pool and from the host tier).

``--offload-gb`` gives both schedulers a host-memory KV tier
(``benchmarks/host_tier.py``: vLLM's ``OffloadingConnector`` as
``--kv-offloading-size`` configures it, its worker side simulated over a
PCIe link); its connector metadata is part of what must be identical.

How a run goes:

* two schedulers are built for the layout (``replay_layouts``: vLLM's own
  grouping, pool sizing and block-size resolution from the model's config,
  prefix caching on): one answers its prefix-cache lookups with vLLM's
  methods (plugin off), the other with the plugin's (on);
* the trace's requests (``benchmarks/mooncake.py``: each 512-token block a
  fixed token sequence seeded by its id, cut to ``input_length``) arrive on
  a simulated clock at their timestamps, the same requests to both;
* a step is ``schedule()``, then a model output synthesized the way vLLM's
  scheduler tests do (one sampled token for each scheduled request whose
  prompt is now all computed, none for a prefill chunk), then
  ``update_from_output()``; a request finishes after ``output_length``
  tokens (``ignore_eos``). The two schedulers step in lockstep, in an order
  that alternates per step, so the machine's noise hits both alike;
* every step's ``SchedulerOutput`` of the two (scheduled requests, tokens,
  computed tokens, block ids, finished and preempted ids) must be identical:
  its canonical form is digested per step and compared; the first
  difference stops the run with ``identical=no`` and that step;
* the clock advances by the GPU step-time model below after each step that
  scheduled tokens (an empty step runs no model), and jumps to the next
  arrival when nothing is left to do;
* timed: per step, the CPU time of ``schedule()`` + ``update_from_output()``
  (the collector is off while stepping, and collects every
  ``GC_EVERY`` steps untimed), and inside it the time of the prefix-cache
  lookups (the coordinator's ``find_longest_cache_hit``: every manager's
  lookup and the fixed point between them) and, of that, Mamba's
  (``MambaManager.find_longest_cache_hit``, vLLM's own on both sides).

The GPU step-time model (``StepModel``): a step costs the time to read one
GPU's weights once from HBM (H100 SXM: 3.35 TB/s, 80% of it achieved) plus,
per scheduled token, that GPU's share (1 / tensor-parallel size) of
``2 x active parameters`` FLOPs at 40% of the H100's 989 TFLOPS dense bf16;
attention's own cost and the all-reduces are left out. ``--step-fixed-ms``
and ``--step-us-per-token`` override it.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import vllm  # noqa: E402

from benchmarks import receipts  # noqa: E402
from benchmarks import host_tier, mooncake, replay_layouts, tier_gap  # noqa: E402
from swa_prefix_cache.pyspec.tier_reference import Group, chained_keys, reference_hits  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
HBM_BYTES_PER_S = 3.35e12 * 0.8
FLOPS = 989e12 * 0.4
GC_EVERY = 2000  # steps between untimed collections
CDF_POINTS = 200  # quantiles of the per-step time kept in the receipt
LOOKUP_SHARE_MAX = 0.05  # target: lookups <= 5% of the scheduler's time, plugin on
SLOW_STEP_MS = (10.0, 20.0)
TOKEN_BASE = 1000  # sampled token ids: TOKEN_BASE + a hash of (request, position)


@dataclass(frozen=True)
class StepModel:
    """GPU time of one step: ``fixed_ms + us_per_token * tokens / 1000``."""

    fixed_ms: float
    us_per_token: float
    source: str

    @classmethod
    def for_layout(cls, layout: replay_layouts.Layout) -> StepModel:
        tp = layout.tensor_parallel_size
        return cls(fixed_ms=layout.weights_bytes / tp / HBM_BYTES_PER_S * 1e3,
                   us_per_token=2 * layout.active_params / tp / FLOPS * 1e6,
                   source="one GPU's weights read once at 80% of 3.35 TB/s + its share of "
                          "2 x active params FLOPs per token at 40% of 989 TFLOPS (H100 SXM, bf16)")

    def step_ms(self, tokens: int) -> float:
        return self.fixed_ms + self.us_per_token * tokens / 1000


STORES = ("stock", "corrected")
UTILIZATION = 0.7  # --instances auto: the GPU's busy share the prompts may take


def instances_for(trace: list[mooncake.TraceRequest], model: StepModel,
                  utilization: float = UTILIZATION) -> int:
    """The fewest instances among which one GPU's share of ``trace``'s
    prompts takes at most ``utilization`` of the trace's time to compute
    by ``model`` (prompt tokens times its per-token cost only: the steps'
    fixed cost is not counted, so a model whose steps it dominates still
    queues at this many instances)."""
    if not trace:
        raise ValueError("trace must hold at least one request")
    span_ms = max(1.0, float(trace[-1].timestamp_ms - trace[0].timestamp_ms))
    busy_ms = sum(r.input_length for r in trace) * model.us_per_token / 1000
    return max(1, math.ceil(busy_ms / (span_ms * utilization)))


@dataclass(frozen=True)
class TierSetting:
    """A host-memory KV tier on both schedulers: its size per GPU (GiB),
    the host link's bandwidth per direction (GB/s) and the store filter
    (vLLM's own, or the plugin's opt-in corrected one on both sides)."""

    gib: float
    link_gb_s: float = host_tier.DEFAULT_LINK_GB_S
    store: str = "stock"

    def __post_init__(self) -> None:
        for name in ("gib", "link_gb_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}")
        if self.store not in STORES:
            raise ValueError(f"store must be one of {STORES}, got {self.store!r}")


def use_store(store: str) -> Callable[[], None]:
    """Put the store filter ``store`` in place for the run (both sides:
    vLLM's classes are shared); what undoes it. ``corrected`` is the
    plugin's opt-in filter, installed as its setting installs it; a vLLM
    that refuses it stops the run (a stock run would be measured under the
    corrected name otherwise)."""
    if store == "stock":
        return lambda: None
    from swa_prefix_cache.vllm_adapter import offload_filter

    saved = os.environ.get("SWA_PREFIX_CACHE_OFFLOAD_FILTER")
    os.environ["SWA_PREFIX_CACHE_OFFLOAD_FILTER"] = "corrected"
    try:
        if not offload_filter.install():
            raise SystemExit(f"the corrected store filter did not install: {offload_filter.status()}")
    finally:
        if saved is None:
            del os.environ["SWA_PREFIX_CACHE_OFFLOAD_FILTER"]
        else:
            os.environ["SWA_PREFIX_CACHE_OFFLOAD_FILTER"] = saved
    return offload_filter.uninstall


def reference_store(built: replay_layouts.Built, prompts: list[tuple[list[int], int]],
                    tier: TierSetting | None) -> dict[str, Any] | None:
    """The reference store (``swa_prefix_cache.pyspec.tier_reference``: keeps exactly what
    vLLM's lookups can read, LRU) on the run's prompts at the run's bytes:
    the GPU pool's (its blocks times one group's block bytes) plus the
    tier's; its groups, windows and block bytes from the scheduler's real
    ``KVCacheConfig``; ``prompts``: each prompt's chained block keys and
    token count; an EAGLE draft's hash look-ahead and last-block drop as
    the scheduler resolved them (with a KV connector vLLM keeps the legacy
    hashes and drops). None for a layout it does not model (a group that is
    neither full attention nor a sliding window, unequal block sizes, a
    draft in a sliding-window group)."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    scheduler = built.scheduler
    config = scheduler.kv_cache_config
    groups = []
    for group in config.kv_cache_groups:
        spec = group.kv_cache_spec
        if spec.block_size != built.hash_block_size:
            return None
        if isinstance(spec, SlidingWindowSpec):
            if group.is_eagle_group:
                return None
            window = spec.sliding_window
        elif isinstance(spec, FullAttentionSpec):
            window = None
        else:
            return None
        groups.append(Group(window, spec.page_size_bytes * len(group.layer_names)))
    pool_bytes = built.num_blocks * max(g.block_bytes for g in groups)
    tier_bytes = 0 if tier is None else int(tier.gib * host_tier.GIB)
    lookahead = scheduler.num_hash_lookahead_tokens
    drop = bool(scheduler.use_eagle_block_drop)
    hits = reference_hits(prompts, built.hash_block_size, groups, pool_bytes + tier_bytes,
                          hash_lookahead=lookahead, eagle_drop=drop)
    return {"hit_tokens": sum(hits), "pool_bytes": pool_bytes, "tier_bytes": tier_bytes,
            "groups": [(g.window, g.block_bytes) for g in groups], "hash_lookahead": lookahead,
            "eagle_drop": drop, "per_prompt": hits}


def step_form(out: Any) -> tuple[Any, ...]:
    """The canonical form of a ``SchedulerOutput``: what the two runs must
    agree on, step for step."""
    new = tuple((r.req_id, r.num_computed_tokens, tuple(tuple(ids) for ids in r.block_ids))
                for r in out.scheduled_new_reqs)
    c = out.scheduled_cached_reqs
    cached = (tuple(c.req_ids), tuple(sorted(getattr(c, "resumed_req_ids", ()))),  # 0.34: gone
              tuple(None if ids is None else tuple(tuple(x) for x in ids) for ids in c.new_block_ids),
              tuple(c.num_computed_tokens), tuple(c.num_output_tokens))
    return (new, cached, tuple(sorted(out.num_scheduled_tokens.items())),
            out.total_num_scheduled_tokens, tuple(sorted(out.finished_req_ids)),
            tuple(sorted(out.preempted_req_ids or ())))


FORM_FIELDS = ("scheduled_new_reqs", "scheduled_cached_reqs", "num_scheduled_tokens",
               "total_num_scheduled_tokens", "finished_req_ids", "preempted_req_ids",
               "kv_connector_metadata", "step_ms")


def first_difference(step: int, off: tuple[Any, ...], on: tuple[Any, ...]) -> dict[str, Any]:
    """Where two step forms first differ: the field and, in it, the first
    differing entry of each side (``repr``, cut to 2,000 characters)."""
    for name, a, b in zip(FORM_FIELDS, off, on):
        if a == b:
            continue
        if isinstance(a, tuple) and isinstance(b, tuple):
            k = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            a = a[k] if k < len(a) else "(none)"
            b = b[k] if k < len(b) else "(none)"
            name = f"{name}[{k}]"
        return {"step": step, "field": name, "off": repr(a)[:2000], "on": repr(b)[:2000]}
    raise ValueError("first_difference: the forms are equal")


def sampled_token(req_id: str, position: int) -> int:
    """A fixed token id for ``req_id``'s output at ``position`` (never an
    EOS: requests run ``ignore_eos``)."""
    digest = hashlib.blake2b(f"{req_id}:{position}".encode(), digest_size=4).digest()
    return TOKEN_BASE + int.from_bytes(digest, "little") % 30_000


def model_output(scheduler: Any, out: Any) -> Any:
    """What the model runner returns for ``out``: one token for every
    scheduled request whose tokens are now all computed, none for a
    request still in prefill (vLLM's runner discards those)."""
    from vllm.v1.outputs import ModelRunnerOutput

    req_ids = list(out.num_scheduled_tokens)
    sampled = []
    for rid in req_ids:
        req = scheduler.requests[rid]
        if req.num_computed_tokens < req.num_tokens:
            sampled.append([])
        else:
            sampled.append([sampled_token(rid, req.num_output_tokens)])
    kwargs: dict[str, Any] = dict(req_ids=req_ids, sampled_token_ids=sampled, logprobs=None,
                                  prompt_logprobs_dict={}, pooler_output=[])
    if "req_id_to_index" in ModelRunnerOutput.__dataclass_fields__:  # vLLM <= 0.33
        kwargs["req_id_to_index"] = {r: i for i, r in enumerate(req_ids)}
    return ModelRunnerOutput(**kwargs)


@dataclass
class CallClock:
    """The time and number of calls of one timed method."""

    ns: int = 0
    calls: int = 0

    def wrap(self, obj: Any, method: str) -> None:
        """Time every call of ``obj.method``. The method is looked up on
        the class at each call: a side's patch may replace it there (the
        lookup memory)."""
        cls = type(obj)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return getattr(cls, method)(obj, *args, **kwargs)
            finally:
                self.ns += time.perf_counter_ns() - start
                self.calls += 1

        setattr(obj, method, timed)


@dataclass
class Side:
    """One scheduler and what it spent."""

    name: str
    patch: Any  # a harness.Patch: the lookups put on vLLM's classes while it steps
    scheduler: Any
    model: StepModel
    worker: Any = None  # a host_tier.SimulatedWorker when the scheduler has a host tier
    step_ns: list[int] = field(default_factory=list)
    lookup: CallClock = field(default_factory=CallClock)  # the coordinator's find_longest_cache_hit
    mamba_ns: int = 0  # of lookup.ns: MambaManager's lookups (vLLM's own on both sides)
    tier_lookup: CallClock = field(default_factory=CallClock)  # the connector's get_num_new_matched_tokens
    queries: int = 0
    hits: int = 0  # GPU prefix-cache hit tokens (requests' first admissions)
    tier_queries: int = 0
    tier_hits: int = 0  # host-tier hit tokens (first admissions)
    prefill_tokens: int = 0  # prompt tokens computed (recomputation after preemption included)
    step_ms: float = 0.0  # the last step's simulated length
    first_tokens: list[str] = field(default_factory=list)  # the last step's requests' first tokens
    admitted: dict[str, int] = field(default_factory=dict)  # request -> hit tokens it was first scheduled with

    def __post_init__(self) -> None:
        self.lookup.wrap(self.scheduler.kv_cache_manager.coordinator, "find_longest_cache_hit")
        connector = getattr(self.scheduler, "connector", None)
        if connector is not None:
            self.tier_lookup.wrap(connector.connector_scheduler, "get_num_new_matched_tokens")

    def step(self, use: Callable[[Any], Any], clock_ms: float) -> Any:
        """One engine step starting at ``clock_ms``; its ``SchedulerOutput``
        (``self.step_ms``: how long the step took on the simulated GPU)."""
        _MAMBA_CLOCK["side"] = self
        with use(self.patch):
            start = time.perf_counter_ns()
            out = self.scheduler.schedule()
            between = time.perf_counter_ns()
            for new in out.scheduled_new_reqs:
                self.admitted.setdefault(new.req_id, new.num_computed_tokens)
            # The model's and the workers' part: untimed.
            runner = model_output(self.scheduler, out)
            self.first_tokens = [rid for rid, sampled in zip(runner.req_ids, runner.sampled_token_ids)
                                 if sampled and not self.scheduler.requests[rid].num_output_tokens]
            self.prefill_tokens += prefill_tokens(self.scheduler, out)
            forward_ms = self.model.step_ms(out.total_num_scheduled_tokens) \
                if out.total_num_scheduled_tokens else 0.0
            self.step_ms = forward_ms
            if self.worker is not None:
                runner.kv_connector_output, self.step_ms = self.worker.step(out, clock_ms, forward_ms)
            resume = time.perf_counter_ns()
            outputs = self.scheduler.update_from_output(out, runner)
            end = time.perf_counter_ns()
        self.step_ns.append((between - start) + (end - resume))
        # The step's prefix-cache counters, as the engine reports them.
        for eco in outputs.values():
            stats = eco.scheduler_stats
            if stats is None:
                continue
            if stats.prefix_cache_stats is not None:
                self.queries += stats.prefix_cache_stats.queries
                self.hits += stats.prefix_cache_stats.hits
            tier = getattr(stats, "connector_prefix_cache_stats", None)
            if tier is not None:
                self.tier_queries += tier.queries
                self.tier_hits += tier.hits
        return out


def prefill_tokens(scheduler: Any, out: Any) -> int:
    """Prompt tokens the step computes (``schedule()`` has already advanced
    each request's ``num_computed_tokens`` by what it scheduled)."""
    total = 0
    for rid, n in out.num_scheduled_tokens.items():
        req = scheduler.requests[rid]
        before = req.num_computed_tokens - n
        total += max(0, min(n, req.num_prompt_tokens - before))
    return total


_MAMBA_CLOCK: dict[str, Side | None] = {"side": None}  # the side stepping now


@contextlib.contextmanager
def mamba_timed() -> Iterator[None]:
    """``MambaManager.find_longest_cache_hit`` timed into the stepping
    side's ``mamba_ns`` for the duration (vLLM's own method, untouched)."""
    from vllm.v1.core.single_type_kv_cache_manager import MambaManager

    original = MambaManager.__dict__["find_longest_cache_hit"]
    own = original.__func__

    def timed(cls: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        try:
            return own(cls, *args, **kwargs)
        finally:
            side = _MAMBA_CLOCK["side"]
            if side is not None:
                side.mamba_ns += time.perf_counter_ns() - start

    MambaManager.find_longest_cache_hit = classmethod(timed)
    try:
        yield
    finally:
        MambaManager.find_longest_cache_hit = original
        _MAMBA_CLOCK["side"] = None


def summary(side: Side) -> dict[str, Any]:
    """Per-step scheduler time: quantiles, total, slow steps, lookup share."""
    ms = sorted(ns / 1e6 for ns in side.step_ns)
    n = len(ms)

    def q(p: float) -> float:
        return ms[min(n - 1, int(p * n))] if n else 0.0

    total = sum(ms)
    return {
        "total_ms": total, "p50_ms": q(0.50), "p90_ms": q(0.90), "p99_ms": q(0.99),
        "max_ms": q(1.0), "mean_ms": total / n if n else 0.0,
        "steps_over_ms": {str(limit): sum(1 for x in ms if x > limit) for limit in SLOW_STEP_MS},
        "lookup_ms": side.lookup.ns / 1e6, "lookups": side.lookup.calls,
        "lookup_share": side.lookup.ns / 1e6 / total if total else 0.0,
        "mamba_lookup_ms": side.mamba_ns / 1e6,
        "mamba_lookup_share": side.mamba_ns / 1e6 / total if total else 0.0,
        "prefix_cache_queries": side.queries, "prefix_cache_hits": side.hits,
        "hit_rate": side.hits / side.queries if side.queries else 0.0,
        "tier_lookup_ms": side.tier_lookup.ns / 1e6, "tier_lookups": side.tier_lookup.calls,
        "tier_lookup_share": side.tier_lookup.ns / 1e6 / total if total else 0.0,
        "tier_queries": side.tier_queries, "tier_hits": side.tier_hits,
        "prefill_tokens": side.prefill_tokens,
        "cdf_ms": [q(i / (CDF_POINTS - 1)) for i in range(CDF_POINTS)],
    }


TURNS = ("blocks", "extend")


def make_requests(trace: list[mooncake.TraceRequest], max_model_len: int, vocab: int,
                  turns: str = "blocks") -> tuple[list[tuple[str, list[int], int]], int]:
    """(request id, prompt, output tokens) per trace request, the prompt cut
    so that prompt + output fit ``max_model_len`` (the API server rejects
    longer ones); also how many were cut. ``turns``: ``blocks``, requests
    share exactly their common trace blocks; ``extend``, a request that
    ``mooncake.continued_turns`` names as the next turn of an earlier one
    starts with that one's whole prompt (as a chat's next turn does)."""
    if turns not in TURNS:
        raise ValueError(f"turns must be one of {TURNS}, got {turns!r}")
    parents = mooncake.continued_turns(trace) if turns == "extend" else [None] * len(trace)
    cut = 0
    made = []
    for k, req in enumerate(trace):
        out_tokens = min(mooncake.output_tokens(req), max_model_len // 2)
        room = max_model_len - out_tokens
        cut += req.input_length > room
        prompt = mooncake.prompt_ids(req, first=TOKEN_BASE, last=vocab - 1, max_tokens=room)
        parent = parents[k]
        if parent is not None:
            earlier = made[parent][1]
            n = min(len(earlier), len(prompt))
            prompt[:n] = earlier[:n]
        made.append((f"t{k}", prompt, out_tokens))
    return made, cut


def replay(trace: list[mooncake.TraceRequest], layout: replay_layouts.Layout, *,
           pool_fraction: float, model: StepModel, log: Callable[[str], None],
           on_patch: Any = None, tier: TierSetting | None = None,
           turns: str = "blocks") -> dict[str, Any]:
    """Both sides through ``trace``; the receipt. The plugin-on side runs
    the plugin's lookups as ``install()`` builds them, or ``on_patch`` (a
    ``harness.Patch``) when given: how a test shows that a wrong lookup
    makes the run differ. ``tier``: a host-memory KV tier on both sides
    (``benchmarks/host_tier.py``), with the same store filter. ``turns``:
    how prompts are made from the trace (``make_requests``)."""
    from vllm import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    from benchmarks.harness import VLLM_PATCH, capture_impls, use
    from swa_prefix_cache.core import hotpath

    impls = capture_impls()
    store = use_store(tier.store) if tier is not None else None
    built = {name: replay_layouts.build_scheduler(
                 layout, pool_fraction=pool_fraction,
                 offload_gib=None if tier is None else tier.gib)
             for name in ("off", "on")}
    b = built["on"]
    workers = {name: None if tier is None else host_tier.SimulatedWorker(
                   host_tier.group_block_bytes(built[name].scheduler.kv_cache_config),
                   num_workers=layout.tensor_parallel_size, link_gb_s=tier.link_gb_s)
               for name in ("off", "on")}
    sides = {"off": Side("off", VLLM_PATCH, built["off"].scheduler, model, workers["off"]),
             "on": Side("on", impls.installed if on_patch is None else on_patch,
                        built["on"].scheduler, model, workers["on"])}
    init_none_hash(sha256)
    hasher = get_request_block_hasher(b.hash_block_size, sha256)
    started = time.perf_counter()
    made, cut = make_requests(trace, b.max_model_len, int(layout.config["vocab_size"]), turns)
    log(f"{layout.name}: {len(made)} requests made in {time.perf_counter() - started:.1f} s "
        f"({cut} cut to max_model_len {b.max_model_len}); pool {b.num_blocks} blocks "
        f"of {b.block_size} tokens ({b.full_pool_blocks} at the full pool), groups {b.groups}")

    arrival_ms: dict[str, float] = {}
    ttft_ms: dict[str, float] = {}

    def add(k: int) -> None:
        rid, prompt, out_tokens = made[k]
        arrival_ms[rid] = float(trace[k].timestamp_ms)
        for side in sides.values():
            params = SamplingParams(max_tokens=out_tokens, ignore_eos=True)
            side.scheduler.add_request(Request(rid, prompt, params, None, block_hasher=hasher,
                                               arrival_time=trace[k].timestamp_ms / 1000))

    native_before = hotpath.load().totals() if impls.backend == "native" else None
    digest = hashlib.sha256()
    clock_ms = 0.0
    arrived = steps = idle = 0
    first_diff: dict[str, Any] | None = None
    order = list(sides.values())
    run_started = time.perf_counter()
    gc.collect()
    gc.disable()
    try:
        with mamba_timed():
            while True:
                while arrived < len(made) and trace[arrived].timestamp_ms <= clock_ms:
                    add(arrived)
                    arrived += 1
                if not sides["off"].scheduler.has_requests():
                    if arrived >= len(made):
                        break
                    clock_ms = float(trace[arrived].timestamp_ms)
                    continue
                outs = {}
                for side in order[steps % 2:] + order[:steps % 2]:
                    outs[side.name] = side.step(use, clock_ms)
                forms = {name: step_form(out) + (host_tier.metadata_form(out.kv_connector_metadata),
                                                 sides[name].step_ms)
                         for name, out in outs.items()}
                if forms["off"] != forms["on"]:
                    first_diff = first_difference(steps, forms["off"], forms["on"])
                    steps += 1
                    break
                digest.update(repr(forms["off"]).encode())
                tokens = outs["off"].total_num_scheduled_tokens
                steps += 1
                clock_ms += sides["off"].step_ms
                for rid in sides["off"].first_tokens:
                    ttft_ms.setdefault(rid, clock_ms - arrival_ms[rid])
                worker = sides["off"].worker
                if tokens:
                    idle = 0
                elif worker is not None and worker.busy():
                    # Nothing to compute while copies are under way: on to
                    # the next copy's end or the next arrival.
                    nxt = worker.next_event_ms()
                    if nxt is not None:
                        if arrived < len(made):
                            nxt = min(nxt, float(trace[arrived].timestamp_ms))
                        clock_ms = max(clock_ms, nxt)
                else:
                    idle += 1
                    if idle > 2:  # nothing schedulable: wait for the next arrival
                        if arrived >= len(made):
                            raise RuntimeError(f"{layout.name}: stuck at step {steps} with "
                                               f"{sides['off'].scheduler.get_num_unfinished_requests()} "
                                               "requests unfinished and none schedulable")
                        clock_ms = max(clock_ms, float(trace[arrived].timestamp_ms))
                if steps % GC_EVERY == 0:
                    gc.collect()
                if steps % 20000 == 0:
                    log(f"{layout.name}: step {steps}, {arrived}/{len(made)} arrived, "
                        f"clock {clock_ms / 1000:.0f} s, {time.perf_counter() - run_started:.0f} s")
    finally:
        gc.enable()
    native = None
    if native_before is not None:
        after = hotpath.load().totals()
        native = {key: after[key] - native_before[key] for key in ("native", "delegated")}
    if store is not None:
        store()
    off, on = summary(sides["off"]), summary(sides["on"])
    prompt_tokens = sum(len(p) for _, p, _ in made[:arrived])
    output_tokens = sum(n for _, _, n in made[:arrived])
    ttfts = sorted(ttft_ms.values())

    def ttft_q(p: float) -> float | None:
        return ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))] if ttfts else None

    prompts = [(chained_keys(made[k][1], b.hash_block_size), len(made[k][1])) for k in range(arrived)]
    ceiling = sum(reference_hits(prompts, b.hash_block_size, [Group(None, 1)], None))
    reference = reference_store(built["off"], prompts, tier)
    short = None
    if reference is not None:
        # vLLM's hit per request (GPU pool + tier, at its first admission)
        # against the reference's, and the cause of each shortfall.
        admitted = sides["off"].admitted
        short = tier_gap.shortfalls([keys for keys, _ in prompts],
                                    [admitted.get(made[k][0], 0) for k in range(arrived)],
                                    reference.pop("per_prompt"), b.hash_block_size,
                                    eagle_drop=reference["eagle_drop"])
    hits = {"gpu_hit_tokens": off["prefix_cache_hits"], "tier_hit_tokens": off["tier_hits"],
            "ceiling_hit_tokens": ceiling,
            "ceiling_hit_rate": ceiling / prompt_tokens if prompt_tokens else 0.0,
            "reference": reference, "short_of_reference": short,
            "reference_hit_rate": (reference["hit_tokens"] / prompt_tokens
                                   if reference is not None and prompt_tokens else None),
            "hit_rate": (off["prefix_cache_hits"] + off["tier_hits"]) / prompt_tokens if prompt_tokens else 0.0,
            "gpu_hit_rate": off["prefix_cache_hits"] / prompt_tokens if prompt_tokens else 0.0,
            "tier_hit_rate": off["tier_hits"] / prompt_tokens if prompt_tokens else 0.0,
            "prefill_tokens": off["prefill_tokens"],
            "ttft_p50_ms": ttft_q(0.5), "ttft_p90_ms": ttft_q(0.9),
            "output_tokens_per_s": output_tokens / (clock_ms / 1000) if clock_ms else None}
    tier_receipt = None
    if tier is not None:
        worker = sides["off"].worker
        manager = sides["off"].scheduler.connector.connector_scheduler.manager
        info = {k: v for entry in manager.config_info() for k, v in dict(entry).items()}
        tier_receipt = dict(asdict(tier), **asdict(worker.counters), manager=type(manager).__name__,
                            **{k: info[k] for k in ("cpu_num_chunks", "cpu_kv_cache_size_bytes") if k in info})
    return {
        "layout": layout.name, "source": layout.source, "pool_fraction": pool_fraction,
        "num_blocks": b.num_blocks, "full_pool_blocks": b.full_pool_blocks,
        "block_size": b.block_size, "hash_block_size": b.hash_block_size,
        "alignment_tokens": b.alignment_tokens, "groups": b.groups,
        "available_kv_bytes": b.available_kv_bytes, "max_model_len": b.max_model_len,
        "coordinator": type(sides["on"].scheduler.kv_cache_manager.coordinator).__name__,
        "requests": len(made), "arrived": arrived, "prompts_cut": cut,
        "turns": turns, "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
        **hits, "tier": tier_receipt,
        "steps": steps, "simulated_s": clock_ms / 1000,
        "identical": first_diff is None, "first_difference": first_diff,
        "digest": digest.hexdigest(), "step_model": asdict(model),
        "core": impls.backend, "native_lookups": native,
        "off": off, "on": on,
        "speedup": off["total_ms"] / on["total_ms"] if on["total_ms"] else None,
        "split": split(off, on, steps),
        "wall_s": time.perf_counter() - run_started,
    }


def split(off: dict[str, Any], on: dict[str, Any], steps: int) -> dict[str, float]:
    """Where the plugin's scheduler time went: the lookups' (prefix cache
    and host tier) time it saved, and the time it added everywhere else
    (the scheduler outside the lookups, on minus off; per step in µs)."""
    def lookups(side: dict[str, Any]) -> float:
        return side["lookup_ms"] + side["tier_lookup_ms"]

    elsewhere = (on["total_ms"] - lookups(on)) - (off["total_ms"] - lookups(off))
    return {"saved_in_lookups_ms": lookups(off) - lookups(on), "added_elsewhere_ms": elsewhere,
            "added_elsewhere_us_per_step": 1000 * elsewhere / steps if steps else 0.0}


def replay_line(r: dict[str, Any]) -> str:
    speedup = r["speedup"]
    tier = r.get("tier")
    tier_part = "" if tier is None else f" offload_gib={tier['gib']:g} store={tier['store']}"
    if r.get("turns", "blocks") != "blocks":
        tier_part += f" turns={r['turns']}"
    return (f"replay layout={r['layout']}{tier_part} requests={r['requests']} steps={r['steps']} "
            f"identical={'yes' if r['identical'] else 'no'} sched_ms_off={r['off']['total_ms']:.1f} "
            f"sched_ms_on={r['on']['total_ms']:.1f} "
            f"speedup={'n/a' if speedup is None else f'{speedup:.2f}'} "
            f"hit_rate={r['hit_rate']:.4f} gpu_hit_rate={r['gpu_hit_rate']:.4f} "
            f"tier_hit_rate={r['tier_hit_rate']:.4f}")


def report(r: dict[str, Any]) -> list[str]:
    """The table rows and the targets, PASS/MISS."""
    lines = [f"{r['layout']} pool {r['num_blocks']} blocks ({r['pool_fraction']:g} of "
             f"{r['full_pool_blocks']}), max_model_len {r['max_model_len']}, {r['steps']} steps, "
             f"{r['simulated_s']:.0f} s simulated, core {r['core']}, native lookups {r['native_lookups']}"]
    lines.append(f"  {'':4} {'total ms':>10} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7} "
                 f"{'>10ms':>6} {'>20ms':>6} {'lookup %':>8} {'mamba %':>8} {'lookups':>8} {'hit rate':>8}")
    for name in ("off", "on"):
        s = r[name]
        lines.append(f"  {name:4} {s['total_ms']:10.1f} {s['p50_ms']:7.3f} {s['p90_ms']:7.3f} "
                     f"{s['p99_ms']:7.3f} {s['max_ms']:7.2f} {s['steps_over_ms']['10.0']:6d} "
                     f"{s['steps_over_ms']['20.0']:6d} {100 * s['lookup_share']:8.2f} "
                     f"{100 * s['mamba_lookup_share']:8.2f} {s['lookups']:8d} {s['hit_rate']:8.3f}")
    same_hits = (r["off"]["prefix_cache_hits"], r["off"]["prefix_cache_queries"]) == (
        r["on"]["prefix_cache_hits"], r["on"]["prefix_cache_queries"])
    diff = r["first_difference"]
    lines.append(f"  target identical=yes: {'PASS' if r['identical'] else 'MISS'}"
                 + ("" if diff is None else f" (first difference at step {diff['step']}, "
                                            f"{diff['field']}: off {diff['off'][:200]} on {diff['on'][:200]})"))
    lines.append(f"  target lookups <= {100 * LOOKUP_SHARE_MAX:.0f}% of the scheduler's time, plugin on: "
                 f"{'PASS' if r['on']['lookup_share'] <= LOOKUP_SHARE_MAX else 'MISS'} "
                 f"({100 * r['on']['lookup_share']:.2f}%; off {100 * r['off']['lookup_share']:.2f}%)")
    sp = r.get("split") or split(r["off"], r["on"], r["steps"])
    lines.append(f"  scheduler time saved in lookups {sp['saved_in_lookups_ms']:.1f} ms; added elsewhere "
                 f"{sp['added_elsewhere_ms']:+.1f} ms ({sp['added_elsewhere_us_per_step']:+.1f} µs per step)")
    lines.append(f"  hit rate equal off/on: {'yes' if same_hits else 'NO'}")
    ttft = [r.get(k) for k in ("ttft_p50_ms", "ttft_p90_ms")]
    of_ceiling = r["hit_rate"] / r["ceiling_hit_rate"] if r["ceiling_hit_rate"] else 0.0
    if r.get("reference_hit_rate") is not None:
        ref = r["reference_hit_rate"]
        lines.append(f"  reference store at the same bytes (GPU pool + tier, keeps what vLLM's lookups read, "
                     f"LRU): {ref:.4f}; measured {r['hit_rate'] / ref if ref else 0:.2f} of it")
        short = r.get("short_of_reference")
        if short is not None:
            causes = ", ".join(f"{cause} {v['requests']} ({v['tokens']:,} tokens)"
                               for cause, v in short["by_cause"].items())
            lines.append(f"  short of the reference: {short['requests']} requests, {short['tokens']:,} tokens "
                         f"({100 * short['tokens'] / r['prompt_tokens'] if r['prompt_tokens'] else 0:.2f}% of "
                         f"prompt tokens): {causes}; above it: {short['above_reference']['requests']}")
    lines.append(f"  hit tokens / prompt tokens {r['hit_rate']:.4f} (GPU pool {r['gpu_hit_rate']:.4f}, "
                 f"host tier {r['tier_hit_rate']:.4f}; the trace's ceiling {r['ceiling_hit_rate']:.4f}, "
                 f"{of_ceiling:.2f} of it); prefill tokens computed {r['prefill_tokens']:,}; "
                 f"TTFT p50 / p90 " + " / ".join("n/a" if t is None else f"{t:.0f}" for t in ttft)
                 + f" ms; {r['output_tokens_per_s'] or 0:.0f} output tokens/s")
    tier = r.get("tier")
    if tier is not None:
        share_ok = r["on"]["tier_lookup_share"] <= LOOKUP_SHARE_MAX
        lines.append(f"  host tier {tier['gib']:g} GiB per GPU ({tier.get('cpu_num_chunks', '?'):,} chunks, "
                     f"{tier['manager']}), store {tier['store']}, link {tier['link_gb_s']:g} GB/s: "
                     f"{tier['stores']:,} stores ({tier['store_bytes'] / 1e9:.1f} GB), {tier['loads']:,} loads "
                     f"({tier['load_bytes'] / 1e9:.1f} GB), {tier['flushed']} flushed, "
                     f"{tier['wait_ms']:.0f} ms waited")
        lines.append(f"  target tier lookups <= {100 * LOOKUP_SHARE_MAX:.0f}% of the scheduler's time, "
                     f"plugin on: {'PASS' if share_ok else 'MISS'} "
                     f"({100 * r['on']['tier_lookup_share']:.2f}%; off {100 * r['off']['tier_lookup_share']:.2f}%)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=mooncake.DEFAULT_TRACE)
    parser.add_argument("--layout", required=True, choices=replay_layouts.names())
    parser.add_argument("--requests", type=int, default=None, help="the first N requests (default: all)")
    parser.add_argument("--short-prompts", type=int, default=None, metavar="TOKENS",
                        help="only the requests whose prompt is at most TOKENS (the trace cut to short prompts)")
    parser.add_argument("--json", type=Path, default=None, help="write the receipt here")
    parser.add_argument("--pool", choices=("full", "half"), default="full",
                        help="the blocks vLLM gives the model on one 80 GB GPU, or half of them")
    parser.add_argument("--offload-gb", type=float, default=None, metavar="GIB",
                        help="a host-memory KV tier of this many GiB per GPU (vLLM's OffloadingConnector, "
                             "CPU backend; the worker side simulated)")
    parser.add_argument("--link-gb-s", type=float, default=host_tier.DEFAULT_LINK_GB_S,
                        help="the host link's bandwidth per direction, GB/s (default: PCIe Gen5 x16 at 80%%)")
    parser.add_argument("--store", choices=STORES, default="stock",
                        help="the tier's store filter on both sides: vLLM's own, or the plugin's corrected one")
    parser.add_argument("--turns", choices=TURNS, default="blocks",
                        help="blocks: requests share exactly their common trace blocks; extend: a "
                             "conversation's next turn starts with the earlier turn's whole prompt")
    parser.add_argument("--instances", default="1", metavar="K|auto",
                        help="replay one of K instances' share of the trace (each conversation on one "
                             "instance); auto: the fewest instances whose prompts one GPU computes in at most "
                             f"{100 * UTILIZATION:.0f}%% of the trace's time by the step model")
    parser.add_argument("--instance", type=int, default=0,
                        help="which instance's share (0-based) of the trace's first --requests requests")
    parser.add_argument("--step-fixed-ms", type=float, default=None)
    parser.add_argument("--step-us-per-token", type=float, default=None)
    args = parser.parse_args(argv)
    if args.requests is not None and args.requests < 1:
        parser.error(f"--requests must be a positive int, got {args.requests}")
    if args.short_prompts is not None and args.short_prompts < 1:
        parser.error(f"--short-prompts must be a positive int, got {args.short_prompts}")
    if not args.trace.is_file():
        parser.error(f"--trace: no such file {args.trace}")
    for flag in ("step_fixed_ms", "step_us_per_token"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            parser.error(f"--{flag.replace('_', '-')} must be >= 0, got {value}")
    tier = None
    if args.offload_gb is not None:
        try:
            tier = TierSetting(args.offload_gb, args.link_gb_s, args.store)
        except ValueError as exc:
            parser.error(f"--offload-gb/--link-gb-s/--store: {exc}")
    elif args.store != "stock":
        parser.error("--store needs --offload-gb (a store filter needs a host tier)")
    layout = replay_layouts.load(args.layout)
    model = StepModel.for_layout(layout)
    if args.step_fixed_ms is not None or args.step_us_per_token is not None:
        model = StepModel(fixed_ms=model.fixed_ms if args.step_fixed_ms is None else args.step_fixed_ms,
                          us_per_token=(model.us_per_token if args.step_us_per_token is None
                                        else args.step_us_per_token), source="set on the command line")
    if args.instances == "1" and args.instance == 0:
        trace = mooncake.load(args.trace, args.requests, args.short_prompts)
        instances = 1
    else:
        whole = mooncake.load(args.trace, max_input=args.short_prompts)
        if args.instances == "auto":
            instances = instances_for(whole, model)
        elif args.instances.isdigit() and int(args.instances) > 0:
            instances = int(args.instances)
        else:
            parser.error(f"--instances must be a positive int or 'auto', got {args.instances!r}")
        if not 0 <= args.instance < instances:
            parser.error(f"--instance must be in [0, {instances}), got {args.instance}")
        first = whole[:args.requests]
        trace = mooncake.instance_share(first, instances, args.instance)
        print(f"replay: instance {args.instance} of {instances} ({args.instances}): "
              f"{len(trace)} of the trace's first {len(first)} requests, each conversation on one instance")
    print(f"replay: {len(trace)} requests of {args.trace.name} on {layout.name} ({args.pool} pool); "
          f"GPU step {model.fixed_ms:.2f} ms + {model.us_per_token:.1f} us/token ({model.source})",
          flush=True)
    result = replay(trace, layout, pool_fraction=1.0 if args.pool == "full" else 0.5, model=model,
                    log=lambda line: print(line, flush=True), tier=tier, turns=args.turns)
    result.update(trace=str(args.trace), pool=args.pool, instances=instances, instance=args.instance,
                  short_prompts=args.short_prompts,
                  python=platform.python_version(), vllm=vllm.__version__,
                  machine=platform.machine(), started=time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        receipts.write(args.json, result)
    for line in report(result):
        print(line)
    print(replay_line(result), flush=True)
    return 0 if result["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
