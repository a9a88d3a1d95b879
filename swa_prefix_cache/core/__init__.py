"""The native core: C written from pyspec function for function, and its loaders.

Laid out the way CPython's ``Modules/_hacl`` keeps verified C apart from the
glue around it:

* ``proved/``: the C proved by Frama-C/WP (``make verify-c`` runs
  ``proved/verify.sh``, which also checks that its mutants are rejected).
  It is compiled unchanged into every build; never edit it without
  re-running that proof.
* ``glue/``: the CPython extension ``swa_prefix_cache.core._hotpath`` that answers
  vLLM's lookups (argument binding, the pool reads); tested, not proved.
* ``hotpath.py``: the extension's loader.

The cffi loader of ``libprefix_cache.so`` (``make lib``), which the FFI tests
and the benchmarks of the C alone use, is not part of the package:
``benchmarks/cffi_core.py``.

kv_index's extension has its glue in ``swa_prefix_cache/kv_index/glue/`` and links the same
proved files.
"""
