"""Every environment variable the package reads: one record each, at the
package root.

A record (``Setting``) holds the name, the values it accepts, what unset
means, its parser and its meaning, and owns its reader: ``MODE.read()`` is
the parsed value (a bad value raises ``ValueError`` naming the variable).
Product code reads a setting only through its record, so a name is written
once, here; tests/test_settings.py checks that no product source reads a
prefixed variable any other way.

Standard library only, so every subpackage imports it without vLLM or
torch, and setup.py loads it by file path before the package is installed.
Every name starts with ``SWA_PREFIX_CACHE_``. A former name (``OldName``)
is still read when the new one is unset, with one warning per process per
name saying which name to use; when both are set and differ, the new one
wins and the warning says so. ``python -m swa_prefix_cache settings`` prints
the table with the values in effect; README's tables are ``markdown()``.
"""

import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

PREFIX = "SWA_PREFIX_CACHE_"

# A child of the plugin's logger, so a warning raised while vLLM loads the
# plugin reaches vLLM's log through the handler the plugin installs there.
logger = logging.getLogger("swa_prefix_cache.settings")

Environ = Mapping[str, str]
# A parser: (the variable's name, its raw value) -> the value; raises
# ValueError naming the variable.
Parse = Callable[[str, str], Any]

# Who a setting is for: an operator of vLLM, or the build and the tests.
USER = "user"
SWITCH = "build and test"

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


def choice(*values: str) -> Parse:
    """One of ``values``, case and surrounding spaces ignored: a typo must
    not silently change what serves production traffic."""

    def parse(name: str, raw: str) -> str:
        word = raw.strip().lower()
        if word not in values:
            raise ValueError(f"{name} must be one of {', '.join(values)}, got {shown(word)}")
        return word

    return parse


def number_at_least_zero(name: str, raw: str) -> float:
    """A finite number >= 0."""
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (0 <= value and math.isfinite(value)):
        raise ValueError(f"{name} must be a number >= 0, got {shown(raw)}")
    return value


def boolean(name: str, raw: str) -> bool:
    """1/0, true/false, yes/no or on/off, case and surrounding spaces ignored."""
    word = raw.strip().lower()
    if word in TRUE_SPELLINGS:
        return True
    if word in FALSE_SPELLINGS:
        return False
    raise ValueError(f"{name} must be one of 1/0, true/false, yes/no, on/off, got {shown(raw)}")


def path(name: str, raw: str) -> str | None:
    """A file or directory; blank is as if unset."""
    return raw.strip() or None


@dataclass(frozen=True)
class OldName:
    """A former name of a setting. ``translate`` maps its raw value to the
    new setting's (None: as if unset), when the meanings differ."""

    name: str
    translate: Callable[[str], str | None] | None = None


@dataclass(frozen=True)
class Setting:
    """One environment variable: what it accepts, what unset means, how it
    is parsed and what it does."""

    name: str
    allowed: str  # the values, as a user writes them
    default: str  # what unset means, in words
    meaning: str
    parse: Parse
    unset: Any = None  # what ``read`` returns when it is unset
    audience: str = USER
    choices: tuple[str, ...] = ()  # the exact values, for an enumerated setting
    old_names: tuple[OldName, ...] = field(default_factory=tuple)
    doc: str = ""  # the page that explains it (README's table links it)

    def read(self, environ: Environ | None = None) -> Any:
        """The value in effect: parsed, or ``unset``. Raises ``ValueError``
        naming the variable for a value it does not accept."""
        raw = get(self.name, environ)
        return self.unset if raw is None else self.parse(self.name, raw)


def _choice_setting(name: str, values: tuple[str, ...], default: str, meaning: str,
                    **more: Any) -> Setting:
    """An enumerated setting: ``values`` in the order the error lists them."""
    return Setting(name=name, allowed=", ".join(values), default=default, meaning=meaning,
                   parse=choice(*values), unset=default, choices=values, **more)


def _legacy_require(raw: str) -> str | None:
    """``SWA_PREFIX_CACHE_REQUIRE_NATIVE=1`` meant ``required``; any other
    value was ignored."""
    return "required" if raw == "1" else None


MODE = _choice_setting(
    "SWA_PREFIX_CACHE_MODE", ("on", "off", "shadow"), "on",
    "on: ours serve vLLM's lookups; shadow: both run, vLLM's answer is served, "
    "disagreements counted and logged with what reproduces them; off: vLLM's code untouched")
CORE = _choice_setting(
    "SWA_PREFIX_CACHE_CORE", ("python", "native"), "native",
    "native: the extension running the proved C; python: pyspec's searches in Python "
    "(same answers, slower; the full-attention lookup stays vLLM's)")
LOOKUP_MEMO = _choice_setting(
    "SWA_PREFIX_CACHE_LOOKUP_MEMO", ("on", "off"), "on",
    "a hybrid model's repeated lookup answered from memory while no key it reads was written",
    doc="docs/lookup-memo.md")
OFFLOAD_FILTER = _choice_setting(
    "SWA_PREFIX_CACHE_OFFLOAD_FILTER", ("off", "corrected"), "off",
    "corrected: the KV-offload store keeps the chunks vLLM's own offload lookup reads; "
    "off: vLLM's own filter",
    doc="docs/store-lookup-agreement.md")
DP_ROUTING = _choice_setting(
    "SWA_PREFIX_CACHE_DP_ROUTING", ("off", "exact"), "off",
    "exact: a `--data-parallel-size N` front end routes by each rank's exact prefix hit "
    "against its load; off: vLLM's balancing",
    doc="docs/kv-index.md")
DP_TOKENS_PER_LOAD = Setting(
    name="SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD", allowed="a number >= 0",
    default="max_num_batched_tokens", parse=number_at_least_zero,
    meaning="tokens one unit of vLLM's load score is worth when DP_ROUTING=exact trades "
            "hit against load")
STATS_DIR = Setting(
    name="SWA_PREFIX_CACHE_STATS_DIR", allowed="a directory", default="none (no stats file)",
    parse=path,
    meaning="each vLLM process writes `stats-<pid>.json` there: what is active and why, "
            "lookups and their time")
NATIVE = _choice_setting(
    "SWA_PREFIX_CACHE_NATIVE", ("required", "optional"), "required",
    "at pip install: a failed extension build fails the install (required) or installs "
    "without it (optional)",
    audience=SWITCH, old_names=(OldName("SWA_PREFIX_CACHE_REQUIRE_NATIVE", _legacy_require),))
STRICT_NATIVE = Setting(
    name="SWA_PREFIX_CACHE_STRICT_NATIVE", allowed="1/0, true/false, yes/no, on/off", default="0", parse=boolean, unset=False, audience=SWITCH,
    meaning="1: a native core that cannot be loaded is an error, not a fallback to the "
            "Python core (tests, benchmarks)",
    old_names=(OldName("PREFIX_CACHE_REQUIRE_NATIVE"),))
HOTPATH = Setting(
    name="SWA_PREFIX_CACHE_HOTPATH", allowed="a file",
    default="the installed swa_prefix_cache.core._hotpath", parse=path, audience=SWITCH,
    meaning="load this build of the hot-path extension instead (ASan, a mutant)",
    old_names=(OldName("PREFIX_CACHE_HOTPATH"),))
KVNATIVE = Setting(
    name="SWA_PREFIX_CACHE_KVNATIVE", allowed="a file",
    default="the installed swa_prefix_cache.kv_index._kvnative", parse=path,
    audience=SWITCH,
    meaning="load this build of kv_index's native core instead (ASan, a mutant)",
    old_names=(OldName("PREFIX_CACHE_KVNATIVE"),))
LIB = Setting(
    name="SWA_PREFIX_CACHE_LIB", allowed="a file",
    default="build/libprefix_cache.so (make lib)", parse=path, audience=SWITCH,
    meaning="load this build of the cffi library of the FFI tests instead (ASan)",
    old_names=(OldName("PREFIX_CACHE_LIB"),))

SETTINGS: tuple[Setting, ...] = (
    MODE, CORE, LOOKUP_MEMO, OFFLOAD_FILTER, DP_ROUTING, DP_TOKENS_PER_LOAD, STATS_DIR,
    NATIVE, STRICT_NATIVE, HOTPATH, KVNATIVE, LIB,
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


def _short(value: str) -> str:
    """``value`` as the table shows it: whole when short, else ``shown``."""
    return value if len(value) <= SHOWN_CHARS else shown(value)


def get(name: str, environ: Environ | None = None) -> str | None:
    """The raw value of setting ``name`` (None when unset), read under its
    name, else under a former name (warned about once per process)."""
    setting = BY_NAME.get(name)
    if setting is None:
        raise ValueError(f"name: {name!r} is not a setting (swa_prefix_cache/settings.py)")
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
        _warn_once(key, "swa-prefix-cache: %s (python -m swa_prefix_cache settings lists them)", line)
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


def _markdown_values(setting: Setting) -> str:
    if not setting.choices:
        return f"{setting.allowed}; default: {setting.default}"
    ordered = sorted(setting.choices, key=lambda v: v != setting.default)
    return ", ".join(f"`{v}` (default)" if v == setting.default else f"`{v}`" for v in ordered)


def markdown(audience: str) -> str:
    """README's table of the settings for ``audience`` (``USER`` or
    ``SWITCH``), made from the records (tests/test_settings.py checks that
    README holds both)."""
    lines = ["| variable | values | effect |", "|---|---|---|"]
    for setting in SETTINGS:
        if setting.audience != audience:
            continue
        effect = setting.meaning + (f" ([{setting.doc}]({setting.doc}))" if setting.doc else "")
        lines.append(f"| `{setting.name}` | {_markdown_values(setting)} | {effect} |")
    return "\n".join(lines)
