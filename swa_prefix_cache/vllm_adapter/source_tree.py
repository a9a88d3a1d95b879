"""Fingerprints of what vLLM's code means, not of how it is written.

A replicated vLLM function is fingerprinted by its syntax tree: the source
is parsed, every docstring and every other bare string statement (a no-op)
is dropped, and the tree is written out in a canonical form that leaves out
what the parser does not take from the code (line numbers, comments, layout)
and the fields that only some CPython versions have and leave empty
(``type_params``, ``type_comment``, a constant's ``kind``). A docstring,
comment or blank-line edit keeps the fingerprint; a change of one operator,
constant or name changes it. The same digest comes out of the live object
(``object_digest``, what the plugin checks) and out of a source file that is
not imported (``file_digests``, what scripts/fingerprint_releases.py reads in
each release's wheel): both find the same ``def`` or ``class`` node.

Stdlib only: it runs in a router process or a script with no vLLM.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# Fields dropped from the canonical form: positions, and what only some
# CPython versions produce (always empty or None for vLLM's code).
_SKIPPED_FIELDS = frozenset({"type_comment", "kind"})


def _is_bare_string(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def canonical(node: Any) -> str:
    """The node written out: its type, then each non-empty field by name.
    Bare string statements (docstrings among them) are left out of every
    statement list."""
    if isinstance(node, ast.AST):
        parts = []
        for name in node._fields:
            if name in _SKIPPED_FIELDS:
                continue
            value = getattr(node, name, None)
            if isinstance(value, list):
                value = [item for item in value if not _is_bare_string(item)]
            if value is None or value == []:
                continue
            parts.append(f"{name}={canonical(value)}")
        return f"{type(node).__name__}({','.join(parts)})"
    if isinstance(node, list):
        return "[" + ",".join(canonical(item) for item in node) + "]"
    # A constant: its type and repr, so 1, 1.0 and True differ.
    return f"{type(node).__name__}:{node!r}"


def tree_digest(node: ast.AST) -> str:
    """sha256 of the canonical form of one ``def`` or ``class`` node."""
    return hashlib.sha256(canonical(node).encode()).hexdigest()


def _unwrap(obj: Any) -> Any:
    """The function or class whose source defines ``obj``."""
    if isinstance(obj, (classmethod, staticmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        obj = obj.fget
    obj = getattr(obj, "__func__", obj)  # a bound method
    return inspect.unwrap(obj)


def object_digest(obj: Any) -> str:
    """The fingerprint of a live function, method, property or class."""
    source = textwrap.dedent(inspect.getsource(_unwrap(obj)))
    body = ast.parse(source).body
    if len(body) != 1 or not isinstance(body[0], (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        raise ValueError(f"source of {obj!r} is not one def or class")
    return tree_digest(body[0])


def find_definition(tree: ast.Module, qualname: str) -> ast.AST | None:
    """The ``def`` or ``class`` node named by a dotted ``qualname``
    (``Class.method``) at the top of a module, or None. When a name is
    defined twice, the last definition wins, as at import."""
    scope: list[ast.stmt] = tree.body
    found: ast.AST | None = None
    for part in qualname.split("."):
        found = None
        for node in scope:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == part:
                found = node
        if found is None:
            return None
        scope = found.body  # type: ignore[attr-defined]
    return found


def file_digests(path: Path, qualnames: Iterable[str]) -> dict[str, str | None]:
    """The fingerprint of each named definition in one source file (None
    for a name the file does not define), without importing it."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    digests: dict[str, str | None] = {}
    for qualname in qualnames:
        node = find_definition(tree, qualname)
        digests[qualname] = None if node is None else tree_digest(node)
    return digests
