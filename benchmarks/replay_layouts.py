"""Real model layouts for the trace replay: vLLM 0.33.0's ``Scheduler`` for
a model, built from that model's config alone the way vLLM's ``EngineCore``
builds it on a GPU, with no weights and no GPU.

A layout file (``benchmarks/layouts/NAME.json``) holds the model's
``config.json`` (cut to what vLLM reads; ``source`` says where from) and
two figures vLLM measures on a real GPU that a CPU machine cannot:
``weights_bytes`` (what loading the weights takes) and ``active_params``
(for the replay's step-time model). Everything else is vLLM's own code:

* per layer, the KV-cache spec the model's attention layer reports
  (``Attention.get_kv_cache_spec``: ``SlidingWindowSpec`` for a
  sliding-window layer, ``FullAttentionSpec`` otherwise; KV heads, head
  size, bf16, block size 16, vLLM's default on CUDA), the layer kinds read
  from the config as transformers reads them (``layer_types``, or Gemma 3's
  ``sliding_window_pattern``);
* the groups and the pool: ``get_global_kv_cache_groups``,
  ``get_kv_cache_configs`` and ``generate_scheduler_kv_cache_config`` over
  the memory an 80 GB GPU leaves at ``gpu_memory_utilization=0.9``
  (``available_kv_bytes``); the half pool is vLLM's
  ``num_gpu_blocks_override``;
* the block sizes and the hit alignment: ``resolve_kv_cache_block_sizes``,
  ``resolve_cache_hit_alignment_tokens``, then ``Scheduler(...)`` with the
  arguments ``EngineCore`` passes.
"""

from __future__ import annotations

import atexit
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LAYOUT_DIR = Path(__file__).resolve().parent / "layouts"
# torch.cuda.get_device_properties(0).total_memory of an H100 80GB HBM3
# (79.19 GiB): what vLLM's memory profiling starts from on that GPU.
GPU_TOTAL_BYTES = 85_029_158_912
GPU_MEMORY_UTILIZATION = 0.9
# Memory besides the weights that vLLM's profiling run takes before the KV
# cache (activation peak, non-torch memory, CUDA graphs): vLLM logs 1-4 GiB
# for these models on an H100; 3 GiB is assumed (``--reserve-gib``).
RESERVE_BYTES = 3 << 30
BLOCK_SIZE = 16  # vLLM's default block size on CUDA
MAX_NUM_BATCHED_TOKENS = 8192  # vLLM's API-server default on a >= 70 GB GPU (arg_utils)
MAX_NUM_SEQS = 1024  # ... and its max_num_seqs there


@dataclass(frozen=True)
class Draft:
    """A speculative-decoding draft (EAGLE/MTP), as vLLM's
    ``SpeculativeConfig`` takes it: ``method``, ``num_speculative_tokens``
    and the draft's ``config.json`` (a config-only folder, as the target's).
    Its attention layers join the KV cache as draft layers (``is_draft``):
    vLLM marks the group holding them ``is_eagle_group``, and the lookups
    drop that group's last block (the EAGLE drop)."""

    method: str
    num_speculative_tokens: int
    config: dict[str, Any]
    weights_bytes: int


@dataclass(frozen=True)
class Layout:
    """One model, as its layout file describes it (``draft``: with a
    speculative-decoding draft; the replay proposes no draft tokens, so the
    draft changes what the cache stores and looks up, not the decode)."""

    name: str
    source: str
    config: dict[str, Any]
    weights_bytes: int  # the whole model's, over all tensor-parallel ranks, its draft's included
    active_params: int
    tensor_parallel_size: int = 1
    draft: Draft | None = None

    @property
    def max_model_len(self) -> int:
        return int(self.config["max_position_embeddings"])

    def layer_types(self) -> list[str]:
        """``sliding_attention``, ``linear_attention`` or ``full_attention``
        per layer, as transformers derives them from the config."""
        n = int(self.config["num_hidden_layers"])
        if "layer_types" in self.config:
            kinds = list(self.config["layer_types"])
        elif "sliding_window_pattern" in self.config:  # Gemma 3
            pattern = int(self.config["sliding_window_pattern"])
            kinds = ["sliding_attention" if (i + 1) % pattern else "full_attention"
                     for i in range(n)]
        elif "full_attention_interval" in self.config:  # Qwen3-Next
            interval = int(self.config["full_attention_interval"])
            kinds = ["linear_attention" if (i + 1) % interval else "full_attention"
                     for i in range(n)]
        else:
            kinds = ["full_attention"] * n
        if len(kinds) != n or set(kinds) - {"sliding_attention", "linear_attention", "full_attention"}:
            raise ValueError(f"layout {self.name}: layer kinds {sorted(set(kinds))} for {n} layers")
        return kinds


def names() -> list[str]:
    """The shipped layouts."""
    return sorted(p.stem for p in LAYOUT_DIR.glob("*.json"))


def load(name: str) -> Layout:
    """The layout ``benchmarks/layouts/NAME.json`` (one with a ``base``
    is that layout with the draft it names)."""
    if not isinstance(name, str) or name not in names():
        raise ValueError(f"layout must be one of {names()}, got {name!r}")
    body = json.loads((LAYOUT_DIR / f"{name}.json").read_text())
    if "base" in body:
        base = load(body["base"])
        spec = body["draft"]
        draft = Draft(method=spec["method"], num_speculative_tokens=int(spec["num_speculative_tokens"]),
                      config=spec["config"], weights_bytes=int(spec["weights_bytes"]))
        return Layout(name=body["name"], source=f"{base.source}; draft: {spec['source']}",
                      config=base.config, weights_bytes=base.weights_bytes + draft.weights_bytes,
                      active_params=base.active_params, tensor_parallel_size=base.tensor_parallel_size,
                      draft=draft)
    return Layout(name=body["name"], source=body["source"], config=body["config"],
                  weights_bytes=int(body["weights_bytes"]), active_params=int(body["active_params"]),
                  tensor_parallel_size=int(body.get("tensor_parallel_size", 1)))


def available_kv_bytes(layout: Layout, reserve_bytes: int = RESERVE_BYTES) -> int:
    """What vLLM's profiling leaves for the KV cache on one 80 GB GPU:
    ``0.9 x total - weights on that GPU - reserve``."""
    weights = layout.weights_bytes // layout.tensor_parallel_size
    free = int(GPU_TOTAL_BYTES * GPU_MEMORY_UTILIZATION) - weights - reserve_bytes
    if free <= 0:
        raise ValueError(f"layout {layout.name}: its weights do not fit on one 80 GB GPU")
    return free


def kv_cache_specs(layout: Layout, vllm_config: Any) -> dict[str, Any]:
    """Per layer name, the spec its layer reports to vLLM on one
    tensor-parallel rank (``vllm_config``'s cache config carries the block
    sizes ``align_hybrid_block_size`` set)."""
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    cfg = layout.config
    model_config = vllm_config.model_config
    heads = model_config.get_num_kv_heads(vllm_config.parallel_config)
    head_size = model_config.get_head_size()
    block_size = vllm_config.cache_config.block_size
    kinds = layout.layer_types()
    gdn = _gdn_spec(vllm_config) if "linear_attention" in kinds else None  # the same for every layer
    specs: dict[str, Any] = {}
    for i, kind in enumerate(kinds):
        if kind == "linear_attention":
            specs[f"model.layers.{i}.linear_attn"] = gdn
        elif kind == "sliding_attention":
            specs[f"model.layers.{i}.self_attn.attn"] = SlidingWindowSpec(
                block_size=block_size, num_kv_heads=heads, head_size=head_size,
                dtype=torch.bfloat16, sliding_window=int(cfg["sliding_window"]))
        else:
            specs[f"model.layers.{i}.self_attn.attn"] = FullAttentionSpec(
                block_size=block_size, num_kv_heads=heads, head_size=head_size,
                dtype=torch.bfloat16)
    draft = vllm_config.speculative_config
    if layout.draft is not None and draft is not None:
        # The draft's layers are numbered after the target's, as vLLM's
        # EAGLE heads name them; full attention, marked as draft layers.
        draft_config = draft.draft_model_config
        draft_heads = draft_config.get_num_kv_heads(draft.draft_parallel_config)
        for j in range(int(layout.draft.config["num_hidden_layers"])):
            specs[f"model.layers.{len(kinds) + j}.self_attn.attn"] = FullAttentionSpec(
                block_size=block_size, num_kv_heads=draft_heads, head_size=draft_config.get_head_size(),
                dtype=torch.bfloat16, is_draft=True)
    return specs


# On an H100, FlashAttention takes kernel blocks of any multiple of 16
# tokens, and Qwen3-Next's gated-delta-net layers prefill with FlashInfer's
# kernel (SM90), which exports prefill checkpoints every 64 tokens
# (vllm.v1.attention.backends.gdn_attn.FLASHINFER_GDN_CHECKPOINT_ALIGNMENT).
ATTENTION_KERNEL_BLOCK = 16
GDN_CHECKPOINT_ALIGNMENT = 64


def _mamba_page_and_model(vllm_config: Any) -> tuple[int, Any]:
    """The model class's Mamba state page (one block) and the class, as
    ``Platform._align_hybrid_block_size`` reads them."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.v1.kv_cache_interface import MambaSpec

    model_cls, _ = ModelRegistry.resolve_model_cls(vllm_config.model_config.architecture,
                                                   model_config=vllm_config.model_config)
    page = MambaSpec(shapes=model_cls.get_mamba_state_shape_from_config(vllm_config),
                     dtypes=model_cls.get_mamba_state_dtype_from_config(vllm_config),
                     block_size=-1).page_size_bytes
    return page, model_cls


def align_hybrid_block_size(vllm_config: Any) -> None:
    """``Platform._align_hybrid_block_size`` for an attention/Mamba hybrid on
    an H100 (vLLM runs it in the worker once the layers and their backends
    exist, which a config-only build has not): the attention block grows
    until its page holds a Mamba state, in steps of the kernel block made a
    multiple of the prefill checkpoint alignment (``align`` mode), the Mamba
    block equals it and the Mamba page is padded to the attention page."""
    import math

    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    cache_config = vllm_config.cache_config
    model_config = vllm_config.model_config
    attn_page_1 = FullAttentionSpec(block_size=1,
                                    num_kv_heads=model_config.get_num_kv_heads(vllm_config.parallel_config),
                                    head_size=model_config.get_head_size(),
                                    dtype=torch.bfloat16).page_size_bytes
    mamba_page, _ = _mamba_page_and_model(vllm_config)
    step = max(ATTENTION_KERNEL_BLOCK, cache_config.block_size)
    if cache_config.mamba_cache_mode == "align":
        step = math.lcm(step, GDN_CHECKPOINT_ALIGNMENT)
    block = step * -(-mamba_page // (step * attn_page_1))
    block = ATTENTION_KERNEL_BLOCK * -(-block // ATTENTION_KERNEL_BLOCK)
    cache_config.block_size = max(cache_config.block_size, block)
    if cache_config.mamba_cache_mode == "align":
        cache_config.mamba_block_size = cache_config.block_size
    attn_page = cache_config.block_size * attn_page_1
    if attn_page != mamba_page:
        cache_config.mamba_page_size_padded = attn_page


def _gdn_spec(vllm_config: Any) -> Any:
    """A gated-delta-net layer's ``MambaSpec`` (``MambaBase.get_kv_cache_spec``
    with Qwen3-Next's checkpoint export: one checkpoint block on the
    prefix-cache grid)."""
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import MambaSpec

    cache_config = vllm_config.cache_config
    _, model_cls = _mamba_page_and_model(vllm_config)
    return MambaSpec(
        shapes=tuple(model_cls.get_mamba_state_shape_from_config(vllm_config)),
        dtypes=model_cls.get_mamba_state_dtype_from_config(vllm_config),
        block_size=cache_config.mamba_block_size, page_size_padded=cache_config.mamba_page_size_padded,
        mamba_type=MambaAttentionBackendEnum.GDN_ATTN, tp_replicated=False,
        mamba_cache_mode=cache_config.mamba_cache_mode, num_speculative_blocks=0,
        num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=cache_config.mamba_block_size)


def config_only_model_dir(config: dict[str, Any], prefix: str) -> str:
    """A local model folder holding only ``config`` as its ``config.json``
    (removed at exit), so ``ModelConfig`` needs no hub, weights or tokenizer."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, True)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def _vllm_config(build: Any) -> Any:
    """``build()``, passing over vLLM 0.34+'s x86 "requires Triton" config
    guard where it refuses (scripts/vllm_upstream/triton_guard.py: the
    scheduler runs no Triton kernel; older releases never refuse)."""
    import sys

    try:
        return build()
    except RuntimeError as exc:
        guard_dir = str(Path(__file__).resolve().parents[1] / "scripts" / "vllm_upstream")
        if guard_dir not in sys.path:
            sys.path.append(guard_dir)
        import triton_guard

        if triton_guard.TRITON_REFUSAL not in str(exc):
            raise
        with triton_guard.triton_guard_passed() as passed:
            if not passed:
                raise
            return build()


@dataclass
class Built:
    """A scheduler and how its pool was sized."""

    scheduler: Any
    num_blocks: int
    full_pool_blocks: int
    groups: list[str]  # per KV-cache group: its kind and layer count
    block_size: int
    hash_block_size: int
    alignment_tokens: int
    available_kv_bytes: int
    max_model_len: int  # after vLLM's auto-fit


def build_scheduler(layout: Layout, *, pool_fraction: float = 1.0,
                    reserve_bytes: int = RESERVE_BYTES,
                    max_num_batched_tokens: int = MAX_NUM_BATCHED_TOKENS,
                    max_num_seqs: int = MAX_NUM_SEQS, offload_gib: float | None = None) -> Built:
    """vLLM's ``Scheduler`` for ``layout`` (prefix caching on, chunked
    prefill, log_stats on), its pool ``pool_fraction`` of the blocks vLLM
    would give the model on one 80 GB GPU; with ``offload_gib``, a host tier
    of that many GiB per GPU, as ``--kv-offloading-size`` sets it (vLLM's
    ``OffloadingConnector``, CPU backend; the size is per GPU here, vLLM's
    flag the total over the tensor-parallel ranks)."""
    if not isinstance(pool_fraction, float) or not 0.0 < pool_fraction <= 1.0:
        raise ValueError(f"pool_fraction must be a float in (0, 1], got {pool_fraction!r}")
    if offload_gib is not None and (isinstance(offload_gib, bool) or not isinstance(offload_gib, (int, float))
                                    or not offload_gib > 0):
        raise ValueError(f"offload_gib must be a positive number or None, got {offload_gib!r}")
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        resolve_kv_cache_layout,
    )
    from vllm.config import (
        CacheConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        resolve_cache_hit_alignment_tokens,
        resolve_kv_cache_block_sizes,
    )
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.structured_output import StructuredOutputManager

    from vllm.platforms import current_platform

    # vLLM's configs depend on the platform (an unresolved one turns the
    # hybrid allocator off and treats every window as full attention): the
    # replay is built on the CPU platform, which keeps vLLM's defaults here.
    if not current_platform.is_cpu():
        raise RuntimeError(f"the replay needs vLLM's CPU platform, this process resolved "
                           f"{type(current_platform).__name__}: set VLLM_TARGET_DEVICE=cpu "
                           "before vLLM is first imported")
    logging.getLogger("vllm").setLevel(logging.ERROR)
    max_len = layout.max_model_len
    # max_model_len -1: vLLM's auto-fit, the model's whole context when one
    # request of it fits the pool, else the longest that does.
    model_config = ModelConfig(model=config_only_model_dir(layout.config, f"replay-{layout.name}-"), dtype="bfloat16", seed=0,
                               skip_tokenizer_init=True, max_model_len=-1)
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_len, enable_chunked_prefill=True, is_encoder_decoder=False)
    cache_config = CacheConfig(block_size=BLOCK_SIZE, gpu_memory_utilization=GPU_MEMORY_UTILIZATION,
                               cache_dtype="auto", enable_prefix_caching=True,
                               kv_offloading_size=(None if offload_gib is None
                                                   else offload_gib * layout.tensor_parallel_size))
    parallel_config = ParallelConfig(tensor_parallel_size=layout.tensor_parallel_size)
    speculative_config = None
    if layout.draft is not None:
        speculative_config = SpeculativeConfig(
            method=layout.draft.method, num_speculative_tokens=layout.draft.num_speculative_tokens,
            model=config_only_model_dir(layout.draft.config, f"replay-{layout.name}-draft-"),
            target_model_config=model_config, target_parallel_config=parallel_config)
    vllm_config = _vllm_config(lambda: VllmConfig(
        scheduler_config=scheduler_config, model_config=model_config, cache_config=cache_config,
        parallel_config=parallel_config, speculative_config=speculative_config))
    if "linear_attention" in layout.layer_types():
        align_hybrid_block_size(vllm_config)
    register_all_kvcache_specs(vllm_config)
    specs = [kv_cache_specs(layout, vllm_config)]
    # The layout the engine core resolves first; a worker with no backend
    # preference reports vLLM's default order.
    default_layouts = [layout.name for layout in get_supported_kv_cache_layouts([])]
    resolve_kv_cache_layout(vllm_config, [default_layouts], specs[0].values())
    available = available_kv_bytes(layout, reserve_bytes)
    groups = get_global_kv_cache_groups(vllm_config, specs)
    full = generate_scheduler_kv_cache_config(
        get_kv_cache_configs(vllm_config, specs, [available], groups)).num_blocks
    if pool_fraction < 1.0:
        vllm_config.cache_config.num_gpu_blocks_override = max(2, int(full * pool_fraction))
    config = generate_scheduler_kv_cache_config(
        get_kv_cache_configs(vllm_config, specs, [available], groups))
    vllm_config.cache_config.num_gpu_blocks = config.num_blocks
    vllm_config.scheduler_config.max_model_len = vllm_config.model_config.max_model_len
    block_size, hash_block_size = resolve_kv_cache_block_sizes(config, vllm_config)
    alignment = resolve_cache_hit_alignment_tokens(config, vllm_config, block_size, hash_block_size)
    config.hash_block_size = hash_block_size
    config.cache_hit_alignment_tokens = alignment
    scheduler = Scheduler(vllm_config=vllm_config, kv_cache_config=config,
                          structured_output_manager=StructuredOutputManager(vllm_config),
                          block_size=block_size, hash_block_size=hash_block_size, log_stats=True)
    kinds = [f"{type(g.kv_cache_spec).__name__} x{len(g.layer_names)}" for g in config.kv_cache_groups]
    return Built(scheduler=scheduler, num_blocks=config.num_blocks, full_pool_blocks=full,
                 groups=kinds, block_size=block_size, hash_block_size=hash_block_size,
                 alignment_tokens=alignment, available_kv_bytes=available,
                 max_model_len=vllm_config.model_config.max_model_len)
