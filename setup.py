"""Build of the native hot path, ``extracted_c._hotpath`` (everything else
is in pyproject.toml).

Like CPython's ``Modules/_hacl``: the proved C is compiled unchanged and
apart from the glue. ``extracted_c/prefix_cache_probe.c``,
``extracted_c/full_attention_probe.c`` and
``extracted_c/offload_lookup_probe.c`` (prefix_cache.c, full_attention.c
and offload_lookup.c in their probe instances, the texts Frama-C/WP proves)
are compiled with the flags ``make lib`` uses for the library (C99,
pedantic, warnings as errors); the CPython glue
(``extracted_c/hotpath_module.c``, ``extracted_c/hotpath_pool.c``) is
compiled with Python's own flags; all are linked into one extension module.

Without a C compiler the install still succeeds: the build says so in one
clear message and the plugin then serves lookups with the pure-Python core
(it says so once in vLLM's log). SWA_PREFIX_CACHE_REQUIRE_NATIVE=1 makes
a failed build an error instead (``make setup`` sets it, so a broken build
cannot pass unnoticed).
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CORE_SOURCES = [
    "extracted_c/prefix_cache_probe.c",
    "extracted_c/full_attention_probe.c",
    "extracted_c/offload_lookup_probe.c",
]
CORE_FLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic"]
GLUE_SOURCES = ["extracted_c/hotpath_module.c", "extracted_c/hotpath_pool.c"]
GLUE_FLAGS = ["-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers"]


class BuildHotPath(build_ext):
    """Compile the proved core with its own flags, then the glue."""

    def build_extension(self, ext: Extension) -> None:
        try:
            objects = self.compiler.compile(
                CORE_SOURCES,
                output_dir=self.build_temp,
                include_dirs=["extracted_c"],
                extra_postargs=CORE_FLAGS,
                debug=self.debug,
            )
            ext.extra_objects = list(objects)
            super().build_extension(ext)
        except Exception as exc:  # no compiler, missing headers, a failed compile
            if os.environ.get("SWA_PREFIX_CACHE_REQUIRE_NATIVE") == "1":
                raise
            sys.stderr.write(
                "\nswa-prefix-cache: could not build the native hot path "
                f"(extracted_c._hotpath): {exc}\n"
                "  Is a C compiler (gcc or clang) and the Python headers installed?\n"
                "  The package is installed without it; vLLM lookups will use the\n"
                "  pure-Python stride search (slower, same answers).\n\n"
            )


setup(
    ext_modules=[
        Extension(
            "extracted_c._hotpath",
            sources=GLUE_SOURCES,
            include_dirs=["extracted_c"],
            depends=["extracted_c/prefix_cache.c", "extracted_c/prefix_cache.h",
                     "extracted_c/prefix_cache_probe.c", "extracted_c/full_attention.c",
                     "extracted_c/full_attention.h", "extracted_c/full_attention_probe.c",
                     "extracted_c/offload_lookup.c", "extracted_c/offload_lookup.h",
                     "extracted_c/offload_lookup_probe.c", "extracted_c/hotpath_pool.h",
                     "extracted_c/hotpath_dict.h", "extracted_c/hotpath_siphash.h"],
            extra_compile_args=GLUE_FLAGS,
        )
    ],
    cmdclass={"build_ext": BuildHotPath},
)
