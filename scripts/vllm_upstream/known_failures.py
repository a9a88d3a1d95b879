"""Why some of vLLM 0.33.0's tests fail on this machine with AND without
the plugin (scripts/vllm_upstream/compare_runs.py groups them by these).

Each entry: (short name, regex searched in the failure's message and
traceback, the reason). These explain failures; they excuse nothing: a test
that passes without the plugin and fails with it fails the comparison
whatever its message. A failure in both runs that matches no entry is still
listed, grouped under its own first error line, as "not explained".
See docs/vllm-upstream-tests.md.
"""

from __future__ import annotations

import re

KNOWN: list[tuple[str, str, str]] = [
    (
        "multimodal model modules need torchvision",
        r"\['(LlavaForConditionalGeneration|Qwen2_5_VLForConditionalGeneration)'\] "
        r"failed to be inspected",
        "ModelConfig has vLLM's model registry inspect the architecture by "
        "importing its module in a subprocess; vllm/model_executor/models/"
        "llava.py imports mistral_common (not in the CPU venv) and both "
        "llava.py and qwen2_5_vl.py import transformers' image processors, "
        "which import torchvision (not in the venv either), and torchvision's "
        "PyPI wheel is a CUDA build whose ops cannot load against the CPU "
        "torch (its _C.so needs libtorch_cuda.so). Past that, these tests "
        "build the model's tokenizer and multimodal processor (tokenizer and "
        "preprocessor files, not config-only). llava-hf/llava-1.5-7b-hf and "
        "Qwen/Qwen2.5-VL-3B-Instruct have config-only cache entries all the same.",
    ),
    (
        "CPU uses the V1 model runner (no Triton)",
        r"Async scheduling is not supported by the V1 model runner with "
        r"pipeline parallelism",
        "without Triton (the CPU platform) vLLM picks the V1 model runner, and "
        "VllmConfig rejects async scheduling with pipeline_parallel_size=2 on "
        "it; the test assumes the GPU's Model Runner V2.",
    ),
]

_COMPILED = [(name, re.compile(pattern), reason) for name, pattern, reason in KNOWN]


def explain(text: str) -> tuple[str, str] | None:
    """``(name, reason)`` of the first known cause found in ``text``."""
    for name, pattern, reason in _COMPILED:
        if pattern.search(text):
            return name, reason
    return None
