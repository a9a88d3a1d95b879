"""Build of the native hot path, ``swa_prefix_cache.core._hotpath``, and of kv_index's
native core, ``swa_prefix_cache.kv_index._kvnative`` (everything else is in pyproject.toml).

Like CPython's ``Modules/_hacl``: the proved C is compiled unchanged and
apart from the glue. Each extension's proved units (swa_prefix_cache/core/units.py:
the probe instances of the searches for ``_hotpath``, the mask instance and
the joint lookup for ``_kvnative``, and the proved parameters for both) are
compiled with the flags ``make lib`` uses for the library (C99, pedantic,
warnings as errors); its CPython glue (swa_prefix_cache/core/glue/, swa_prefix_cache/kv_index/glue/)
with Python's own flags plus GLUE_FLAGS (warnings as errors); all are
linked into one extension module.

A failed native build (no C compiler, no Python headers, a compile error)
fails the install, with a message that says why and how to install without
it: pip shows a build backend's output only when the build fails, so a
build that only warned would pass unnoticed. SWA_PREFIX_CACHE_NATIVE
chooses:

  unset or ``required``  a failed build is an error (the default);
  ``optional``           a failed build is reported and the package installs
                         without the extension: the plugin then serves
                         lookups with the pure-Python core (same answers,
                         slower) and says so once in vLLM's log.

SWA_PREFIX_CACHE_REQUIRE_NATIVE=1, the former switch, still means
``required``. On an interpreter the glue does not support (free-threaded
CPython, ``Py_GIL_DISABLED``; not CPython) the extension is not built at all
(a message; swa_prefix_cache/core/hotpath.py's unsupported_reason), whatever the
switch says.
"""

import importlib.util
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CORE_FLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic"]
GLUE_FLAGS = ["-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers"]


def _load(name: str, relative: str):  # type: ignore[no-untyped-def]
    """A module of this tree, read from its file: the package is not
    importable while it is being built."""
    path = Path(__file__).resolve().parent / relative
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# swa_prefix_cache/settings.py: every variable's name, former names and meaning.
SETTINGS = _load("_swa_settings", "swa_prefix_cache/settings.py")
NATIVE_ENV = SETTINGS.NATIVE.name
# swa_prefix_cache/core/units.py: the proved core and the glue each extension links.
UNITS = _load("_swa_units", "swa_prefix_cache/core/units.py").UNITS
# The proved C each extension links, compiled apart from its glue.
CORE = {"swa_prefix_cache.core._hotpath": UNITS["hotpath-core"], "swa_prefix_cache.kv_index._kvnative": UNITS["kv-core"]}
# What a rebuild depends on besides the glue's sources: every proved file
# (the probe instances include their searches) and the glue's headers.
_ROOT = Path(__file__).resolve().parent
DEPENDS = sorted(str(p.relative_to(_ROOT)) for pattern in ("swa_prefix_cache/core/proved/*.[ch]",
                                                           "swa_prefix_cache/core/glue/*.h", "swa_prefix_cache/kv_index/glue/*.h")
                 for p in _ROOT.glob(pattern))


def native_mode() -> str:
    """``required`` or ``optional`` (SWA_PREFIX_CACHE_NATIVE, or its former
    name SWA_PREFIX_CACHE_REQUIRE_NATIVE=1; see above)."""
    try:
        return SETTINGS.NATIVE.read()
    except ValueError as exc:  # the message names the variable and the values
        raise SystemExit(f"swa-prefix-cache: {exc}") from None


def unsupported_reason() -> str | None:
    """swa_prefix_cache/core/hotpath.py's answer (read from the file: the package is
    not importable while it is being built)."""
    return _load("_swa_hotpath_loader", "swa_prefix_cache/core/hotpath.py").unsupported_reason()


class BuildHotPath(build_ext):
    """Compile the proved core with its own flags, then the glue."""

    def build_extension(self, ext: Extension) -> None:
        try:
            objects = self.compiler.compile(
                CORE[ext.name],
                output_dir=self.build_temp,
                include_dirs=["swa_prefix_cache/core/proved"],
                extra_postargs=CORE_FLAGS,
                debug=self.debug,
            )
            ext.extra_objects = list(objects)
            super().build_extension(ext)
        except Exception as exc:  # no compiler, missing headers, a failed compile
            why = (
                "\nswa-prefix-cache: could not build the native hot path "
                f"({ext.name}): {exc}\n"
                "  Is a C compiler (gcc or clang) and the Python headers installed?\n"
            )
            if native_mode() == "required":
                sys.stderr.write(
                    why + "  The install stops here. To install without the native hot "
                    "path (vLLM\n  lookups then use the pure-Python stride search: same "
                    f"answers, slower):\n    {NATIVE_ENV}=optional pip install ...\n\n")
                raise SystemExit(
                    f"swa-prefix-cache: native build failed ({exc}); "
                    f"{NATIVE_ENV}=optional installs without it") from exc
            sys.stderr.write(
                why + f"  {NATIVE_ENV}=optional: the package is installed without it; "
                "vLLM\n  lookups will use the pure-Python stride search (slower, same "
                "answers; kv_index scores with its pure-Python reference).\n\n")


native_mode()  # a bad value is an error at once

REASON = unsupported_reason()
if REASON is not None:
    sys.stderr.write(f"\nswa-prefix-cache: the native hot path is not built: {REASON}; "
                     "the plugin uses the pure-Python core.\n\n")

setup(
    ext_modules=[] if REASON is not None else [
        Extension(
            "swa_prefix_cache.core._hotpath",
            sources=UNITS["hotpath-glue"],
            include_dirs=["swa_prefix_cache/core/proved"],
            depends=DEPENDS,
            extra_compile_args=GLUE_FLAGS,
        ),
        Extension(
            "swa_prefix_cache.kv_index._kvnative",
            sources=UNITS["kv-glue"],
            include_dirs=["swa_prefix_cache/core/proved"],
            depends=DEPENDS,
            extra_compile_args=GLUE_FLAGS,
        ),
    ],
    cmdclass={"build_ext": BuildHotPath},
)
