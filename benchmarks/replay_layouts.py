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
class Layout:
    """One model, as its layout file describes it."""

    name: str
    source: str
    config: dict[str, Any]
    weights_bytes: int
    active_params: int

    @property
    def max_model_len(self) -> int:
        return int(self.config["max_position_embeddings"])

    def layer_types(self) -> list[str]:
        """``sliding_attention`` or ``full_attention`` per layer, as
        transformers derives them from the config."""
        n = int(self.config["num_hidden_layers"])
        if "layer_types" in self.config:
            kinds = list(self.config["layer_types"])
        elif "sliding_window_pattern" in self.config:
            pattern = int(self.config["sliding_window_pattern"])
            kinds = ["sliding_attention" if (i + 1) % pattern else "full_attention"
                     for i in range(n)]
        else:
            kinds = ["full_attention"] * n
        if len(kinds) != n or set(kinds) - {"sliding_attention", "full_attention"}:
            raise ValueError(f"layout {self.name}: layer kinds {sorted(set(kinds))} for {n} layers")
        return kinds


def names() -> list[str]:
    """The shipped layouts."""
    return sorted(p.stem for p in LAYOUT_DIR.glob("*.json"))


def load(name: str) -> Layout:
    """The layout ``benchmarks/layouts/NAME.json``."""
    if not isinstance(name, str) or name not in names():
        raise ValueError(f"layout must be one of {names()}, got {name!r}")
    body = json.loads((LAYOUT_DIR / f"{name}.json").read_text())
    return Layout(name=body["name"], source=body["source"], config=body["config"],
                  weights_bytes=int(body["weights_bytes"]), active_params=int(body["active_params"]))


def available_kv_bytes(layout: Layout, reserve_bytes: int = RESERVE_BYTES) -> int:
    """What vLLM's profiling leaves for the KV cache on one 80 GB GPU:
    ``0.9 x total - weights - reserve``."""
    free = int(GPU_TOTAL_BYTES * GPU_MEMORY_UTILIZATION) - layout.weights_bytes - reserve_bytes
    if free <= 0:
        raise ValueError(f"layout {layout.name}: its weights do not fit on one 80 GB GPU")
    return free


def kv_cache_specs(layout: Layout) -> dict[str, Any]:
    """Per layer name, the spec its attention layer reports to vLLM."""
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    cfg = layout.config
    heads = int(cfg["num_key_value_heads"])
    head_size = int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    specs: dict[str, Any] = {}
    for i, kind in enumerate(layout.layer_types()):
        name = f"model.layers.{i}.self_attn.attn"
        if kind == "sliding_attention":
            specs[name] = SlidingWindowSpec(block_size=BLOCK_SIZE, num_kv_heads=heads,
                                            head_size=head_size, dtype=torch.bfloat16,
                                            sliding_window=int(cfg["sliding_window"]))
        else:
            specs[name] = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=heads,
                                            head_size=head_size, dtype=torch.bfloat16)
    return specs


def _model_dir(layout: Layout) -> str:
    """A local model folder holding only the layout's ``config.json``."""
    folder = Path(tempfile.mkdtemp(prefix=f"replay-{layout.name}-"))
    atexit.register(shutil.rmtree, folder, True)
    (folder / "config.json").write_text(json.dumps(layout.config))
    return str(folder)


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
                    max_num_seqs: int = MAX_NUM_SEQS) -> Built:
    """vLLM's ``Scheduler`` for ``layout`` (prefix caching on, chunked
    prefill, log_stats on), its pool ``pool_fraction`` of the blocks vLLM
    would give the model on one 80 GB GPU."""
    if not isinstance(pool_fraction, float) or not 0.0 < pool_fraction <= 1.0:
        raise ValueError(f"pool_fraction must be a float in (0, 1], got {pool_fraction!r}")
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        resolve_kv_cache_layout,
    )
    from vllm.config import CacheConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import (
        generate_scheduler_kv_cache_config,
        resolve_cache_hit_alignment_tokens,
        resolve_kv_cache_block_sizes,
    )
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.structured_output import StructuredOutputManager

    logging.getLogger("vllm").setLevel(logging.ERROR)
    max_len = layout.max_model_len
    # max_model_len -1: vLLM's auto-fit, the model's whole context when one
    # request of it fits the pool, else the longest that does.
    model_config = ModelConfig(model=_model_dir(layout), dtype="bfloat16", seed=0,
                               skip_tokenizer_init=True, max_model_len=-1)
    scheduler_config = SchedulerConfig(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_len, enable_chunked_prefill=True, is_encoder_decoder=False)
    cache_config = CacheConfig(block_size=BLOCK_SIZE, gpu_memory_utilization=GPU_MEMORY_UTILIZATION,
                               cache_dtype="auto", enable_prefix_caching=True)
    vllm_config = VllmConfig(scheduler_config=scheduler_config, model_config=model_config,
                             cache_config=cache_config, parallel_config=ParallelConfig())
    register_all_kvcache_specs(vllm_config)
    specs = [kv_cache_specs(layout)]
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
