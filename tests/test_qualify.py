"""``python -m swa_prefix_cache qualify``: passes on this installation, fails
when the patched lookup answers wrongly, names what changed for unknown
code, and leaves vLLM's own methods in place afterwards."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")

from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager  # noqa: E402

from swa_prefix_cache.vllm_adapter import known_sources, qualify, swa_lookup  # noqa: E402
from swa_prefix_cache.__main__ import main  # noqa: E402

ORIGINAL = SlidingWindowManager.__dict__["find_longest_cache_hit"]


def test_qualify_passes_here(tmp_path, capsys) -> None:
    out = tmp_path / "q.json"
    assert main(["qualify", "--lookups", "300", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["ok"] and report["differential"]["compared"] == 300
    assert report["differential"]["mismatches"] == 0
    assert "differential check" in capsys.readouterr().out
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is ORIGINAL


def test_qualify_fails_on_a_wrong_lookup(monkeypatch, capsys) -> None:
    real = swa_lookup.make_lookup

    def wrong(*args, **kwargs):  # type: ignore[no-untyped-def]
        ours = real(*args, **kwargs)

        def off_by_one(cls, *a, **k):  # type: ignore[no-untyped-def]
            blocks, tokens = ours(cls, *a, **k)
            return blocks, tokens + 1
        off_by_one.calls = 0  # type: ignore[attr-defined]  # the patch reads the extension's counter
        return off_by_one

    monkeypatch.setattr(swa_lookup, "make_lookup", wrong)
    assert main(["qualify", "--lookups", "200"]) == 1
    text = capsys.readouterr().out
    assert "FAIL" in text and " 0 disagreed" not in text


def test_qualify_names_changed_functions(monkeypatch, capsys) -> None:
    monkeypatch.setitem(known_sources.VARIANTS, "full_attention", [
        dict(v, digests=dict(v["digests"], cdiv="0" * 64)) for v in known_sources.VARIANTS["full_attention"]
    ])
    report = qualify.run(50, 1)
    row = next(r for r in report["bindings"] if r["binding"] == "full_attention")
    assert not row["applies"] and row["changed"] == ["cdiv"]


def test_qualify_refuses_bad_arguments() -> None:
    with pytest.raises(SystemExit):
        main(["qualify", "--lookups", "0"])
    assert main([]) == 2


def test_qualify_would_not_serve_without_the_entry_point(monkeypatch) -> None:
    """The plugin's entry point missing from vllm.general_plugins (the package
    not pip-installed) means vLLM never calls it: qualify says so."""
    import importlib.metadata

    for key in ("SWA_PREFIX_CACHE_MODE", "VLLM_PLUGINS"):
        monkeypatch.delenv(key, raising=False)
    assert qualify.not_serving() is None
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kwargs: [])
    why = qualify.not_serving()
    assert why is not None and "not installed" in why and qualify.PLUGIN_NAME in why


def test_qualify_says_degraded_when_a_patch_does_not_apply(monkeypatch, capsys) -> None:
    """Answers that agree through a slower path are DEGRADED (exit 4), with
    the lookup and the reason named; the mutant that drops the check (a
    PASS here) fails this test."""
    from swa_prefix_cache.vllm_adapter import known_sources

    for key in ("SWA_PREFIX_CACHE_MODE", "SWA_PREFIX_CACHE_CORE", "VLLM_PLUGINS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setitem(known_sources.VARIANTS, "pool_read", [])
    assert main(["qualify", "--lookups", "200"]) == 4
    out = capsys.readouterr().out.splitlines()
    assert "lookup sliding_window: native (probes: get_cached_block)" in out
    assert out[-1].startswith("DEGRADED: probes call get_cached_block")
