"""Passing over vLLM 0.34+'s x86 "requires Triton" guard, for code that runs
no model.

vLLM 0.34.0's ``CpuPlatform.check_and_update_config`` raises
``RuntimeError("vLLM on x86 CPUs requires Triton (triton-cpu).")`` for every
``VllmConfig`` built on an x86 CPU without Triton. The guard protects the
model runner's kernels; the scheduler, the KV-cache manager and the
offloading connector run none, yet every test or benchmark that builds a
config stops there. ``check_and_update_config`` reads
``vllm.triton_utils.HAS_TRITON`` when it is called, and on x86 the guard is
its only use of it, so reading True there builds the same config 0.33.0
built (it only logged a warning there).

The guard is passed over only where all of these hold, so older releases
(the refusal text is not in their source), non-x86 CPUs and machines with
Triton are left untouched:

* the CPU architecture is x86;
* ``vllm.triton_utils.HAS_TRITON`` is false;
* the refusal text is in the installed ``CpuPlatform.check_and_update_config``.

How: while passed over, ``vllm.triton_utils.HAS_TRITON`` is a property of
that module that reads True for vLLM's own ``check_and_update_config`` (the
reading frame runs that function's code) and False for every other reader.
A flag flipped for the length of the call would not do: the call resolves
the model's class (``_cpu_mamba_backend``), which imports model modules
(qwen3_next.py, fused_moe, mamba_ssm) that copy ``HAS_TRITON`` at import
and would keep a True for the rest of the process.

Two ways to use it, one mechanism:

* ``with triton_guard_passed() as passed:`` around building one config
  (the benchmarks); restored on exit, which also checks that no module
  first imported meanwhile holds ``HAS_TRITON=True``;
* ``pass_over_triton_guard()`` for a whole process (vLLM's own test
  sessions); ``restore_triton_guard()`` undoes it.

vLLM is imported only when a function is called, never at import time.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import types
from collections.abc import Iterator
from typing import Any

TRITON_REFUSAL = "vLLM on x86 CPUs requires Triton (triton-cpu)."

# depth: open triton_guard_passed() blocks plus the process-wide switch;
# code: the refusing function's code object (the one reader told True);
# configs: guard checks answered True; session: the process-wide switch is on;
# module_class: vllm.triton_utils' own class, given back by the last holder.
_state: dict[str, Any] = {
    "depth": 0,
    "code": None,
    "configs": 0,
    "session": False,
    "module_class": types.ModuleType,
}
# Whether the refusal is in a given check_and_update_config, by function.
_refuses: dict[Any, bool] = {}


class _TritonUtilsPastGuard(types.ModuleType):
    """``vllm.triton_utils``'s class while the guard is passed over."""

    @property
    def HAS_TRITON(self) -> bool:  # noqa: N802 (vLLM's name)
        """True only when the frame reading it (the one running
        ``from vllm.triton_utils import HAS_TRITON``) runs the refusing
        ``check_and_update_config``; vLLM's own value for anyone else."""
        if sys._getframe(1).f_code is _state["code"]:
            _state["configs"] += 1
            return True
        return self.__dict__["HAS_TRITON"]

    @HAS_TRITON.setter
    def HAS_TRITON(self, value: bool) -> None:  # noqa: N802
        self.__dict__["HAS_TRITON"] = value


def guard_applies() -> bool:
    """True when this vLLM on this machine would refuse a config for want
    of Triton: x86, ``HAS_TRITON`` false, the refusal in the source."""
    import vllm.triton_utils as triton_utils
    from vllm.platforms.cpu import CpuPlatform
    from vllm.platforms.interface import CpuArchEnum

    if triton_utils.HAS_TRITON:
        return False
    if CpuPlatform.get_cpu_architecture() != CpuArchEnum.X86:
        return False
    func = CpuPlatform.__dict__["check_and_update_config"].__func__
    if func not in _refuses:
        _refuses[func] = TRITON_REFUSAL in inspect.getsource(func)
    return _refuses[func]


def _enter() -> bool:
    """One more holder of the pass; False (nothing done) where the guard
    does not apply."""
    if _state["depth"] == 0:
        if not guard_applies():
            return False
        import vllm.triton_utils as triton_utils
        from vllm.platforms.cpu import CpuPlatform

        _state["code"] = CpuPlatform.__dict__["check_and_update_config"].__func__.__code__
        _state["module_class"] = type(triton_utils)
        triton_utils.__class__ = _TritonUtilsPastGuard
    _state["depth"] += 1
    return True


def _leave() -> None:
    """One holder fewer; the last one gives vLLM's module back its class."""
    _state["depth"] -= 1
    if _state["depth"] == 0:
        import vllm.triton_utils as triton_utils

        triton_utils.__class__ = _state["module_class"]
        _state["code"] = None


@contextlib.contextmanager
def triton_guard_passed() -> Iterator[bool]:
    """Inside the block, vLLM's ``check_and_update_config`` reads
    ``HAS_TRITON`` as True where the guard applies (``guard_applies()``);
    yields whether it does. Every other reader, inside the block or not,
    reads the real False.

    On exit it checks that no module first imported inside the block holds
    ``HAS_TRITON=True`` (it would reach for a Triton that is not there):
    ``RuntimeError`` naming the modules."""
    if not _enter():
        yield False
        return
    loaded = set(sys.modules)
    try:
        yield True
    finally:
        _leave()
    kept = sorted(
        name
        for name in set(sys.modules) - loaded
        if getattr(sys.modules[name], "HAS_TRITON", None) is True
    )
    if kept:
        raise RuntimeError(
            "modules imported while vLLM's Triton guard was passed over hold "
            f"HAS_TRITON=True: {kept}"
        )


def pass_over_triton_guard() -> bool:
    """Process-wide: vLLM's ``check_and_update_config`` reads ``HAS_TRITON``
    as True from now on. True when the guard applies here and is now passed
    over (also when it already was); False, changing nothing, where it does
    not apply (vLLM 0.33.0 and older, non-x86, Triton installed)."""
    if _state["session"]:
        return True
    if not _enter():
        return False
    _state["session"] = True
    _state["configs"] = 0
    return True


def restore_triton_guard() -> None:
    """Undoes ``pass_over_triton_guard()`` (nothing when it is not on)."""
    if _state["session"]:
        _state["session"] = False
        _leave()


def is_passed_over() -> bool:
    """Whether ``pass_over_triton_guard()`` is in effect."""
    return bool(_state["session"])


def configs_passed() -> int:
    """Config checks that read ``HAS_TRITON`` as True past the guard (since
    ``pass_over_triton_guard()``)."""
    return int(_state["configs"])
