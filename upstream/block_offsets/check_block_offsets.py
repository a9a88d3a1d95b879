"""``make upstream-events``: build the ``BlockStored.block_offsets`` patch for
a vLLM release and check it (docs/router-reports.md, "vLLM's side").

The release is ``UPSTREAM_VLLM`` (default 0.33.0, the venv's); another one is
read from ``build/releases/<version>`` (installed ``--no-deps`` by
mk/vllm-releases.mk), whose vLLM then answers in every run, stock and
patched, with that release's sdist tests. Each release has its own
replacement file (``FIXES``): the same change on that release's definitions,
refused unless they hash to its ``BASE``.

1. ``kv_events_block_offsets.py`` (replacement definitions + the new vLLM
   test file) is spliced into the release's vLLM by upstream/findings/check.py's
   ``build``: the diff ``build/upstream/block_offsets/kv_events_block_offsets.patch``
   (generated, never committed), proven to apply with ``patch -p1``, and a
   hard-linked copy of the installed ``vllm`` with the patched files unlinked
   first, plus a hard-linked copy of vLLM's sdist tests with the new file.
2. vLLM's own tests of KV events and prefix caching (``VLLM_TESTS``, from the
   sdist that ``make vllm-upstream-tests`` fetches) and the new test file, run
   on the stock vLLM and on the patched copy side by side, plugin off: every
   test that passes on stock passes patched, no other test changes outcome,
   and every new test passes patched and FAILS on stock (none passes
   vacuously).
3. kv_index on the patched vLLM: tests/test_kv_events_block_offsets.py (reads
   the batches unchanged, objects and bytes; places each hash by its offset)
   and tests/test_kv_index.py (its exactness against ``get_computed_blocks``).
4. Nothing was written through a hard link (the venv and the sdist cache are
   as they were).

Exit status 0 only when every step passed.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "upstream" / "findings")]

import check as findings  # noqa: E402  (upstream/findings/check.py)

from upstream.check_patch import written_through_links  # noqa: E402

# The replacement file (upstream/block_offsets/<fix>.py) per release.
FIXES = {
    "0.33.0": "kv_events_block_offsets",
    "0.34.0": "kv_events_block_offsets_0_34_0",
}
VERSION = os.environ.get("UPSTREAM_VLLM", findings.VLLM_VERSION)
VENV_VERSION = findings.VLLM_VERSION  # the release of the venv's own vLLM
OUT = ROOT / "build" / "upstream" / "block_offsets"
if VERSION != VENV_VERSION:
    OUT = OUT / f"vllm-{VERSION}"
NEW_TEST = "tests/v1/core/test_kv_events_block_offsets.py"
# vLLM's tests of what the patch touches: the event types and their wire
# format, the publisher, BlockPool's emission, and the consumers of
# BlockStored inside vLLM (the worker-event aggregator, the offload tiers).
VLLM_TESTS = (
    "tests/distributed/test_kv_cache_events.py",
    "tests/distributed/test_events.py",
    "tests/v1/core/test_prefix_caching.py",
    "tests/v1/core/test_single_type_kv_cache_manager.py",
    "tests/v1/kv_connector/unit/test_output_aggregator.py",
    "tests/v1/kv_connector/unit/offloading_connector/test_events.py",
    "tests/v1/simple_kv_offload/test_kv_events.py",
)
KV_INDEX_TESTS = ("tests/test_kv_events_block_offsets.py", "tests/test_kv_index.py")
KV_INDEX_CASES = os.environ.get("PREFIX_CACHE_KV_INDEX_CASES", "600")


def say(message: str) -> None:
    print(f"upstream-events: {message}", flush=True)


def compare(stock: dict[str, str], patched: dict[str, str]) -> list[str]:
    """What is wrong between the two sessions' outcomes (empty: nothing)."""
    new = findings._mod(NEW_TEST)
    problems = []
    if set(stock) != set(patched):
        problems.append(f"the sessions ran different tests ({len(set(stock) ^ set(patched))} differ)")
    new_tests = sorted(t for t in patched if t.startswith(new + "::"))
    if not new_tests:
        problems.append(f"{NEW_TEST} did not run")
    for t in new_tests:
        if patched[t] != "passed":
            problems.append(f"new test {patched[t]} patched: {t}")
        if stock.get(t) != "failed":
            problems.append(f"new test {stock.get(t, 'missing')} on stock (must fail): {t}")
    for t, state in sorted(stock.items()):
        if t in new_tests:
            continue
        if state != patched.get(t):
            problems.append(f"{state} on stock, {patched.get(t, 'missing')} patched: {t}")
    return problems


def counts(states: dict[str, str], only: str | None = None) -> str:
    picked = [s for t, s in states.items() if only is None or t.startswith(only)]
    return ", ".join(f"{picked.count(k)} {k}" for k in ("passed", "failed", "skipped") if picked.count(k))


def use_release() -> Path:
    """Point upstream/findings/check.py at release ``VERSION`` (its sdist tests,
    version and build folder: ``findings.use_release``); the folder holding
    that release's ``vllm`` package."""
    if VERSION not in FIXES:
        raise SystemExit(f"no block_offsets replacement for vLLM {VERSION} "
                         f"(known: {', '.join(FIXES)})")
    return findings.use_release(VERSION)


def vllm_sessions(built: findings.Built, stock_site: Path) -> bool:
    paths = tuple(p for p in VLLM_TESTS if (built.tests_root / p).exists()) + (NEW_TEST,)
    missing = sorted(set(VLLM_TESTS) - set(paths))
    if missing:
        say(f"FAIL: not in vLLM's sdist: {', '.join(missing)}")
        return False
    say(f"vLLM's own tests, stock and patched side by side (plugin off): {' '.join(paths)}")
    hf = findings.hf_cache(OUT)
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        runs = {
            kind: pool.submit(findings.run_vllm_tests, f"block-offsets-{kind}", site, paths, hf,
                              stock_site, built.tests_root, OUT)
            # The venv's vLLM is the stock one for its release; another
            # release comes first on PYTHONPATH from its own folder.
            for kind, site in (("stock", None if VERSION == VENV_VERSION else stock_site),
                               ("patched", built.site))
        }
        (stock_run, stock), (patched_run, patched) = runs["stock"].result(), runs["patched"].result()
    new = findings._mod(NEW_TEST)
    old = {t: s for t, s in stock.items() if not t.startswith(new + "::")}
    say(f"  stock vLLM:   {counts(old)} ({stock_run.seconds:.0f} s); new tests: {counts(stock, new)}")
    say(f"  patched vLLM: {counts({t: patched.get(t, 'missing') for t in old})} "
        f"({patched_run.seconds:.0f} s); new tests: {counts(patched, new)}")
    problems = [f"{r.name}: no report or not the expected vLLM: {r.summary}"
                for r in (stock_run, patched_run) if not r.ok]
    problems += compare(stock, patched)
    for p in problems:
        say(f"  FAIL: {p}")
    if problems:
        for r in (stock_run, patched_run):
            print(r.output[-3000:])
    else:
        say(f"  OK: no test changes outcome; the {len([t for t in patched if t.startswith(new + '::')])} "
            "new tests pass patched and fail on stock")
    return not problems


def kv_index_on_patched(built: findings.Built) -> bool:
    say(f"kv_index on the patched vLLM: {' '.join(KV_INDEX_TESTS)}")
    env = findings.clean_env(built.site, (ROOT, ROOT / "tests"))
    env.update(PREFIX_CACHE_KV_INDEX_CASES=KV_INDEX_CASES, SWA_PREFIX_CACHE_STRICT_NATIVE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *KV_INDEX_TESTS],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800,
    )
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    ok = proc.returncode == 0 and "skipped" not in tail
    say(f"  {'OK' if ok else 'FAIL'}: {tail}")
    if not ok:
        print(proc.stdout[-4000:])
    return ok


def main() -> int:
    start = time.monotonic()
    stock_site = use_release()
    where = stock_site.relative_to(ROOT) if stock_site.is_relative_to(ROOT) else stock_site
    say(f"vLLM {VERSION} from {where}")
    findings.ensure_sdist()
    since = time.time()
    built = findings.build(FIXES[VERSION], stock_site, fixes=HERE, out=OUT)
    say(f"{', '.join(built.fix.files)} -> {built.patch.relative_to(ROOT)} ({built.diff_lines} diff "
        f"lines, applies with patch -p1: {', '.join(built.files)}); hard-linked copy "
        f"{built.site.relative_to(ROOT)}, the venv's files unchanged")
    steps = {"vLLM's tests, stock vs patched": vllm_sessions(built, stock_site),
             "kv_index on the patched vLLM": kv_index_on_patched(built)}
    touched = [p for tree in (built.site, built.tests_root) for p in written_through_links(tree, since)]
    for path in touched:
        say(f"FAIL: {path} was written through a hard link (venv or sdist cache changed)")
    steps["no file written through a hard link"] = not touched
    failed = [name for name, ok in steps.items() if not ok]
    say(f"vLLM {VERSION}: {len(steps) - len(failed)} of {len(steps)} steps passed in "
        f"{time.monotonic() - start:.0f} s" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
