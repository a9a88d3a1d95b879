"""Which C files each native module links: its proved core (extracted_c/proved,
compiled unchanged with the core's own flags) and its glue (compiled with
Python's flags). The one list: setup.py reads this file by path (the package
is not importable while it is built), and the Makefile asks it for the
sanitizer and aarch64 builds::

    python extracted_c/units.py hotpath-core hotpath-glue

The cffi library (extracted_c/libprefix_cache.so) links every proved unit,
``extracted_c/proved/*.c``. Standard library only.
"""

import sys

UNITS: dict[str, list[str]] = {
    # The extension extracted_c._hotpath: the probe instances of the proved
    # searches (each compiles its search with PC_PROBE_INSTANCE) and the
    # proved parameters, around the CPython glue.
    "hotpath-core": [
        "extracted_c/proved/prefix_cache_probe.c",
        "extracted_c/proved/full_attention_probe.c",
        "extracted_c/proved/offload_lookup_probe.c",
        "extracted_c/proved/params.c",
    ],
    "hotpath-glue": ["extracted_c/glue/hotpath_module.c", "extracted_c/glue/hotpath_pool.c"],
    # kv_index._kvnative: the proved mask instance and joint lookup.
    "kv-core": [
        "extracted_c/proved/prefix_cache.c",
        "extracted_c/proved/joint.c",
        "extracted_c/proved/params.c",
    ],
    "kv-glue": ["kv_index/glue/kvindex_module.c", "kv_index/glue/kvindex_sha256.c"],
}


def main(argv: list[str]) -> int:
    unknown = [name for name in argv if name not in UNITS]
    if not argv or unknown:
        print(f"usage: python extracted_c/units.py {{{','.join(UNITS)}}}...", file=sys.stderr)
        return 2
    print(" ".join(path for name in argv for path in UNITS[name]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
