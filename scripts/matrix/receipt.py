"""Write one receipt of the Python matrix: build/matrix/<id>.json.

Run by the interpreter under test (from the repository root), after its
checks: it reads that interpreter's version, implementation, machine and
free-threading from itself, vLLM's version if installed, the extension's
fast-path choice (swa_prefix_cache.core.hotpath.fast_paths(), which honours
$SWA_PREFIX_CACHE_HOTPATH), the self-check's JSON line (scripts/matrix/
selfcheck.py) and each pytest suite's counts from its --junitxml report.

  receipt.py --id ID --out FILE [--selfcheck JSON] [--suite NAME=JUNIT.xml ...]
             [--arch ARCH] [--seconds N]
  receipt.py --id ID --out FILE --skipped REASON   (any interpreter: nothing ran)

Format (the support table reads build/matrix/*.json; keep it exactly):
  {"id", "python" (full version or null), "implementation", "arch",
   "gil_disabled", "vllm" (version or null),
   "extension": {"built", "read_ahead", "hash", "why"},
   "suites": [{"name", "passed", "failed", "skipped", "errors"}],
   "skipped_reason" (str or null), "ok" (bool)}
plus "seconds" (the target's wall time) when given. ok: the extension was
built and every suite ran at least one test and none failed or erred; a
skipped receipt has ok false (nothing was shown to work) and its reason.
Exits 1 when ok is false and nothing was skipped.
"""

import argparse
import json
import os
import platform
import sys
import sysconfig
from pathlib import Path


def junit_counts(name: str, path: Path) -> dict[str, object]:
    import xml.etree.ElementTree as ET

    counts = {"name": name, "passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    if not path.is_file():
        counts["errors"] = 1  # the suite did not report (pytest did not run)
        return counts
    root = ET.parse(path).getroot()
    for suite in [root] if root.tag == "testsuite" else root.iter("testsuite"):
        tests = int(suite.get("tests", 0))
        failed = int(suite.get("failures", 0))
        errors = int(suite.get("errors", 0))
        skipped = int(suite.get("skipped", 0))
        counts["failed"] += failed
        counts["errors"] += errors
        counts["skipped"] += skipped
        counts["passed"] += tests - failed - errors - skipped
    return counts


def selfcheck_counts(path: Path) -> dict[str, object]:
    counts = {"name": "selfcheck", "passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    try:
        result = json.loads(path.read_text().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        counts["errors"] = 1
        return counts
    checks = result.get("checks", {})
    counts["passed"] = sum(1 for k, v in checks.items() if k != "failed" and v)
    counts["skipped"] = sum(1 for k, v in checks.items() if k != "failed" and not v)
    counts["failed"] = 0 if result.get("ok") else 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--id", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--selfcheck", type=Path)
    parser.add_argument("--suite", action="append", default=[])
    parser.add_argument("--arch")
    parser.add_argument("--seconds", type=int)
    parser.add_argument("--skipped")
    args = parser.parse_args()

    receipt: dict[str, object]
    if args.skipped:
        receipt = {
            "id": args.id, "python": None, "implementation": "cpython",
            "arch": args.arch or platform.machine(), "gil_disabled": None, "vllm": None,
            "extension": {"built": False, "read_ahead": False, "hash": "none",
                          "why": args.skipped},
            "suites": [], "skipped_reason": args.skipped, "ok": False,
        }
    else:
        sys.path.insert(0, os.getcwd())
        from swa_prefix_cache.core import hotpath

        paths = hotpath.fast_paths()
        try:
            from importlib.metadata import PackageNotFoundError, version
            try:
                vllm = version("vllm")
            except PackageNotFoundError:
                vllm = None
        except ImportError:
            vllm = None
        suites = []
        if args.selfcheck:
            suites.append(selfcheck_counts(args.selfcheck))
        for spec in args.suite:
            name, _, path = spec.partition("=")
            suites.append(junit_counts(name, Path(path)))
        ok = bool(paths["built"]) and all(
            s["failed"] == 0 and s["errors"] == 0 and s["passed"] > 0 for s in suites)
        receipt = {
            "id": args.id, "python": platform.python_version(),
            "implementation": sys.implementation.name,
            "arch": args.arch or platform.machine(),
            "gil_disabled": bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
            "vllm": vllm,
            "extension": {k: paths[k] for k in ("built", "read_ahead", "hash", "why")},
            "suites": suites, "skipped_reason": None, "ok": ok,
        }
    if args.seconds is not None:
        receipt["seconds"] = args.seconds
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(receipt, indent=2) + "\n")
    print(f"{args.id}: ok={receipt['ok']} extension={json.dumps(receipt['extension'])} "
          + " ".join(f"{s['name']}: {s['passed']} passed, {s['failed']} failed, "
                     f"{s['skipped']} skipped, {s['errors']} errors"
                     for s in receipt["suites"]))
    return 0 if receipt["ok"] or args.skipped else 1


if __name__ == "__main__":
    sys.exit(main())
