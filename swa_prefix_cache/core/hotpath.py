"""Loader of the native hot path, the extension ``swa_prefix_cache.core._hotpath``
(built by ``pip install`` through setup.py; glue: hotpath_module.c, search:
the proved prefix_cache.c in its probe instance).

``$SWA_PREFIX_CACHE_HOTPATH``, if set, names the extension file to load
instead (the ASan + UBSan build uses this, as ``$SWA_PREFIX_CACHE_LIB`` does
for the cffi library).
"""

import importlib
import importlib.util
import os
import platform
import sys
import sysconfig
from types import ModuleType

MODULE = "swa_prefix_cache.core._hotpath"

_module: ModuleType | None = None


class HotPathUnavailable(ImportError):
    """The extension was not built or cannot be loaded."""


def unsupported_reason() -> str | None:
    """Why this interpreter gets no extension at all (setup.py does not build
    it, load() refuses it), or None: the glue is CPython's (C API, the GIL
    held for a whole lookup, a dict layout of builds with the GIL), so a
    free-threaded build (``Py_GIL_DISABLED``) or another implementation is
    served by the Python core."""
    if sys.implementation.name != "cpython":
        return (f"{platform.python_implementation()} is not CPython: the native hot path is "
                "CPython's C API")
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return ("free-threaded CPython (Py_GIL_DISABLED) is not supported by the native hot "
                "path (it needs the GIL for a whole lookup)")
    return None


def load() -> ModuleType:
    """The extension module, loaded once; ``HotPathUnavailable`` says why not."""
    global _module
    if _module is None:
        reason = unsupported_reason()
        if reason is not None:
            raise HotPathUnavailable(f"{MODULE} is not used: {reason}")
        # Imported here: setup.py loads this file by path, before pyspec is
        # importable, for unsupported_reason() alone.
        from swa_prefix_cache import settings

        path = settings.HOTPATH.read()
        try:
            if path:
                spec = importlib.util.spec_from_file_location(MODULE, path)
                if spec is None or spec.loader is None:
                    raise ImportError(f"not an extension module: {path}")
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            else:
                module = importlib.import_module(MODULE)
        except ImportError as exc:
            where = path or MODULE
            built = path or any(
                name.startswith("_hotpath.") for name in os.listdir(os.path.dirname(__file__)))
            why = ("it was not built (installed without a working C compiler, with "
                   f"{settings.NATIVE.name}=optional)" if not built else f"it cannot be loaded ({exc})")
            raise HotPathUnavailable(
                f"{where}: {why}; reinstall the package with a C compiler and the Python "
                "headers present (pip install .) or run `make setup`"
            ) from exc
        _module = module
    return _module


def fast_paths() -> dict[str, object]:
    """What this interpreter gets: the extension's own answer (its
    ``fast_paths()``: read_ahead, read_ahead_on, hash, built, why), or
    built False with the reason it is not used."""
    try:
        return dict(load().fast_paths())
    except HotPathUnavailable as exc:
        return {"built": False, "read_ahead": False, "read_ahead_on": False, "hash": "none",
                "why": str(exc)}
