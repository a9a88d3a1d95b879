"""The adapter's one setting, read from the environment (no vLLM import)."""

import enum
import os

MODE_ENV = "SWA_PREFIX_CACHE_MODE"
CORE_ENV = "SWA_PREFIX_CACHE_CORE"


class Mode(enum.Enum):
    """``on``: our lookup serves vLLM. ``off``: vLLM's own code, untouched.
    ``shadow``: both run, vLLM's answer is returned, disagreements are
    counted and logged with what is needed to reproduce them."""

    ON = "on"
    OFF = "off"
    SHADOW = "shadow"


def read_mode(environ: "os._Environ[str] | dict[str, str] | None" = None) -> Mode:
    """The mode from ``SWA_PREFIX_CACHE_MODE`` (default ``on``).

    An unknown value raises ``ValueError`` naming the variable: a typo must
    not silently change what serves production traffic.
    """
    env = os.environ if environ is None else environ
    raw = env.get(MODE_ENV, Mode.ON.value).strip().lower()
    try:
        return Mode(raw)
    except ValueError:
        allowed = ", ".join(m.value for m in Mode)
        raise ValueError(f"{MODE_ENV} must be one of {allowed}, got {raw!r}") from None


class Core(enum.Enum):
    """Which implementation of the (same) stride search serves lookups.

    ``python`` (default): pyspec's stride search, probing vLLM's BlockPool
    directly. ``native``: the Frama-C-proved C core, calling back into
    Python for each probe. Both make the same probes and return the same
    hit (tests/test_exhaustive.py, tests/test_adapter.py); measured on the
    real BlockPool, the cffi callback per probe makes ``native`` slower than
    vLLM itself on fully cached prompts, so it is opt-in until that cost
    is gone (README, "The hot path").
    """

    PYTHON = "python"
    NATIVE = "native"


def read_core(environ: "os._Environ[str] | dict[str, str] | None" = None) -> Core:
    """The core from ``SWA_PREFIX_CACHE_CORE`` (default ``python``)."""
    env = os.environ if environ is None else environ
    raw = env.get(CORE_ENV, Core.PYTHON.value).strip().lower()
    try:
        return Core(raw)
    except ValueError:
        allowed = ", ".join(c.value for c in Core)
        raise ValueError(f"{CORE_ENV} must be one of {allowed}, got {raw!r}") from None
