"""Every environment variable the package reads, in one table.

Standard library only, so each package (pyspec, extracted_c, kv_index,
vllm_adapter) imports it without vLLM or torch, and setup.py loads it by
file path before the package is installed. Every name starts with
``SWA_PREFIX_CACHE_``. A former name (``OldName``) is still read when the
new one is unset, with one warning per process per name saying which name
to use; when both are set and differ, the new one wins and the warning says
so. ``python -m vllm_adapter settings`` prints the table with the values in
effect; tests/test_settings.py checks that no product source reads a
prefixed variable that is not here.

This module only finds the raw value; each reader (``Setting.readers``)
parses it and keeps its own answer to a bad value (config.py's readers
raise ``ValueError`` naming the variable).
"""

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

PREFIX = "SWA_PREFIX_CACHE_"

# A child of the plugin's logger, so a warning raised while vLLM loads the
# plugin reaches vLLM's log through the handler the plugin installs there.
logger = logging.getLogger("vllm_adapter.settings")

Environ = Mapping[str, str]


@dataclass(frozen=True)
class OldName:
    """A former name of a setting. ``translate`` maps its raw value to the
    new setting's (None: as if unset), when the meanings differ."""

    name: str
    translate: Callable[[str], str | None] | None = None


@dataclass(frozen=True)
class Setting:
    """One environment variable: what it accepts and who reads it."""

    name: str
    allowed: str  # the values, as a user writes them
    default: str  # what unset means
    readers: tuple[str, ...]  # the functions that parse it
    meaning: str
    choices: tuple[str, ...] = ()  # the exact values, for an enumerated setting
    old_names: tuple[OldName, ...] = field(default_factory=tuple)


def _legacy_require(raw: str) -> str | None:
    """``SWA_PREFIX_CACHE_REQUIRE_NATIVE=1`` meant ``required``; any other
    value was ignored."""
    return "required" if raw == "1" else None


SETTINGS: tuple[Setting, ...] = (
    Setting(
        name="SWA_PREFIX_CACHE_MODE",
        allowed="on, shadow, off",
        default="on",
        readers=("vllm_adapter.config.read_mode",),
        meaning="on: ours serve vLLM's lookups; shadow: both run, vLLM's answer served, "
                "disagreements counted and logged; off: vLLM's code untouched",
        choices=("on", "off", "shadow"),
    ),
    Setting(
        name="SWA_PREFIX_CACHE_CORE",
        allowed="native, python",
        default="native",
        readers=("vllm_adapter.config.read_core",),
        meaning="native: the extension running the proved C; python: pyspec's search "
                "(same answers, slower)",
        choices=("python", "native"),
    ),
    Setting(
        name="SWA_PREFIX_CACHE_LOOKUP_MEMO",
        allowed="on, off",
        default="on",
        readers=("vllm_adapter.config.read_lookup_memo",),
        meaning="a hybrid model's repeated lookup answered from memory while no key it "
                "reads was written",
        choices=("on", "off"),
    ),
    Setting(
        name="SWA_PREFIX_CACHE_OFFLOAD_FILTER",
        allowed="off, corrected",
        default="off",
        readers=("vllm_adapter.config.read_offload_filter",),
        meaning="corrected: the KV-offload store keeps the chunks vLLM's offload lookup "
                "reads; off: vLLM's own filter",
        choices=("off", "corrected"),
    ),
    Setting(
        name="SWA_PREFIX_CACHE_DP_ROUTING",
        allowed="off, exact",
        default="off",
        readers=("vllm_adapter.config.read_dp_routing",),
        meaning="exact: a data-parallel front end routes by each rank's exact prefix hit "
                "against its load; off: vLLM's balancing",
        choices=("off", "exact"),
    ),
    Setting(
        name="SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD",
        allowed="a number >= 0",
        default="max_num_batched_tokens",
        readers=("vllm_adapter.config.read_tokens_per_load",),
        meaning="tokens one unit of vLLM's load score is worth when DP_ROUTING=exact "
                "trades hit against load",
    ),
    Setting(
        name="SWA_PREFIX_CACHE_STATS_DIR",
        allowed="a directory",
        default="(none: no file)",
        readers=("vllm_adapter.report.stats_dir",),
        meaning="each vLLM process writes stats-<pid>.json there: what is active and why, "
                "lookups and their time",
    ),
    Setting(
        name="SWA_PREFIX_CACHE_NATIVE",
        allowed="required, optional",
        default="required",
        readers=("setup.py native_mode",),
        meaning="at pip install: a failed extension build fails the install (required) or "
                "installs without it (optional)",
        choices=("required", "optional"),
        old_names=(OldName("SWA_PREFIX_CACHE_REQUIRE_NATIVE", _legacy_require),),
    ),
    Setting(
        name="SWA_PREFIX_CACHE_STRICT_NATIVE",
        allowed="1/0, true/false, yes/no, on/off",
        default="0",
        readers=("kv_index.native.load", "pyspec.settings.read_bool"),
        meaning="1: a native core that cannot be loaded is an error, not a fallback to the "
                "Python core (tests, benchmarks)",
        old_names=(OldName("PREFIX_CACHE_REQUIRE_NATIVE"),),
    ),
    Setting(
        name="SWA_PREFIX_CACHE_HOTPATH",
        allowed="a file",
        default="(none: the installed extracted_c._hotpath)",
        readers=("extracted_c.hotpath.load",),
        meaning="load this build of the hot-path extension instead (ASan, a mutant)",
        old_names=(OldName("PREFIX_CACHE_HOTPATH"),),
    ),
    Setting(
        name="SWA_PREFIX_CACHE_KVNATIVE",
        allowed="a file",
        default="(none: the installed kv_index._kvnative)",
        readers=("kv_index.native.load",),
        meaning="load this build of kv_index's native core instead (ASan, a mutant)",
        old_names=(OldName("PREFIX_CACHE_KVNATIVE"),),
    ),
    Setting(
        name="SWA_PREFIX_CACHE_LIB",
        allowed="a file",
        default="(none: extracted_c/libprefix_cache.so)",
        readers=("extracted_c.native.library_path",),
        meaning="load this build of the cffi library instead (ASan)",
        old_names=(OldName("PREFIX_CACHE_LIB"),),
    ),
)

BY_NAME: dict[str, Setting] = {setting.name: setting for setting in SETTINGS}
OLD_NAMES: dict[str, str] = {
    old.name: setting.name for setting in SETTINGS for old in setting.old_names
}

# Names warned about in this process (old names, unknown names): once each.
_warned: set[str] = set()


def _warn_once(key: str, message: str, *args: object) -> None:
    if key in _warned:
        return
    _warned.add(key)
    logger.warning(message, *args)


# A value is shown in a message or the log up to this many characters.
SHOWN_CHARS = 80

TRUE_SPELLINGS = ("1", "true", "yes", "on")
FALSE_SPELLINGS = ("0", "false", "no", "off")


def shown(value: str) -> str:
    """``value`` as a message quotes it: repr'd, cut to ``SHOWN_CHARS``
    characters with its length said (a setting can be any size)."""
    if len(value) <= SHOWN_CHARS:
        return repr(value)
    return f"{value[:SHOWN_CHARS]!r}... ({len(value):,} characters)"


def _short(value: str) -> str:
    """``value`` as the table shows it: whole when short, else ``shown``."""
    return value if len(value) <= SHOWN_CHARS else shown(value)


def read_bool(name: str, default: bool, environ: Environ | None = None) -> bool:
    """A boolean setting: 1/0, true/false, yes/no or on/off, case and
    surrounding spaces ignored; unset is ``default``. Anything else raises
    ``ValueError`` naming the variable."""
    raw = get(name, environ)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in TRUE_SPELLINGS:
        return True
    if word in FALSE_SPELLINGS:
        return False
    raise ValueError(f"{name} must be one of 1/0, true/false, yes/no, on/off, got {shown(raw)}")


def get(name: str, environ: Environ | None = None) -> str | None:
    """The raw value of setting ``name`` (None when unset), read under its
    name, else under a former name (warned about once per process)."""
    setting = BY_NAME.get(name)
    if setting is None:
        raise ValueError(f"name: {name!r} is not a setting (pyspec/settings.py)")
    env = os.environ if environ is None else environ
    value = env.get(name)
    for old in setting.old_names:
        raw = env.get(old.name)
        if raw is None:
            continue
        meant = old.translate(raw) if old.translate is not None else raw
        if value is None:
            _warn_once(old.name, "swa-prefix-cache: %s is a former name of %s; it is still "
                       "read, set %s instead", old.name, name, name)
            value = meant
        elif meant is not None and meant != value:
            _warn_once(old.name, "swa-prefix-cache: %s=%s and %s=%s are both set; %s wins "
                       "(%s is its former name)", name, shown(value), old.name, shown(raw), name,
                       old.name)
        else:
            _warn_once(old.name, "swa-prefix-cache: %s is a former name of %s (both set); "
                       "unset %s", old.name, name, old.name)
    return value


def unknown(environ: Environ | None = None) -> list[str]:
    """The ``SWA_PREFIX_CACHE_*`` variables in the environment that name no
    setting (a typo that would otherwise be silently ignored)."""
    env = os.environ if environ is None else environ
    return sorted(key for key in env
                  if key.startswith(PREFIX) and key not in BY_NAME and key not in OLD_NAMES)


def _edits(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def near_miss(name: str) -> str | None:
    """The setting (or former name) ``name`` is at most two edits from,
    the nearest; None if none is."""
    best = min(list(BY_NAME) + list(OLD_NAMES), key=lambda known: _edits(name, known))
    return best if _edits(name, best) <= 2 else None


def unknown_said(environ: Environ | None = None) -> list[str]:
    """One line per unknown ``SWA_PREFIX_CACHE_*`` variable, naming the
    setting it is a near miss of (at most two edits away), if any."""
    lines = []
    for key in unknown(environ):
        close = near_miss(key)
        hint = f"; did you mean {close}?" if close else ""
        lines.append(f"{key} is not a setting and is ignored{hint}")
    return lines


def warn_unknown(environ: Environ | None = None) -> list[str]:
    """Warn, once per process per name, about each unknown
    ``SWA_PREFIX_CACHE_*`` variable, with the setting it is a near miss of."""
    names = unknown(environ)
    for key, line in zip(names, unknown_said(environ)):
        _warn_once(key, "swa-prefix-cache: %s (python -m vllm_adapter settings lists them)", line)
    return names


def table(environ: Environ | None = None) -> list[dict[str, str]]:
    """One row per setting: name, value in effect (and under which name),
    allowed values, default, meaning. Reads without warning."""
    env = os.environ if environ is None else environ
    rows = []
    for setting in SETTINGS:
        value = env.get(setting.name)
        source = setting.name if value is not None else ""
        ignored = []
        for old in setting.old_names:
            raw = env.get(old.name)
            if raw is None:
                continue
            meant = old.translate(raw) if old.translate is not None else raw
            if value is None and meant is not None:
                value, source = meant, old.name
            else:
                ignored.append(f"{old.name}={_short(raw)}")
        said = "(unset)" if value is None else _short(value)
        if source and source != setting.name:
            said += f" (from {source})"
        if ignored:
            said += f" (also set, ignored: {', '.join(ignored)})"
        rows.append({"name": setting.name, "value": said, "allowed": setting.allowed,
                     "default": setting.default, "meaning": setting.meaning})
    return rows


def format_table(environ: Environ | None = None) -> str:
    """``table()`` as aligned text, one setting per line plus its meaning."""
    rows = table(environ)
    width = max(len(row["name"]) for row in rows)
    lines = []
    for row in rows:
        lines.append(f"{row['name']:<{width}}  = {row['value']}")
        lines.append(f"{'':<{width}}    allowed: {row['allowed']}; default: {row['default']}")
        lines.append(f"{'':<{width}}    {row['meaning']}")
    return "\n".join(lines)
