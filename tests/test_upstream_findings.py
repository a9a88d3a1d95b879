"""Fast checks of upstream/findings/ (the stand-alone reproductions and the
upstream fixes of the store/lookup findings, docs/upstream-findings.md).

The full check -- each reproduction failing on stock vLLM and passing on its
patched copy, the agreement property on random cases, vLLM's own tests -- is
``make upstream-findings`` (upstream/findings/check.py). Here, without running
vLLM:

* every finding has a reproduction and a fix, and ``ALL`` combines them;
* the reproductions and their helper import nothing but the standard library,
  vLLM and ``_repro`` (a maintainer runs them on a stock vLLM alone);
* every fix still applies to the installed vLLM: the definitions it replaces
  hash to its ``BASE`` (vLLM 0.33.0), the patched files parse, and the
  generated diff applies with ``patch -p1`` to exactly the patched text;
* every fix names the releases its ``BASE`` is for (``RELEASES``), and on
  vLLM 0.34.0 (build/releases/0.34.0, when installed) each one applies or is
  refused with its reason, never patched against another definition.
"""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FINDINGS_DIR = ROOT / "upstream" / "findings"
sys.path.insert(0, str(FINDINGS_DIR))

import check  # noqa: E402  (upstream/findings/check.py)

ALLOWED_TOP = set(sys.stdlib_module_names) | {"vllm", "_repro", "torch"}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_every_finding_has_a_reproduction_and_a_fix() -> None:
    for fid in check.FINDINGS:
        assert (FINDINGS_DIR / f"{fid}.py").is_file(), fid
        assert (check.FIXES / f"{fid}.py").is_file(), fid
    assert set(check.FINDINGS) <= set(check._fixed_by(check.COMBINED))


@pytest.mark.parametrize("name", [*check.FINDINGS, "_repro"])
def test_reproductions_import_only_stdlib_and_vllm(name: str) -> None:
    used = _imports(FINDINGS_DIR / f"{name}.py")
    assert used <= ALLOWED_TOP, used - ALLOWED_TOP
    assert not used & {"swa_prefix_cache", "vllm_adapter", "pyspec", "extracted_c", "kv_index"}


@pytest.mark.parametrize("fid", [*check.FINDINGS, check.COMBINED])
def test_fix_applies_to_the_installed_vllm(fid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("vllm")
    if shutil.which("patch") is None:
        pytest.skip("no patch(1)")
    fix = check.load_fix(fid)
    if any(t.startswith("tests/") for t in fix.targets) and not (check.SDIST / "tests").is_dir():
        pytest.skip("vLLM's sdist tests are not fetched (make vllm-upstream-tests or make upstream-findings)")
    monkeypatch.setattr(check, "BUILD", tmp_path)
    built = check.build(fid, check.site_packages(), copy=False)
    text = built.patch.read_text()
    assert text.count("\n+++ b/") + text.startswith("+++ b/") >= 1
    assert built.diff_lines > 0


def test_new_vllm_module_is_the_spec_verbatim() -> None:
    """The store filter the O2-O5 fix adds to vLLM is swa_prefix_cache/pyspec/offload.py's
    code itself (``# @include``), under vLLM's imports: no copy to drift."""
    spec = (check.ROOT / "swa_prefix_cache" / "pyspec" / "offload.py").read_text()
    (text,) = check.load_fix("O2").new_files.values()
    assert check.INCLUDE not in text
    body = spec[spec.index("@dataclass(frozen=True)"):]
    assert body in text
    assert "from pyspec" not in text and "from vllm.utils.math_utils import cdiv" in text


def test_new_vllm_module_has_the_adapters_glue() -> None:
    """The same module's mapping of vLLM's scheduler config to the spec's
    groups, and the block mask, are the adapter's own functions
    (``# @include swa_prefix_cache/vllm_adapter/offload_filter.py: ...``): the same syntax
    tree once the imports that open the adapter's bodies are left out."""
    import ast

    (text,) = check.load_fix("O2").new_files.values()
    adapter = (check.ROOT / "swa_prefix_cache" / "vllm_adapter" / "offload_filter.py").read_text()

    def bodies(source: str, drop_imports: bool) -> dict[str, str]:
        out = {}
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name in ("offload_groups", "corrected_block_mask"):
                if drop_imports:
                    node.body = [s for s in node.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
                out[node.name] = ast.dump(node)
        return out

    assert bodies(text, False) == bodies(adapter, True)
    assert len(bodies(text, False)) == 2
    assert "from vllm_adapter" not in text and "import OffloadGroup" not in text


NEXT = "0.34.0"
# What 0.34.0 gets (docs/upstream-findings.md, "Per release"): O1 has a fix of
# its own there, the corrected offload filter (O2-O5) is refused.
NEXT_REFUSED = {"O2", "O3", "O4", "O5"}


def _fix_files() -> list[Path]:
    return sorted(check.FIXES.glob("*.py")) + sorted(check.FIXES.glob("*/*.py"))


def test_every_fix_names_its_releases() -> None:
    """A fix with ``BASE`` digests says which releases they are for; one in
    a release's folder is for that release; a refusal says why."""
    for path in _fix_files():
        tree = ast.parse(path.read_text())
        releases = check._literal(tree, "RELEASES", None)
        refused = check._literal(tree, "REFUSED", {})
        if check._literal(tree, "BASE", None) is not None:
            assert releases, f"{path.name}: BASE without RELEASES"
        if path.parent != check.FIXES:
            assert releases == (path.parent.name.replace("_", "."),), path
        for release, why in refused.items():  # type: ignore[union-attr]
            assert release not in (releases or ()), path
            assert isinstance(why, str) and len(why) > 40, path


@pytest.fixture
def next_release(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """check.py pointed at vLLM 0.34.0 (restored afterwards); its folder."""
    pytest.importorskip("vllm")
    if shutil.which("patch") is None:
        pytest.skip("no patch(1)")
    if not (check.ROOT / "build" / "releases" / NEXT / ".stamp").is_file():
        pytest.skip(f"vLLM {NEXT} is not installed in build/releases (make build/releases/{NEXT}/.stamp)")
    for name in ("VLLM_VERSION", "SDIST", "BUILD", "STOCK_OVERLAY"):
        monkeypatch.setattr(check, name, getattr(check, name))
    site = check.use_release(NEXT)
    if not (check.SDIST / "tests").is_dir():
        pytest.skip(f"vLLM {NEXT}'s sdist tests are not fetched (make vllm-upstream-tests-next)")
    monkeypatch.setattr(check, "BUILD", tmp_path)
    return site


@pytest.mark.parametrize("fid", [*check.FINDINGS, check.COMBINED])
def test_fix_applies_or_is_refused_on_the_next_release(fid: str, next_release: Path) -> None:
    if fid in NEXT_REFUSED:
        with pytest.raises(check.Refused, match="_reachable_store_block_mask"):
            check.build(fid, next_release, copy=False)
        return
    built = check.build(fid, next_release, copy=False)
    assert built.diff_lines > 0
    assert f"vLLM {NEXT}" in built.patch.read_text().splitlines()[1]
    if fid == check.COMBINED:
        assert set(built.fix.refused) == {"store_filter"}
        assert "upstream/findings/fixes/0_34_0/O1.py" in built.fix.files
        assert set(check._fixed_by(fid)) == set(check.FINDINGS) - NEXT_REFUSED


def test_a_fix_not_for_the_release_is_refused(next_release: Path, tmp_path: Path) -> None:
    """Planted: L1's fix claiming only 0.33.0 is refused on 0.34.0 (not
    patched), and one claiming 0.34.0 with another BASE digest stops the
    build: the release list and the digests are both checked."""
    fixes = tmp_path / "fixes"
    fixes.mkdir()
    text = (check.FIXES / "L1.py").read_text()
    claimed = 'RELEASES = ("0.33.0", "0.34.0")'
    assert claimed in text
    (fixes / "L1.py").write_text(text.replace(claimed, 'RELEASES = ("0.33.0",)'))
    with pytest.raises(check.Refused, match="written for vLLM 0.33.0"):
        check.build("L1", next_release, copy=False, fixes=fixes, out=tmp_path)
    base = check._literal(ast.parse(text), "BASE", {})["SlidingWindowManager.reachable_block_mask"]
    (fixes / "L1.py").write_text(text.replace(base, "0" * 64))
    with pytest.raises(SystemExit, match="is not the vLLM 0.34.0 definition"):
        check.build("L1", next_release, copy=False, fixes=fixes, out=tmp_path)
