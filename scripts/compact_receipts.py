"""Rewrite receipts in the compact form of benchmarks/receipts.py: the
summary as JSON, the raw series in a gzip'd sidecar. Lossless (``load``
gives back what was there) and idempotent.

Usage: python scripts/compact_receipts.py [RECEIPT ...]
(default: every benchmarks/results/*.json and e2e/results/*.json)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import receipts  # noqa: E402


def main(argv: list[str]) -> int:
    paths = [Path(a).resolve() for a in argv] or sorted(
        p for folder in ("benchmarks/results", "e2e/results") for p in (ROOT / folder).glob("*.json"))
    for path in paths:
        before = receipts.load(path)
        receipts.write(path, before)
        if receipts.load(path) != before:
            raise SystemExit(f"{path}: the compact form does not load back to the receipt")
        print(f"{path.relative_to(ROOT)}: {len(path.read_text().splitlines())} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
