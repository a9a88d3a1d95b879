"""Differential checks of the Lean library (``lake build``) against pyspec.

``lake build`` links ``.lake/build/lib/libprefix_cache_lean.so`` with the
``@[export]`` entry points of ``Lean/PrefixCache/Export.lean``. The
scalar-only ones (``pc_lean_find_hit_bits_*``, ``pc_lean_legacy_scan_bits_*``:
``uint64_t`` mask, block ``i`` cached when bit ``i`` is set) need no Lean
object, so ctypes can call them. Before any call the Lean runtime and the
module must be initialised, as for any Lean shared library:

1. load the Lean runtime (``libleanshared``, from ``lean --print-prefix`` or
   ``PREFIX_CACHE_LEAN_RUNTIME``) with ``RTLD_GLOBAL``, since the library
   leaves its runtime symbols to it;
2. ``lean_initialize_runtime_module()``;
3. ``initialize_PrefixCache(builtin=1, world)`` (the root module's
   initializer, which initialises every imported module), where ``world`` is
   ``lean_io_mk_world()`` = ``lean_box(0)``, the pointer value 1, and check
   that the returned IO result is ``ok`` (object tag 0);
4. ``lean_io_mark_end_initialization()``.

The library is looked up at ``PREFIX_CACHE_LEAN_LIB`` or under
``.lake/build/lib/``; when it is absent the tests skip and say so (no Lean
toolchain exists on the machines this project is built on).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from swa_prefix_cache.pyspec import SearchParams, find_hit, legacy_scan

ROOT = Path(__file__).resolve().parent.parent
LIB_NAME = "libprefix_cache_lean.so"


def _library_path() -> Path:
    env = os.environ.get("PREFIX_CACHE_LEAN_LIB")
    return Path(env) if env else ROOT / ".lake" / "build" / "lib" / LIB_NAME


def _runtime_path() -> Path | None:
    env = os.environ.get("PREFIX_CACHE_LEAN_RUNTIME")
    if env:
        return Path(env)
    lean = shutil.which("lean")
    if lean is None:
        return None
    prefix = subprocess.run([lean, "--print-prefix"], capture_output=True, text=True, check=True).stdout.strip()
    for candidate in ("lib/lean/libleanshared.so", "lib/libleanshared.so"):
        if (Path(prefix) / candidate).exists():
            return Path(prefix) / candidate
    return None


_LIB: ctypes.CDLL | None = None


def _load() -> ctypes.CDLL:
    global _LIB
    if _LIB is not None:
        return _LIB
    path = _library_path()
    if not path.exists():
        pytest.skip(
            f"Lean library {path} not found: it is built by `lake build`, and no Lean "
            "toolchain exists on this machine (set PREFIX_CACHE_LEAN_LIB to use another build)"
        )
    runtime = _runtime_path()
    if runtime is None or not runtime.exists():
        pytest.skip(
            f"{path} exists but the Lean runtime libleanshared.so was not found "
            "(no `lean` on PATH; set PREFIX_CACHE_LEAN_RUNTIME)"
        )
    # Runtime functions are looked up in the runtime itself: dlsym on the
    # library's handle only searches the library and its own dependencies.
    rt = ctypes.CDLL(str(runtime), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    rt.lean_initialize_runtime_module.restype = None
    rt.lean_initialize_runtime_module()
    init = None
    for name in ("initialize_PrefixCache", "initialize_prefix__cache_PrefixCache"):
        try:
            init = getattr(lib, name)
            break
        except AttributeError:
            continue
    if init is None:
        pytest.fail(f"{path} has no module initializer initialize_PrefixCache")
    init.restype = ctypes.c_void_p
    init.argtypes = (ctypes.c_uint8, ctypes.c_void_p)
    result = init(1, ctypes.c_void_p(1))  # builtin, lean_io_mk_world() = lean_box(0)
    # lean_io_result_is_ok: the result object's tag (byte 7 of its header) is 0.
    assert result and ctypes.string_at(result, 8)[7] == 0, "initialize_PrefixCache failed"
    rt.lean_io_mark_end_initialization.restype = None
    rt.lean_io_mark_end_initialization()
    for name in (
        "pc_lean_find_hit_bits_length",
        "pc_lean_find_hit_bits_first_real",
        "pc_lean_legacy_scan_bits_length",
        "pc_lean_legacy_scan_bits_first_real",
    ):
        fn = getattr(lib, name)
        fn.restype = ctypes.c_uint64
        fn.argtypes = (ctypes.c_uint64,) * 4 + (ctypes.c_uint8,)
    _LIB = lib
    return lib


def _bits(mask: bytes) -> int:
    return sum(1 << i for i, b in enumerate(mask) if b)


def test_lean_find_hit_matches_pyspec() -> None:
    """Every mask of up to 9 blocks x need 1..4 x period 1..3 x EAGLE: the
    Lean `findHit` and `legacyScan` return pyspec's hit."""
    lib = _load()
    for n in range(10):
        for bits in range(1 << n):
            mask = bytes((bits >> i) & 1 for i in range(n))
            for need, period, eagle in itertools.product((1, 2, 3, 4), (1, 2, 3), (False, True)):
                want = find_hit(mask, SearchParams(n=n, need=need, period=period, eagle=eagle))
                args = (bits, n, need, period, int(eagle))
                assert lib.pc_lean_find_hit_bits_length(*args) == want.length
                assert lib.pc_lean_find_hit_bits_first_real(*args) == want.first_real
                assert lib.pc_lean_legacy_scan_bits_length(*args) == want.length
                assert lib.pc_lean_legacy_scan_bits_first_real(*args) == want.first_real


def test_lean_legacy_scan_matches_vllm_transcription() -> None:
    """Lean `legacyScan` with vLLM's raw block count (0 for a 1-token window)
    equals `swa_prefix_cache.pyspec.legacy_scan` on vLLM arguments (block size 1)."""
    lib = _load()
    for n in range(9):
        for bits in range(1 << n):
            mask = bytes((bits >> i) & 1 for i in range(n))
            for window, eagle in itertools.product((1, 2, 3, 5), (False, True)):
                want = legacy_scan(mask, n, 1, window, 1, eagle)
                need = window - 1 + int(eagle)
                args = (_bits(mask), n, need, 1, int(eagle))
                assert lib.pc_lean_legacy_scan_bits_length(*args) == want.length
                assert lib.pc_lean_legacy_scan_bits_first_real(*args) == want.first_real
