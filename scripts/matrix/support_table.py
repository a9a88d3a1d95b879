"""The README's support table, made from the matrix receipts.

Each row is one receipt (scripts/matrix/receipt.py: a vLLM release or a
CPython / architecture run): what the plugin patches there (the bindings
whose known variants list that vLLM release, vllm_adapter/known_sources.py),
the extension's fast paths, and the suites that ran with their counts.

    python scripts/matrix/support_table.py [--receipts DIR] [--write | --check]

``--write`` puts the table into README.md between its two markers;
``--check`` exits 1 when the README's table differs from the one the
receipts make (make check runs it on the receipts of its own run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vllm_adapter.known_sources import VARIANTS  # noqa: E402

BEGIN = "<!-- support-table: made by scripts/matrix/support_table.py from the matrix receipts -->"
END = "<!-- /support-table -->"
README = ROOT / "README.md"


def patched(vllm: str | None) -> str:
    """The bindings whose checked variants include this vLLM release."""
    if vllm is None:
        return "(no vLLM)"
    names = [b for b, variants in VARIANTS.items() if any(vllm in v["releases"] for v in variants)]
    return ", ".join(n.replace("_", " ") for n in names) or "nothing (unpatched)"


def row(receipt: dict) -> str:
    ext = receipt.get("extension") or {}
    if receipt.get("skipped_reason"):
        ran = f"SKIPPED: {receipt['skipped_reason']}"
    else:
        ran = "; ".join(
            f"{s['name']} {s['passed']} passed" + (f", {s['failed'] + s['errors']} FAILED" if s["failed"] + s["errors"] else "")
            for s in receipt.get("suites", [])
        )
    fast = "not built" if not ext.get("built") else (
        f"read-ahead {'on' if ext.get('read_ahead') else 'off'}, hash {ext.get('hash')}"
    )
    python = receipt.get("python") or receipt.get("id", "-")
    return (f"| {receipt.get('vllm') or '-'} | {python} | {receipt.get('arch')} | {patched(receipt.get('vllm'))} "
            f"| {fast} | {ran} | {'yes' if receipt.get('ok') else 'no'} |")


def table(receipts: Path) -> str:
    rows = []
    for path in sorted(receipts.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "id" in data and "suites" in data:
            rows.append((data.get("vllm") or "", data.get("python") or "", data.get("arch") or "", row(data)))
    lines = [
        "| vLLM | CPython | arch | patched | native fast paths | what ran | ok |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [r for *_, r in sorted(rows)]
    return "\n".join(lines)


def readme_table() -> str:
    text = README.read_text()
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--receipts", type=Path, default=ROOT / "build" / "matrix")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true")
    group.add_argument("--check", action="store_true")
    args = parser.parse_args()
    made = table(args.receipts)
    if args.write:
        text = README.read_text()
        start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
        README.write_text(text[:start] + "\n" + made + "\n" + text[end:])
    elif args.check:
        if readme_table() != made:
            print("README's support table differs from the receipts' (scripts/matrix/support_table.py --write):")
            print(made)
            return 1
        print(f"README's support table matches the receipts in {args.receipts}")
    else:
        print(made)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
