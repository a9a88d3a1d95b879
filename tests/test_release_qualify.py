"""scripts/release_qualify.py's per-function verdicts, on source trees made
here (no download): unchanged, cosmetic (same syntax tree), code (with its
diff), missing and new."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import release_qualify  # noqa: E402

from swa_prefix_cache.vllm_adapter.fingerprint import Binding, Source  # noqa: E402

BASE = '''
class Pool:
    def get(self, key):
        """Reads the map."""
        return self._cache.get(key)

    def put(self, key, block):
        self._cache[key] = block

    def drop(self, key):
        self._cache.pop(key, None)


def cdiv(a, b):
    return -(a // -b)
'''

NEW = '''
class Pool:
    def get(self, key):
        # A comment and another docstring: the same code.
        """Reads the hash map."""
        return self._cache.get(key)

    def put(self, key, block):
        self._cache[key] = block.block_id

    def fresh(self):
        return {}


def cdiv(a, b):
    return -(a // -b)
'''


def _tree(root: Path, text: str) -> Path:
    path = root / "pkg" / "mod.py"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return root


def test_each_function_gets_its_verdict(tmp_path: Path) -> None:
    base, new = _tree(tmp_path / "a", BASE), _tree(tmp_path / "b", NEW)
    names = ("Pool.get", "Pool.put", "Pool.drop", "Pool.fresh", "cdiv")
    binding = Binding("demo", "a demo", tuple(Source(n, "pkg.mod", n) for n in names))
    rows = {r["function"]: r for r in release_qualify.compare(binding, base, new, "1.0", "1.1")}
    assert {n: r["change"] for n, r in rows.items()} == {
        "Pool.get": "cosmetic", "Pool.put": "code", "Pool.drop": "missing", "Pool.fresh": "new",
        "cdiv": "unchanged"}
    diff = rows["Pool.put"]["diff"]
    assert "-        self._cache[key] = block\n" in diff
    assert "+        self._cache[key] = block.block_id\n" in diff
    assert all("diff" not in r for n, r in rows.items() if n != "Pool.put")
