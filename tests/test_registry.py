"""The patch registry (swa_prefix_cache/vllm_adapter/registry.py): one record per patch, and
the one installer that sets and restores vLLM's attributes.

* the table: every fingerprinted binding has exactly one record; every record's setting is in swa_prefix_cache/settings.py; every
  attribute it sets exists on the installed vLLM (or, for a method the
  plugin adds, does not);
* install / uninstall on the real vLLM classes: with every part asked for,
  each record's attributes are ours while installed and vLLM's very
  objects again after ``uninstall`` (an added method deleted);
* ``status()["patches"]`` and the once-per-process log line are the
  registry's rows: a patch that a setting turns off says so;
* only the registry writes to vLLM's classes: no other module of the
  adapter assigns or deletes an attribute a record names, or sets one on
  a class;
* installation is one loop over the records (``install_all``): each record
  in order gets its plan from the module that builds it, a record without
  a plan is refused by name, a plan that raises keeps vLLM's code for its
  record only; the lookups' module (patch.py) installs nothing of the
  opt-in parts;
* ``bind`` refuses a wrong number of values, naming the patch.
"""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import pytest

pytest.importorskip("vllm")

from vllm_support import unpatched  # noqa: E402, F401 (autouse fixture)

from swa_prefix_cache import vllm_adapter  # noqa: E402
from swa_prefix_cache import settings  # noqa: E402
from swa_prefix_cache.vllm_adapter import fingerprint, registry  # noqa: E402

ADAPTER = Path(__file__).resolve().parent.parent / "swa_prefix_cache" / "vllm_adapter"
ALL_ON = {"SWA_PREFIX_CACHE_MODE": "on", "SWA_PREFIX_CACHE_CORE": "native",
          "SWA_PREFIX_CACHE_LOOKUP_MEMO": "on", "SWA_PREFIX_CACHE_OFFLOAD_FILTER": "corrected",
          "SWA_PREFIX_CACHE_DP_ROUTING": "exact"}


def _env(monkeypatch, values: dict[str, str]) -> None:
    for name in [s.name for s in settings.SETTINGS] + list(settings.OLD_NAMES):
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def test_one_record_per_binding() -> None:
    by_name = {b.name: b for b in fingerprint.BINDINGS}
    assert sorted(p.name for p in registry.PATCHES) == sorted(by_name)
    assert all(p.binding is by_name[p.name] for p in registry.PATCHES)
    assert len(registry.BY_NAME) == len(registry.PATCHES)


def test_every_record_names_a_setting_and_real_attributes() -> None:
    names = {s.name for s in settings.SETTINGS}
    added = {("EngineCore", "swa_prefix_cache_layout")}
    for patch in registry.PATCHES:
        assert patch.setting in settings.SETTINGS and patch.setting.name in names, patch.name
        assert patch.binds or patch.part_of in registry.BY_NAME, patch.name
        for target in patch.binds:
            owner = target.owner_class()
            if (target.owner, target.attr) in added:
                assert target.current() is registry.ABSENT, target.name
            else:
                assert target.attr in vars(owner), target.name


def test_install_binds_every_record_and_uninstall_restores_vllms_objects(monkeypatch) -> None:
    _env(monkeypatch, ALL_ON)
    before = {p.name: tuple(t.current() for t in p.binds) for p in registry.PATCHES}
    assert vllm_adapter.install()
    rows = {row["patch"]: row for row in vllm_adapter.status()["patches"]}
    assert all(row["installed"] for row in rows.values()), rows
    for patch in registry.PATCHES:
        for target, theirs in zip(patch.binds, before[patch.name]):
            assert target.current() is not theirs, target.name
            assert registry.original(patch.name, patch.binds.index(target)) is theirs
    vllm_adapter.uninstall()
    for patch in registry.PATCHES:
        assert not registry.is_installed(patch.name)
        assert tuple(t.current() for t in patch.binds) == before[patch.name], patch.name
        for target, theirs in zip(patch.binds, before[patch.name]):
            assert target.current() is theirs, target.name
            if theirs is registry.ABSENT:  # an added method is deleted again
                assert target.attr not in vars(target.owner_class()), target.name


def test_status_and_log_line_walk_the_registry(monkeypatch, caplog) -> None:
    _env(monkeypatch, {"SWA_PREFIX_CACHE_LOOKUP_MEMO": "off"})
    with caplog.at_level(logging.INFO, logger="swa_prefix_cache"):
        assert vllm_adapter.install()
    rows = {row["patch"]: row for row in vllm_adapter.status()["patches"]}
    assert list(rows) == [p.name for p in registry.PATCHES]
    assert rows["sliding_window"]["installed"] and rows["full_attention"]["installed"]
    assert rows["offload_filter"] == dict(rows["offload_filter"], installed=False, reason="setting off")
    assert rows["dp_routing"]["reason"] == "setting off"
    assert rows["lookup_memo"]["reason"] == "SWA_PREFIX_CACHE_LOOKUP_MEMO=off"
    assert rows["dp_routing"]["binds"] == ["DPLBAsyncMPClient.get_core_engine_for_request",
                                           "EngineCore.swa_prefix_cache_layout"]
    active = [r.getMessage() for r in caplog.records if "active (mode on)" in r.getMessage()]
    assert len(active) == 1, active
    assert ("patches off: offload_filter (setting off), dp_routing (setting off), "
            "lookup_memo (SWA_PREFIX_CACHE_LOOKUP_MEMO=off)") in active[0]


def test_an_unknown_binding_keeps_vllms_attribute_and_says_why(monkeypatch) -> None:
    from swa_prefix_cache.vllm_adapter import known_sources

    _env(monkeypatch, {})
    monkeypatch.setitem(known_sources.VARIANTS, "full_attention", [])
    target = registry.BY_NAME["full_attention"].binds[0]
    theirs = target.current()
    assert vllm_adapter.install()
    assert target.current() is theirs
    row = next(r for r in vllm_adapter.status()["patches"] if r["patch"] == "full_attention")
    assert not row["installed"] and row["reason"].startswith("unknown full-attention lookup in vLLM")
    assert any(s.startswith("full-attention lookup is vLLM's own: unknown")
               for s in vllm_adapter.status()["degraded"])


def test_only_the_registry_writes_vllms_attributes() -> None:
    attrs = {t.attr for p in registry.PATCHES for t in p.binds}
    writes = []
    for path in sorted(ADAPTER.glob("*.py")):
        if path.name == "registry.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                writes += [f"{path.name}:{node.lineno}" for t in targets
                           if isinstance(t, ast.Attribute) and t.attr in attrs]
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("setattr", "delattr")):
                owner, name = (node.args + [None, None])[:2]
                on_a_class = isinstance(owner, ast.Name) and owner.id[:1].isupper()
                named = isinstance(name, ast.Constant) and name.value in attrs
                if on_a_class or named:
                    writes.append(f"{path.name}:{node.lineno} {node.func.id}")
    assert writes == [], writes


def test_bind_refuses_a_wrong_number_of_values() -> None:
    with pytest.raises(ValueError, match="dp_routing"):
        registry.bind("dp_routing", object())
    assert not registry.is_installed("dp_routing")


def test_a_target_that_cannot_be_imported_leaves_every_attribute_vllms(monkeypatch) -> None:
    """dp_routing sets two classes; its second one's module missing means
    the first stays vLLM's too, and the reason names the import."""
    import dataclasses

    patch = registry.BY_NAME["dp_routing"]
    missing = dataclasses.replace(patch.binds[1], module="vllm.no_such_module")
    monkeypatch.setitem(registry.BY_NAME, "dp_routing",
                        dataclasses.replace(patch, sets=(patch.sets[0], missing)))
    theirs = patch.binds[0].current()
    assert not registry.install("dp_routing", lambda found, originals: (object(), object()), "kept")
    assert patch.binds[0].current() is theirs
    assert not registry.is_installed("dp_routing")
    assert "vllm.no_such_module" in registry.state("dp_routing").reason


def test_installation_loops_over_the_records_in_order(monkeypatch) -> None:
    asked: list[str] = []

    def planner(name: str):
        def plan() -> None:
            asked.append(name)
            return None  # not tried: the record's state stays as it is

        return plan

    decided = [p.name for p in registry.PATCHES if not p.part_of]
    registry.install_all({name: planner(name) for name in decided})
    assert asked == decided
    assert not any(registry.is_installed(p.name) for p in registry.PATCHES)
    with pytest.raises(ValueError, match="no plan for lookup_memo"):
        registry.install_all({name: planner(name) for name in decided if name != "lookup_memo"})


def test_a_plan_that_raises_keeps_vllms_code_for_its_record_only(monkeypatch, caplog) -> None:
    from swa_prefix_cache.vllm_adapter import offload_filter

    _env(monkeypatch, ALL_ON)

    def broken() -> registry.Plan:
        raise ImportError("no module named the_filters_dependency")

    monkeypatch.setattr(offload_filter, "plan", broken)
    target = registry.BY_NAME["offload_filter"].binds[0]
    theirs = target.current()
    with caplog.at_level(logging.WARNING, logger="swa_prefix_cache"):
        assert vllm_adapter.install()
    assert target.current() is theirs
    rows = {row["patch"]: row for row in vllm_adapter.status()["patches"]}
    assert rows["offload_filter"]["reason"].startswith("cannot plan the KV-offload store filter")
    assert rows["dp_routing"]["installed"] and rows["lookup_memo"]["installed"]
    said = [r.getMessage() for r in caplog.records
            if r.getMessage().startswith("swa-prefix-cache: cannot plan")]
    assert len(said) == 1 and "the_filters_dependency" in said[0], said


def test_apply_refuses_what_is_not_a_plan() -> None:
    with pytest.raises(TypeError, match="apply\\('full_attention'\\): plan is str"):
        registry.apply("full_attention", "install it")


def test_the_lookups_module_installs_no_other_part() -> None:
    """patch.py builds the lookups; the opt-in parts are the installer's."""
    tree = ast.parse((ADAPTER / "patch.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert not imported & {"offload_filter", "dp_routing"}, imported
    callers = sorted(
        path.name for path in ADAPTER.glob("*.py")
        if "registry.install_all(" in path.read_text()
    )
    assert callers == ["installer.py"], callers
