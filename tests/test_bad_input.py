"""Bad input gets a ValueError that names the argument, never a crash.

Covers every public function of pyspec and of the native loader. The
native cases also run under the ASan + UBSan build (``make ffi-test-asan``).
"""

import array
import re

import pytest

from benchmarks import cffi_core as native
from swa_prefix_cache.pyspec import SearchParams, find_hit, legacy_scan, prefix_fallback, stride_search

GOOD_VLLM = dict(
    max_length=64, block_size=16, sliding_window=33, alignment_tokens=16,
    drop_eagle_block=False,
)


@pytest.mark.parametrize(
    "name, value",
    [
        ("max_length", -1),
        ("max_length", 3.0),
        ("max_length", None),
        ("block_size", 0),
        ("block_size", -16),
        ("alignment_tokens", 0),
        ("alignment_tokens", "16"),
        ("sliding_window", None),
        ("sliding_window", 1.5),
        ("drop_eagle_block", 1),
        ("drop_eagle_block", None),
    ],
)
def test_from_vllm_rejects(name: str, value: object) -> None:
    args = {**GOOD_VLLM, name: value}
    with pytest.raises(ValueError, match=name):
        SearchParams.from_vllm(**args)
    with pytest.raises(ValueError, match=name):
        legacy_scan(b"\x01" * 4, **args)


@pytest.mark.parametrize(
    "name, value",
    [("n", -1), ("need", 0), ("need", -3), ("period", 0), ("eagle", 0), ("n", True)],
)
def test_search_params_rejects(name: str, value: object) -> None:
    args = {**dict(n=4, need=2, period=1, eagle=False), name: value}
    with pytest.raises(ValueError, match=name):
        SearchParams(**args)


def test_short_mask_rejected_by_spec() -> None:
    p = SearchParams(n=5, need=2, period=1, eagle=False)
    with pytest.raises(ValueError, match="cached"):
        find_hit([True] * 4, p)
    with pytest.raises(ValueError, match="cached"):
        legacy_scan([True] * 4, **dict(GOOD_VLLM, max_length=80))


def test_degenerate_windows_are_accepted() -> None:
    """vLLM accepts sliding windows of 0 and 1 token (need <= 0): so do we."""
    for window in (-5, 0, 1):
        p = SearchParams.from_vllm(64, 16, window, 16, False)
        assert p.need == 1
        assert find_hit([False, True, True, False], p) == legacy_scan(
            [False, True, True, False], 64, 16, window, 16, False
        )
    assert stride_search([True], SearchParams(1, 1, 1, False)) == 1
    assert prefix_fallback([True], SearchParams(1, 1, 1, False)) == 0


NATIVE_FUNCS = [native.find_hit, native.legacy_scan, native.stride_search,
                native.prefix_fallback]
GOOD_NATIVE = dict(n=4, need=2, period=1, eagle=False)
BIG = native.SIZE_LIMIT + 1


@pytest.mark.parametrize("func", NATIVE_FUNCS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "cached, message",
    [
        (None, "cached"),
        ([1, 1, 1, 1], "cached"),
        ("1111", "cached"),
        (array.array("i", [1, 1, 1, 1]), "cached"),
        (array.array("H", [1, 1, 1, 1]), "cached"),
        (memoryview(b"\x01" * 8)[::2], "cached"),
        (memoryview(b"\x01" * 8).cast("B", (2, 4)), "cached"),
        (b"\x01\x01\x01", "cached"),
    ],
    ids=["none", "list", "str", "int32", "uint16", "strided", "2d", "short"],
)
def test_native_rejects_bad_buffers(func, cached: object, message: str, lib: None) -> None:
    with pytest.raises(ValueError, match=message):
        func(cached, **GOOD_NATIVE)


@pytest.mark.parametrize("func", NATIVE_FUNCS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "name, value",
    [
        ("n", -1), ("n", BIG), ("n", 2.0), ("n", None),
        ("period", 0), ("period", -1), ("period", BIG),
        ("need", BIG), ("need", -BIG), ("need", "2"),
        ("eagle", 1), ("eagle", None),
    ],
)
def test_native_rejects_bad_scalars(func, name: str, value: object, lib: None) -> None:
    args = {**GOOD_NATIVE, name: value}
    with pytest.raises(ValueError, match=rf"^{re.escape(name)} "):
        func(b"\x01" * 4, **args)


@pytest.mark.parametrize("func", [native.stride_search, native.prefix_fallback],
                         ids=lambda f: f.__name__)
def test_native_core_steps_need_positive_run(func, lib: None) -> None:
    """stride_search / prefix_fallback take the effective need (>= 1);
    only find_hit and legacy_scan accept vLLM's raw need (<= 0 for W <= 1)."""
    with pytest.raises(ValueError, match="need"):
        func(b"\x01" * 4, n=4, need=0, period=1, eagle=False)


@pytest.mark.parametrize("func", [native.find_hit, native.legacy_scan],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("need", [0, -1, -(native.SIZE_LIMIT)])
def test_native_zero_window_terminates(func, need: int, lib: None) -> None:
    """The W = 0 case (need <= 0) terminates and behaves as need = 1."""
    mask = b"\x00\x01\x01\x00\x01"
    got = func(mask, n=5, need=need, period=1, eagle=False)
    assert got.hit == func(mask, n=5, need=1, period=1, eagle=False).hit


@pytest.mark.parametrize("func", NATIVE_FUNCS, ids=lambda f: f.__name__)
def test_native_accepts_byte_like_buffers(func, lib: None) -> None:
    """bytes, bytearray, memoryview, bool arrays: all read as 'nonzero = cached'."""
    results = {
        repr(func(buf, **GOOD_NATIVE))
        for buf in (b"\x00\x02\x01\x07", bytearray(b"\x00\x02\x01\x07"),
                    memoryview(b"\x00\x02\x01\x07"), array.array("B", [0, 2, 1, 7]),
                    array.array("b", [0, 2, 1, 7]))
    }
    assert len(results) == 1


def test_missing_library_is_reported(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setenv(native.LIB_ENV, str(tmp_path / "nope.so"))
    assert not native.is_available()
    with pytest.raises(native.NativeLibraryError, match="nope.so"):
        native.find_hit(b"\x01", n=1, need=1, period=1, eagle=False)


def test_find_hit_probe_rejects_bad_arguments(lib: None) -> None:
    with pytest.raises(ValueError, match="probe"):
        native.find_hit_probe(None, n=4, need=2, period=1, eagle=False)
    for name, value in [("n", -1), ("period", 0), ("eagle", 1), ("need", "2")]:
        args = {**GOOD_NATIVE, name: value}
        with pytest.raises(ValueError, match=rf"^{name} "):
            native.find_hit_probe(lambda i: True, **args)


def test_find_hit_probe_reraises_probe_errors(lib: None) -> None:
    """A failing probe is never read as 'not cached': its error comes back."""
    calls = []

    def probe(i: int) -> bool:
        calls.append(i)
        raise KeyError(i)

    with pytest.raises(KeyError):
        native.find_hit_probe(probe, n=1000, need=4, period=1, eagle=False)
    assert len(calls) == 1  # after the first error the C side is told "miss"
