"""The plugin against vLLM's own method, on real vLLM objects (no mocks).

* differential: ``PREFIX_CACHE_ADAPTER_CASES`` random lookups (default
  100,000) on real ``BlockPool``s with real ``SlidingWindowSpec``s, each
  answered by vLLM's original classmethod and by the patched one: same hit
  length and, per group, the very same block objects;
* guard rails: unknown vLLM fingerprint -> not patched; native extension
  missing -> pure-Python search; shadow mode returns vLLM's answer and
  reports an injected mismatch; install/uninstall are idempotent; the
  plugin is found through vLLM's own entry-point loader.
"""

import logging
import os
import random

import pytest

pytest.importorskip("vllm")

from conftest import CASE_COUNTS  # noqa: E402
from masks import random_alignment, random_mask, random_window  # noqa: E402
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager  # noqa: E402
from vllm_support import (  # noqa: E402, F401 (unpatched: autouse fixture)
    ORIGINAL_LOOKUP,
    REFUSALS,
    assert_same_answer,
    build_planted_cache,
    count_native,
    lookup_outcome,
    make_spec,
    split_mask_across_groups,
    unpatched,
)

from swa_prefix_cache import settings, vllm_adapter  # noqa: E402
from swa_prefix_cache.core import hotpath
from benchmarks import cffi_core as native  # noqa: E402
from swa_prefix_cache.vllm_adapter import Mode, patch, swa_lookup  # noqa: E402

ADAPTER_CASES = int(os.environ.get("PREFIX_CACHE_ADAPTER_CASES", "100000"))
LOOKUPS_PER_POOL = 200

# vLLM's own method, taken before anything is patched; ``unpatched`` is an
# autouse fixture that keeps it in place around every test.
ORIGINAL = ORIGINAL_LOOKUP


def _vllm(*args, **kwargs):
    return ORIGINAL.__get__(None, SlidingWindowManager)(*args, **kwargs)


def _all_cached_lookup() -> dict:
    """Arguments of one small lookup whose answer is a full 8-block hit."""
    cache = build_planted_cache({0: [True] * 8}, 4)
    return dict(
        block_hashes=cache.block_hashes, max_length=32, kv_cache_group_ids=[0],
        block_pool=cache.block_pool, kv_cache_spec=make_spec(4, 9),
        drop_eagle_block=False, alignment_tokens=4,
    )


def _random_lookups(rng: random.Random, cases: int) -> int:
    """Run ``cases`` lookups on fresh pools; return the number vLLM answered
    (the others it refused, and so must the plugin: ``lookup_outcome``)."""
    done = 0
    refused_before = REFUSALS[0]
    while done < cases:
        block_size = rng.choice((rng.randint(1, 64), rng.choice((1, 16, 32, 64))))
        n = rng.choice((rng.randint(0, 40), rng.randint(0, 600)))
        group_ids = rng.sample(range(6), rng.randint(1, 3))
        shape_need = rng.choice((rng.randint(0, 8), rng.randint(0, 70)))
        cached = random_mask(rng, n, shape_need)
        masks = split_mask_across_groups(cached, group_ids, rng, partial_prob=0.3)
        cache = build_planted_cache(masks, block_size, salt=rng.randbytes(8))
        for _ in range(min(LOOKUPS_PER_POOL, cases - done)):
            need = rng.choice((shape_need, rng.randint(0, 8), rng.randint(0, 70)))
            spec = make_spec(block_size, random_window(rng, block_size, need))
            args = dict(
                block_hashes=cache.block_hashes,
                max_length=rng.randint(0, n * block_size + block_size - 1),
                kv_cache_group_ids=rng.sample(group_ids, rng.randint(1, len(group_ids))),
                block_pool=cache.block_pool,
                kv_cache_spec=spec,
                drop_eagle_block=rng.random() < 0.5,
                alignment_tokens=random_alignment(rng, block_size),
            )
            theirs = lookup_outcome(_vllm, **args)
            ours = lookup_outcome(SlidingWindowManager.find_longest_cache_hit, **args)
            assert_same_answer(ours, theirs, {k: v for k, v in args.items() if k != "block_hashes"})
            done += 1
    refused = (REFUSALS[0] - refused_before) // 2  # once for vLLM, once for ours
    assert refused <= done // 2, f"vLLM refused {refused} of {done} lookups"
    return done - refused


@pytest.mark.parametrize("core", ["python", "native"])
def test_differential_against_vllm(core: str, monkeypatch) -> None:
    """Both cores against vLLM; the default core gets the full count."""
    monkeypatch.setenv(vllm_adapter.CORE_ENV, core)
    assert vllm_adapter.install(Mode.ON)
    assert vllm_adapter.status()["backend"] == core
    calls_before = vllm_adapter.stats().calls
    cases = ADAPTER_CASES if core == vllm_adapter.Core.NATIVE.value else ADAPTER_CASES // 5
    with count_native() as path:
        done = _random_lookups(random.Random(20261129), cases)
    assert vllm_adapter.stats().calls - calls_before == done
    # The native core answers in C whenever its checks hold (most of these
    # lookups); the python core never goes there.
    if core == "native":
        assert path["native"] > done // 2, path
    else:
        assert path == {"native": 0, "delegated": 0}, path
    CASE_COUNTS[f"adapter vs vLLM ({vllm_adapter.status()['backend']} core)"] += done


def test_python_fallback_when_native_missing(monkeypatch, tmp_path, caplog) -> None:
    monkeypatch.setenv(vllm_adapter.CORE_ENV, "native")
    monkeypatch.setattr(hotpath, "_module", None)
    monkeypatch.setenv(settings.HOTPATH.name, str(tmp_path / "missing.so"))
    with caplog.at_level(logging.WARNING, logger="swa_prefix_cache"):
        assert vllm_adapter.install(Mode.ON)
    assert vllm_adapter.status()["backend"] == "python"
    assert "native hot path unavailable" in caplog.text
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if m.startswith("swa-prefix-cache: native hot path unavailable")]) == 1
    # ... and the once-per-process line says the process is slower for it.
    degraded = [m for m in said if "DEGRADED" in m]
    assert len(degraded) == 1 and "native hot path unavailable" in degraded[0], said
    done = _random_lookups(random.Random(7), 3000)
    CASE_COUNTS["adapter vs vLLM (python fallback)"] += done


def test_unknown_fingerprint_leaves_vllm_alone(monkeypatch, caplog) -> None:
    from swa_prefix_cache.vllm_adapter import known_sources

    version = vllm_adapter.fingerprint.installed_version()
    monkeypatch.setitem(known_sources.VARIANTS, "sliding_window", [])
    with caplog.at_level(logging.WARNING, logger="swa_prefix_cache"):
        assert not vllm_adapter.install(Mode.ON)
    assert not vllm_adapter.is_installed()
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is ORIGINAL
    assert f"unknown sliding-window lookup in vLLM {version}" in caplog.text
    assert "SlidingWindowManager.find_longest_cache_hit" in caplog.text  # what changed
    assert len([r for r in caplog.records if "unpatched" in r.getMessage()]) == 1


def _counted_alignments(alignments: tuple[int, ...]) -> list[int]:
    """For each alignment, how many calls the plugin counted for one lookup
    (0: it went straight to vLLM's own method); answers compared."""
    counted = []
    for alignment in alignments:
        args = dict(_all_cached_lookup(), alignment_tokens=alignment)
        before = vllm_adapter.stats().calls
        got = lookup_outcome(SlidingWindowManager.find_longest_cache_hit, **args)
        counted.append(vllm_adapter.stats().calls - before)
        assert_same_answer(got, lookup_outcome(_vllm, **args), alignment)
    return counted


@pytest.mark.parametrize("core", ["python", "native"])
def test_block_aligned_only_sends_fine_grained_lookups_to_vllm(core, monkeypatch) -> None:
    """The 0.28/0.29 variant (``fingerprint.BLOCK_ALIGNED_ONLY``): a lookup
    whose alignment is not a multiple of the block size (4) goes to vLLM's
    own method, which asserts on it there. Forced on a vLLM that answers
    both kinds (0.30+), the path shows in the call count; unforced there,
    the plugin answers all four."""
    from swa_prefix_cache.vllm_adapter import fingerprint, known_sources

    monkeypatch.setenv(vllm_adapter.CORE_ENV, core)
    alignments = (4, 8, 2, 6)
    own = fingerprint.check(fingerprint.SLIDING_WINDOW).semantics
    assert vllm_adapter.install(Mode.ON)
    expected = [1, 1, 0, 0] if own == fingerprint.BLOCK_ALIGNED_ONLY else [1, 1, 1, 1]
    assert _counted_alignments(alignments) == expected
    vllm_adapter.uninstall()
    forced = [
        dict(v, semantics=fingerprint.BLOCK_ALIGNED_ONLY)
        for v in known_sources.VARIANTS["sliding_window"]
    ]
    monkeypatch.setitem(known_sources.VARIANTS, "sliding_window", forced)
    assert vllm_adapter.install(Mode.ON)
    assert _counted_alignments(alignments) == [1, 1, 0, 0]


def test_mode_off_and_bad_mode(monkeypatch) -> None:
    monkeypatch.setenv(vllm_adapter.MODE_ENV, "off")
    assert not vllm_adapter.install()
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is ORIGINAL
    monkeypatch.setenv(vllm_adapter.MODE_ENV, "fast-please")
    assert not vllm_adapter.install()
    assert "SWA_PREFIX_CACHE_MODE" in vllm_adapter.status()["reason"]
    with pytest.raises(ValueError, match="SWA_PREFIX_CACHE_MODE"):
        vllm_adapter.read_mode()
    monkeypatch.setenv(vllm_adapter.MODE_ENV, "on")
    monkeypatch.setenv(vllm_adapter.CORE_ENV, "fortran")
    assert not vllm_adapter.install()
    assert "SWA_PREFIX_CACHE_CORE" in vllm_adapter.status()["reason"]


def test_install_is_idempotent_and_uninstall_restores() -> None:
    assert vllm_adapter.install(Mode.ON)
    patched = SlidingWindowManager.__dict__["find_longest_cache_hit"]
    assert vllm_adapter.install(Mode.ON) and vllm_adapter.install(Mode.SHADOW)
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is patched
    vllm_adapter.uninstall()
    vllm_adapter.uninstall()
    assert not vllm_adapter.is_installed()


def test_shadow_returns_vllm_answer_and_reports_injected_mismatch(monkeypatch, caplog) -> None:
    def wrong_search(cached, params):
        cached[0]
        return 0, 0  # claims "no hit" (length, first_real), always

    # The python core's search (the native core answers in C: its own wrong
    # answers are injected in tests/test_hotpath.py).
    monkeypatch.setenv(vllm_adapter.CORE_ENV, "python")
    monkeypatch.setattr(swa_lookup, "python_search", wrong_search)
    assert vllm_adapter.install(Mode.SHADOW)
    args = _all_cached_lookup()
    before = vllm_adapter.stats().shadow_mismatches
    with caplog.at_level(logging.ERROR, logger="swa_prefix_cache"):
        got = SlidingWindowManager.find_longest_cache_hit(**args)
    assert_same_answer(got, _vllm(**args), "shadow must return vLLM's own answer")
    assert got[1] == 32
    assert vllm_adapter.stats().shadow_mismatches == before + 1
    mismatch = vllm_adapter.stats().last_mismatch
    assert mismatch["mask"] == "11111111" and mismatch["sliding_window"] == 9
    assert "MISMATCH" in caplog.text


def test_shadow_agrees_on_random_lookups() -> None:
    assert vllm_adapter.install(Mode.SHADOW)
    before = vllm_adapter.stats().shadow_compared
    mismatches = vllm_adapter.stats().shadow_mismatches
    done = _random_lookups(random.Random(11), 2000)
    assert vllm_adapter.stats().shadow_compared - before == done
    assert vllm_adapter.stats().shadow_mismatches == mismatches


def test_inputs_outside_the_model_go_to_vllm() -> None:
    """vLLM raises on these; the plugin must raise the same error."""
    assert vllm_adapter.install(Mode.ON)
    cache = build_planted_cache({0: [True] * 4}, 4)
    base = dict(
        block_hashes=cache.block_hashes, max_length=16, kv_cache_group_ids=[0],
        block_pool=cache.block_pool, kv_cache_spec=make_spec(4, 9),
        drop_eagle_block=False, alignment_tokens=4,
    )
    for overrides, error in [
        (dict(max_length=64), IndexError),  # fewer hashes than blocks
        (dict(alignment_tokens=0), ZeroDivisionError),
        (dict(kv_cache_group_ids=[]), IndexError),
        (dict(dcp_world_size=2), AssertionError),
    ]:
        args = {**base, **overrides}
        with pytest.raises(error):
            _vllm(**args)
        with pytest.raises(error):
            SlidingWindowManager.find_longest_cache_hit(**args)
    for overrides in (dict(max_length=-5), dict(alignment_tokens=-8)):
        args = {**base, **overrides}
        assert_same_answer(SlidingWindowManager.find_longest_cache_hit(**args), _vllm(**args), overrides)


def test_vllm_loads_the_plugin_through_its_entry_point(monkeypatch) -> None:
    from importlib.metadata import entry_points

    import vllm.plugins

    names = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert names.get("swa_prefix_cache") == "swa_prefix_cache.vllm_adapter.plugin:register"
    monkeypatch.setattr(vllm.plugins, "plugins_loaded", False)
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    vllm.plugins.load_general_plugins()
    assert vllm_adapter.is_installed()


def test_a_failing_search_falls_back_to_vllm(monkeypatch, caplog) -> None:
    def broken_search(cached, params):
        raise RuntimeError("boom")

    # The python core's search; the native core's error path is tested in
    # tests/test_hotpath.py.
    monkeypatch.setenv(vllm_adapter.CORE_ENV, "python")
    monkeypatch.setattr(swa_lookup, "python_search", broken_search)
    assert vllm_adapter.install(Mode.ON)
    args = _all_cached_lookup()
    errors = vllm_adapter.stats().errors
    with caplog.at_level(logging.ERROR, logger="swa_prefix_cache"):
        for _ in range(3):
            assert_same_answer(SlidingWindowManager.find_longest_cache_hit(**args), _vllm(**args), "")
    assert vllm_adapter.stats().errors == errors + 3
    assert caplog.text.count("lookup failed") == (1 if errors == 0 else 0)


def test_native_that_is_not_the_extension_uses_python(monkeypatch, tmp_path, caplog) -> None:
    """A file that is not the extension (here: the cffi library) must not be
    chosen: the plugin says so once and serves with the python core."""
    monkeypatch.setenv(vllm_adapter.CORE_ENV, "native")
    monkeypatch.setattr(hotpath, "_module", None)
    monkeypatch.setenv(settings.HOTPATH.name, str(native.library_path()))
    with caplog.at_level(logging.WARNING, logger="swa_prefix_cache"):
        assert vllm_adapter.install(Mode.ON)
    assert vllm_adapter.status()["backend"] == "python"
    assert "native hot path unavailable" in caplog.text
