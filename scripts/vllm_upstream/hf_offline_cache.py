"""Write config-only Hugging Face cache entries for the model ids that
vLLM 0.33.0's scheduler / KV-cache unit tests name.

Those tests build ``ModelConfig(<model id>)`` (``Qwen/Qwen3-0.6B`` is
``ModelConfig``'s own default) and then a ``VllmConfig`` / ``Scheduler``
from it; ``ModelConfig`` only reads the model's ``config.json`` (no weights;
``try_get_safetensors_metadata`` is answered ``None`` offline by
vllm_upstream_plugin.py). With ``HF_HUB_OFFLINE=1`` the hub client resolves
a repo id from the local cache, so for each id in ``MODELS`` this writes

    $HF_HOME/hub/models--<org>--<name>/refs/main
    $HF_HOME/hub/models--<org>--<name>/snapshots/<rev>/config.json

Each config below is the model's public ``config.json`` cut down to the
fields vLLM's ``ModelConfig`` reads (architecture, model type, layer /
head / hidden sizes, context length, rope, sliding window, vocab, dtype,
the multimodal sub-configs) -- the values are those of the published
models, so what a test derives from them (``max_model_len``, the KV-cache
layout, ``is_multimodal_model``, the hybrid layer pattern) is what it
would be with the hub. No weights, no tokenizer (no test in the selection
loads one: the schedulers are built with token ids, and the multimodal
ones only need ``ModelConfig.is_multimodal_model``), no download.

Usage: python hf_offline_cache.py HF_HOME
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# A made-up revision: only has to be the same in refs/main and snapshots/.
REVISION = "0" * 40

# facebook/opt-125m: utils.create_scheduler's default model (most scheduler
# tests), the offloading-connector tests' default, test_deferred_block_free.
_OPT_125M: dict[str, Any] = {
    "architectures": ["OPTForCausalLM"],
    "model_type": "opt",
    "activation_dropout": 0.0,
    "activation_function": "relu",
    "attention_dropout": 0.0,
    "bos_token_id": 2,
    "do_layer_norm_before": True,
    "dropout": 0.1,
    "eos_token_id": 2,
    "ffn_dim": 3072,
    "hidden_size": 768,
    "init_std": 0.02,
    "layerdrop": 0.0,
    "max_position_embeddings": 2048,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "pad_token_id": 1,
    "prefix": "</s>",
    "torch_dtype": "float16",
    "use_cache": True,
    "vocab_size": 50272,
    "word_embed_proj_dim": 768,
}

MODELS: dict[str, dict[str, Any]] = {
    "facebook/opt-125m": _OPT_125M,
    # test_priority_preemption_bug.py
    "facebook/opt-350m": {
        **_OPT_125M,
        "do_layer_norm_before": False,
        "ffn_dim": 4096,
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "num_hidden_layers": 24,
        "word_embed_proj_dim": 512,
    },
    # ModelConfig()'s default model: test_kv_cache_planning.py,
    # test_kv_cache_utils.py, test_kv_cache_config_builder.py.
    "Qwen/Qwen3-0.6B": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 1024,
        "initializer_range": 0.02,
        "intermediate_size": 3072,
        "max_position_embeddings": 40960,
        "max_window_layers": 28,
        "num_attention_heads": 16,
        "num_hidden_layers": 28,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
    # test_kv_cache_planning.py::test_estimate_max_model_len,
    # test_kv_cache_utils.py::test_get_max_concurrency_for_kv_cache_config
    "Qwen/Qwen1.5-7B": {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151643,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "initializer_range": 0.02,
        "intermediate_size": 11008,
        "max_position_embeddings": 32768,
        "max_window_layers": 28,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 32,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
    # test_scheduler.py (the multimodal / encoder-cache scheduler tests)
    "llava-hf/llava-1.5-7b-hf": {
        "architectures": ["LlavaForConditionalGeneration"],
        "model_type": "llava",
        "ignore_index": -100,
        "image_token_index": 32000,
        "pad_token_id": 32001,
        "projector_hidden_act": "gelu",
        "text_config": {
            "_name_or_path": "lmsys/vicuna-7b-v1.5",
            "architectures": ["LlamaForCausalLM"],
            "max_position_embeddings": 4096,
            "model_type": "llama",
            "rms_norm_eps": 1e-05,
            "torch_dtype": "float16",
            "vocab_size": 32064,
        },
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "vision_config": {
            "hidden_size": 1024,
            "image_size": 336,
            "intermediate_size": 4096,
            "model_type": "clip_vision_model",
            "num_attention_heads": 16,
            "num_hidden_layers": 24,
            "patch_size": 14,
            "projection_dim": 768,
            "vocab_size": 32000,
        },
        "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default",
        "vocab_size": 32064,
    },
    # test_scheduler.py (a hybrid attention + Gated DeltaNet model)
    "Qwen/Qwen3-Next-80B-A3B-Instruct": {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "decoder_sparse_step": 1,
        "eos_token_id": 151645,
        "full_attention_interval": 4,
        "head_dim": 256,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 5120,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "max_position_embeddings": 262144,
        "mlp_only_layers": [],
        "moe_intermediate_size": 512,
        "norm_topk_prob": True,
        "num_attention_heads": 16,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "num_hidden_layers": 48,
        "num_key_value_heads": 2,
        "output_router_logits": False,
        "partial_rotary_factor": 0.25,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 10000000,
        "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": 512,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
    # test_priority_scheduler_random.py
    "Qwen/Qwen2.5-VL-3B-Instruct": {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "model_type": "qwen2_5_vl",
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "vision_start_token_id": 151652,
        "vision_end_token_id": 151653,
        "vision_token_id": 151654,
        "image_token_id": 151655,
        "video_token_id": 151656,
        "hidden_act": "silu",
        "hidden_size": 2048,
        "initializer_range": 0.02,
        "intermediate_size": 11008,
        "max_position_embeddings": 128000,
        "max_window_layers": 70,
        "num_attention_heads": 16,
        "num_hidden_layers": 36,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vision_config": {
            "depth": 32,
            "hidden_act": "silu",
            "hidden_size": 1280,
            "intermediate_size": 3420,
            "num_heads": 16,
            "in_chans": 3,
            "out_hidden_size": 2048,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "spatial_patch_size": 14,
            "window_size": 112,
            "fullatt_block_indexes": [7, 15, 23, 31],
            "tokens_per_second": 2,
            "temporal_patch_size": 2,
        },
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        "vocab_size": 151936,
    },
}


def write_entry(hf_home: Path, repo_id: str, config: dict[str, Any]) -> Path:
    repo_dir = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(REVISION)
    path = snapshot / "config.json"
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    for repo_id, config in MODELS.items():
        path = write_entry(Path(argv[1]), repo_id, config)
        print(f"wrote config-only HF cache entry {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
