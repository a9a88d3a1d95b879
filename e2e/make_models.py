"""Build the two tiny random-weight models the end-to-end run serves.

Nothing is downloaded: the configs are written here, the weights are drawn
from a fixed seed, and the tokenizer is a word-level one over the words
``w0 .. w{V-3}`` (plus ``<unk>`` and ``</s>``), so a prompt of N words is
exactly N tokens. Both models are as small as vLLM's CPU attention allows
(head_dim 32):

* ``swa``: a 2-layer Mistral, every layer sliding-window (window 64 tokens).
  vLLM builds one KV-cache group (``UnitaryKVCacheCoordinator`` +
  ``SlidingWindowManager``).
* ``hybrid``: a 4-layer Gemma3 text model, sliding/full layers alternating
  (window 64). vLLM builds a full-attention group and a sliding-window group
  (``HybridKVCacheCoordinator``).

Usage: python e2e/make_models.py OUT_DIR   (idempotent: existing models are
kept when their recipe is unchanged).
"""

import argparse
import json
import sys
from pathlib import Path

VOCAB = 512
WINDOW = 64
SEED = 0
# What both models share: as small as vLLM's CPU attention accepts.
SHAPE = dict(
    vocab_size=VOCAB,
    hidden_size=128,
    intermediate_size=256,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=8192,  # the probe's long phase sends ~7,000 tokens
    sliding_window=WINDOW,
    bos_token_id=1,
    eos_token_id=1,
)
# Bump when a recipe changes, so stale models are rebuilt.
RECIPE_VERSION = 2


def word(i: int) -> str:
    """The i-th ordinary word of the vocabulary."""
    return f"w{i}"


def save_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "</s>": 1}
    for i in range(VOCAB - 2):
        vocab[word(i)] = i + 2
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", eos_token="</s>", pad_token="</s>",
    )
    tok.save_pretrained(out)


def build_swa(out: Path) -> None:
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(**SHAPE, num_hidden_layers=2, tie_word_embeddings=False)
    MistralForCausalLM(config).save_pretrained(out)


def build_hybrid(out: Path) -> None:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(
        **SHAPE,
        num_hidden_layers=4,
        layer_types=["sliding_attention", "full_attention"] * 2,
        pad_token_id=1,
    )
    Gemma3ForCausalLM(config).save_pretrained(out)


def build_dense(out: Path) -> None:
    """Full attention only: the control of upstream/routers (not served by
    the e2e harnesses)."""
    from transformers import MistralConfig, MistralForCausalLM

    shape = {**SHAPE, "sliding_window": None}
    config = MistralConfig(**shape, num_hidden_layers=2, tie_word_embeddings=False)
    MistralForCausalLM(config).save_pretrained(out)


BUILDERS = {"swa": build_swa, "hybrid": build_hybrid, "dense": build_dense}
E2E_MODELS = ("swa", "hybrid")  # what the e2e harnesses serve
# The managers vLLM builds for each model: whether a FullAttentionManager
# serves lookups (run_e2e.py requires its lookups exactly there).
HAS_FULL_ATTENTION = {"swa": False, "hybrid": True, "dense": True}


def build(root: Path, names: tuple[str, ...] = E2E_MODELS) -> dict[str, Path]:
    """Build the named models under ``root`` (skipping up-to-date ones)."""
    import torch

    paths = {}
    for name in names:
        builder = BUILDERS[name]
        out = root / name
        stamp = out / "recipe.json"
        recipe = {"version": RECIPE_VERSION, "vocab": VOCAB, "window": WINDOW, "seed": SEED,
                  "max_position_embeddings": SHAPE["max_position_embeddings"]}
        if stamp.exists() and json.loads(stamp.read_text()) == recipe:
            paths[name] = out
            continue
        out.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(SEED)
        builder(out)
        save_tokenizer(out)
        stamp.write_text(json.dumps(recipe))
        paths[name] = out
    return paths


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    for name, path in build(args.out, tuple(BUILDERS)).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
