"""``make upstream-patch``: build the upstream patch and check it.

The release is ``UPSTREAM_VLLM`` (default 0.33.0, the venv's): the venv's
vLLM when it is that release, else the one installed ``--no-deps`` in
``build/releases/<version>`` (mk/vllm-releases.mk), which then comes first on
``PYTHONPATH`` in every step.

1. upstream/make_patch.py writes ``build/upstream/vllm-<version>-swa-stride.patch``
   from that release's files (refused for a release or a method it does not
   know).
2. Two vLLM trees under build/upstream/vllm-<version>/: the release's ``vllm``
   package and its ``dist-info`` hard-linked (``cp -al``, nothing copied) plus
   that release's sdist ``tests/`` (fetched as ``make vllm-upstream-tests``
   fetches them). In ``patched`` the
   files the patch touches are first replaced by copies of their own (the
   venv is never written through a hard link), then the patch is applied
   with ``patch -p1``; the result must equal make_patch's patched module,
   and the venv's file must be unchanged. ``stock`` gets only the new test
   file, unapplied code.
3. (a) tests/test_upstream_patch.py: the patched method against vLLM's stock
   method on the same BlockPool objects, >= 100,000 random lookups plus every
   small input, and the broken bodies it must catch.
4. (b) vLLM's own tests (the set ``make vllm-upstream-tests`` runs, or
   ``UPSTREAM_PATCH_SET=prefix``) in each tree, side by side, with our plugin
   off (``VLLM_PLUGINS=""``, ``SWA_PREFIX_CACHE_MODE=off``, checked by
   upstream/swa_stride/swa_stride_session.py): nothing that passes on stock
   may fail patched, and the new test file must pass patched.
5. (c) upstream/swa_stride/bench.py: stock vs patched on the bench cells.

Exit status 0 only when every step passed. Nothing is timed against a bound.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts" / "vllm_upstream")]

from compare_runs import FAILED, ERROR, PASSED, read_junit, summary  # noqa: E402
from known_failures import explain  # noqa: E402

from upstream import make_patch  # noqa: E402

VERSION = os.environ.get("UPSTREAM_VLLM", make_patch.VLLM_VERSION)
OUT = ROOT / "build" / "upstream"
# The trees, logs and reports of one release.
WORK = OUT / f"vllm-{VERSION}"
SWA = ROOT / "upstream" / "swa_stride"
UPSTREAM_SCRIPT = ROOT / "scripts" / "vllm_upstream_tests.sh"
PY = Path(os.environ.get("PY", ROOT / ".venv" / "bin" / "python"))
if not PY.is_absolute():
    PY = ROOT / PY
LOOKUPS = int(os.environ.get("SWA_STRIDE_LOOKUPS", "100000"))
SESSION_TIMEOUT = int(os.environ.get("VLLM_UPSTREAM_TIMEOUT", "1200"))
# Tests of the new file expected to fail on stock vLLM: they check the
# lookup count the patch brings, not the answer.
FAIL_ON_STOCK = "test_sliding_window_cache_miss_lookups"


def say(message: str) -> None:
    print(f"upstream-patch: {message}", flush=True)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def bash_array(name: str) -> list[str]:
    """The bash array ``name`` of scripts/vllm_upstream_tests.sh."""
    match = re.search(rf"^{name}=\((.*?)^\)", UPSTREAM_SCRIPT.read_text(), re.S | re.M)
    if match is None:
        raise SystemExit(f"no {name}=(...) in {UPSTREAM_SCRIPT}")
    return shlex.split(match.group(1))


def release_site() -> Path | None:
    """The folder holding the release's ``vllm`` package, or None for the
    venv's own vLLM (when it is the release asked for)."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", VERSION):
        raise SystemExit(f"UPSTREAM_VLLM must be a release like 0.34.0, got {VERSION!r}")
    if make_patch.installed_version() == VERSION:
        return None
    site = ROOT / "build" / "releases" / VERSION
    if not (site / ".stamp").is_file():
        raise SystemExit(f"vLLM {VERSION} is not installed in {site.relative_to(ROOT)} "
                         f"(make {site.relative_to(ROOT)}/.stamp)")
    if make_patch.installed_version(site) != VERSION:
        raise SystemExit(f"{site.relative_to(ROOT)} holds vLLM "
                         f"{make_patch.installed_version(site)}, not {VERSION}")
    return site


# Set by main(): release_site().
SITE: Path | None = None


def release_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` with the release's folder first on PYTHONPATH (when it is not
    the venv's own vLLM), so vLLM's real classes of that release answer."""
    if SITE is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SITE), env.get("PYTHONPATH", "")) if p)
    return env


def fetch_vllm_tests() -> tuple[Path, Path]:
    """(sdist root, test-only site-packages), as make vllm-upstream-tests has them."""
    out = subprocess.run(
        ["bash", str(SWA / "fetch_vllm_tests.sh")],
        env={**os.environ, "PY": str(PY), "VLLM_UPSTREAM_VERSION": VERSION},
        check=True, stdout=subprocess.PIPE, text=True,
    ).stdout.splitlines()
    for line in out[:-2]:
        print(line)
    return Path(out[-2]), Path(out[-1])


def make_tree(name: str, vllm_pkg: Path, sdist: Path) -> Path:
    """build/upstream/vllm-<version>/<name>: vLLM's package, its dist-info
    (so the tree reports its own version) and sdist tests, hard-linked."""
    tree = WORK / name
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    subprocess.run(["cp", "-al", str(vllm_pkg), str(tree / "vllm")], check=True)
    infos = list(vllm_pkg.parent.glob(f"vllm-{VERSION}.dist-info"))
    if len(infos) != 1:
        raise SystemExit(f"no single vllm-{VERSION}.dist-info beside {vllm_pkg}")
    subprocess.run(["cp", "-al", str(infos[0]), str(tree / infos[0].name)], check=True)
    subprocess.run(["cp", "-al", str(sdist / "tests"), str(tree / "tests")], check=True)
    shutil.copyfile(sdist / "pyproject.toml", tree / "pyproject.toml")
    return tree


def unshare(path: Path) -> None:
    """Give ``path`` an inode of its own (it is a hard link into the venv)."""
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)


def written_through_links(tree: Path, since: float) -> list[Path]:
    """Files of ``tree`` still hard-linked (shared with the venv or the sdist
    cache) yet modified after ``since``: written through a link."""
    found = []
    for folder, _, files in os.walk(tree):
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            if st.st_nlink > 1 and st.st_mtime > since:
                found.append(Path(folder, name))
    return found


def build_trees(sdist: Path) -> tuple[Path, Path, Path]:
    """(stock tree, patched tree, the patch). Applies the patch by ``patch``."""
    stock_file = make_patch.installed_module_file(SITE)
    vllm_pkg = stock_file.parents[2]
    before = sha256(stock_file)
    rc = make_patch.main(["--out", str(OUT)] + ([] if SITE is None else ["--vllm-site", str(SITE)]))
    if rc:
        raise SystemExit(rc)
    patch_file = OUT / make_patch.patch_name(VERSION)
    expected = (OUT / make_patch.patched_module_name(VERSION)).read_text()

    stock = make_tree("stock", vllm_pkg, sdist)
    shutil.copyfile(make_patch.TEST_SOURCE, stock / make_patch.TEST_PATH)
    patched = make_tree("patched", vllm_pkg, sdist)
    target = patched / make_patch.MODULE_PATH
    unshare(target)
    if target.stat().st_ino == stock_file.stat().st_ino:
        raise SystemExit("the patched tree's module still shares the venv's inode")
    subprocess.run(
        ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "--quiet",
         "-d", str(patched), "-i", str(patch_file)],
        check=True,
    )
    if target.read_text() != expected:
        raise SystemExit(f"patch -p1 gave {target}, not make_patch's patched module")
    if (patched / make_patch.TEST_PATH).read_text() != make_patch.TEST_SOURCE.read_text():
        raise SystemExit("patch -p1 did not create the new test file as written")
    if sha256(stock_file) != before or make_patch.STOCK_TODO not in stock_file.read_text():
        raise SystemExit(f"{stock_file} changed: the venv was written through a link")
    say(f"patch -p1 applied {patch_file.relative_to(ROOT)} to {patched.relative_to(ROOT)} "
        f"(hard-linked vLLM {VERSION} from {vllm_pkg.parent.relative_to(ROOT)}; "
        "its file unchanged)")
    return stock, patched, patch_file


def differential(patched: Path) -> bool:
    """(a): tests/test_upstream_patch.py on the applied file."""
    say(f"(a) differential harness: {LOOKUPS:,} random lookups + every small input, "
        "patched vs stock on the same BlockPool objects, and the broken bodies")
    env = release_env({**os.environ,
                       "SWA_STRIDE_PATCHED_FILE": str(patched / make_patch.MODULE_PATH),
                       "SWA_STRIDE_LOOKUPS": str(LOOKUPS)})
    proc = subprocess.run(
        [str(PY), "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-W",
         "ignore::DeprecationWarning", "tests/test_upstream_patch.py"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    (WORK / "differential.log").write_text(proc.stdout)
    for line in proc.stdout.splitlines():
        if line.startswith(("upstream patch", "mutant", "cases checked")) or re.match(
            r"^=*\s*\d+ (passed|failed)", line
        ):
            print(f"    {line}")
    if proc.returncode:
        print(proc.stdout[-4000:])
    return proc.returncode == 0


def session_env(tree: Path, kind: str, site: Path, hf_home: Path, cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join(
            [str(tree), str(ROOT / "scripts" / "vllm_upstream"), str(SWA), str(site)]),
        # Our plugin stays out: vLLM loads no general plugin, and ours would
        # not patch anyway (mode off; swa_stride_session checks it).
        VLLM_PLUGINS="", SWA_PREFIX_CACHE_MODE="off", VLLM_UPSTREAM_PLUGIN="off",
        SWA_STRIDE_SESSION=kind, SWA_STRIDE_TREE=str(tree),
        SWA_STRIDE_REPORT=str(WORK / "results" / f"{kind}.json"),
        VLLM_TARGET_DEVICE="cpu", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(hf_home), HF_HUB_DISABLE_TELEMETRY="1", VLLM_NO_USAGE_STATS="1",
        VLLM_CACHE_ROOT=str(cache / kind), PYTHONPYCACHEPREFIX=str(OUT / "pycache"),
        PYTHONDONTWRITEBYTECODE="",
    )
    env.pop("VLLM_UPSTREAM_REPORT", None)
    return env


def vllm_sessions(stock: Path, patched: Path, site: Path) -> bool:
    """(b): vLLM's tests in both trees, side by side; compared test by test."""
    which = os.environ.get("UPSTREAM_PATCH_SET", "full")
    if which not in ("full", "prefix"):
        raise SystemExit(f"UPSTREAM_PATCH_SET must be full or prefix, got {which!r}")
    paths = bash_array("FULL_TESTS" if which == "full" else "PREFIX_TESTS")
    if make_patch.TEST_PATH not in paths and not any(
        make_patch.TEST_PATH.startswith(p.rstrip("/") + "/") for p in paths
    ):
        paths.append(make_patch.TEST_PATH)
    ignore = []
    for entry in bash_array("IGNORED"):
        path, reason = entry.split("|", 1)
        if (stock / path).exists():
            ignore.append(f"--ignore={path}")
            say(f"NOT RUN (as in make vllm-upstream-tests): {path}: {reason}")
    results = WORK / "results"
    shutil.rmtree(results, ignore_errors=True)
    results.mkdir(parents=True)
    say(f"(b) vLLM {VERSION}'s own tests ({which} set: {' '.join(paths)}), plugin off, "
        "stock and patched side by side")
    with tempfile.TemporaryDirectory(prefix="upstream-patch-") as tmp:
        hf_home, cache = Path(tmp) / "hf", Path(tmp) / "cache"
        subprocess.run([str(PY), str(ROOT / "scripts" / "vllm_upstream" / "hf_offline_cache.py"),
                        str(hf_home)], check=True, stdout=subprocess.DEVNULL)
        procs = {}
        for kind, tree in (("stock", stock), ("patched", patched)):
            env = session_env(tree, kind, site, hf_home, cache)
            # python -O bytecode first (a test imports vLLM in a timed
            # `python -O` subprocess), as scripts/vllm_upstream_tests.sh does.
            subprocess.run([str(PY), "-O", "-c", "import vllm.v1.core.kv_cache_planning, "
                            "vllm.v1.kv_cache_interface"], cwd=tree, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            log = open(results / f"{kind}.log", "w")  # noqa: SIM115 (closed below)
            cmd = ["timeout", "--kill-after=30", str(SESSION_TIMEOUT), str(PY), "-m", "pytest",
                   "-q", "-rfE", "-p", "vllm_upstream_plugin", "-p", "swa_stride_session",
                   "-p", "no:cacheprovider", f"--rootdir={tree}", "-c", str(tree / "pyproject.toml"),
                   f"--junitxml={results / f'{kind}.xml'}", *ignore, *paths]
            procs[kind] = (subprocess.Popen(cmd, cwd=tree, env=env, stdout=log,
                                            stderr=subprocess.STDOUT), log)
        start = time.monotonic()
        rcs = {}
        for kind, (proc, log) in procs.items():
            rcs[kind] = proc.wait()
            log.close()
        say(f"both sessions took {time.monotonic() - start:.0f} s "
            f"(pytest exit: stock {rcs['stock']}, patched {rcs['patched']}; "
            f"logs in {results.relative_to(ROOT)})")
    return compare_sessions(results)


def compare_sessions(results: Path) -> bool:
    problems: list[str] = []
    runs, reports = {}, {}
    details: dict[str, str] = {}
    for kind in ("stock", "patched"):
        try:
            reports[kind] = json.loads((results / f"{kind}.json").read_text())
            runs[kind] = read_junit(results / f"{kind}.xml",
                                    details if kind == "stock" else None)
        except (OSError, ValueError) as exc:
            print(f"FAIL: {kind}: no report ({exc}); see {results / f'{kind}.log'}")
            return False
    stock, patched = runs["stock"], runs["patched"]
    print(f"    stock vLLM:   {summary(stock)}; find_longest_cache_hit called "
          f"{reports['stock']['calls']} times")
    print(f"    patched vLLM: {summary(patched)}; find_longest_cache_hit called "
          f"{reports['patched']['calls']} times")
    for kind, rep in reports.items():
        if rep.get("triton_check_bypassed"):
            print(f"    {kind}: vLLM's CPU platform refuses configs without Triton; that "
                  "check was passed over (scripts/vllm_upstream/triton_guard.py)")
        problems += [f"{kind}: {p}" for p in rep["problems"]]
        if rep["exitstatus"] not in (0, 1):
            problems.append(f"{kind}: pytest exit status {rep['exitstatus']}")
    if not reports["patched"]["calls"]:
        problems.append("patched: the patched method was never called")
    if set(stock) != set(patched):
        problems.append(f"the sessions collected different tests "
                        f"({len(set(stock) ^ set(patched))} differ)")
    new_file = make_patch.TEST_PATH.removesuffix(".py").replace("/", ".")
    new_tests = sorted(t for t in patched if t.startswith(new_file))
    if not new_tests:
        problems.append(f"the new test file {make_patch.TEST_PATH} did not run")
    for t in new_tests:
        if patched[t][0] != PASSED:
            problems.append(f"patched: new test {t} {patched[t][0]}: {patched[t][1]}")
        expected_stock = FAILED if FAIL_ON_STOCK in t else PASSED
        if stock.get(t, ("missing", ""))[0] != expected_stock:
            problems.append(f"stock: new test {t} is {stock.get(t, ('missing',))[0]}, "
                            f"expected {expected_stock}")
    print(f"    new test file {make_patch.TEST_PATH}: {len(new_tests)} tests, "
          f"patched {sum(patched[t][0] == PASSED for t in new_tests)} passed; stock "
          f"{sum(stock.get(t, ('',))[0] == PASSED for t in new_tests)} passed "
          f"(the {FAIL_ON_STOCK} cases fail on stock by design: it makes 1 lookup per block)")
    regressions = sorted(t for t, (o, _) in stock.items()
                         if o == PASSED and patched.get(t, ("missing", ""))[0] != PASSED)
    only_patched = sorted(t for t, (o, _) in patched.items() if o == PASSED and t in stock
                          and stock[t][0] != PASSED and t not in new_tests)
    both = sorted(t for t, (o, _) in stock.items()
                  if o in (FAILED, ERROR) and patched.get(t, ("", ""))[0] in (FAILED, ERROR))
    if both:
        groups: dict[tuple[str, str], list[str]] = {}
        for t in both:
            known = explain(details.get(t, "") + "\n" + stock[t][1])
            groups.setdefault(known or ("not explained", stock[t][1]), []).append(t)
        print(f"    failing on stock AND patched: {len(both)}, by cause "
              "(scripts/vllm_upstream/known_failures.py):")
        for (name, message), tests in sorted(groups.items(), key=lambda g: -len(g[1])):
            # An unexplained cause is named by its first error line.
            first = message.strip().splitlines()[0][:160] if message.strip() else ""
            shown = f"{name}: {first}" if name == "not explained" else name
            print(f"      [{len(tests)}] {shown}")
    for t in regressions:
        problems.append(f"REGRESSION: passes on stock, {patched.get(t, ('missing',))[0]} "
                        f"patched: {t}")
    for t in only_patched:
        problems.append(f"DIFFERENCE: passes only patched: {t}")
    for p in problems:
        print(f"    FAIL: {p}")
    if not problems:
        print(f"    OK: every test that passes on stock vLLM passes patched "
              f"({sum(o == PASSED for o, _ in patched.values())} passed patched, "
              f"{sum(o == PASSED for o, _ in stock.values())} on stock)")
    return not problems


def bench(patched: Path) -> bool:
    """(c): the bench cells, stock vs patched, printed."""
    say("(c) bench cells: vLLM's stock method vs the patched one (pure Python, same process)")
    proc = subprocess.run(
        [str(PY), str(SWA / "bench.py"), str(patched / make_patch.MODULE_PATH),
         "--json", str(WORK / "bench.json")],
        cwd=ROOT, env=release_env(dict(os.environ)), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )
    for line in proc.stdout.splitlines():
        print(f"    {line}")
    return proc.returncode == 0


def main() -> int:
    global SITE
    start = time.monotonic()
    SITE = release_site()
    WORK.mkdir(parents=True, exist_ok=True)
    say(f"vLLM {VERSION} from {make_patch.installed_module_file(SITE).parents[3]}")
    sdist, site = fetch_vllm_tests()
    since = time.time()
    stock, patched, _ = build_trees(sdist)
    steps = {"(a) differential": differential(patched)}
    steps["(b) vLLM tests"] = vllm_sessions(stock, patched, site)
    touched = written_through_links(stock, since) + written_through_links(patched, since)
    for path in touched:
        say(f"FAIL: {path} was written through a hard link (venv or sdist cache changed)")
    steps["(b) vLLM tests"] = steps["(b) vLLM tests"] and not touched
    steps["(c) bench"] = bench(patched)
    for name, ok in steps.items():
        say(f"{name}: {'PASS' if ok else 'FAIL'}")
    say(f"vLLM {VERSION}: took {time.monotonic() - start:.0f} s")
    return 0 if all(steps.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
