"""Hard-link byte-identical large files across the project's installs.

`make check` installs vLLM and torch several times: .venv (CPython 3.11),
.venv-e2e, build/venvs/py312 and py313 (each with PyPI's CUDA torch and its
2.7 GB of nvidia libraries, the same wheels for both interpreters) and the
releases under build/releases/. Many of those files are the same bytes
(the nvidia libraries, vLLM 0.33.0's kernels in three venvs, the CPU torch in
.venv and .venv-e2e). Linking them keeps a fresh machine's `make check`
within a smaller disk (docs/check.md gives the measured footprint).

    python scripts/dedupe_installs.py ROOT... [--complete DIR] [--min-bytes N]

Only files of --min-bytes (1 MiB) or more are linked: shared libraries and
data, which nothing in the project writes in place (the findings' patches
write Python sources, into trees of their own). A root takes part only
once its install is complete: it has a stamp file (`.setup-stamp` or
`.stamp`), or it is named by --complete (the install that has just
finished, before its stamp is written). Files must agree in size, mode and
SHA-256; each duplicate is replaced atomically (a link to a temporary name,
then rename), so a reader never sees a missing file. Standard library only:
it runs before any venv exists.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import stat
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

STAMPS = (".setup-stamp", ".stamp")
MIN_BYTES = 1 << 20


def install_roots(roots: list[Path], complete: list[Path]) -> list[Path]:
    """The installs under ROOTs (a venv or a release, or a folder of them)
    that are complete; a folder without a stamp stands for its children."""
    done = {path.resolve() for path in complete}
    found: list[Path] = []
    for root in roots:
        if not root.is_dir():
            continue
        if root.resolve() in done or any((root / name).is_file() for name in STAMPS):
            found.append(root)
            continue
        for child in sorted(root.iterdir()):
            if child.is_dir() and (child.resolve() in done
                                   or any((child / name).is_file() for name in STAMPS)):
                found.append(child)
    return found


def regular_files(roots: list[Path]) -> Iterator[tuple[Path, os.stat_result]]:
    """Each regular file under roots with its lstat, one path per inode
    (paths already linked together count once; a missing root is empty).
    scripts/disk_budget.py sums the same walk."""
    seen: set[tuple[int, int]] = set()
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            for name in files:
                path = Path(folder) / name
                info = path.lstat()
                if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                    seen.add((info.st_dev, info.st_ino))
                    yield path, info


def large_files(roots: list[Path], min_bytes: int) -> dict[tuple[int, int, int], list[Path]]:
    """(device, size, mode) -> regular files of at least min_bytes, one path
    per inode."""
    groups: dict[tuple[int, int, int], list[Path]] = defaultdict(list)
    for path, info in regular_files(roots):
        if info.st_size >= min_bytes:
            groups[(info.st_dev, info.st_size, stat.S_IMODE(info.st_mode))].append(path)
    return groups


def sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def link_over(keep: Path, duplicate: Path) -> None:
    """Replace duplicate by a hard link to keep, atomically."""
    temporary = duplicate.with_name(f".{duplicate.name}.dedupe-{os.getpid()}")
    os.link(keep, temporary)
    os.replace(temporary, duplicate)


def dedupe(roots: list[Path], min_bytes: int = MIN_BYTES) -> tuple[int, int]:
    """Link identical files under roots; returns (files linked, bytes saved)."""
    linked = saved = 0
    for (_device, size, _mode), paths in large_files(roots, min_bytes).items():
        if len(paths) < 2:
            continue
        by_digest: dict[str, list[Path]] = defaultdict(list)
        for path in paths:
            by_digest[sha256(path)].append(path)
        for same in by_digest.values():
            keep, *duplicates = same
            for duplicate in duplicates:
                link_over(keep, duplicate)
                linked += 1
                saved += size
    return linked, saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--complete", action="append", type=Path, default=[],
                        help="an install that has just finished (no stamp yet)")
    parser.add_argument("--min-bytes", type=int, default=MIN_BYTES)
    args = parser.parse_args(argv)
    if args.min_bytes < 1:
        parser.error("--min-bytes must be at least 1")
    roots = install_roots(args.roots, args.complete)
    linked, saved = dedupe(roots, args.min_bytes)
    print(f"dedupe_installs: {len(roots)} installs, {linked} files linked, "
          f"{saved / 1e9:.2f} GB saved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
