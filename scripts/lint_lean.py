"""Fail if Lean/ (or the lakefile) holds an unfinished or trusted proof step,
or a name declared twice.

Looks for ``sorry``, ``admit``, ``native_decide`` and ``axiom`` declarations
outside comments and strings. A proof that Lean cannot check here (no
toolchain on these machines) must at least contain none of these. Every
file is in ``namespace PrefixCache`` and the root module imports them all,
so a (non-private) name declared in two places would break ``lake build``:
that is caught here too.
"""

import re
import sys
from pathlib import Path

FORBIDDEN = re.compile(r"\b(sorry|admit|native_decide|axiom)\b")
DECLARATION = re.compile(
    r"^\s*(?:@\[[^\]]*\]\s*)?(?:noncomputable\s+)?(?:protected\s+)?"
    r"(def|theorem|lemma|abbrev|structure|inductive|instance)\s+([^\s:({\[]+)"
)


def strip_comments(text: str) -> str:
    """Remove nested /- -/ block comments, -- line comments and strings."""
    out, depth, i = [], 0, 0
    while i < len(text):
        if text.startswith("/-", i):
            depth += 1
            i += 2
        elif depth and text.startswith("-/", i):
            depth -= 1
            i += 2
        elif depth:
            out.append("\n" if text[i] == "\n" else " ")
            i += 1
        elif text.startswith("--", i):
            while i < len(text) and text[i] != "\n":
                i += 1
        elif text[i] == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def main(root: Path) -> int:
    files = sorted(root.glob("Lean/**/*.lean")) + sorted(root.glob("*.lean"))
    problems = []
    declared: dict[str, str] = {}
    duplicates = 0
    for path in files:
        code = strip_comments(path.read_text())
        for lineno, line in enumerate(code.splitlines(), 1):
            where = f"{path.relative_to(root)}:{lineno}"
            if FORBIDDEN.search(line):
                problems.append(f"{where}: {line.strip()}")
            match = DECLARATION.match(line)
            if match:
                name = match.group(2)
                if name in declared:
                    duplicates += 1
                    problems.append(f"{where}: {name} is also declared at {declared[name]}")
                else:
                    declared[name] = where
    for problem in problems:
        print(problem)
    print(f"lint-lean: {len(files)} Lean files, {len(declared)} names, "
          f"{len(problems) - duplicates} forbidden steps (sorry / admit / native_decide / axiom), "
          f"{duplicates} names declared twice")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
