"""Build, apply and check the upstream fix of every store/lookup finding.

For each finding ``<id>`` (docs/upstream-findings.md) this script

1. reads the fix, ``fixes/<id>.py``: replacement source written by this
   project for one or more functions / methods of the *installed* vLLM
   (``TARGETS``: vLLM file -> qualified names; ``BASE``: the sha256 of
   each original definition it replaces, so a different vLLM is refused;
   ``USE``: the fix is another file's; ``NEW_FILES``: whole new modules,
   where a line ``# @include swa_prefix_cache/pyspec/<file>.py`` stands for that spec
   module's code, verbatim, and ``# @include <file>.py: f, g`` for those
   functions of the adapter's glue (``new_module_text``);
   ``COMBINE``: the fixes it is made of, see ``ALL``);
2. locates each target definition in the installed vLLM by ``ast`` and
   splices the replacement in (decorators included, re-indented), giving the
   patched text of each touched file;
3. makes a temporary copy of vLLM, ``build/upstream/findings/site-<id>/vllm``:
   ``cp -al`` (hard links) of the installed package, where each patched file
   is unlinked first and written as a new file (the venv is never written
   through a link; checked);
4. writes the unified diff ``build/upstream/findings/<id>.patch`` (generated,
   never committed: its context lines are vLLM's code) and proves that it
   applies: ``patch -p1`` on real copies of the original files, whose result
   must be byte for byte the tested copy;
5. runs the reproduction ``<id>.py``, as its own process, on the stock vLLM
   (must exit 1: the bug is there) and on the patched copy (must exit 0),
   each checking which vLLM it ran on (on ``ALL``, every reproduction, in
   one interpreter);
6. runs the project's agreement property on random cases against the
   patched copy (``property_check.py``, reusing tests/test_reachable.py and
   tests/test_joint.py): no violation that only this fix's finding could
   explain (``ALL``: no violation at all);
7. runs the release's own vLLM unit tests of the touched area (from the sdist
   tree that scripts/vllm_upstream_tests.sh fetches into
   build/vllm-upstream/) on the patched copy: every test that passes on the
   stock vLLM must pass. A fix may update tests of vLLM's that pinned the
   lossy behaviour (``TARGETS`` under ``tests/``); those must then fail on
   the stock vLLM.

``ALL`` is every fix at once (one combined patch per file; where two fixes
replace the same function, ``fixes/ALL.py`` gives the combined function).

Releases: ``UPSTREAM_VLLM`` (default 0.33.0, the venv's) picks the vLLM
checked; another release is read from ``build/releases/<version>``
(installed ``--no-deps`` by mk/vllm-releases.mk) and answers in every run,
stock included, with that release's sdist tests; output goes to
``build/upstream/findings/vllm-<version>``. A fix file names the releases
its ``BASE`` digests are for (``RELEASES``: the replaced definitions are
byte-identical in each, so the file is reused, not copied); where a release
changed a replaced function, the fix for it is ``fixes/<version with
_>/<id>.py``, or the shared file says why there is none (``REFUSED``:
release -> reason). A refused fix is logged and its reproduction runs on
stock only; ``ALL`` there combines the fixes that apply, a refused part
replaced by its ``FALLBACK`` where it names one.

Usage: [UPSTREAM_VLLM=0.34.0] python upstream/findings/check.py [ID ...]
       [--jobs N] [--cases N] [--no-vllm-tests] [--no-property] [--list]

No vLLM plugin is loaded in any run (``VLLM_PLUGINS=""``), so stock means
stock. Exit 0 when every check passed.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import difflib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FIXES = HERE / "fixes"
BUILD = ROOT / "build" / "upstream" / "findings"
VENV_VERSION = "0.33.0"  # the release of the venv's own vLLM
# The release checked: the venv's, or (``UPSTREAM_VLLM``, ``use_release``)
# another one installed --no-deps in build/releases/<version>
# (mk/vllm-releases.mk), whose folder then comes first on PYTHONPATH in every
# run, stock included (``STOCK_OVERLAY``).
VLLM_VERSION = VENV_VERSION
STOCK_OVERLAY: Path | None = None
SDIST = ROOT / "build" / "vllm-upstream" / f"vllm-{VLLM_VERSION}"
SDIST_SITE = ROOT / "build" / "vllm-upstream" / "site-packages"

# In the order of docs/store-lookup-agreement.md.
FINDINGS = ("L1", "L2", "L3", "L4", "L5", "W", "O1", "O2", "O3", "O4", "O5", "J1")
COMBINED = "ALL"

# vLLM's own tests of each touched file (paths of the sdist). The local
# store mask also feeds the KV-offload store filter, hence its scheduler test.
CORE_TESTS = (
    "tests/v1/core/test_single_type_kv_cache_manager.py",
    "tests/v1/core/test_prefix_caching.py",
    "tests/v1/core/prefix_cache",
    "tests/v1/core/test_prefix_replay.py",
    "tests/v1/core/test_swa_inflight_window_free.py",
    "tests/v1/core/test_kv_cache_utils.py",
    "tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py",
)
OFFLOAD_TESTS = ("tests/v1/kv_connector/unit/offloading_connector",)
AREA_TESTS = {
    "vllm/v1/core/single_type_kv_cache_manager.py": CORE_TESTS,
    "vllm/v1/core/kv_cache_coordinator.py": CORE_TESTS,
    "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py": OFFLOAD_TESTS,
}
# Starts a real server on a model's weights (see docs/vllm-upstream-tests.md).
IGNORED_TESTS = ("tests/v1/core/prefix_cache/test_hybrid_prefix_cache_hit_rate.py",)

# Which random property each finding's fix must keep (property_check.py):
# the local store+lookup, the KV-offload store+lookup (the local mask feeds
# it), the joint lookup's maximality, the local store's waste.
PROPERTIES = {
    "L1": ("local", "offload"),
    "L2": ("local", "offload"),
    "L3": ("local",),
    "L4": ("local",),
    "L5": ("local",),
    "W": ("local", "waste", "offload"),
    "O1": ("offload",),
    "O2": ("offload",),
    "O3": ("offload",),
    "O4": ("offload",),
    "O5": ("offload",),
    "J1": ("joint", "local"),
    COMBINED: ("local", "waste", "offload", "joint"),
}



INCLUDE = "# @include "


def new_module_text(path: Path) -> str:
    """A new vLLM module's text. A line ``# @include swa_prefix_cache/pyspec/<file>.py`` is
    replaced by that spec module's code from its first definition on (its
    docstring and imports stay behind: the new module has vLLM's), and a line
    ``# @include <file>.py: f, g`` by the named top-level functions of that
    file (``swa_prefix_cache/vllm_adapter/``'s glue), the imports that open their bodies
    dropped (the new module imports at its top). So the module vLLM gets is
    the code the project tests, not a copy of it."""
    out = []
    for line in path.read_text().splitlines(keepends=True):
        if not line.startswith(INCLUDE):
            out.append(line)
            continue
        where, _, names = line[len(INCLUDE):].partition(":")
        text = (ROOT / where.strip()).read_text()
        if names.strip():
            out.extend(_functions_of(text, [n.strip() for n in names.split(",")], where.strip()))
            continue
        tree = ast.parse(text)
        first = next(node for node in tree.body
                     if not isinstance(node, (ast.Import, ast.ImportFrom))
                     and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)))
        start = min([first.lineno] + [d.lineno for d in getattr(first, "decorator_list", [])])
        out.extend(text.splitlines(keepends=True)[start - 1:])
    return "".join(out)


def _functions_of(text: str, names: list[str], where: str) -> list[str]:
    """The source lines of top-level functions ``names`` of ``text``, in that
    order, two blank lines after each, without the import statements among
    their first statements (and the blank line each leaves)."""
    lines = text.splitlines(keepends=True)
    defs = {node.name: node for node in ast.parse(text).body if isinstance(node, ast.FunctionDef)}
    out: list[str] = []
    for name in names:
        node = defs.get(name)
        if node is None:
            raise SystemExit(f"@include {where}: no top-level function {name!r}")
        drop: set[int] = set()
        for stmt in node.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # the docstring
            if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                break
            drop.update(range(stmt.lineno, stmt.end_lineno + 1))
            if stmt.end_lineno < len(lines) and not lines[stmt.end_lineno].strip():
                drop.add(stmt.end_lineno + 1)
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        out.extend(lines[k - 1] for k in range(start, node.end_lineno + 1) if k not in drop)
        out.append("\n\n")
    return out


def use_release(version: str) -> Path:
    """Check release ``version``: its vLLM, its sdist tests, its own build
    folder (``build/upstream/findings/vllm-<version>``) and its fixes
    (``fixes/<version with _>/<id>.py`` where the fix differs from the
    venv's release); the site-packages folder holding its ``vllm``."""
    global VLLM_VERSION, SDIST, BUILD, STOCK_OVERLAY
    if not version.replace(".", "").isdigit() or version.count(".") != 2:
        raise SystemExit(f"UPSTREAM_VLLM must be a release like 0.34.0, got {version!r}")
    if version == VENV_VERSION:
        return site_packages()
    site = ROOT / "build" / "releases" / version
    if not (site / ".stamp").is_file() or not (site / f"vllm-{version}.dist-info").is_dir():
        raise SystemExit(f"vLLM {version} is not installed in {site.relative_to(ROOT)} "
                         f"(make {site.relative_to(ROOT)}/.stamp)")
    VLLM_VERSION = version
    SDIST = ROOT / "build" / "vllm-upstream" / f"vllm-{version}"
    BUILD = ROOT / "build" / "upstream" / "findings" / f"vllm-{version}"
    STOCK_OVERLAY = site
    return site


def log(msg: str) -> None:
    print(f"upstream-findings: {msg}", flush=True)


def site_packages() -> Path:
    import vllm  # the stock vLLM of this interpreter (the project venv)

    return Path(vllm.__file__).resolve().parents[1]


# ---- 1-2. fixes and patched sources ---------------------------------------------


@dataclass
class Replacement:
    qualname: str
    source: str  # the definition (decorators included), dedented
    origin: str  # fix file it came from


@dataclass
class Fix:
    fid: str
    files: tuple[str, ...]  # the fix files it is made of
    targets: dict[str, list[Replacement]] = field(default_factory=dict)
    base: dict[str, str] = field(default_factory=dict)
    new_files: dict[str, str] = field(default_factory=dict)  # vllm path -> text
    after: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # COMBINE part -> why left out


def _literal(tree: ast.Module, name: str, default: object) -> object:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    return default


def _defs(tree: ast.Module) -> dict[str, ast.AST]:
    """Qualified name -> definition, for top-level functions and the
    methods of top-level classes (the class is only a shell)."""
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            out[node.name] = node
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{node.name}.{sub.name}"] = sub
    return out


def _span(node: ast.AST) -> tuple[int, int]:
    """1-based first and last line of a definition, decorators included."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return first, node.end_lineno  # type: ignore[attr-defined]


def _segment(lines: list[str], node: ast.AST) -> str:
    first, last = _span(node)
    return "".join(lines[first - 1 : last])


def _dedent(text: str, col: int) -> str:
    out = []
    for line in text.splitlines(keepends=True):
        if line.strip():
            assert line[:col].strip() == "", f"cannot dedent {line!r} by {col}"
            out.append(line[col:])
        else:
            out.append(line.lstrip(" \t") if line.endswith("\n") else line)
    return "".join(out)


def _indent(text: str, col: int) -> str:
    pad = " " * col
    return "".join(pad + line if line.strip() else line for line in text.splitlines(keepends=True))


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Refused(Exception):
    """A fix that is not built for the release checked (``REFUSED`` in its
    file, or ``RELEASES`` without it): the reason says which vLLM function
    changed."""

    def __init__(self, fid: str, reason: str) -> None:
        super().__init__(f"{fid} on vLLM {VLLM_VERSION}: {reason}")
        self.fid, self.reason = fid, reason


def _shown(path: Path) -> str:
    """A fix file's path as logged: relative to the project when inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def fix_path(fid: str, fixes: Path = FIXES) -> Path:
    """The fix file of ``fid`` for the release checked: the release's own
    (``fixes/0_34_0/<fid>.py``) where vLLM's function changed, else the
    shared one, whose ``RELEASES`` must name the release."""
    own = fixes / VLLM_VERSION.replace(".", "_") / f"{fid}.py"
    return own if own.is_file() else fixes / f"{fid}.py"


def _check_release(fid: str, tree: ast.Module) -> None:
    """Refuse a fix file that is not for the release checked. ``RELEASES``:
    the releases whose definitions hash to ``BASE`` (a file without it, such
    as a one-release patch of another tool, is left to the BASE check);
    ``REFUSED``: release -> why there is no fix for it."""
    refused = _literal(tree, "REFUSED", {})
    if VLLM_VERSION in refused:  # type: ignore[operator]
        raise Refused(fid, str(refused[VLLM_VERSION]))  # type: ignore[index]
    releases = _literal(tree, "RELEASES", None)
    if releases is not None and VLLM_VERSION not in releases:  # type: ignore[operator]
        raise Refused(fid, f"the fix is written for vLLM {', '.join(releases)} "  # type: ignore[arg-type]
                           f"and there is no fixes/{VLLM_VERSION.replace('.', '_')}/{fid}.py")


def load_fix(fid: str, seen: tuple[str, ...] = (), fixes: Path = FIXES) -> Fix:
    """The fix ``fixes/<fid>.py`` for the release checked (another patch
    keeps its fix file elsewhere); raises ``Refused`` when it has none. A
    ``COMBINE`` part refused on the release is left out, or replaced by the
    part ``FALLBACK`` names for it, and recorded in ``Fix.refused``."""
    path = fix_path(fid, fixes)
    if not path.is_file():
        raise SystemExit(f"no fix file {_shown(path)}")
    text = path.read_text()
    tree = ast.parse(text)
    _check_release(fid, tree)
    use = _literal(tree, "USE", None)
    if use is not None:
        inner = load_fix(str(use), seen + (fid,), fixes)
        inner.fid, inner.files = fid, (_shown(path),) + inner.files
        return inner
    fix = Fix(fid, (_shown(path),))
    base_of: dict[str, str] = _literal(tree, "BASE", {})  # type: ignore[assignment]
    rename_of = _literal(tree, "RENAME_OF", None)
    if rename_of is not None:
        # One body for every release: this file gives the release's BASE and
        # the renames that carry the body onto its definitions.
        body = fixes / f"{rename_of}.py"
        text = renamed(body.read_text(), _literal(tree, "RENAMES", []), path.name)  # type: ignore[arg-type]
        tree = ast.parse(text)
        fix.files += (_shown(body),)
    fallback: dict[str, str] = _literal(tree, "FALLBACK", {})  # type: ignore[assignment]
    for part in _literal(tree, "COMBINE", []):  # type: ignore[union-attr]
        if part in seen:
            raise SystemExit(f"{fid}: cyclic COMBINE/USE through {part}")
        try:
            sub = load_fix(part, seen + (fid,), fixes)
        except Refused as exc:
            fix.refused[part] = exc.reason
            if part not in fallback:
                continue
            sub = load_fix(fallback[part], seen + (fid,), fixes)
        fix.refused.update(sub.refused)
        fix.files += tuple(f for f in sub.files if f not in fix.files)
        fix.base.update(sub.base)
        fix.after.update(sub.after)
        fix.new_files.update(sub.new_files)
        for target, reps in sub.targets.items():
            mine = fix.targets.setdefault(target, [])
            for rep in reps:
                clash = next((r for r in mine if r.qualname == rep.qualname), None)
                if clash is not None and clash.source != rep.source:
                    clash.origin += f" + {rep.origin}"  # resolved below or refused
                elif clash is None:
                    mine.append(rep)
    lines = text.splitlines(keepends=True)
    defs = _defs(tree)
    own: set[str] = set()
    for target, names in _literal(tree, "TARGETS", {}).items():  # type: ignore[union-attr]
        mine = fix.targets.setdefault(target, [])
        for qualname in names:
            node = defs.get(qualname)
            if node is None:
                raise SystemExit(f"{path.name}: TARGETS names {qualname}, which the file does not define")
            rep = Replacement(qualname, _dedent(_segment(lines, node), node.col_offset), path.name)
            mine[:] = [r for r in mine if r.qualname != qualname] + [rep]
            own.add(qualname)
    fix.base.update(base_of if rename_of is not None else _literal(tree, "BASE", {}))  # type: ignore[arg-type]
    fix.after.update(_literal(tree, "AFTER", {}))  # type: ignore[arg-type]
    for target, name in _literal(tree, "NEW_FILES", {}).items():  # type: ignore[union-attr]
        fix.new_files[target] = new_module_text(fixes / name)
        fix.files += (_shown(fixes / name),)
    for reps in fix.targets.values():
        for rep in reps:
            if "+" in rep.origin and rep.qualname not in own:
                raise SystemExit(
                    f"{fid}: {rep.origin} both replace {rep.qualname}; {path.name} must give the combined definition"
                )
    return fix


def renamed(text: str, renames: list[tuple[str, str]], where: str) -> str:
    """``text`` with each ``(old, new)`` of ``renames`` replaced everywhere;
    an ``old`` that no longer occurs is an error (the body changed under the
    table)."""
    for old, new in renames:
        if old not in text:
            raise SystemExit(f"{where}: RENAMES: {old!r} is not in the body")
        text = text.replace(old, new)
    return text


def patch_source(original: str, reps: list[Replacement], base: dict[str, str], after: dict[str, str], where: str) -> str:
    """``original`` with each replacement spliced in place of the
    definition of the same qualified name (or, for a new one, after the
    definition ``after[qualname]``)."""
    lines = original.splitlines(keepends=True)
    tree = ast.parse(original)
    defs = _defs(tree)
    edits: list[tuple[int, int, str]] = []  # (first line, last line, text), 1-based, inclusive
    for rep in reps:
        node = defs.get(rep.qualname)
        if node is None:
            anchor = after.get(rep.qualname)
            if anchor is None or anchor not in defs:
                raise SystemExit(f"{where}: no {rep.qualname} in vLLM and no AFTER anchor for it")
            anchor_node = defs[anchor]
            _, last = _span(anchor_node)
            text = "\n" + _indent(rep.source, anchor_node.col_offset)
            edits.append((last + 1, last, text))
            continue
        want = base.get(rep.qualname)
        have = sha256(_segment(lines, node))
        if want is None:
            raise SystemExit(f"{rep.origin}: no BASE sha256 for {rep.qualname} (vLLM {VLLM_VERSION}'s is {have})")
        if want != have:
            raise SystemExit(
                f"{rep.origin}: {rep.qualname} in the installed vLLM ({where}) is not the vLLM "
                f"{VLLM_VERSION} definition the fix was written against (sha256 {have}, expected {want})"
            )
        first, last = _span(node)
        edits.append((first, last, _indent(rep.source, node.col_offset)))
    for first, last, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        lines[first - 1 : last] = [text]
    patched = "".join(lines)
    ast.parse(patched)  # still Python
    return patched


@dataclass
class Built:
    fid: str
    fix: Fix
    site: Path  # PYTHONPATH entry holding the patched vllm/
    patch: Path
    files: tuple[str, ...]  # vllm paths touched
    digest: str  # of the patched texts: equal digests = the same patched vLLM
    diff_lines: int
    tests_root: Path = SDIST  # vLLM's tests (a patched copy when the fix updates some)
    updated_tests: tuple[str, ...] = ()  # "tests/...py::test_name" the fix replaces


def root_of(target: str, stock: Path) -> Path:
    """Where a path of a vLLM source checkout lives here: ``vllm/...`` in the
    installed package's site-packages, ``tests/...`` in the sdist tree."""
    if target.startswith("tests/"):
        return SDIST
    if target.startswith("vllm/"):
        return stock
    raise SystemExit(f"cannot place {target}: only vllm/... and tests/... are patched")


def build(fid: str, stock: Path, copy: bool = True, fixes: Path = FIXES, out: Path | None = None) -> Built:
    """Steps 2-4 for one fix (3, the copies, only with ``copy``); the fix
    file is ``fixes/<fid>.py``, the patch and the copies go to ``out``
    (default: the release's build folder)."""
    out = BUILD if out is None else out
    fix = load_fix(fid, fixes=fixes)
    patched: dict[str, str] = {}
    originals: dict[str, str | None] = {}
    for target, reps in sorted(fix.targets.items()):
        original = (root_of(target, stock) / target).read_text()
        originals[target] = original
        patched[target] = patch_source(original, reps, fix.base, fix.after, target)
    for target, text in fix.new_files.items():
        if (root_of(target, stock) / target).exists():
            raise SystemExit(f"{fid}: new file {target} already exists in vLLM")
        originals[target] = None
        patched[target] = text
    # 4. the diff
    out.mkdir(parents=True, exist_ok=True)
    chunks = []
    for target in sorted(patched):
        old = originals[target]
        chunks.extend(
            difflib.unified_diff(
                [] if old is None else old.splitlines(keepends=True),
                patched[target].splitlines(keepends=True),
                "/dev/null" if old is None else f"a/{target}",
                f"b/{target}",
            )
        )
    diff = "".join(chunks)
    header = (
        f"# {fid}: generated by upstream/findings/check.py from {', '.join(fix.files)}\n"
        f"# against the installed vLLM {VLLM_VERSION} (vllm/) and its sdist tests (tests/); paths are those of a\n"
        f"# vLLM source checkout: patch -p1 -d <checkout> < {fid}.patch\n"
    )
    patch_path = out / f"{fid}.patch"
    patch_path.write_text(header + diff)
    _prove_applies(fid, patch_path, originals, patched)
    digest = sha256(json.dumps(sorted(patched.items())))
    updated = tuple(
        f"{target}::{rep.qualname}" for target, reps in sorted(fix.targets.items())
        if target.startswith("tests/") for rep in reps
    )
    if not copy:
        return Built(fid, fix, out / f"site-{fid}", patch_path, tuple(sorted(patched)), digest,
                     diff.count("\n"), SDIST, updated)
    # 3. the temporary copies: vLLM, and vLLM's tests when the fix updates some
    site = out / f"site-{fid}"
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    subprocess.run(["cp", "-al", str(stock / "vllm"), str(site / "vllm")], check=True)
    info = stock / f"vllm-{VLLM_VERSION}.dist-info"
    if VLLM_VERSION != VENV_VERSION and info.is_dir():
        # The copy reports its release's version (the venv's dist-info would say 0.33.0).
        subprocess.run(["cp", "-al", str(info), str(site / info.name)], check=True)
    tests_root = SDIST
    if any(t.startswith("tests/") for t in patched):
        tests_root = out / f"sdist-{fid}"
        if tests_root.exists():
            shutil.rmtree(tests_root)
        tests_root.mkdir(parents=True)
        for name in ("tests", "pyproject.toml", "PKG-INFO"):
            subprocess.run(["cp", "-al", str(SDIST / name), str(tests_root / name)], check=True)
    for target, text in patched.items():
        dest = (tests_root if target.startswith("tests/") else site) / target
        if dest.exists():
            dest.unlink()  # never write through a hard link into the venv
        dest.write_text(text)
        assert dest.stat().st_nlink == 1
        cache = dest.parent / "__pycache__"
        if cache.is_dir():
            for pyc in cache.glob(dest.stem + ".*.pyc"):
                pyc.unlink()
    for target, old in originals.items():
        if old is not None:
            assert (root_of(target, stock) / target).read_text() == old, f"the original {target} changed"
    return Built(fid, fix, site, patch_path, tuple(sorted(patched)), digest, diff.count("\n"), tests_root, updated)


def _prove_applies(fid: str, patch_path: Path, originals: dict[str, str | None], patched: dict[str, str]) -> None:
    """``patch -p1`` the diff onto real copies of the original files; the
    result must be exactly the patched text."""
    with tempfile.TemporaryDirectory(dir=patch_path.parent) as tmp:
        for target, old in originals.items():
            if old is not None:
                dest = Path(tmp) / target
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(old)
        res = subprocess.run(
            ["patch", "-p1", "--batch", "--forward", "-d", tmp, "-i", str(patch_path)],
            capture_output=True, text=True,
        )
        if res.returncode != 0:
            raise SystemExit(f"{fid}: {patch_path.name} does not apply:\n{res.stdout}{res.stderr}")
        for target, text in patched.items():
            got = (Path(tmp) / target).read_text()
            if got != text:
                raise SystemExit(f"{fid}: {patch_path.name} applied gives another {target} than the tested copy")


# ---- 5-7. the runs ----------------------------------------------------------------


def clean_env(site: Path | None, extra_path: tuple[Path, ...] = ()) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SWA_PREFIX_CACHE_", "PYTHON"))}
    env.update(
        VLLM_PLUGINS="",  # no general plugin (this project's included) is loaded
        SWA_PREFIX_CACHE_MODE="off",
        SWA_PREFIX_CACHE_OFFLOAD_FILTER="off",
        VLLM_TARGET_DEVICE="cpu",
        VLLM_NO_USAGE_STATS="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    site = site or STOCK_OVERLAY  # stock: the release's own folder, unless it is the venv's
    path = ([str(site)] if site else []) + [str(p) for p in extra_path]
    if path:
        env["PYTHONPATH"] = os.pathsep.join(path)
    return env


@dataclass
class Result:
    name: str
    ok: bool
    summary: str
    seconds: float
    output: str = ""


def run_repro(fid: str, site: Path | None, stock: Path) -> Result:
    """The reproduction on stock (``site`` None; must exit 1) or on the
    patched copy (must exit 0), on the vLLM it says."""
    t0 = time.monotonic()
    script = HERE / f"{fid}.py"
    res = subprocess.run(
        [sys.executable, str(script)], cwd=str(BUILD), env=clean_env(site),
        capture_output=True, text=True, timeout=600,
    )
    out = res.stdout + res.stderr
    label = "stock" if site is None else site.name.removeprefix("site-")
    (BUILD / "repro").mkdir(exist_ok=True)
    (BUILD / "repro" / f"{fid}-on-{label}.txt").write_text(out)
    vllm_dir = (site / "vllm") if site else (stock / "vllm")
    where = f"vLLM {VLLM_VERSION} from {vllm_dir}"
    want = 0 if site else 1
    ok = res.returncode == want and where in out
    label = "patched" if site else "stock"
    why = "" if where in out else f" (ran on another vLLM than {vllm_dir})"
    return Result(f"{fid} reproduction on {label}", ok, f"exit {res.returncode} (want {want}){why}", time.monotonic() - t0, out)


def run_repros_in_one_process(fids: list[str], site: Path) -> list[Result]:
    """Every reproduction on the combined copy, one after the other in one
    interpreter (``--run-repros``: vLLM is imported once). Each is also run
    alone, as its own process, on the stock vLLM and on its own fix."""
    t0 = time.monotonic()
    res = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--run-repros", *fids], cwd=str(BUILD),
        env=clean_env(site), capture_output=True, text=True, timeout=1200,
    )
    seconds = time.monotonic() - t0
    try:
        runs = json.loads(res.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return [Result(f"reproductions on {site.name}", False, f"runner exit {res.returncode}", seconds, res.stdout + res.stderr)]
    out = []
    where = f"vLLM {VLLM_VERSION} from {site / 'vllm'}"
    for fid in fids:
        rc, text = runs[fid]
        (BUILD / "repro").mkdir(exist_ok=True)
        (BUILD / "repro" / f"{fid}-on-{site.name.removeprefix('site-')}.txt").write_text(text)
        ok = rc == 0 and where in text
        out.append(Result(f"{fid} reproduction on {site.name.removeprefix('site-')} (in one process)", ok,
                          f"exit {rc} (want 0)", seconds / len(fids), text))
    return out


def _run_repros(fids: list[str]) -> int:
    """``--run-repros``: run reproductions in this interpreter; print one
    JSON line ``{id: [exit code, output]}``."""
    import contextlib
    import io
    import runpy

    sys.path.insert(0, str(HERE))
    runs = {}
    for fid in fids:
        buf = io.StringIO()
        code: object = 0
        sys.argv = [str(HERE / f"{fid}.py")]
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                runpy.run_path(str(HERE / f"{fid}.py"), run_name="__main__")
            except SystemExit as exc:
                code = exc.code
        runs[fid] = [code if isinstance(code, int) else 1, buf.getvalue()]
    print(json.dumps(runs))
    return 0


def run_property(built: Built, cases: int, label: str = "") -> Result:
    t0 = time.monotonic()
    kinds = PROPERTIES[built.fid]
    fixed = _fixed_by(built.fid)
    report = BUILD / f"property-{built.fid}.json"
    env = clean_env(built.site, (ROOT, ROOT / "tests"))
    env.update(
        UPSTREAM_FINDINGS_FIXED=",".join(fixed),
        UPSTREAM_FINDINGS_CASES=str(cases),
        UPSTREAM_FINDINGS_REPORT=str(report),
        UPSTREAM_FINDINGS_VLLM=str(built.site / "vllm"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
         "-k", " or ".join(kinds), str(HERE / "property_check.py")],
        cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=1800,
    )
    out = res.stdout + res.stderr
    counts = json.loads(report.read_text()) if report.exists() else {}
    total = sum(v for k, v in counts.items() if k != "vllm")
    detail = ", ".join(f"{k} {v}" for k, v in counts.items() if k != "vllm")
    ok = res.returncode == 0 and total > 0 and counts.get("vllm") == str(built.site / "vllm")
    tail = out.strip().splitlines()[-1] if out.strip() else ""
    return Result(f"{label or built.fid} agreement property (fixed: {','.join(fixed)})", ok, f"{detail or 'no cases'}; {tail}", time.monotonic() - t0, out)


def _fixed_by(fid: str) -> tuple[str, ...]:
    """The findings a fix claims to fix: itself (a combination: each of its
    parts), and (``ALSO_FIXES`` in the fix file) any it fixes on the side;
    on the release checked (a part refused there claims nothing, its
    ``FALLBACK`` what it fixes)."""
    tree = ast.parse(fix_path(fid).read_text())
    out: list[str] = [] if fid == COMBINED else [fid]
    fallback: dict[str, str] = _literal(tree, "FALLBACK", {})  # type: ignore[assignment]
    for part in _literal(tree, "COMBINE", ()):  # type: ignore[union-attr]
        try:
            _check_release(part, ast.parse(fix_path(part).read_text()))
            out += _fixed_by(part)
        except Refused:
            if part in fallback:
                out += _fixed_by(fallback[part])
    use = _literal(tree, "USE", None)
    if use is not None:
        out += _fixed_by(str(use))
    out += _literal(tree, "ALSO_FIXES", ())  # type: ignore[arg-type]
    return tuple(f for f in FINDINGS if f in out)


def _junit(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        state = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                state = "failed"
            elif child.tag == "skipped":
                state = "skipped"
        out[name] = state
    return out


def test_paths(files: tuple[str, ...]) -> tuple[str, ...]:
    paths: list[str] = []
    for f in files:
        for p in (f,) if f.startswith("tests/") else AREA_TESTS.get(f, CORE_TESTS):
            if p not in paths and not any(p.startswith(q.rstrip("/") + "/") for q in paths):
                paths.append(p)
    return tuple(p for p in paths if (SDIST / p).exists())


def run_vllm_tests(
    label: str, site: Path | None, paths: tuple[str, ...], hf_home: Path, stock: Path, root: Path | None = None,
    out: Path | None = None,
) -> tuple[Result, dict[str, str]]:
    """vLLM's own tests ``paths`` (of the test tree ``root``, default the
    release's sdist) on the stock vLLM (``site`` None) or a patched copy; the
    outcome of every test (the junit report goes to ``out``, default the
    release's build folder)."""
    t0 = time.monotonic()
    root = SDIST if root is None else root
    out = BUILD if out is None else out
    junit = out / f"vllm-tests-{label}.xml"
    if junit.exists():
        junit.unlink()
    env = clean_env(site, (HERE, ROOT / "scripts" / "vllm_upstream", SDIST_SITE))
    env.update(HF_HOME=str(hf_home), UPSTREAM_FINDINGS_VLLM=str((site or stock) / "vllm"))
    ignores = [f"--ignore={p}" for p in IGNORED_TESTS if (root / p).exists()]
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "findings_pytest_plugin", "-p", "no:cacheprovider",
         f"--rootdir={root}", "-c", str(root / "pyproject.toml"), f"--junitxml={junit}", *ignores, *paths],
        cwd=str(root), env=env, capture_output=True, text=True, timeout=1800,
    )
    out = res.stdout + res.stderr
    states = _junit(junit) if junit.exists() else {}
    tail = next((line for line in reversed(out.splitlines()) if " passed" in line or " failed" in line), "")
    ok = bool(states) and "findings_pytest_plugin: vllm at" in out
    return Result(f"vLLM's tests ({label})", ok, tail, time.monotonic() - t0, out), states


def _test_key(node: str) -> str:
    """``tests/a/b.py::Class.name`` -> the junit key prefix
    ``tests.a.b.Class::name``."""
    path, qualname = node.split("::", 1)
    owner, _, name = qualname.rpartition(".")
    return f"{_mod(path)}{'.' + owner if owner else ''}::{name}"


def _node_id(node: str) -> str:
    """``tests/a/b.py::Class.name`` -> pytest's ``tests/a/b.py::Class::name``."""
    path, qualname = node.split("::", 1)
    return f"{path}::{qualname.replace('.', '::')}"


def compare_tests(fid: str, stock: dict[str, str], patched: dict[str, str], run: Result, updated: tuple[str, ...]) -> Result:
    """Every test that passes on stock passes on the patched copy (with the
    fix's updated tests in place of vLLM's)."""
    broken = sorted(t for t, s in stock.items() if s == "passed" and patched.get(t) != "passed")
    passed = sum(1 for s in patched.values() if s == "passed")
    stock_passed = sum(1 for s in stock.values() if s == "passed")
    ok = run.ok and not broken and stock_passed > 0
    summary = f"{passed} passed patched / {stock_passed} passed stock, {len(broken)} broken"
    if broken:
        summary += " (" + ", ".join(broken[:8]) + ")"
    if updated:
        summary += f"; {len(updated)} test function(s) updated by the fix"
    return Result(f"{fid} vLLM's own tests", ok, summary, run.seconds, run.output if not ok else "")


def check_updated_fail_on_stock(fid: str, updated: tuple[str, ...], states: dict[str, str], run: Result) -> Result:
    """The fix's updated tests, run on the stock vLLM: each must fail in at
    least one case (it pins the fixed behaviour)."""
    pinned, unpinned = [], []
    for node in updated:
        key = _test_key(node)
        cases = {t: s for t, s in states.items() if t == key or t.startswith(key + "[")}
        (pinned if any(s == "failed" for s in cases.values()) else unpinned).append(node.split("::")[1])
    if not states:
        return Result(f"{fid} updated vLLM tests on stock", False, "the run reported no test", run.seconds, run.output)
    ok = run.ok and not unpinned
    summary = f"{len(pinned)} of {len(updated)} updated test function(s) fail on stock"
    if unpinned:
        summary += f"; passing on stock too (do not pin the fix): {', '.join(unpinned)}"
    return Result(f"{fid} updated vLLM tests on stock", ok, summary, run.seconds, run.output if not ok else "")


def ensure_sdist() -> None:
    """vLLM's test tree, fetched by scripts/vllm_upstream_tests.sh's own
    functions (fetch_sdist, install_test_deps) when it is not there yet."""
    if (SDIST / ".complete").exists() and (SDIST_SITE / ".stamp").exists():
        return
    script = ROOT / "scripts" / "vllm_upstream_tests.sh"
    log("vLLM's sdist tests are not in build/vllm-upstream yet: fetching them with scripts/vllm_upstream_tests.sh's fetch_sdist")
    prog = f"""
set -euo pipefail
ROOT={ROOT}; PY={sys.executable}; VLLM_VERSION={VLLM_VERSION}
HERE=$ROOT/scripts/vllm_upstream; WORK=$ROOT/build/vllm-upstream
SRC=$WORK/vllm-$VLLM_VERSION; SITE=$WORK/site-packages
eval "$(sed -n -e '/^log() /p' -e '/^fetch_sdist() {{/,/^}}/p' -e '/^install_test_deps() {{/,/^}}/p' {script})"
declare -F fetch_sdist install_test_deps >/dev/null
fetch_sdist
install_test_deps
"""
    subprocess.run(["bash", "-c", prog], check=True)


def hf_cache(out: Path | None = None) -> Path:
    """An offline Hugging Face cache (config.json of each model the tests name)."""
    out = BUILD if out is None else out
    home = out / "hf-home"
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "vllm_upstream" / "hf_offline_cache.py"), str(home)],
        check=True, capture_output=True,
    )
    return home


# ---- main ------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ids", nargs="*", help=f"findings to check (default: every one with a fix, then {COMBINED})")
    ap.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--cases", type=int, default=int(os.environ.get("UPSTREAM_FINDINGS_CASES", "100")),
                    help="random cases per property and fix (ALL: 3x)")
    ap.add_argument("--no-vllm-tests", action="store_true")
    ap.add_argument("--no-property", action="store_true")
    ap.add_argument("--list", action="store_true", help="list the findings and their fix files")
    ap.add_argument("--run-repros", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--show", nargs=2, metavar=("VLLM_FILE", "QUALNAME"),
                    help="print a definition of the installed vLLM and its BASE sha256 (to write a fix)")
    args = ap.parse_args()
    if args.run_repros:
        return _run_repros(args.ids)
    stock = use_release(os.environ.get("UPSTREAM_VLLM") or VENV_VERSION)
    if args.show:
        text = (root_of(args.show[0], stock) / args.show[0]).read_text()
        node = _defs(ast.parse(text))[args.show[1]]
        seg = _segment(text.splitlines(keepends=True), node)
        print(f"# BASE sha256 {sha256(seg)}")
        print(_dedent(seg, node.col_offset), end="")
        return 0
    t_start = time.monotonic()
    ids = args.ids or [f for f in FINDINGS if (FIXES / f"{f}.py").exists()] + [COMBINED]
    for fid in ids:
        if fid not in FINDINGS and fid != COMBINED:
            raise SystemExit(f"unknown finding {fid}; known: {', '.join(FINDINGS)}, {COMBINED}")
    missing = [f for f in FINDINGS if not (FIXES / f"{f}.py").exists() or not (HERE / f"{f}.py").exists()]
    if args.list:
        for fid in FINDINGS + (COMBINED,):
            try:
                state = "missing" if fid in missing else ", ".join(load_fix(fid).files)
            except Refused as exc:
                state = f"refused on vLLM {VLLM_VERSION}: {exc.reason}"
            print(f"{fid}: {state}")
        return 0
    BUILD.mkdir(parents=True, exist_ok=True)

    log(f"stock vLLM {VLLM_VERSION} at {stock / 'vllm'}")
    ensure_sdist()  # vLLM's tests: run below, and some fixes update them
    built: dict[str, Built] = {}
    refused: dict[str, str] = {}  # finding -> why it has no fix on this release
    for fid in ids:
        try:
            b = build(fid, stock)
        except Refused as exc:
            refused[fid] = exc.reason
            log(f"{fid}: REFUSED on vLLM {VLLM_VERSION}: {exc.reason} (only its reproduction on stock runs)")
            continue
        built[fid] = b
        log(f"{fid}: {', '.join(b.fix.files)} -> {b.patch.relative_to(ROOT)} ({b.diff_lines} diff lines, "
            f"applies with patch -p1; {', '.join(b.files)}); copy {b.site.relative_to(ROOT)}")
        for part, why in b.fix.refused.items():
            log(f"{fid}: without {part}, refused on vLLM {VLLM_VERSION}: {why}")
    stock_only = [f for f in ids if f in refused and f != COMBINED]
    ids = [f for f in ids if f in built]

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures: dict[concurrent.futures.Future, str] = {}
        # The longest runs first (vLLM's tests), the shortest last.
        test_runs: dict[str, concurrent.futures.Future] = {}
        pin_runs: dict[str, concurrent.futures.Future] = {}
        test_groups: dict[str, list[str]] = {}
        if not args.no_vllm_tests:
            hf = hf_cache()
            for fid in ids:
                test_groups.setdefault(built[fid].digest, []).append(fid)
            all_paths: list[str] = []
            for same in test_groups.values():
                for p in test_paths(built[same[0]].files):
                    if p not in all_paths:
                        all_paths.append(p)
            stock_future = pool.submit(run_vllm_tests, "stock", None, tuple(all_paths), hf, stock)
            for digest, same in test_groups.items():
                b = built[same[0]]
                label = "+".join(same)
                test_runs[digest] = pool.submit(run_vllm_tests, label, b.site, test_paths(b.files), hf, stock, b.tests_root)
                if b.updated_tests:
                    pin_runs[digest] = pool.submit(
                        run_vllm_tests, f"{label}-updated-on-stock", None,
                        tuple(_node_id(n) for n in b.updated_tests), hf, stock, b.tests_root)
        # One property run per distinct patched vLLM.
        by_digest: dict[str, list[str]] = {}
        for fid in ids:
            by_digest.setdefault(built[fid].digest + ",".join(PROPERTIES[fid]), []).append(fid)
        if not args.no_property:
            for same in by_digest.values():
                b = built[same[0]]
                cases = args.cases * (3 if b.fid == COMBINED else 1)
                futures[pool.submit(run_property, b, cases, "+".join(same))] = ",".join(same)
        for fid in ids:
            if fid != COMBINED:
                futures[pool.submit(run_repro, fid, None, stock)] = fid
                futures[pool.submit(run_repro, fid, built[fid].site, stock)] = fid
        for fid in stock_only:  # the bug is still there (a fix for it would be needed)
            futures[pool.submit(run_repro, fid, None, stock)] = fid
        if COMBINED in ids:
            fixed_all = _fixed_by(COMBINED)
            done_ids = [f for f in FINDINGS if f not in missing and f in fixed_all]
            futures[pool.submit(run_repros_in_one_process, done_ids, built[COMBINED].site)] = COMBINED
        results: list[Result] = []
        for fut in concurrent.futures.as_completed(futures):
            got = fut.result()
            for r in got if isinstance(got, list) else [got]:
                results.append(r)
                log(f"{'ok  ' if r.ok else 'FAIL'} {r.name}: {r.summary} ({r.seconds:.0f} s)")
        if test_runs:
            stock_run, stock_states = stock_future.result()
            log(f"{'ok  ' if stock_run.ok else 'FAIL'} vLLM's tests on stock: {stock_run.summary} ({stock_run.seconds:.0f} s)")
            if not stock_run.ok:
                results.append(stock_run)
            for digest, fut in test_runs.items():
                run, states = fut.result()
                b = built[test_groups[digest][0]]
                prefixes = tuple(_mod(p) for p in test_paths(b.files))
                sub = {t: s for t, s in stock_states.items() if t.startswith(prefixes)}
                label = "+".join(test_groups[digest])
                checks = [compare_tests(label, sub, states, run, b.updated_tests)]
                if digest in pin_runs:
                    checks.append(check_updated_fail_on_stock(label, b.updated_tests, *pin_runs[digest].result()[::-1]))
                for r in checks:
                    results.append(r)
                    log(f"{'ok  ' if r.ok else 'FAIL'} {r.name}: {r.summary} ({r.seconds:.0f} s)")

    failed = [r for r in results if not r.ok]
    for r in failed:
        print(f"\n===== FAILED: {r.name}: {r.summary}\n{r.output[-6000:]}")
    (BUILD / "summary.json").write_text(json.dumps(
        [{"name": r.name, "ok": r.ok, "summary": r.summary, "seconds": round(r.seconds, 1)} for r in results]
        + [{"name": f"{fid} fix", "ok": None, "refused": why} for fid, why in refused.items()], indent=1))
    done = [f for f in FINDINGS if f in ids]
    log(f"vLLM {VLLM_VERSION}: findings checked: {', '.join(done) or '-'}"
        + (f"; not yet done (no reproduction or fix): {', '.join(missing)}" if missing else ""))
    for fid, why in refused.items():
        log(f"REFUSED on vLLM {VLLM_VERSION}: {fid}: {why}")
    if COMBINED in built and built[COMBINED].fix.refused:
        log(f"{COMBINED} on vLLM {VLLM_VERSION} is every fix that applies there; left out: "
            + ", ".join(built[COMBINED].fix.refused))
    log(f"{len(results) - len(failed)} of {len(results)} checks passed in {time.monotonic() - t_start:.0f} s")
    return 1 if failed else 0


def _mod(path: str) -> str:
    """junit classname prefix of a test path (``tests.v1.core.test_x``)."""
    p = path[:-3] if path.endswith(".py") else path
    return p.replace("/", ".")


if __name__ == "__main__":
    sys.exit(main())
