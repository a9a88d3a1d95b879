"""swa_prefix_cache/settings.py, the one table of the environment variables the
package reads:

* every ``SWA_PREFIX_CACHE_*`` / ``PREFIX_CACHE_*`` name the product sources
  mention is a setting or a former name of one, and none of them reads such
  a variable from the environment directly (only through the table);
* config.py's enumerated readers accept exactly the table's values, and each
  record reads and parses its own variable;
* a setting's name is written once: no product source but settings.py holds
  it as a string of its own;
* README's two tables (user settings, build and test switches) are the
  records' ``markdown()``;
* a former name is still read by the real loaders, with one warning per
  process naming the new one; the new name wins when both are set;
* an unknown ``SWA_PREFIX_CACHE_*`` variable is warned about once by the
  plugin's ``register`` (loaded by vLLM's ``load_general_plugins``);
* ``python -m swa_prefix_cache settings`` prints the table;
* setup.py's way of loading the module by file path works;
* the project's own Makefile, tests, benchmarks and scripts set no former
  name, so its runs never warn.
"""

import ast
import importlib.util
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swa_prefix_cache import settings
from swa_prefix_cache.vllm_adapter import config

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "swa_prefix_cache" / "settings.py"
PRODUCT = sorted([ROOT / "setup.py"] + [
    path for path in (ROOT / "swa_prefix_cache").rglob("*.py") if path != MODULE])
NAME = re.compile(r"(?<![A-Za-z0-9_])(?:SWA_)?PREFIX_CACHE_[A-Z0-9_]*[A-Z0-9]")
KNOWN = set(settings.BY_NAME) | set(settings.OLD_NAMES)
# Environment without any of the package's variables, for the subprocesses.
CLEAN = {k: v for k, v in os.environ.items()
         if not k.startswith(settings.PREFIX) and k not in settings.OLD_NAMES}


def _prefixed_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "...PREFIX_CACHE_..."`` assignments."""
    found = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str) and NAME.search(node.value.value)):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def _direct_reads(source: str) -> list[str]:
    """Each ``<mapping>.get(KEY)``, ``.pop``, ``.setdefault``, ``getenv(KEY)``,
    ``<mapping>[KEY]`` or ``KEY in <mapping>`` whose KEY is a prefixed name
    (a literal or a module constant) and whose receiver is not the settings
    module: an environment read that bypasses the table."""
    tree = ast.parse(source)
    constants = _prefixed_constants(tree)

    def prefixed(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return bool(NAME.fullmatch(node.value))
        return isinstance(node, ast.Name) and node.id in constants

    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and prefixed(node.args[0]):
            func = node.func
            attr = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            receiver = func.value if isinstance(func, ast.Attribute) else None
            via_table = isinstance(receiver, ast.Name) and receiver.id in ("settings", "SETTINGS")
            if attr in ("get", "pop", "setdefault", "getenv") and not via_table:
                reads.append(ast.unparse(node))
        elif isinstance(node, ast.Subscript) and prefixed(node.slice):
            reads.append(ast.unparse(node))
        elif (isinstance(node, ast.Compare) and prefixed(node.left)
              and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)):
            reads.append(ast.unparse(node))
    return reads


def test_every_name_in_the_product_is_in_the_table() -> None:
    assert len(PRODUCT) > 20
    unknown = {}
    for path in PRODUCT:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in NAME.findall(node.value):
                    if name not in KNOWN:
                        unknown.setdefault(str(path.relative_to(ROOT)), set()).add(name)
    assert not unknown, f"not in swa_prefix_cache/settings.py: {unknown}"


def test_no_product_source_reads_a_variable_around_the_table() -> None:
    reads = {str(path.relative_to(ROOT)): _direct_reads(path.read_text()) for path in PRODUCT}
    assert not {path: found for path, found in reads.items() if found}


def test_the_scan_finds_a_direct_read() -> None:
    """The planted reads the scan above must catch (so it cannot pass by
    finding nothing)."""
    planted = [
        'import os\nX = os.environ.get("SWA_PREFIX_CACHE_MODE")\n',
        'import os\nLIB_ENV = "PREFIX_CACHE_LIB"\nX = os.getenv(LIB_ENV)\n',
        'import os\nENV = "SWA_PREFIX_CACHE_CORE"\ndef f(env):\n    return env[ENV]\n',
        'import os\nY = "SWA_PREFIX_CACHE_LIB" in os.environ\n',
    ]
    for source in planted:
        assert _direct_reads(source), source
    assert not _direct_reads('from pyspec import settings\nX = settings.get("SWA_PREFIX_CACHE_MODE")\n')


def test_every_setting_is_well_formed() -> None:
    for setting in settings.SETTINGS:
        assert setting.name.startswith(settings.PREFIX), setting.name
        assert setting.meaning and setting.allowed and setting.default and callable(setting.parse)
        assert setting.audience in (settings.USER, settings.SWITCH), setting.name
        if setting.choices:
            assert setting.unset == setting.default and setting.default in setting.choices
        for old in setting.old_names:
            assert old.name not in settings.BY_NAME, old.name
    names = [s.name for s in settings.SETTINGS]
    assert len(names) == len(set(names))
    assert len(settings.OLD_NAMES) == sum(len(s.old_names) for s in settings.SETTINGS)


@pytest.mark.parametrize("enum, name", [
    (config.Mode, config.MODE_ENV), (config.Core, config.CORE_ENV),
    (config.LookupMemo, config.LOOKUP_MEMO_ENV),
    (config.OffloadFilter, config.OFFLOAD_FILTER_ENV), (config.DpRouting, config.DP_ROUTING_ENV),
])
def test_config_readers_accept_exactly_the_tables_values(enum: type, name: str) -> None:
    assert sorted(c.value for c in enum) == sorted(settings.BY_NAME[name].choices)


def test_each_record_reads_its_own_variable() -> None:
    assert settings.MODE.read({}) == "on"
    assert settings.MODE.read({"SWA_PREFIX_CACHE_MODE": " Shadow "}) == "shadow"
    with pytest.raises(ValueError, match="SWA_PREFIX_CACHE_CORE must be one of python, native"):
        settings.CORE.read({"SWA_PREFIX_CACHE_CORE": "fast"})
    assert settings.DP_TOKENS_PER_LOAD.read({}) is None
    assert settings.DP_TOKENS_PER_LOAD.read({"SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD": "2.5"}) == 2.5
    for bad in ("-1", "inf", "nan", "x"):
        with pytest.raises(ValueError, match="SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD must be a number"):
            settings.DP_TOKENS_PER_LOAD.read({"SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD": bad})
    assert settings.STRICT_NATIVE.read({}) is False
    assert settings.STRICT_NATIVE.read({"SWA_PREFIX_CACHE_STRICT_NATIVE": "Yes"}) is True
    with pytest.raises(ValueError, match="SWA_PREFIX_CACHE_STRICT_NATIVE must be one of"):
        settings.STRICT_NATIVE.read({"SWA_PREFIX_CACHE_STRICT_NATIVE": "2"})
    assert settings.STATS_DIR.read({"SWA_PREFIX_CACHE_STATS_DIR": "  "}) is None
    assert settings.HOTPATH.read({"SWA_PREFIX_CACHE_HOTPATH": "/x.so"}) == "/x.so"


def test_a_settings_name_is_written_once() -> None:
    """Product code names a setting through its record (``settings.MODE.name``),
    never as a string of its own; messages and docstrings may mention it."""
    found = {}
    for path in PRODUCT:
        if path.name == "setup.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value in settings.BY_NAME):
                found.setdefault(str(path.relative_to(ROOT)), []).append(node.value)
    assert not found, found


def test_readme_tables_are_the_records() -> None:
    readme = (ROOT / "README.md").read_text()
    for audience in (settings.USER, settings.SWITCH):
        assert settings.markdown(audience) in readme, f"README's {audience} table is not the records'"
    users = settings.markdown(settings.USER)
    assert "SWA_PREFIX_CACHE_MODE" in users and "SWA_PREFIX_CACHE_HOTPATH" not in users


def test_unknown_names_are_refused() -> None:
    with pytest.raises(ValueError, match="name"):
        settings.get("SWA_PREFIX_CACHE_MOD", {})


@pytest.fixture
def fresh_warnings():  # noqa: ANN201
    """Forget the names already warned about in this process, before and after."""
    settings._warned.clear()
    yield
    settings._warned.clear()


def _ours(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == settings.logger.name]


@pytest.mark.usefixtures("fresh_warnings")
def test_a_former_name_is_read_and_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=settings.logger.name)
    env = {"PREFIX_CACHE_HOTPATH": "/a.so"}
    assert settings.get("SWA_PREFIX_CACHE_HOTPATH", env) == "/a.so"
    assert settings.get("SWA_PREFIX_CACHE_HOTPATH", env) == "/a.so"
    lines = _ours(caplog)
    assert len(lines) == 1 and "PREFIX_CACHE_HOTPATH" in lines[0], lines
    assert "set SWA_PREFIX_CACHE_HOTPATH instead" in lines[0]


@pytest.mark.usefixtures("fresh_warnings")
def test_the_new_name_wins_over_the_former(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=settings.logger.name)
    env = {"SWA_PREFIX_CACHE_KVNATIVE": "/new.so", "PREFIX_CACHE_KVNATIVE": "/old.so"}
    assert settings.get("SWA_PREFIX_CACHE_KVNATIVE", env) == "/new.so"
    lines = _ours(caplog)
    assert len(lines) == 1 and "SWA_PREFIX_CACHE_KVNATIVE wins" in lines[0], lines


@pytest.mark.usefixtures("fresh_warnings")
def test_the_former_build_switch_means_required() -> None:
    native = "SWA_PREFIX_CACHE_NATIVE"
    assert settings.get(native, {"SWA_PREFIX_CACHE_REQUIRE_NATIVE": "1"}) == "required"
    assert settings.get(native, {"SWA_PREFIX_CACHE_REQUIRE_NATIVE": "0"}) is None
    both = {"SWA_PREFIX_CACHE_REQUIRE_NATIVE": "1", native: "optional"}
    assert settings.get(native, both) == "optional"


@pytest.mark.usefixtures("fresh_warnings")
def test_config_readers_keep_their_errors() -> None:
    with pytest.raises(ValueError, match="SWA_PREFIX_CACHE_MODE must be one of"):
        config.read_mode({"SWA_PREFIX_CACHE_MODE": "garbage"})
    with pytest.raises(ValueError, match="SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD"):
        config.read_tokens_per_load(1.0, {"SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD": "-1"})
    assert config.read_mode({}) is config.Mode.ON
    assert config.read_tokens_per_load(7.0, {}) == 7.0


# The real loaders, each under its former name, in a fresh process: each
# former name must change what is loaded (a file that is not a library makes
# the load fail) and be warned about once, however often it is read.
LOADERS = """
from swa_prefix_cache.core import hotpath
from benchmarks import cffi_core as native
from swa_prefix_cache.kv_index import native as kv
print("lib", native.library_path(), native.is_available(), native.is_available())
for _ in range(2):
    try:
        hotpath.load()
        print("hotpath loaded")
    except hotpath.HotPathUnavailable as exc:
        print("hotpath refused")
    try:
        kv.load()
        print("kv loaded")
    except kv.NativeUnavailable as exc:
        print("kv refused")
"""


def _run(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args] if args else [sys.executable, "-c", code],
                          cwd=ROOT, env={**CLEAN, **env}, capture_output=True, text=True,
                          timeout=300)


def _warnings_about(stderr: str, name: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(f"swa-prefix-cache: {name} ")]


def test_former_names_reach_the_real_loaders_and_warn_once(tmp_path: Path) -> None:
    junk = tmp_path / "not-a-library.so"
    junk.write_text("")
    missing = tmp_path / "missing.so"
    env = {"PREFIX_CACHE_LIB": str(missing), "PREFIX_CACHE_HOTPATH": str(junk),
           "PREFIX_CACHE_KVNATIVE": str(junk), "PREFIX_CACHE_REQUIRE_NATIVE": "1"}
    done = _run(LOADERS, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"lib {missing} False False", "hotpath refused", "kv refused", "hotpath refused",
        "kv refused"], done.stdout
    for old, new in settings.OLD_NAMES.items():
        if old in env:
            lines = _warnings_about(done.stderr, old)
            assert len(lines) == 1 and new in lines[0], (old, done.stderr)
    # The same files under the new names: the same answers, and no warning.
    new_env = {settings.OLD_NAMES[k]: v for k, v in env.items()}
    again = _run(LOADERS, new_env)
    assert again.stdout == done.stdout, again.stderr
    assert "swa-prefix-cache: " not in again.stderr, again.stderr
    # Unset: the built ones load.
    built = _run(LOADERS, {"SWA_PREFIX_CACHE_STRICT_NATIVE": "1"})
    assert built.stdout.splitlines()[1:] == ["hotpath loaded", "kv loaded"] * 2, built.stderr


def test_the_new_name_wins_in_the_real_loader(tmp_path: Path) -> None:
    missing = tmp_path / "missing.so"
    real = ROOT / "build" / "libprefix_cache.so"
    done = _run(LOADERS, {"SWA_PREFIX_CACHE_LIB": str(real), "PREFIX_CACHE_LIB": str(missing)})
    assert done.stdout.splitlines()[0] == f"lib {real} True True", done.stderr
    lines = [line for line in done.stderr.splitlines()
             if line.startswith("swa-prefix-cache: SWA_PREFIX_CACHE_LIB=")]
    assert len(lines) == 1 and "SWA_PREFIX_CACHE_LIB wins" in lines[0], done.stderr


PLUGIN = """
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
swa = SlidingWindowManager.__dict__["find_longest_cache_hit"]
from vllm.plugins import load_general_plugins
load_general_plugins()
import sys
print("register done", file=sys.stderr, flush=True)
from swa_prefix_cache import settings
settings.warn_unknown()
print("patched", SlidingWindowManager.__dict__["find_longest_cache_hit"] is not swa)
"""


def test_the_plugin_warns_once_about_an_unknown_variable() -> None:
    pytest.importorskip("vllm")
    done = _run(PLUGIN, {"SWA_PREFIX_CACHE_MOD": "off", "VLLM_TARGET_DEVICE": "cpu"})
    assert done.returncode == 0, done.stderr
    # The typo is ignored (vLLM is patched: the mode is on) and said once.
    assert done.stdout.strip().splitlines()[-1] == "patched True", done.stdout
    # Said by register (before the marker), and not again when asked again.
    before, marker, after = done.stderr.partition("register done\n")
    assert marker, done.stderr
    lines = [line for line in before.splitlines() if "SWA_PREFIX_CACHE_MOD " in line]
    assert len(lines) == 1, done.stderr
    assert "SWA_PREFIX_CACHE_MOD " not in after, done.stderr
    assert "not a setting" in lines[0] and "did you mean SWA_PREFIX_CACHE_MODE?" in lines[0]


def test_unknown_lists_only_unknown_prefixed_names() -> None:
    env = {"SWA_PREFIX_CACHE_MOD": "off", "SWA_PREFIX_CACHE_MODE": "on",
           "SWA_PREFIX_CACHE_REQUIRE_NATIVE": "1", "PREFIX_CACHE_LIB": "x",
           "PREFIX_CACHE_FFI_CASES": "9"}
    assert settings.unknown(env) == ["SWA_PREFIX_CACHE_MOD"]


def test_the_settings_command_prints_every_setting() -> None:
    done = _run("", {"PREFIX_CACHE_HOTPATH": "/x.so", "SWA_PREFIX_CACHE_MODE": "shadow",
                     "SWA_PREFIX_CACHE_MOD": "off"}, "-m", "swa_prefix_cache", "settings")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for setting in settings.SETTINGS:
        assert re.search(rf"^{setting.name} +=", out, re.M), setting.name
        assert setting.meaning in out
    assert re.search(r"^SWA_PREFIX_CACHE_MODE +?= shadow$", out, re.M)
    assert "= /x.so (from PREFIX_CACHE_HOTPATH)" in out
    assert re.search(r"^SWA_PREFIX_CACHE_CORE += \(unset\)$", out, re.M)
    assert "SWA_PREFIX_CACHE_MOD is not a setting" in out
    # Printing the table reads without warning.
    assert "former name" not in done.stderr, done.stderr


def test_setup_py_can_load_the_module_by_its_path() -> None:
    """As setup.py does, before the package is importable: not registered in
    sys.modules."""
    spec = importlib.util.spec_from_file_location("_settings_by_path", MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert set(module.BY_NAME) == set(settings.BY_NAME)
    assert "_settings_by_path" not in sys.modules
    assert "from pyspec import settings" not in (ROOT / "setup.py").read_text()
    assert '"swa_prefix_cache/settings.py"' in (ROOT / "setup.py").read_text()


SETTERS = [ROOT / "Makefile", *sorted((ROOT / "mk").glob("*.mk"))] + sorted(
    path for folder in ("tests", "benchmarks", "e2e", "scripts", "upstream")
    for path in (ROOT / folder).rglob("*") if path.suffix in (".py", ".sh", ".mk")
    and path.name not in ("test_settings.py", "test_build.py") and "__pycache__" not in path.parts)


def test_the_projects_own_runs_set_no_former_name() -> None:
    olds = "|".join(re.escape(n) for n in sorted(settings.OLD_NAMES, key=len, reverse=True))
    sets = re.compile(rf"(?<![A-Za-z0-9_])({olds})(?![A-Za-z0-9_])")
    found = {}
    for path in SETTERS:
        text = path.read_text(errors="replace")
        hits = sorted(set(sets.findall(text)))
        if hits:
            found[str(path.relative_to(ROOT))] = hits
    # e2e pops the former hot-path name from its servers' environment too.
    allowed = {"e2e/inprocess.py": ["PREFIX_CACHE_HOTPATH"], "e2e/run_e2e.py": ["PREFIX_CACHE_HOTPATH"]}
    assert found == allowed


@pytest.mark.parametrize("raw, want", [
    ("1", True), ("true", True), (" YES ", True), ("On", True),
    ("0", False), ("false", False), ("no", False), (" off", False),
])
def test_booleans_take_the_usual_spellings(raw: str, want: bool) -> None:
    assert settings.STRICT_NATIVE.read({"SWA_PREFIX_CACHE_STRICT_NATIVE": raw}) is want


def test_a_bad_boolean_is_refused_in_one_short_line() -> None:
    for raw in ("2", "maybe", "", "x" * 100_000):
        with pytest.raises(ValueError, match="SWA_PREFIX_CACHE_STRICT_NATIVE must be one of") as exc:
            settings.STRICT_NATIVE.read({"SWA_PREFIX_CACHE_STRICT_NATIVE": raw})
        assert "\n" not in str(exc.value) and len(str(exc.value)) < 300
    assert settings.STRICT_NATIVE.read({}) is False


def test_long_values_are_cut_where_they_are_said() -> None:
    huge = "y" * 100_000
    with pytest.raises(ValueError) as exc:
        config.read_mode({"SWA_PREFIX_CACHE_MODE": huge})
    assert len(str(exc.value)) < 300 and "100,000 characters" in str(exc.value)
    row = next(r for r in settings.table({"SWA_PREFIX_CACHE_STATS_DIR": huge})
               if r["name"] == "SWA_PREFIX_CACHE_STATS_DIR")
    assert len(row["value"]) < 300


def test_near_misses_are_named_and_far_names_are_not() -> None:
    lines = settings.unknown_said({"SWA_PREFIX_CACHE_MOD": "off", "SWA_PREFIX_CACHE_COER": "x",
                                   "SWA_PREFIX_CACHE_SOMETHING_ELSE": "1"})
    assert "SWA_PREFIX_CACHE_COER is not a setting and is ignored; did you mean SWA_PREFIX_CACHE_CORE?" in lines
    assert "SWA_PREFIX_CACHE_MOD is not a setting and is ignored; did you mean SWA_PREFIX_CACHE_MODE?" in lines
    assert "SWA_PREFIX_CACHE_SOMETHING_ELSE is not a setting and is ignored" in lines


def test_the_table_shows_a_former_name_that_is_also_set() -> None:
    old = next(o.name for s in settings.SETTINGS for o in s.old_names if o.translate is None)
    new = settings.OLD_NAMES[old]
    row = next(r for r in settings.table({new: "a", old: "b"}) if r["name"] == new)
    assert row["value"] == f"a (also set, ignored: {old}=b)"


def test_qualify_names_typos_and_warns_about_an_unused_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from swa_prefix_cache.vllm_adapter import qualify

    monkeypatch.setenv("SWA_PREFIX_CACHE_MOD", "off")
    monkeypatch.setenv("SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD", "")
    monkeypatch.delenv("SWA_PREFIX_CACHE_DP_ROUTING", raising=False)
    assert qualify.settings_problem() is None
    said = qualify.settings_warnings()
    assert any("did you mean SWA_PREFIX_CACHE_MODE?" in line for line in said), said
    assert any("SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD" in line and "unused" in line for line in said), said
    monkeypatch.setenv("SWA_PREFIX_CACHE_DP_ROUTING", "exact")
    assert "SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD" in (qualify.settings_problem() or "")
