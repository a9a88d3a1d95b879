"""scripts/vllm_upstream/triton_guard.py on the installed vLLM's real
``CpuPlatform`` and ``VllmConfig``.

On vLLM 0.33.0 (.venv) the refusal is not in the source and the module
changes nothing. On 0.34.0 (``PYTHONPATH=build/releases/0.34.0``, an x86
CPU without Triton) a config is refused without it and built with it;
``HAS_TRITON`` reads True only for vLLM's check and is vLLM's own again
after the context or the process-wide switch.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "vllm_upstream"))

import triton_guard  # noqa: E402
import vllm.triton_utils as triton_utils  # noqa: E402
from vllm.config import CacheConfig, VllmConfig  # noqa: E402
from vllm.platforms.cpu import CpuPlatform  # noqa: E402
from vllm.platforms.interface import CpuArchEnum  # noqa: E402

_STOCK_CHECK = CpuPlatform.__dict__["check_and_update_config"]
REFUSES = triton_guard.TRITON_REFUSAL in (
    Path(_STOCK_CHECK.__func__.__code__.co_filename).read_text()
)
GUARDED = (
    REFUSES
    and CpuPlatform.get_cpu_architecture() == CpuArchEnum.X86
    and not triton_utils.HAS_TRITON
)
needs_guard = pytest.mark.skipif(
    not GUARDED, reason="this vLLM/machine has no x86 'requires Triton' guard (vLLM < 0.34)"
)
needs_no_guard = pytest.mark.skipif(GUARDED, reason="this vLLM refuses configs without Triton")


def _config() -> VllmConfig:
    return VllmConfig(cache_config=CacheConfig(block_size=16))


@pytest.fixture(autouse=True)
def _stock_platform():
    """Every test starts and ends with vLLM's own method and HAS_TRITON."""
    has_triton = triton_utils.HAS_TRITON
    triton_guard.restore_triton_guard()
    yield
    triton_guard.restore_triton_guard()
    assert CpuPlatform.__dict__["check_and_update_config"] is _STOCK_CHECK
    assert type(triton_utils) is types.ModuleType
    assert triton_utils.HAS_TRITON is has_triton


@needs_no_guard
def test_older_vllm_untouched() -> None:
    assert not triton_guard.guard_applies()
    _config()  # built without any help
    with triton_guard.triton_guard_passed() as passed:
        assert passed is False
        assert triton_utils.HAS_TRITON is False
    assert triton_guard.pass_over_triton_guard() is False
    assert not triton_guard.is_passed_over()
    assert CpuPlatform.__dict__["check_and_update_config"] is _STOCK_CHECK


@needs_guard
def test_refused_without_built_within_context() -> None:
    assert triton_guard.guard_applies()
    with pytest.raises(RuntimeError, match="requires Triton"):
        _config()
    with triton_guard.triton_guard_passed() as passed:
        assert passed is True
        assert triton_utils.HAS_TRITON is False  # this reader is not vLLM's check
        config = _config()
    assert config.cache_config.block_size == 16
    assert triton_utils.HAS_TRITON is False
    with pytest.raises(RuntimeError, match="requires Triton"):
        _config()


@needs_guard
def test_restored_when_the_block_raises() -> None:
    with pytest.raises(KeyError):
        with triton_guard.triton_guard_passed():
            raise KeyError("inside")
    assert triton_utils.HAS_TRITON is False


@needs_guard
def test_only_the_check_reads_true() -> None:
    """A module imported while the guard is passed over (as the config
    check imports model modules) copies the real False, not the True."""
    name = "triton_guard_test_copier"
    try:
        with triton_guard.triton_guard_passed():
            copier = types.ModuleType(name)
            exec("from vllm.triton_utils import HAS_TRITON", copier.__dict__)
            sys.modules[name] = copier
            assert copier.HAS_TRITON is False
        triton_guard.pass_over_triton_guard()
        exec("from vllm.triton_utils import HAS_TRITON", copier.__dict__)
        assert copier.HAS_TRITON is False
    finally:
        sys.modules.pop(name, None)


@needs_guard
def test_module_that_holds_true_is_named() -> None:
    """A module first imported inside the block that holds HAS_TRITON=True
    would keep it after the block: refused, naming it."""
    name = "triton_guard_test_holder"
    try:
        with pytest.raises(RuntimeError, match=name):
            with triton_guard.triton_guard_passed():
                holder = types.ModuleType(name)
                holder.HAS_TRITON = True  # type: ignore[attr-defined]
                sys.modules[name] = holder
    finally:
        sys.modules.pop(name, None)
    assert triton_utils.HAS_TRITON is False


@needs_guard
def test_process_wide_switch() -> None:
    assert triton_guard.pass_over_triton_guard() is True
    assert triton_guard.pass_over_triton_guard() is True  # once is enough
    assert triton_guard.is_passed_over()
    assert triton_guard.guard_applies()  # still judged on vLLM's own method
    first = _config()
    second = _config()
    assert first.cache_config.block_size == second.cache_config.block_size == 16
    assert triton_guard.configs_passed() == 2
    assert triton_utils.HAS_TRITON is False  # True only for vLLM's check
    triton_guard.restore_triton_guard()
    assert not triton_guard.is_passed_over()
    with pytest.raises(RuntimeError, match="requires Triton"):
        _config()


def test_refusal_text_is_what_this_vllm_raises() -> None:
    """The refusal the module looks for is vLLM's own text, verbatim, on the
    release that has it; the 0.33 line has none."""
    import vllm

    major_minor = tuple(int(p) for p in vllm.__version__.split(".")[:2])
    assert REFUSES is (major_minor >= (0, 34))
