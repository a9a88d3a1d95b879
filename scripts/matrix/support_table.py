"""The README's support table, made from the matrix receipts.

Each row is one receipt (scripts/matrix/receipt.py: a vLLM release or a
CPython / architecture run): what the plugin patches there (the bindings
whose known variants list that vLLM release, swa_prefix_cache/vllm_adapter/known_sources.py),
the extension's fast paths, and the suites that ran with their counts.

    python scripts/matrix/support_table.py [--receipts DIR] [--write | --check]

``--write`` puts the table into README.md between its two markers.
``--check`` (make check runs it on the receipts of its own run) exits 1
when the README claims what the run does not show: a row the run did not
make or a row it made that the README lacks (vLLM, CPython, arch), a
different "patched" cell, or a suite that failed. The other cells depend
on the machine (test counts with their skips, the CPU's fast paths): a
difference there is printed, not failed on. The table describes releases,
not the machine that made it: a receipt that ran nothing (an interpreter
that is not installed) makes no row, and the check says so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from swa_prefix_cache.vllm_adapter.known_sources import VARIANTS  # noqa: E402

BEGIN = "<!-- support-table: made by scripts/matrix/support_table.py from the matrix receipts -->"
END = "<!-- /support-table -->"
README = ROOT / "README.md"


def patched(vllm: str | None) -> str:
    """The bindings whose checked variants include this vLLM release."""
    if vllm is None:
        return "(no vLLM)"
    names = [b for b, variants in VARIANTS.items() if any(vllm in v["releases"] for v in variants)]
    return ", ".join(n.replace("_", " ") for n in names) or "nothing (unpatched)"


def minor(python: str) -> str:
    """CPython's X.Y, what a row claims: the patch release (3.11.2 from
    Debian, 3.11.7 from pyenv) is the machine's, not the support's."""
    parts = python.split(".")
    if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
        return f"{parts[0]}.{parts[1]}"
    return python


def row(receipt: dict) -> str:
    ext = receipt.get("extension") or {}
    ran = "; ".join(
        f"{s['name']} {s['passed']} passed" + (f", {s['skipped']} skipped" if s.get("skipped") else "")
        + (f", {s['failed'] + s['errors']} FAILED" if s["failed"] + s["errors"] else "")
        for s in receipt.get("suites", [])
    )
    fast = "not built" if not ext.get("built") else (
        f"read-ahead {'on' if ext.get('read_ahead') else 'off'}, hash {ext.get('hash')}"
    )
    python = minor(receipt["python"]) if receipt.get("python") else receipt.get("id", "-")
    return (f"| {receipt.get('vllm') or '-'} | {python} | {receipt.get('arch')} | {patched(receipt.get('vllm'))} "
            f"| {fast} | {ran} | {'yes' if receipt.get('ok') else 'no'} |")


def receipts_of(directory: Path) -> list[dict]:
    out = []
    for path in sorted(directory.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "id" in data and "suites" in data:
            out.append(data)
    return out


def ran(receipts: list[dict]) -> list[dict]:
    """The receipts of runs that ran (not skipped on this machine)."""
    return [r for r in receipts if not r.get("skipped_reason")]


def table(receipts: list[dict]) -> str:
    rows = [(r.get("vllm") or "", minor(r.get("python") or ""), r.get("arch") or "", row(r))
            for r in ran(receipts)]
    lines = [
        "| vLLM | CPython | arch | patched | native fast paths | what ran | ok |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [r for *_, r in sorted(rows)]
    return "\n".join(lines)


# The cells a row claims whatever the machine: its key and what is patched.
CLAIMED = {"vLLM": 0, "CPython": 1, "arch": 2, "patched": 3}


def _cells(table_text: str) -> dict[tuple[str, ...], list[str]]:
    """A table's rows by (vLLM, CPython, arch)."""
    rows = {}
    for line in table_text.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[tuple(cells[:3])] = cells
    return rows


def differences(readme: str, made: str, receipts: list[dict]) -> tuple[list[str], list[str]]:
    """(what fails the check, what is only said) between the README's
    table and the one the receipts make."""
    failures, notes = [], []
    ours, theirs = _cells(readme), _cells(made)
    for key in sorted(set(ours) | set(theirs)):
        if key not in theirs:
            failures.append(f"README row {' / '.join(key)}: no receipt in this run")
            continue
        if key not in ours:
            failures.append(f"run's row {' / '.join(key)}: not in the README")
            continue
        for name, at in CLAIMED.items():
            if ours[key][at] != theirs[key][at]:
                failures.append(f"{' / '.join(key)}: {name} README {ours[key][at]!r}, run {theirs[key][at]!r}")
        if ours[key][4:] != theirs[key][4:]:
            notes.append(f"{' / '.join(key)}: README {' | '.join(ours[key][4:])}; "
                         f"this run {' | '.join(theirs[key][4:])}")
    for receipt in receipts:
        if any(s["failed"] + s["errors"] for s in receipt.get("suites", [])):
            failures.append(f"{receipt['id']}: a suite failed")
    return failures, notes


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
    receipts = receipts_of(args.receipts)
    made = table(receipts)
    if args.write:
        text = README.read_text()
        start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
        README.write_text(text[:start] + "\n" + made + "\n" + text[end:])
    elif args.check:
        failures, notes = differences(readme_table(), made, receipts)
        notes += [f"{r['id']}: not run here ({r['skipped_reason']}), so no row"
                  for r in receipts if r.get("skipped_reason")]
        for note in notes:
            print(f"support table, machine-dependent: {note}")
        if failures:
            print("README's support table claims what the receipts do not show "
                  "(scripts/matrix/support_table.py --write):")
            print("\n".join(failures))
            print(made)
            return 1
        print(f"README's support table matches the receipts in {args.receipts}"
              + (f" (cells that depend on the machine differ in {len(notes)} rows)" if notes else ""))
    else:
        print(made)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
