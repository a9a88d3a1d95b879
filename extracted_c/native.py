"""cffi (ABI mode) loader for ``libprefix_cache.so``.

Every wrapper checks its arguments before the call and raises ``ValueError``
naming the argument, so the C preconditions proved by Frama-C/WP (valid
buffer of at least ``n`` bytes, sizes in range) hold for every call that
reaches the library. The library is found at ``$PREFIX_CACHE_LIB`` if set
(the sanitizer build uses this), else next to this file (``make lib``).
"""

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cffi import FFI

from pyspec.search import HitResult

# Mirrors extracted_c/prefix_cache.h; tests/test_ffi.py checks they agree.
CDEF = """
typedef struct { int64_t length; int64_t first_real; int64_t probes; } pc_hit_result;
int64_t stride_search(const uint8_t *cached, int64_t n, int64_t need,
                      int64_t period, int eagle, int64_t *probes);
int64_t prefix_fallback(const uint8_t *cached, int64_t n, int64_t need,
                        int64_t period, int eagle, int64_t *probes);
void find_hit(const uint8_t *cached, int64_t n, int64_t need, int64_t period,
              int eagle, pc_hit_result *out);
void legacy_scan(const uint8_t *cached, int64_t n, int64_t need, int64_t period,
                 int eagle, pc_hit_result *out);
typedef uint8_t (*pc_probe_fn)(void *ctx, int64_t i);
void find_hit_probe(pc_probe_fn probe, void *ctx, int64_t n, int64_t need,
                    int64_t period, int eagle, pc_hit_result *out);
"""

# The C preconditions bound every size by 2**62 so no sum can overflow.
SIZE_LIMIT = 1 << 62
# Buffer formats whose items are one byte read as "nonzero means cached".
_BYTE_FORMATS = frozenset({"B", "b", "c", "?"})

LIB_ENV = "PREFIX_CACHE_LIB"
DEFAULT_LIB = Path(__file__).with_name("libprefix_cache.so")

_ffi = FFI()
_ffi.cdef(CDEF)


class NativeLibraryError(RuntimeError):
    """The shared library is missing or cannot be loaded."""


def library_path() -> Path:
    """Where the library is looked for."""
    return Path(os.environ.get(LIB_ENV, DEFAULT_LIB))


_lib: Any = None


def load() -> Any:
    """Load the library once; raise NativeLibraryError with the path if absent."""
    global _lib
    if _lib is None:
        path = library_path()
        if not path.is_file():
            raise NativeLibraryError(f"{path} not found; run `make lib`")
        try:
            _lib = _ffi.dlopen(str(path))
        except OSError as exc:
            raise NativeLibraryError(f"cannot load {path}: {exc}") from exc
    return _lib


def is_available() -> bool:
    """True when the library loads."""
    try:
        load()
    except NativeLibraryError:
        return False
    return True


@dataclass(frozen=True)
class NativeHit:
    """A C result: the hit plus how many mask reads (probes) it took."""

    length: int
    first_real: int
    probes: int

    @property
    def hit(self) -> HitResult:
        return HitResult(length=self.length, first_real=self.first_real)


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return value


def _check_args(
    cached: object, n: object, need: object, period: object, eagle: object,
    min_need: int,
) -> tuple[Any, int, int, int, int]:
    """Validate everything the C preconditions assume; return C arguments."""
    if cached is None:
        raise ValueError("cached must be a bytes-like buffer, got None")
    try:
        view = memoryview(cached)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(
            f"cached must be a bytes-like buffer, got {type(cached).__name__}"
        ) from None
    if view.itemsize != 1 or view.format not in _BYTE_FORMATS:
        raise ValueError(
            f"cached must hold uint8 items, got format {view.format!r}"
            f" with itemsize {view.itemsize}"
        )
    if view.ndim != 1 or not view.c_contiguous:
        raise ValueError("cached must be a one-dimensional contiguous buffer")
    n = _check_int("n", n, 0, SIZE_LIMIT)
    need = _check_int("need", need, min_need, SIZE_LIMIT)
    period = _check_int("period", period, 1, SIZE_LIMIT)
    if not isinstance(eagle, bool):
        raise ValueError(f"eagle must be a bool, got {type(eagle).__name__}")
    if view.nbytes < n:
        raise ValueError(f"cached has {view.nbytes} entries, fewer than n = {n}")
    return _ffi.from_buffer("uint8_t[]", view), n, need, period, int(eagle)


def stride_search(
    cached: object, n: int, need: int, period: int, eagle: bool
) -> tuple[int | None, int]:
    """C ``stride_search``: (aligned end of the rightmost valid window or
    None, probes). ``need`` must be at least 1."""
    buf, n, need, period, eagle_int = _check_args(cached, n, need, period, eagle, 1)
    probes = _ffi.new("int64_t *", 0)
    end = load().stride_search(buf, n, need, period, eagle_int, probes)
    return (None if end < 0 else int(end)), int(probes[0])


def prefix_fallback(
    cached: object, n: int, need: int, period: int, eagle: bool
) -> tuple[int, int]:
    """C ``prefix_fallback``: (hit length in blocks, probes)."""
    buf, n, need, period, eagle_int = _check_args(cached, n, need, period, eagle, 1)
    probes = _ffi.new("int64_t *", 0)
    length = load().prefix_fallback(buf, n, need, period, eagle_int, probes)
    return int(length), int(probes[0])


def _hit_call(name: str, cached: object, n: int, need: int, period: int,
              eagle: bool) -> NativeHit:
    buf, n, need, period, eagle_int = _check_args(
        cached, n, need, period, eagle, -SIZE_LIMIT
    )
    out = _ffi.new("pc_hit_result *")
    getattr(load(), name)(buf, n, need, period, eagle_int, out)
    return NativeHit(int(out.length), int(out.first_real), int(out.probes))


def find_hit(cached: object, n: int, need: int, period: int, eagle: bool) -> NativeHit:
    """C ``find_hit``. ``need`` is vLLM's raw run length and may be 0 or
    negative (sliding window of 0 or 1 token); the C treats it as 1."""
    return _hit_call("find_hit", cached, n, need, period, eagle)


class _ProbeCall:
    """One ``find_hit_probe`` call's Python side: the probe and any error."""

    __slots__ = ("probe", "error")

    def __init__(self, probe: Callable[[int], bool]) -> None:
        self.probe = probe
        self.error: BaseException | None = None


# The call in progress, per thread (cffi releases the GIL inside the C call,
# so another thread may be searching at the same time). Cheaper per probe
# than passing a cffi handle through ``ctx``.
_current = threading.local()


@_ffi.callback("uint8_t(void *, int64_t)")
def _probe_trampoline(ctx: Any, i: int) -> int:
    call = _current.call
    if call.error is not None:
        return 0
    try:
        return 1 if call.probe(i) else 0
    except BaseException as exc:  # re-raised after the C call returns
        call.error = exc
        return 0


def find_hit_probe(
    probe: Callable[[int], bool], n: int, need: int, period: int, eagle: bool
) -> HitResult:
    """C ``find_hit_probe``: the verified search, asking ``probe(i)`` for
    each block it reads instead of reading a mask (the vLLM hot path).

    ``probe`` must answer the same for the same ``i`` during one call (vLLM's
    BlockPool does: the scheduler does not mutate it during a lookup). An
    exception raised by ``probe`` is re-raised here; the C side then sees
    only misses, so it stops quickly, and its result is discarded.
    """
    if not callable(probe):
        raise ValueError(f"probe must be callable, got {type(probe).__name__}")
    n = _check_int("n", n, 0, SIZE_LIMIT)
    need = _check_int("need", need, -SIZE_LIMIT, SIZE_LIMIT)
    period = _check_int("period", period, 1, SIZE_LIMIT)
    if not isinstance(eagle, bool):
        raise ValueError(f"eagle must be a bool, got {type(eagle).__name__}")
    call = _ProbeCall(probe)
    outer = getattr(_current, "call", None)  # a probe may itself search
    _current.call = call
    out = _ffi.new("pc_hit_result *")
    try:
        load().find_hit_probe(_probe_trampoline, _ffi.NULL, n, need, period, int(eagle), out)
    finally:
        _current.call = outer
    if call.error is not None:
        raise call.error
    return HitResult(length=int(out.length), first_real=int(out.first_real))


def legacy_scan(
    cached: object, n: int, need: int, period: int, eagle: bool
) -> NativeHit:
    """C ``legacy_scan``: vLLM's O(N) loop, proved to meet the same spec."""
    return _hit_call("legacy_scan", cached, n, need, period, eagle)
