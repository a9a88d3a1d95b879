"""Write a config-only Hugging Face cache entry for facebook/opt-125m.

Some of vLLM's unit tests build ``ModelConfig("facebook/opt-125m")``, which
only reads the model's config.json. With ``HF_HUB_OFFLINE=1`` the hub
client resolves it from the local cache, so this writes

    $HF_HOME/hub/models--facebook--opt-125m/refs/main
    $HF_HOME/hub/models--facebook--opt-125m/snapshots/<rev>/config.json

from ``transformers.OPTConfig()`` (whose defaults are opt-125m's shape).
No weights, no tokenizer, no download.

Usage: python hf_offline_cache.py HF_HOME
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ID = "facebook/opt-125m"
# A made-up revision: only has to be the same in refs/main and snapshots/.
REVISION = "0" * 40


def write_entry(hf_home: Path) -> Path:
    from transformers import OPTConfig

    config = OPTConfig()
    config.architectures = ["OPTForCausalLM"]
    config._name_or_path = REPO_ID
    repo_dir = hf_home / "hub" / ("models--" + REPO_ID.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(REVISION)
    config.to_json_file(str(snapshot / "config.json"))
    return snapshot / "config.json"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    path = write_entry(Path(argv[1]))
    print(f"wrote config-only HF cache entry {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
