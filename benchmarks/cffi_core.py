"""cffi (ABI mode) loader for ``libprefix_cache.so``.

Every wrapper checks its arguments before the call and raises ``ValueError``
naming the argument, so the C preconditions proved by Frama-C/WP (valid
buffer of at least ``n`` bytes, sizes in range) hold for every call that
reaches the library. The library is found at ``$SWA_PREFIX_CACHE_LIB`` if set
(the sanitizer build uses this), else build/libprefix_cache.so (``make lib``).
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cffi import FFI

from swa_prefix_cache import settings
from swa_prefix_cache.pyspec.search import HitResult

# Mirrors swa_prefix_cache/core/proved/prefix_cache.h; tests/test_ffi.py checks they agree.
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

LIB_ENV = settings.LIB.name
DEFAULT_LIB = Path(__file__).resolve().parent.parent / "build" / "libprefix_cache.so"  # make lib
# The proved C whose headers the declarations below mirror (the tests read them).
PROVED_DIR = Path(__file__).resolve().parent.parent / "swa_prefix_cache" / "core" / "proved"

_ffi = FFI()
_ffi.cdef(CDEF)


class NativeLibraryError(RuntimeError):
    """The shared library is missing or cannot be loaded."""


def library_path() -> Path:
    """Where the library is looked for."""
    return Path(settings.LIB.read() or DEFAULT_LIB)


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


# ---- the multi-group lookup and the store mask (joint.h, reachable.h) ------

# Mirrors swa_prefix_cache/core/proved/joint.h and swa_prefix_cache/core/proved/reachable.h;
# tests/test_ffi_joint.py checks they agree.
CDEF_JOINT = """
typedef struct { int64_t block_size; int64_t sliding_window; int64_t mask_offset; int64_t mask_len; int is_full; int eagle; } pc_group;
typedef struct { int64_t length; int64_t first_real; int64_t tokens; int64_t verified; } pc_group_answer;
typedef struct { int64_t hit_length; int64_t num_uncached_common_prefix_tokens; int64_t rounds; } pc_joint_result;
int64_t group_hit(const pc_group *g, const uint8_t *masks, int64_t masks_len,
                  int64_t max_length, int64_t align, int drop, int64_t *first_real);
void joint_lookup(const pc_group *groups, int64_t num_groups, const uint8_t *masks,
                  int64_t masks_len, int64_t max_cache_hit_length,
                  int64_t alignment_tokens, int64_t cap_tokens,
                  pc_group_answer *answers, pc_joint_result *out);
int reachable_mask(int64_t start_block, int64_t end_block, int64_t alignment_tokens,
                   int64_t block_size, int64_t sliding_window, int use_eagle,
                   int64_t retention_interval, const int64_t *reachable_boundaries,
                   int64_t num_boundaries, int64_t final_segment_end_block,
                   uint8_t *out);
"""
_ffi.cdef(CDEF_JOINT)

# Python's None for the optional integers of reachable_mask (reachable.h).
PC_NONE = -1
_INT64_MIN = -(1 << 63)


def _check_optional(name: str, value: object, low: int, high: int) -> int:
    if value is None:
        return PC_NONE
    return _check_int(name, value, low, high)


def _check_bool(name: str, value: object) -> int:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, got {type(value).__name__}")
    return int(value)


def reachable_mask(
    start_block: int,
    end_block: int,
    alignment_tokens: int | None,
    block_size: int,
    sliding_window: int,
    use_eagle: bool,
    retention_interval: int | None = None,
    reachable_boundaries: Any = (),
    final_segment_end_block: int | None = None,
) -> list[bool] | None:
    """C ``reachable_mask`` (swa_prefix_cache.pyspec.reachable.reachable_mask's signature):
    entry ``i - start_block`` says whether block ``i`` is kept; None keeps
    every block. Windows are at least 0 tokens, boundaries at most 2**62."""
    start_block = _check_int("start_block", start_block, 0, SIZE_LIMIT)
    end_block = _check_int("end_block", end_block, start_block, SIZE_LIMIT)
    align = _check_optional("alignment_tokens", alignment_tokens, 1, SIZE_LIMIT)
    block_size = _check_int("block_size", block_size, 1, SIZE_LIMIT)
    sliding_window = _check_int("sliding_window", sliding_window, 0, SIZE_LIMIT)
    eagle = _check_bool("use_eagle", use_eagle)
    retention = _check_optional("retention_interval", retention_interval, 0, SIZE_LIMIT)
    final = _check_optional("final_segment_end_block", final_segment_end_block, 0, SIZE_LIMIT)
    if isinstance(reachable_boundaries, (str, bytes)) or reachable_boundaries is None:
        raise ValueError("reachable_boundaries must be a sequence of ints")
    try:
        bounds = list(reachable_boundaries)
    except TypeError:
        raise ValueError(
            f"reachable_boundaries must be a sequence of ints, got "
            f"{type(reachable_boundaries).__name__}"
        ) from None
    for i, p in enumerate(bounds):
        _check_int(f"reachable_boundaries[{i}]", p, _INT64_MIN, SIZE_LIMIT)
    length = end_block - start_block
    out = _ffi.new("uint8_t[]", max(length, 1))
    cbounds = _ffi.new("int64_t[]", bounds if bounds else [0])
    masked = load().reachable_mask(
        start_block, end_block, align, block_size, sliding_window, eagle,
        retention, cbounds, len(bounds), final, out,
    )
    if not masked:
        return None
    return [out[i] != 0 for i in range(length)]


@dataclass(frozen=True)
class NativeJoint:
    """A C ``joint_lookup`` result, shaped like ``swa_prefix_cache.pyspec.joint.JointResult``
    (per original group, in group order)."""

    hit_length: int
    groups: tuple[Any, ...]
    num_uncached_common_prefix_tokens: int
    rounds: int


def _check_group(name: str, g: object) -> None:
    """A swa_prefix_cache.pyspec.joint.Group (or AttentionGroup) with fields in the C range."""
    from swa_prefix_cache.pyspec.joint import AttentionGroup, Group

    if not isinstance(g, (Group, AttentionGroup)):
        raise ValueError(f"{name} must be a swa_prefix_cache.pyspec.joint.Group, got {type(g).__name__}")
    _check_int(f"{name}.block_size", g.block_size, 1, SIZE_LIMIT)
    if g.sliding_window is not None:
        _check_int(f"{name}.sliding_window", g.sliding_window, -SIZE_LIMIT, SIZE_LIMIT)
    _check_bool(f"{name}.eagle", g.eagle)
    if isinstance(g.cached, (str, bytes)) or g.cached is None:
        raise ValueError(f"{name}.cached must be a sequence of bools")
    try:
        len(g.cached)
    except TypeError:
        raise ValueError(f"{name}.cached must be a sequence of bools") from None


def _pack_group(group: Any, masks: bytearray) -> tuple[int, int, int, int, int, int]:
    offset = len(masks)
    masks.extend(1 if x else 0 for x in group.cached)
    return (group.block_size, group.sliding_window or 0, offset, len(group.cached),
            int(group.is_full), int(group.eagle))


def group_hit(group: Any, max_length: int, alignment_tokens: int, drop_eagle_block: bool) -> tuple[int, int]:
    """C ``group_hit``: one lookup of one (attention) group, as
    ``swa_prefix_cache.pyspec.joint.group_hit``: ``(hit tokens, first_real)``. The group's
    block size must divide ``alignment_tokens``. A lookup reads at most the
    group's mask (where a sliding-window mask is shorter than
    ``max_length // block_size``, pyspec raises and the C reads the mask)."""
    _check_group("group", group)
    bs = group.block_size
    max_length = _check_int("max_length", max_length, 0, SIZE_LIMIT)
    align = _check_int("alignment_tokens", alignment_tokens, 1, SIZE_LIMIT)
    drop = _check_bool("drop_eagle_block", drop_eagle_block)
    if align % bs:
        raise ValueError(f"alignment_tokens {align} must be a multiple of group.block_size {bs}")
    masks = bytearray()
    packed = _pack_group(group, masks)
    cg = _ffi.new("pc_group *", packed)
    buf = _ffi.from_buffer("uint8_t[]", masks) if masks else _ffi.new("uint8_t[]", 1)
    first_real = _ffi.new("int64_t *", 0)
    tokens = load().group_hit(cg, buf, len(masks), max_length, align, drop, first_real)
    return int(tokens), int(first_real[0])


def joint_lookup(
    groups: Any,
    max_cache_hit_length: int,
    alignment_tokens: int,
    hash_block_size: int,
    num_hash_blocks: int,
) -> NativeJoint:
    """C ``joint_lookup`` with ``swa_prefix_cache.pyspec.joint.joint_lookup``'s signature.
    Groups with equal specs are merged by ``swa_prefix_cache.pyspec.joint.attention_groups``
    (the C takes attention groups); every argument is checked first, as
    pyspec checks it. A lookup reads at most its group's mask: where pyspec
    raises because a sliding-window lookup asks past the mask
    (``max_cache_hit_length`` above ``num_hash_blocks * hash_block_size``),
    the C answers from the mask."""
    from swa_prefix_cache.pyspec.joint import GroupAnswer, attention_groups

    if isinstance(groups, (str, bytes)) or groups is None:
        raise ValueError("groups must be a sequence of swa_prefix_cache.pyspec.joint.Group")
    try:
        groups = list(groups)
    except TypeError:
        raise ValueError(
            f"groups must be a sequence of swa_prefix_cache.pyspec.joint.Group, got {type(groups).__name__}"
        ) from None
    if len(groups) < 2:
        raise ValueError(f"groups must hold at least two groups (a hybrid coordinator), got {len(groups)}")
    for gid, g in enumerate(groups):
        _check_group(f"groups[{gid}]", g)
    max_len = _check_int("max_cache_hit_length", max_cache_hit_length, 0, SIZE_LIMIT)
    align = _check_int("alignment_tokens", alignment_tokens, 1, SIZE_LIMIT)
    h = _check_int("hash_block_size", hash_block_size, 1, SIZE_LIMIT)
    num_hash = _check_int("num_hash_blocks", num_hash_blocks, 0, SIZE_LIMIT)
    cap = num_hash * h
    if cap > SIZE_LIMIT:
        raise ValueError(f"num_hash_blocks * hash_block_size must be <= 2**62, got {cap}")
    for gid, g in enumerate(groups):
        if g.block_size % h or align % g.block_size:
            raise ValueError(
                f"groups[{gid}].block_size {g.block_size} must be a multiple of "
                f"hash_block_size and divide alignment_tokens"
            )
        need = cap // g.block_size
        if len(g.cached) < need:
            raise ValueError(f"groups[{gid}].cached has {len(g.cached)} < {need} entries")
    agroups = attention_groups(groups)
    masks = bytearray()
    packed = [_pack_group(a, masks) for a in agroups]
    cgroups = _ffi.new("pc_group[]", packed)
    buf = _ffi.from_buffer("uint8_t[]", masks) if masks else _ffi.new("uint8_t[]", 1)
    answers = _ffi.new("pc_group_answer[]", len(agroups))
    out = _ffi.new("pc_joint_result *")
    load().joint_lookup(cgroups, len(agroups), buf, len(masks), max_len, align, cap,
                        answers, out)
    per_group: list[Any] = [None] * len(groups)
    for idx, a in enumerate(agroups):
        for gid in a.members:
            per_group[gid] = GroupAnswer(length=int(answers[idx].length),
                                         first_real=int(answers[idx].first_real))
    return NativeJoint(
        hit_length=int(out.hit_length),
        groups=tuple(per_group),
        num_uncached_common_prefix_tokens=int(out.num_uncached_common_prefix_tokens),
        rounds=int(out.rounds),
    )


# ---- the full-attention lookup (full_attention.h) ---------------------------

# Mirrors swa_prefix_cache/core/proved/full_attention.h; tests/test_ffi_full.py checks they agree.
CDEF_FULL = """
typedef struct { int64_t hit_tokens; int64_t num_blocks; int64_t prefix; int64_t tail; int64_t probes; } fa_hit_result;
void full_hit(const uint8_t *cached, int64_t n_cached, const uint8_t *fine_cached, int64_t n_fine,
              int64_t max_length, int64_t block_size, int64_t alignment_tokens, int eagle,
              fa_hit_result *out);
void legacy_full_scan(const uint8_t *cached, int64_t n_cached, const uint8_t *fine_cached,
                      int64_t n_fine, int64_t max_length, int64_t block_size,
                      int64_t alignment_tokens, int eagle, fa_hit_result *out);
void full_hit_probe(pc_probe_fn probe, pc_probe_fn fine_probe, void *ctx, int64_t n_cached,
                    int64_t n_fine, int64_t max_length, int64_t block_size,
                    int64_t alignment_tokens, int eagle, fa_hit_result *out);
"""
_ffi.cdef(CDEF_FULL)


def _check_mask_buffer(name: str, value: object) -> tuple[Any, int]:
    """A one-dimensional contiguous buffer of bytes (nonzero means cached)
    of at most 2**62 entries: (cdata pointer, length)."""
    if value is None or isinstance(value, str):
        raise ValueError(f"{name} must be a bytes-like buffer, got {type(value).__name__}")
    try:
        view = memoryview(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(
            f"{name} must be a bytes-like buffer, got {type(value).__name__}"
        ) from None
    if view.itemsize != 1 or view.format not in _BYTE_FORMATS:
        raise ValueError(
            f"{name} must hold uint8 items, got format {view.format!r}"
            f" with itemsize {view.itemsize}"
        )
    if view.ndim != 1 or not view.c_contiguous:
        raise ValueError(f"{name} must be a one-dimensional contiguous buffer")
    if view.nbytes > SIZE_LIMIT:
        raise ValueError(f"{name} must have at most 2**62 entries")
    if view.nbytes == 0:
        return _ffi.new("uint8_t[]", 1), 0
    return _ffi.from_buffer("uint8_t[]", view), view.nbytes


def _check_full_params(
    max_length: object, block_size: object, alignment_tokens: object, eagle: object
) -> tuple[int, int, int, int]:
    max_length = _check_int("max_length", max_length, 0, SIZE_LIMIT)
    block_size = _check_int("block_size", block_size, 1, SIZE_LIMIT)
    alignment_tokens = _check_int("alignment_tokens", alignment_tokens, 1, SIZE_LIMIT)
    if not isinstance(eagle, bool):
        raise ValueError(f"eagle must be a bool, got {type(eagle).__name__}")
    return max_length, block_size, alignment_tokens, int(eagle)


def _full_result(out: Any) -> Any:
    from swa_prefix_cache.pyspec.full import FullHit

    tail = int(out.tail)
    return FullHit(
        hit_tokens=int(out.hit_tokens),
        num_blocks=int(out.num_blocks),
        prefix=int(out.prefix),
        tail=None if tail < 0 else tail,
        probes=int(out.probes),
    )


def _full_call(name: str, cached: object, fine_cached: object, max_length: object,
               block_size: object, alignment_tokens: object, eagle: object) -> Any:
    cbuf, n_cached = _check_mask_buffer("cached", cached)
    fbuf, n_fine = _check_mask_buffer("fine_cached", fine_cached)
    params = _check_full_params(max_length, block_size, alignment_tokens, eagle)
    out = _ffi.new("fa_hit_result *")
    getattr(load(), name)(cbuf, n_cached, fbuf, n_fine, *params, out)
    return _full_result(out)


def full_hit(cached: object, fine_cached: object, max_length: int, block_size: int,
             alignment_tokens: int, eagle: bool) -> Any:
    """C ``full_hit`` on two byte masks (``n_cached = len(cached)``,
    ``n_fine = len(fine_cached)``): a ``swa_prefix_cache.pyspec.full.FullHit``."""
    return _full_call("full_hit", cached, fine_cached, max_length, block_size,
                      alignment_tokens, eagle)


def legacy_full_scan(cached: object, fine_cached: object, max_length: int,
                     block_size: int, alignment_tokens: int, eagle: bool) -> Any:
    """C ``legacy_full_scan``: vLLM's loop, proved to meet full_hit's spec."""
    return _full_call("legacy_full_scan", cached, fine_cached, max_length, block_size,
                      alignment_tokens, eagle)


class _FullProbeCall:
    """One ``full_hit_probe`` call's Python side: both probes and any error."""

    __slots__ = ("probe", "fine_probe", "error")

    def __init__(self, probe: Callable[[int], bool], fine_probe: Callable[[int], bool]) -> None:
        self.probe = probe
        self.fine_probe = fine_probe
        self.error: BaseException | None = None


_current_full = threading.local()


def _full_ask(fine: bool, i: int) -> int:
    call = _current_full.call
    if call.error is not None:
        return 0
    try:
        return 1 if (call.fine_probe if fine else call.probe)(i) else 0
    except BaseException as exc:  # re-raised after the C call returns
        call.error = exc
        return 0


@_ffi.callback("uint8_t(void *, int64_t)")
def _full_probe_trampoline(ctx: Any, i: int) -> int:
    return _full_ask(False, i)


@_ffi.callback("uint8_t(void *, int64_t)")
def _full_fine_trampoline(ctx: Any, j: int) -> int:
    return _full_ask(True, j)


def full_hit_probe(
    probe: Callable[[int], bool], fine_probe: Callable[[int], bool], n_cached: int,
    n_fine: int, max_length: int, block_size: int, alignment_tokens: int, eagle: bool,
) -> Any:
    """C ``full_hit_probe``: the proved full_hit asking ``probe(i)`` for full
    block ``i`` and ``fine_probe(j)`` for fine index ``j`` instead of reading
    masks. Both must answer the same for the same index during one call; an
    exception raised by either is re-raised here (the C side then sees only
    misses and its result is discarded)."""
    if not callable(probe):
        raise ValueError(f"probe must be callable, got {type(probe).__name__}")
    if not callable(fine_probe):
        raise ValueError(f"fine_probe must be callable, got {type(fine_probe).__name__}")
    n_cached = _check_int("n_cached", n_cached, 0, SIZE_LIMIT)
    n_fine = _check_int("n_fine", n_fine, 0, SIZE_LIMIT)
    params = _check_full_params(max_length, block_size, alignment_tokens, eagle)
    call = _FullProbeCall(probe, fine_probe)
    outer = getattr(_current_full, "call", None)
    _current_full.call = call
    out = _ffi.new("fa_hit_result *")
    try:
        load().full_hit_probe(_full_probe_trampoline, _full_fine_trampoline, _ffi.NULL,
                              n_cached, n_fine, *params, out)
    finally:
        _current_full.call = outer
    if call.error is not None:
        raise call.error
    return _full_result(out)


# ---- the KV-offload sliding-window lookup (offload_lookup.h) ---------------

# Mirrors swa_prefix_cache/core/proved/offload_lookup.h; tests/test_ffi_offload.py checks it.
CDEF_OFFLOAD = """
typedef uint8_t (*pc_tri_probe_fn)(void *ctx, int64_t i);
int64_t offload_stride_search(const uint8_t *chunks, int64_t n, int64_t window, int64_t initial_window, int64_t *probes);
int64_t legacy_offload_scan(const uint8_t *chunks, int64_t n, int64_t window, int64_t initial_window, int64_t *probes);
int64_t offload_stride_search_probe(pc_tri_probe_fn probe, void *ctx, int64_t n, int64_t window, int64_t initial_window, int64_t *probes);
"""
_ffi.cdef(CDEF_OFFLOAD)

# vLLM's None in the C result encoding.
OL_NONE = -1


def _check_offload_params(window: object, initial_window: object) -> tuple[int, int]:
    """``window >= 0``; ``initial_window`` None or >= 0 (None and 0 both
    become 0, vLLM's ``initial_window_size or sliding_window_size``)."""
    window = _check_int("window", window, 0, SIZE_LIMIT)
    if initial_window is None:
        return window, 0
    return window, _check_int("initial_window", initial_window, 0, SIZE_LIMIT)


def _check_chunks(chunks: object) -> tuple[Any, int]:
    """A bytes-like mask of 0 (MISS), 1 (HIT), 2 (HIT_PENDING)."""
    if chunks is None or isinstance(chunks, str):
        raise ValueError(f"chunks must be a bytes-like buffer, got {type(chunks).__name__}")
    try:
        view = memoryview(chunks)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"chunks must be a bytes-like buffer, got {type(chunks).__name__}") from None
    if view.itemsize != 1 or view.format not in _BYTE_FORMATS:
        raise ValueError(f"chunks must hold uint8 items, got format {view.format!r}")
    if view.ndim != 1 or not view.c_contiguous:
        raise ValueError("chunks must be a one-dimensional contiguous buffer")
    raw = view.cast("B")
    if raw.nbytes and max(raw) > 2:
        raise ValueError("chunks must hold only 0 (MISS), 1 (HIT) or 2 (HIT_PENDING)")
    if raw.nbytes > SIZE_LIMIT:
        raise ValueError(f"chunks has more than {SIZE_LIMIT} entries")
    if raw.nbytes == 0:
        return _ffi.new("uint8_t[]", 1), 0
    return _ffi.from_buffer("uint8_t[]", raw), raw.nbytes


def _offload_call(name: str, chunks: object, window: object, initial_window: object) -> tuple[int | None, int]:
    buf, n = _check_chunks(chunks)
    window, initial = _check_offload_params(window, initial_window)
    probes = _ffi.new("int64_t *", 0)
    res = getattr(load(), name)(buf, n, window, initial, probes)
    return (None if res == OL_NONE else int(res)), int(probes[0])


def offload_stride_search(chunks: object, window: int, initial_window: int | None = None) -> tuple[int | None, int]:
    """C ``offload_stride_search`` on a 0/1/2 mask: (vLLM's answer, reads)."""
    return _offload_call("offload_stride_search", chunks, window, initial_window)


def legacy_offload_scan(chunks: object, window: int, initial_window: int | None = None) -> tuple[int | None, int]:
    """C ``legacy_offload_scan`` (vLLM's loop) on a 0/1/2 mask: (answer, reads)."""
    return _offload_call("legacy_offload_scan", chunks, window, initial_window)


class _TriProbeCall:
    __slots__ = ("probe", "error")

    def __init__(self, probe: Callable[[int], int]) -> None:
        self.probe = probe
        self.error: BaseException | None = None


_current_offload = threading.local()


@_ffi.callback("uint8_t(void *, int64_t)")
def _tri_probe_trampoline(ctx: Any, i: int) -> int:
    call = _current_offload.call
    if call.error is not None:
        return 0
    try:
        v = call.probe(i)
        if isinstance(v, bool) or v not in (0, 1, 2):
            raise ValueError(f"probe({i}) returned {v!r}, not 0 (MISS), 1 (HIT) or 2 (HIT_PENDING)")
        return v
    except BaseException as exc:  # re-raised after the C call returns
        call.error = exc
        return 0


def offload_stride_search_probe(
    probe: Callable[[int], int], n: int, window: int, initial_window: int | None = None
) -> tuple[int | None, int]:
    """C ``offload_stride_search_probe``: the proved search asking
    ``probe(i)`` (0/1/2) for chunk ``i``; (answer, reads). ``probe`` must
    answer the same for the same ``i`` during one call; an exception it
    raises (or an answer outside 0/1/2) is raised here, the C result
    discarded."""
    if not callable(probe):
        raise ValueError(f"probe must be callable, got {type(probe).__name__}")
    n = _check_int("n", n, 0, SIZE_LIMIT)
    window, initial = _check_offload_params(window, initial_window)
    call = _TriProbeCall(probe)
    outer = getattr(_current_offload, "call", None)
    _current_offload.call = call
    probes = _ffi.new("int64_t *", 0)
    try:
        res = load().offload_stride_search_probe(_tri_probe_trampoline, _ffi.NULL, n, window, initial, probes)
    finally:
        _current_offload.call = outer
    if call.error is not None:
        raise call.error
    return (None if res == OL_NONE else int(res)), int(probes[0])


# ---- the lookup parameters (params.h) ---------------------------------------

# Mirrors swa_prefix_cache/core/proved/params.h; tests/test_params.py checks they agree.
CDEF_PARAMS = """
int64_t contiguous_blocks_for_hit(int64_t sliding_window, int64_t block_size, int eagle);
int64_t search_need(int64_t sliding_window, int64_t block_size, int eagle);
int64_t alignment_period(int64_t block_size, int64_t alignment_tokens);
"""
_ffi.cdef(CDEF_PARAMS)


def _check_window_args(sliding_window: object, block_size: object, eagle: object) -> tuple[int, int, int]:
    """params.h's preconditions: |window| <= 2**62, 1 <= block_size <= 2**62."""
    window = _check_int("sliding_window", sliding_window, -SIZE_LIMIT, SIZE_LIMIT)
    bs = _check_int("block_size", block_size, 1, SIZE_LIMIT)
    return window, bs, _check_bool("eagle", eagle)


def contiguous_blocks_for_hit(sliding_window: int, block_size: int, eagle: bool) -> int:
    """C ``contiguous_blocks_for_hit``: vLLM's
    ``cdiv(sliding_window - 1, block_size) + eagle`` (may be 0 or negative)."""
    return int(load().contiguous_blocks_for_hit(*_check_window_args(sliding_window, block_size, eagle)))


def search_need(sliding_window: int, block_size: int, eagle: bool) -> int:
    """C ``search_need``: ``contiguous_blocks_for_hit`` clamped to >= 1."""
    return int(load().search_need(*_check_window_args(sliding_window, block_size, eagle)))


def alignment_period(block_size: int, alignment_tokens: int) -> int:
    """C ``alignment_period``: ``alignment_tokens / gcd(alignment_tokens,
    block_size)``, the alignment gate in blocks."""
    bs = _check_int("block_size", block_size, 1, SIZE_LIMIT)
    align = _check_int("alignment_tokens", alignment_tokens, 1, SIZE_LIMIT)
    return int(load().alignment_period(bs, align))
