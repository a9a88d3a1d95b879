"""Bind the patch to vLLM builds whose lookup semantics we have proved equal.

We replicate the semantics of a handful of vLLM functions. Their source is
hashed; the patch is applied only when the hash is one we know. A vLLM
release that changes any of them is left untouched until someone checks the
new source and adds one line to ``KNOWN_FINGERPRINTS``.
"""

import hashlib
import inspect
from collections.abc import Callable
from typing import Any

# version -> sha256 of the replicated sources (see ``replicated_sources``).
# Adding a vLLM version: check its sources against pyspec/legacy.py, run the
# differential tests in that version's venv, then add one line here.
KNOWN_FINGERPRINTS: dict[str, str] = {
    "0.33.0": "744668fb3005fcf0fe08ace888df5aa7e1877c677bf9412189ae9f08920ed719",
}


def replicated_sources() -> dict[str, Callable[..., Any]]:
    """The vLLM functions whose behaviour the replacement reproduces."""
    from vllm.utils import math_utils
    from vllm.v1.core import block_pool, kv_cache_utils, single_type_kv_cache_manager

    swa = single_type_kv_cache_manager.SlidingWindowManager
    return {
        "SlidingWindowManager.find_longest_cache_hit": swa.find_longest_cache_hit,
        "SlidingWindowManager._contiguous_blocks_for_hit": swa._contiguous_blocks_for_hit,
        "BlockPool.get_cached_block": block_pool.BlockPool.get_cached_block,
        "resolve_block_hashes": kv_cache_utils.resolve_block_hashes,
        "cdiv": math_utils.cdiv,
    }


def fingerprint(functions: dict[str, Callable[..., Any]]) -> str:
    """sha256 over the names and source texts, in a fixed order."""
    digest = hashlib.sha256()
    for name in sorted(functions):
        func = inspect.unwrap(getattr(functions[name], "__func__", functions[name]))
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(inspect.getsource(func).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def installed_version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def check_installed() -> tuple[bool, str, str]:
    """(known?, vLLM version, fingerprint) of the installed vLLM."""
    version = installed_version()
    digest = fingerprint(replicated_sources())
    return KNOWN_FINGERPRINTS.get(version) == digest, version, digest
