"""Loader of the native hot path, the extension ``extracted_c._hotpath``
(built by ``pip install`` through setup.py; glue: hotpath_module.c, search:
the proved prefix_cache.c in its probe instance).

``$PREFIX_CACHE_HOTPATH``, if set, names the extension file to load instead
(the ASan + UBSan build uses this, as ``$PREFIX_CACHE_LIB`` does for the
cffi library).
"""

import importlib
import importlib.util
import os
from types import ModuleType

HOTPATH_ENV = "PREFIX_CACHE_HOTPATH"
MODULE = "extracted_c._hotpath"

_module: ModuleType | None = None


class HotPathUnavailable(ImportError):
    """The extension was not built or cannot be loaded."""


def load() -> ModuleType:
    """The extension module, loaded once; ``HotPathUnavailable`` says why not."""
    global _module
    if _module is None:
        path = os.environ.get(HOTPATH_ENV)
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
            raise HotPathUnavailable(
                f"{where} cannot be loaded ({exc}); reinstall the package with a C "
                "compiler present (pip install .) or run `make setup`"
            ) from exc
        _module = module
    return _module
