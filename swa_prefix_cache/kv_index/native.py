"""Loader of kv_index's native core, the extension ``swa_prefix_cache.kv_index._kvnative``
(built by setup.py like ``swa_prefix_cache.core._hotpath``; glue:
swa_prefix_cache/kv_index/glue/kvindex_module.c and kvindex_sha256.c; lookups: the proved
swa_prefix_cache/core/proved/joint.c and prefix_cache.c, compiled unchanged).

When it is not built (``SWA_PREFIX_CACHE_NATIVE=optional`` without a C
compiler, free-threaded CPython), ``KVIndex`` scores with the pure-Python
reference (pyspec: same answers, slower) and says so once in the log.
``$SWA_PREFIX_CACHE_KVNATIVE``, if set, names the extension file to load
instead (the ASan + UBSan build, a test's mutant);
``SWA_PREFIX_CACHE_STRICT_NATIVE=1`` turns a missing extension into an error.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from types import ModuleType

from swa_prefix_cache import settings

logger = logging.getLogger("swa_prefix_cache.kv_index")

MODULE = "swa_prefix_cache.kv_index._kvnative"
PATH_ENV = settings.KVNATIVE.name
REQUIRE_ENV = settings.STRICT_NATIVE.name

_module: ModuleType | None = None
_why: str | None = None


class NativeUnavailable(ImportError):
    """The extension was not built or cannot be loaded."""


def _import() -> ModuleType:
    path = settings.KVNATIVE.read()
    if not path:
        return importlib.import_module(MODULE)
    spec = importlib.util.spec_from_file_location(MODULE, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{PATH_ENV}={path}: not an extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load() -> ModuleType | None:
    """The extension, loaded once; None when it cannot be (logged once),
    or NativeUnavailable when ``SWA_PREFIX_CACHE_STRICT_NATIVE=1``."""
    global _module, _why
    if _module is None and _why is None:
        try:
            _module = _import()
        except ImportError as exc:
            _why = f"{settings.KVNATIVE.read() or MODULE} cannot be loaded ({exc})"
            logger.warning("kv_index: the native core %s; scoring with the pure-Python "
                           "reference (pyspec: same answers, slower)", _why)
    if _module is None and settings.STRICT_NATIVE.read():
        raise NativeUnavailable(f"kv_index: the native core {_why} ({REQUIRE_ENV}=1)")
    return _module


def require() -> ModuleType:
    """The extension, or NativeUnavailable saying why not."""
    module = load()
    if module is None:
        raise NativeUnavailable(f"kv_index: the native core {_why}")
    return module
