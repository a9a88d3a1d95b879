"""Fingerprints of meaning (swa_prefix_cache/vllm_adapter/source_tree.py, fingerprint.py).

* A docstring, comment or blank-line edit keeps a fingerprint; a one-token
  code change (an operator, a constant, a name) changes it: checked on the
  real source of every replicated vLLM function, edited each way.
* The live object and its file, read without import, give the same digest.
* The installed vLLM matches a known variant of every binding, and the
  table (swa_prefix_cache/vllm_adapter/known_sources.py) has one variant per distinct
  fingerprint set.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest

from swa_prefix_cache.vllm_adapter import known_sources
from swa_prefix_cache.vllm_adapter.fingerprint import BINDINGS, Binding, match
from swa_prefix_cache.vllm_adapter.source_tree import canonical, file_digests, tree_digest

pytest.importorskip("vllm")

from swa_prefix_cache.vllm_adapter import fingerprint  # noqa: E402
from swa_prefix_cache.vllm_adapter.source_tree import _unwrap, object_digest  # noqa: E402


def _digest(source: str) -> str:
    return tree_digest(ast.parse(textwrap.dedent(source)).body[0])


def _all_sources() -> list[tuple[str, str]]:
    """(name, dedented source) of every replicated function found here."""
    found: dict[str, str] = {}
    for binding in BINDINGS:
        for source in binding.sources:
            try:
                obj = source.resolve()
            except Exception:
                continue
            found[source.name] = textwrap.dedent(inspect.getsource(_unwrap(obj)))
    return sorted(found.items())


SOURCES = _all_sources()


def test_sources_found() -> None:
    assert len(SOURCES) >= 25


@pytest.mark.parametrize("name,source", SOURCES, ids=[n for n, _ in SOURCES])
def test_cosmetic_edits_keep_the_fingerprint(name: str, source: str) -> None:
    base = _digest(source)
    lines = source.splitlines()
    # A comment and blank lines after the signature's first line.
    commented = "\n".join(lines[:1] + ["", "    # a comment", ""] + lines[1:])
    assert _digest(commented) == base
    # A docstring added (or a second one) at the top of the body.
    tree = ast.parse(source)
    node = tree.body[0]
    first = node.body[0]
    indent = " " * first.col_offset
    at = first.lineno - 1
    with_doc = "\n".join(lines[:at] + [f'{indent}"""Docstring edited."""'] + lines[at:])
    assert _digest(with_doc) == base
    # Re-indented as a whole (a method moved into a class).
    assert _digest(textwrap.indent(source, "    ")) == base


def _one_token_changes(source: str) -> list[str]:
    """Sources that differ from ``source`` by one operator, constant or name."""
    tree = ast.parse(source)
    changed: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and not changed[0:0]:
            swap = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.FloorDiv: ast.Mult, ast.Mult: ast.FloorDiv,
                    ast.Mod: ast.FloorDiv}
            if type(node.op) in swap:
                old = node.op
                node.op = swap[type(old)]()
                changed.append(ast.unparse(tree))
                node.op = old
                break
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            node.value += 1
            changed.append(ast.unparse(tree))
            node.value -= 1
            break
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            old_id = node.id
            node.id = old_id + "_x"
            changed.append(ast.unparse(tree))
            node.id = old_id
            break
    return changed


@pytest.mark.parametrize("name,source", SOURCES, ids=[n for n, _ in SOURCES])
def test_code_edits_change_the_fingerprint(name: str, source: str) -> None:
    base = _digest(source)
    edits = _one_token_changes(source)
    assert edits, name
    for edited in edits:
        assert _digest(edited) != base, edited


def test_token_edits_on_the_lookup_itself() -> None:
    """The edits the issue names, on the sliding-window lookup's source."""
    name, source = next((n, s) for n, s in SOURCES if n == "SlidingWindowManager.find_longest_cache_hit")
    base = _digest(source)
    assert "range(" in source and "- 1" in source
    for old, new in [("- 1", "- 2"), ("- 1", "+ 1"), (">=", ">"), ("range(", "reversed(")]:
        if old in source:
            assert _digest(source.replace(old, new, 1)) != base, (old, new)


def test_live_and_file_digests_agree() -> None:
    for binding in BINDINGS:
        for source in binding.sources:
            try:
                obj = source.resolve()
            except (ImportError, AttributeError, KeyError):
                continue  # not in this release (e.g. the offload filter's on <= 0.32)
            path = inspect.getsourcefile(_unwrap(obj))
            assert path is not None
            from_file = file_digests(path, [source.qualname])[source.qualname]
            assert from_file == object_digest(obj), source.name


def test_installed_vllm_matches_its_releases_variant() -> None:
    """A checked release matches the variant listed for it, binding by
    binding; a binding not checked on it (the offload lookup on 0.28/0.29,
    the offload filter before 0.33) must not match anything."""
    version = fingerprint.installed_version()
    checked = {r for vs in known_sources.VARIANTS.values() for v in vs for r in v["releases"]}
    if version not in checked:
        pytest.skip(f"vLLM {version} is not a checked release")
    for binding in BINDINGS:
        found = fingerprint.check(binding)
        listed = [v for v in known_sources.VARIANTS[binding.name] if version in v["releases"]]
        if listed:
            assert found.variant == listed[0]["name"], found.describe()
            assert found.semantics == listed[0]["semantics"]
            assert found.changed == ()
        else:
            assert not found.known, found.describe()
            assert found.changed


def test_variants_are_distinct_and_cover_their_sources() -> None:
    for binding in BINDINGS:
        variants = known_sources.VARIANTS[binding.name]
        assert variants, binding.name
        seen = set()
        for variant in variants:
            assert set(variant["digests"]) == {s.name for s in binding.sources}
            key = (tuple(sorted(variant["digests"].items())), variant["semantics"])
            assert key not in seen
            seen.add(key)


def test_match_names_what_changed() -> None:
    binding = fingerprint.SLIDING_WINDOW
    digests = dict(known_sources.VARIANTS[binding.name][-1]["digests"])
    assert match(binding, digests).known
    digests["BlockPool.get_cached_block"] = "0" * 64
    found = match(binding, digests)
    assert not found.known and found.changed == ("BlockPool.get_cached_block",)
    digests["cdiv"] = None
    assert match(binding, digests).changed == ("BlockPool.get_cached_block", "cdiv")


def test_an_unknown_binding_has_no_variant() -> None:
    binding = Binding("nothing", "", ())
    assert not match(binding, {}).known


def test_canonical_form_ignores_positions_and_strings_only() -> None:
    a = _digest("def f(x):\n    'doc'\n    return x + 1\n")
    b = _digest("def f(x):  # c\n\n    return (x\n            + 1)\n")
    assert a == b
    assert _digest("def f(x):\n    return x + 1.0\n") != a  # 1 vs 1.0
    assert _digest("def f(x):\n    return x + True\n") != a  # 1 vs True
    assert "lineno" not in canonical(ast.parse("x = 1"))
