"""The adapter's one setting, read from the environment (no vLLM import)."""

import enum
import os

MODE_ENV = "SWA_PREFIX_CACHE_MODE"


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
