"""The native core: C written from pyspec function for function, and its loaders.

Laid out the way CPython's ``Modules/_hacl`` keeps verified C apart from the
glue around it:

* ``proved/``: the C proved by Frama-C/WP (``make verify-c`` runs
  ``proved/verify.sh``, which also checks that its mutants are rejected).
  It is compiled unchanged into every build; never edit it without
  re-running that proof.
* ``glue/``: the CPython extension ``extracted_c._hotpath`` that answers
  vLLM's lookups (argument binding, the pool reads); tested, not proved.
* ``hotpath.py``: the extension's loader; ``native.py``: the cffi loader of
  ``libprefix_cache.so`` (``make lib``), used by the FFI tests and the
  benchmarks of the C alone.

kv_index's extension has its glue in ``kv_index/glue/`` and links the same
proved files.
"""
