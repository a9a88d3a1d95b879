"""``make upstream-routers``: every router reproduction on every recorded
fixture, each outcome against the one this project has measured and
documented (docs/router-reports.md):

* ``swa`` and ``hybrid`` (sliding-window models): the stock router
  mis-scores (exit 1). Should a release fix it, the exit becomes 0 and
  this check fails until the report and the pin are updated.
* ``dense`` (full attention only), the control: the same router, the same
  harness, scores exactly (exit 0). It shows the reproduction can pass,
  so exit 1 on the others is the router's doing, not the harness's.

Any exit 2 (the reproduction could not run) fails the check. Run with a
Python that has vllm-router, ai-dynamo-runtime and pyzmq (.venv-peers).
A JSON receipt of every run goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
REPROS = {
    "vllm_router_kv_aware": ["--router", str(Path(sys.executable).parent / "vllm-router")],
    "dynamo_indexer": ["--python", sys.executable],
}
MIS_SCORE, EXACT = 1, 0
EXPECTED = {"swa": MIS_SCORE, "hybrid": MIS_SCORE, "dense": EXACT}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE.parents[1] / "build" / "upstream-routers")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs, failed = [], []
    for repro, extra in REPROS.items():
        for model, want in EXPECTED.items():
            started = time.monotonic()
            cmd = [sys.executable, str(HERE / f"{repro}.py"), *extra, str(FIXTURES / f"{model}.json")]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired as exc:
                out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
                done = subprocess.CompletedProcess(cmd, 2, out, f"timed out after {exc.timeout} s")
            print(f"== {repro} {model}: exit {done.returncode} (expected {want}), "
                  f"{time.monotonic() - started:.1f} s")
            print(done.stdout.rstrip())
            if done.stderr.strip():
                print(done.stderr.rstrip()[-2000:])
            runs.append({"repro": repro, "fixture": model, "exit": done.returncode, "expected": want,
                         "stdout": done.stdout})
            if done.returncode != want:
                failed.append(f"{repro} {model}: exit {done.returncode}, expected {want}")
    (args.out / "receipt.json").write_text(json.dumps(runs, indent=1) + "\n")
    if failed:
        print("upstream-routers: FAILED: " + "; ".join(failed), file=sys.stderr)
        return 1
    print(f"upstream-routers: all {len(runs)} outcomes as documented")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
