"""Fail early when the disk cannot hold `make check`'s installs.

A fresh machine's `make check` installs about NEED GB (five venvs, six vLLM
releases and their wheels; docs/check.md gives the measured footprint).
Running out of space shows up an hour in, as pip's "No space left on
device"; this check says it in the first second instead.

    python scripts/disk_budget.py --need-gb NEED PATH...

What is already installed under the PATHs counts toward NEED (each inode
once), so a machine that ran `make check` before needs only the difference.
NEED 0 skips the check. Standard library only: it runs before any venv.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from dedupe_installs import regular_files

GB = 1e9


def installed_bytes(paths: list[Path]) -> int:
    """Bytes in regular files under paths, each inode counted once."""
    return sum(info.st_blocks * 512 for _path, info in regular_files(paths))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--need-gb", type=float, required=True)
    parser.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.need_gb < 0:
        parser.error("--need-gb must be 0 or more")
    if args.need_gb == 0:
        print("disk_budget: SKIPPED (need 0 GB)")
        return 0
    free = shutil.disk_usage(Path.cwd()).free
    present = installed_bytes(args.paths)
    short = args.need_gb * GB - free - present
    summary = (f"needs about {args.need_gb:.0f} GB for its installs: {present / GB:.1f} GB "
               f"installed, {free / GB:.1f} GB free")
    if short > 0:
        print(f"disk_budget: make check {summary}; {short / GB:.1f} GB short. Free some "
              "space (or make clean), or set CHECK_DISK_GB=0 to run anyway.", file=sys.stderr)
        return 1
    print(f"disk_budget: ok - make check {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
