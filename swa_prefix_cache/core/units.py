"""Which C files each native module links: its proved core (swa_prefix_cache/core/proved,
compiled unchanged with the core's own flags) and its glue (compiled with
Python's flags). The one list: setup.py reads this file by path (the package
is not importable while it is built), and the Makefile asks it for the
sanitizer and aarch64 builds::

    python swa_prefix_cache/core/units.py hotpath-core hotpath-glue

The cffi library (build/libprefix_cache.so, loaded by benchmarks/cffi_core.py) links every proved unit,
``swa_prefix_cache/core/proved/*.c``. Standard library only.
"""

import sys

UNITS: dict[str, list[str]] = {
    # The extension swa_prefix_cache.core._hotpath: the probe instances of the proved
    # searches (each compiles its search with PC_PROBE_INSTANCE) and the
    # proved parameters, around the CPython glue.
    "hotpath-core": [
        "swa_prefix_cache/core/proved/prefix_cache_probe.c",
        "swa_prefix_cache/core/proved/full_attention_probe.c",
        "swa_prefix_cache/core/proved/offload_lookup_probe.c",
        "swa_prefix_cache/core/proved/params.c",
    ],
    "hotpath-glue": ["swa_prefix_cache/core/glue/hotpath_module.c", "swa_prefix_cache/core/glue/hotpath_pool.c"],
    # swa_prefix_cache.kv_index._kvnative: the proved mask instance and joint lookup.
    "kv-core": [
        "swa_prefix_cache/core/proved/prefix_cache.c",
        "swa_prefix_cache/core/proved/joint.c",
        "swa_prefix_cache/core/proved/params.c",
    ],
    "kv-glue": ["swa_prefix_cache/kv_index/glue/kvindex_module.c", "swa_prefix_cache/kv_index/glue/kvindex_sha256.c"],
}


def main(argv: list[str]) -> int:
    unknown = [name for name in argv if name not in UNITS]
    if not argv or unknown:
        print(f"usage: python swa_prefix_cache/core/units.py {{{','.join(UNITS)}}}...", file=sys.stderr)
        return 2
    print(" ".join(path for name in argv for path in UNITS[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
