"""swa-prefix-cache: vLLM's prefix-cache lookups, fast and proved to answer
as vLLM's own do.

One import namespace, a subpackage per role:

* ``pyspec``: the executable specification, and vLLM's loops transcribed;
* ``core``: the C proved by Frama-C/WP (``core/proved/``) and the CPython
  glue that serves it to the plugin (``core/glue/``, ``core/hotpath.py``);
* ``vllm_adapter``: the plugin vLLM loads (entry point
  ``vllm.general_plugins`` -> ``swa_prefix_cache.vllm_adapter.plugin:register``),
  the only subpackage that imports vLLM;
* ``kv_index``: a router's index of what each replica's prefix cache holds;
* ``settings``: every environment variable the package reads.

Importing this package imports nothing else.
"""
