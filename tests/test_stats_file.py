"""Stats files and the timed mode off (what ``make e2e`` reads from vLLM's
engine-core process), on the real classes.

* mode off without ``SWA_PREFIX_CACHE_STATS_DIR``: nothing patched;
* mode off with it: vLLM's own method answers (same blocks), counted and
  timed;
* the plugin entry point writes ``stats-<pid>.json`` with this pid, what
  is active, and counters that follow the lookups made.
"""

import json
import os
import time

import pytest

pytest.importorskip("vllm")

from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager  # noqa: E402
from vllm_support import (  # noqa: E402, F401 (unpatched: autouse fixture)
    ORIGINAL_LOOKUP,
    assert_same_answer,
    build_planted_cache,
    make_spec,
    unpatched,
)

from swa_prefix_cache import vllm_adapter  # noqa: E402
from swa_prefix_cache.vllm_adapter import Mode, plugin, stats_file  # noqa: E402


def _lookup_args() -> dict:
    cache = build_planted_cache({0: [False, True, True, False, True, True, True, True]}, 4)
    return dict(
        block_hashes=cache.block_hashes, max_length=32, kv_cache_group_ids=[0],
        block_pool=cache.block_pool, kv_cache_spec=make_spec(4, 9),
        drop_eagle_block=False, alignment_tokens=4,
    )


def test_off_without_stats_dir_patches_nothing(monkeypatch) -> None:
    monkeypatch.delenv(stats_file.STATS_DIR_ENV, raising=False)
    assert not vllm_adapter.install(Mode.OFF)
    assert SlidingWindowManager.__dict__["find_longest_cache_hit"] is ORIGINAL_LOOKUP


def test_off_with_stats_dir_times_vllms_own_method(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(stats_file.STATS_DIR_ENV, str(tmp_path))
    assert vllm_adapter.install(Mode.OFF)
    assert vllm_adapter.status()["backend"] == "vllm"
    args = _lookup_args()
    before = vllm_adapter.stats().calls, vllm_adapter.stats().lookup_ns
    answer = SlidingWindowManager.find_longest_cache_hit(**args)
    theirs = ORIGINAL_LOOKUP.__get__(None, SlidingWindowManager)(**args)
    assert_same_answer(answer, theirs, "mode off")
    assert answer[1] == 32  # window of 2 blocks ending at block 8: all cached
    assert vllm_adapter.stats().calls == before[0] + 1
    assert vllm_adapter.stats().lookup_ns > before[1]


def test_register_writes_this_process_stats(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(stats_file.STATS_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(vllm_adapter.MODE_ENV, "on")
    plugin.register()
    assert vllm_adapter.is_installed()
    path = tmp_path / f"stats-{os.getpid()}.json"
    if not path.exists():  # started earlier in this process: same pid, other dir
        pytest.skip("the stats writer of this process was started by an earlier test")
    SlidingWindowManager.find_longest_cache_hit(**_lookup_args())
    calls = vllm_adapter.stats().calls
    deadline = time.monotonic() + 5 * stats_file._PERIOD_S + 5
    data = json.loads(path.read_text())
    while data["stats"]["calls"] != calls and time.monotonic() < deadline:
        time.sleep(stats_file._PERIOD_S / 2)
        data = json.loads(path.read_text())
    assert data["pid"] == os.getpid()
    assert data["installed"] is True and data["mode"] == "on"
    assert data["stats"]["calls"] == calls >= 1
    assert data["stats"]["lookup_ns"] > 0
