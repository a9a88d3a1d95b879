"""What a new vLLM release needs before the plugin may serve it.

    make release-qualify VERSION=X        (python scripts/release_qualify.py X)

1. Downloads the release's wheel and the newest checked release's (pip,
   ``--no-deps``) and reads their sources without importing them.
2. Per binding (swa_prefix_cache/vllm_adapter/fingerprint.py): it applies when its functions'
   syntax trees equal a checked variant; otherwise, per function against the
   newest checked release: unchanged, cosmetic (the text differs, the syntax
   tree does not: docstrings, comments, layout), code (with the diff), or
   missing.
3. Runs the matrix suites on the release (``make matrix-vllm-X`` with its
   receipt in the output folder, not in build/matrix): vLLM's real classes of
   that release under the plugin, installed ``--no-deps`` over .venv.
4. Writes for review, in the output folder: known_sources.py as
   scripts/fingerprint_releases.py would write it with the release added to
   every binding whose code is unchanged, its diff against the committed one,
   the support table row of the suites' receipt, and report.txt.

Nothing in the tree changes. Adding the release is a reviewed edit of
scripts/fingerprint_releases.py (RELEASES and CHECKED, printed below), after
which ``make known-sources`` and ``make matrix-vllm`` check it. A binding
whose code changed needs its model re-read against that code first
(docs/releases.md).
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "scripts" / "matrix"))

import fingerprint_releases as releases  # noqa: E402
import support_table  # noqa: E402

from swa_prefix_cache.vllm_adapter.fingerprint import BINDINGS, Binding, Source, match, release_digests  # noqa: E402
from swa_prefix_cache.vllm_adapter.source_tree import find_definition, tree_digest  # noqa: E402


def definition(root: Path, source: Source) -> tuple[str, str] | None:
    """(the definition's source text, its fingerprint) in an unpacked
    release, or None when the release does not define it there."""
    path = source.path_in(root)
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    node = find_definition(ast.parse(text), source.qualname)
    if node is None:
        return None
    return (ast.get_source_segment(text, node) or "") + "\n", tree_digest(node)


def compare(binding: Binding, base: Path, new: Path, base_version: str, version: str) -> list[dict]:
    """Per source of ``binding``: how ``new`` differs from ``base``."""
    rows = []
    for source in binding.sources:
        old, now = definition(base, source), definition(new, source)
        row = {"function": source.name, "module": source.module}
        if now is None:
            row["change"] = "missing"
        elif old is None:
            row["change"] = "new"
        elif old[0] == now[0]:
            row["change"] = "unchanged"
        elif old[1] == now[1]:
            row["change"] = "cosmetic"
        else:
            row["change"] = "code"
            row["diff"] = "".join(difflib.unified_diff(
                old[0].splitlines(keepends=True), now[0].splitlines(keepends=True),
                f"{base_version}/{source.qualname}", f"{version}/{source.qualname}"))
        rows.append(row)
    return rows


def run_suites(version: str, out: Path) -> dict | None:
    """``make matrix-vllm-VERSION`` with its receipt in ``out``; the receipt."""
    done = subprocess.run(
        ["make", "--no-print-directory", f"matrix-vllm-{version}", f"MATRIX_DIR={out}"],
        cwd=ROOT, text=True, capture_output=True,
    )
    (out / "suites.log").write_text(done.stdout + done.stderr)
    receipts = sorted(out.glob(f"vllm-{version}-*.json"))
    return json.loads(receipts[-1].read_text()) if receipts else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the vLLM release, e.g. 0.34.0")
    parser.add_argument("--against", default=releases.RELEASES[-1],
                        help=f"the checked release to compare with (default {releases.RELEASES[-1]})")
    parser.add_argument("--wheels", type=Path, default=ROOT / "build" / "releases" / "wheels")
    parser.add_argument("--out", type=Path, help="default build/release-qualify/VERSION")
    parser.add_argument("--no-suites", action="store_true", help="only read the sources")
    args = parser.parse_args(argv)
    version = args.version
    if not all(part.isdigit() for part in version.split(".")):
        parser.error(f"version must be a release number such as 0.34.0, got {version!r}")
    if args.against not in releases.RELEASES:
        parser.error(f"--against must be a checked release ({', '.join(releases.RELEASES)})")
    out = (args.out or ROOT / "build" / "release-qualify" / version).resolve()
    out.mkdir(parents=True, exist_ok=True)
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    lines: list[str] = []

    def say(line: str = "") -> None:
        print(line)
        lines.append(line)

    roots = {}
    for release in (args.against, version):
        roots[release] = out / "src" / release
        releases.unpack_sources(releases.wheel(release, args.wheels), roots[release])
    say(f"vLLM {version} against {args.against} (sources read from the wheels, not imported)")
    applies, report = [], {"version": version, "against": args.against, "bindings": {}}
    for binding in BINDINGS:
        found = match(binding, release_digests(binding, roots[version]))
        rows = compare(binding, roots[args.against], roots[version], args.against, version)
        report["bindings"][binding.name] = {"applies": found.known, "variant": found.variant,
                                            "functions": rows}
        if found.known:
            applies.append(binding.name)
            say(f"binding {binding.name}: applies (code as in vLLM {found.variant})")
            continue
        say(f"binding {binding.name}: does NOT apply ({binding.doc})")
        for row in rows:
            if row["change"] != "unchanged":
                say(f"  {row['function']}: {row['change']}")
        for row in rows:
            if row.get("diff"):
                (out / f"{binding.name}.{row['function']}.diff").write_text(row["diff"])
                say(f"  --- {row['function']} (code change; {shown}/{binding.name}."
                    f"{row['function']}.diff)")
                for diff_line in row["diff"].splitlines()[2:42]:
                    say(f"    {diff_line}")
    checked = {name: tuple(rs) + ((version,) if name in applies else ())
               for name, rs in releases.CHECKED.items()}
    proposed = releases.render(releases.variants(args.wheels, releases.RELEASES + (version,), checked))
    (out / "known_sources.py").write_text(proposed)
    committed = releases.OUT.read_text()
    diff = "".join(difflib.unified_diff(committed.splitlines(keepends=True),
                                        proposed.splitlines(keepends=True),
                                        "swa_prefix_cache/vllm_adapter/known_sources.py", "proposed/known_sources.py"))
    (out / "known_sources.diff").write_text(diff)
    say()
    say(f"to add {version} for the bindings that apply, in scripts/fingerprint_releases.py:")
    say(f"  RELEASES += ({version!r},)")
    for name in applies:
        say(f"  CHECKED[{name!r}] += ({version!r},)")
    added = sum(1 for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
    say(f"  known_sources.py would change by {added} added lines ({shown}/known_sources.diff)")
    ok = True
    if not args.no_suites:
        receipt = run_suites(version, out)
        report["receipt"] = receipt
        if receipt is None:
            say(f"suites: no receipt ({shown}/suites.log)")
            ok = False
        else:
            ok = not any(s["failed"] + s["errors"] for s in receipt["suites"])
            say("suites on vLLM's real classes of the release (the support table row its receipt "
                "makes; 'patched' as the committed known_sources.py has it):")
            say("  " + support_table.row(receipt))
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.txt").write_text("\n".join(lines) + "\n")
    print(f"written: {shown}/report.txt, report.json, known_sources.py, known_sources.diff")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
