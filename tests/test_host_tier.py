"""benchmarks/host_tier.py and the replay's host tier: vLLM's real
``OffloadingConnector`` on both schedulers, the worker side simulated.

The simulated worker is checked on vLLM's own metadata classes against the
protocol of vLLM's ``OffloadingConnectorWorker`` (stores deferred to the next
step, flushes and synchronous loads waited for, completions counted once per
worker, asynchronous loads reported in ``finished_recving``) and the link
model (bytes over bandwidth, first in first out per direction). The replay
with a tier must schedule identically with the plugin off and on, serve real
hits from the tier, and stop at the step where a wrong offload lookup changes
the schedule."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import host_tier, mooncake, replay, replay_layouts

BLOCK_BYTES = {0: 1_000_000, 1: 3_000_000}  # two offloaded groups
GB_S = 1.0  # 1e6 bytes per ms


def _gpu(blocks: list[int]) -> Any:
    """A GPU spec moving ``blocks[g]`` blocks of group g."""
    from vllm.v1.kv_offload.base import GPULoadStoreSpec

    ids = list(range(1, sum(blocks) + 1))
    return GPULoadStoreSpec(ids, group_sizes=blocks, block_indices=[0] * len(blocks))


def _cpu(n: int) -> Any:
    from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec

    return CPULoadStoreSpec(list(range(n)))


def _out(loads: dict[int, Any] | None = None, stores: dict[int, Any] | None = None,
         flush: set[int] | None = None) -> Any:
    """A SchedulerOutput stand-in that carries only vLLM's real connector
    metadata (the worker reads nothing else)."""
    from types import SimpleNamespace

    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
        OffloadingConnectorMetadata,
    )

    return SimpleNamespace(kv_connector_metadata=OffloadingConnectorMetadata(
        load_jobs=loads or {}, store_jobs=stores or {}, jobs_to_flush=flush))


def _store(req: str, blocks: list[int]) -> Any:
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import TransferJob

    return TransferJob(req_id=req, src_spec=_gpu(blocks), dst_spec=_cpu(sum(blocks)))


def _load(req: str, blocks: list[int], sync: bool = False) -> Any:
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import TransferJob

    return TransferJob(req_id=req, src_spec=_cpu(sum(blocks)), dst_spec=_gpu(blocks), sync=sync)


def _worker(workers: int = 2) -> host_tier.SimulatedWorker:
    return host_tier.SimulatedWorker(dict(BLOCK_BYTES), num_workers=workers, link_gb_s=GB_S)


def test_job_bytes_are_blocks_times_each_groups_block_bytes() -> None:
    w = _worker()
    assert w.job_bytes(_gpu([2, 1])) == 2 * 1_000_000 + 3_000_000
    assert w.job_bytes(_gpu([0, 4])) == 12_000_000


def test_a_store_starts_with_the_next_step_and_is_reported_once_per_worker() -> None:
    w = _worker(workers=2)
    kv, length = w.step(_out(stores={7: _store("a", [1, 1])}), 0.0, 1.0)
    assert length == 1.0 and kv.kv_connector_worker_meta is None  # deferred, not started
    assert w.busy() and w.next_event_ms() is None
    # Submitted at the next step's start (t=1): 4e6 bytes at 1e6 bytes/ms end at t=5.
    kv, _ = w.step(_out(), 1.0, 2.0)
    assert kv.kv_connector_worker_meta is None and w.next_event_ms() == pytest.approx(5.0)
    kv, _ = w.step(_out(), 3.0, 2.0)  # ends at 5: the copy is done
    assert kv.kv_connector_worker_meta.completed_jobs == {7: 2}
    assert not kv.finished_recving and not w.busy()
    assert (w.counters.stores, w.counters.store_bytes) == (1, 4_000_000)


def test_an_async_load_reports_its_request_when_its_copy_ends() -> None:
    w = _worker(workers=1)
    kv, length = w.step(_out(loads={3: _load("r", [0, 2])}), 10.0, 1.0)  # 6e6 bytes: ends at 16
    assert length == 1.0 and not kv.finished_recving
    kv, _ = w.step(_out(), 11.0, 4.0)  # ends at 15
    assert not kv.finished_recving
    kv, _ = w.step(_out(), 15.0, 1.0)
    assert kv.finished_recving == {"r"} and kv.kv_connector_worker_meta.completed_jobs == {3: 1}


def test_a_sync_load_and_a_flush_are_waited_for() -> None:
    w = _worker(workers=1)
    kv, length = w.step(_out(loads={1: _load("r", [3, 0], sync=True)}), 0.0, 1.0)
    assert length == pytest.approx(3.0 + 1.0)  # the copy, then the forward pass
    assert not kv.finished_recving  # a sync load's request is already running
    assert kv.kv_connector_worker_meta.completed_jobs == {1: 1}
    # A store flushed in the step it is created is copied and waited for first.
    kv, length = w.step(_out(stores={2: _store("s", [2, 0])}, flush={2}), 10.0, 1.0)
    assert length == pytest.approx(2.0 + 1.0)
    assert kv.kv_connector_worker_meta.completed_jobs == {2: 1}
    assert w.counters.flushed == 1 and w.counters.wait_ms == pytest.approx(5.0)


def test_each_direction_queues_first_in_first_out() -> None:
    w = _worker(workers=1)
    w.step(_out(loads={1: _load("a", [5, 0]), 2: _load("b", [1, 0])}), 0.0, 0.5)
    # b waits behind a: a ends at 5, b at 6; a store on the other direction does not wait.
    w.step(_out(stores={3: _store("c", [1, 0])}), 0.5, 0.5)
    kv, _ = w.step(_out(), 1.0, 1.0)  # the store starts at 1, ends at 2
    assert kv.kv_connector_worker_meta.completed_jobs == {3: 1}
    kv, _ = w.step(_out(), 2.0, 3.5)  # ends at 5.5: only a
    assert kv.finished_recving == {"a"}
    kv, _ = w.step(_out(), 5.5, 0.5)
    assert kv.finished_recving == {"b"}


def test_bad_input_names_the_argument() -> None:
    for bad in (0, -1.0, "fast", None):
        with pytest.raises(ValueError, match="link_gb_s"):
            host_tier.SimulatedWorker(dict(BLOCK_BYTES), num_workers=1, link_gb_s=bad)  # type: ignore[arg-type]
    from types import SimpleNamespace

    with pytest.raises(TypeError, match="kv_connector_metadata"):
        _worker().step(SimpleNamespace(kv_connector_metadata=None), 0.0, 1.0)
    with pytest.raises(ValueError, match="groups"):
        _worker().job_bytes(_gpu([1, 1, 1]))
    with pytest.raises(ValueError, match="gib"):
        replay.TierSetting(0)
    with pytest.raises(ValueError, match="store"):
        replay.TierSetting(1.0, store="dense")
    with pytest.raises(ValueError, match="offload_gib"):
        replay_layouts.build_scheduler(replay_layouts.load("llama-3.1-8b"), offload_gib=-1)


def test_the_tier_is_vllms_connector_sized_by_its_own_accounting() -> None:
    """``--kv-offloading-size`` as vLLM resolves it: its OffloadingConnector
    with the CPU manager (LRU), one GPU block per chunk, the chunk count from
    the bytes per chunk of the layout's real KV-cache config."""
    layout = replay_layouts.load("gpt-oss-120b")
    built = replay_layouts.build_scheduler(layout, offload_gib=4.0)
    connector = built.scheduler.connector
    assert type(connector).__name__ == "OffloadingConnector"
    tier = connector.connector_scheduler
    assert type(tier.manager).__name__ == "CPUOffloadingManager"
    assert tier.config.blocks_per_chunk == 1
    per_block = host_tier.group_block_bytes(built.scheduler.kv_cache_config)
    assert len(per_block) == 2 and len(set(per_block.values())) == 1
    info = dict(tier.manager.config_info()[0])
    chunk = next(iter(per_block.values()))  # one group's block, one GPU (tensor-parallel size 1)
    assert info["cpu_num_chunks"] == (4 << 30) // chunk


@pytest.fixture(scope="module")
def tier_run() -> dict[str, Any]:
    """The trace's first requests on gpt-oss-120b with a GPU pool too small
    to keep them, so returning conversations hit the host tier."""
    layout = replay_layouts.load("gpt-oss-120b")
    sample = mooncake.load(mooncake.DEFAULT_TRACE, 24)
    return replay.replay(sample, layout, pool_fraction=0.02, model=replay.StepModel.for_layout(layout),
                         log=lambda line: None, tier=replay.TierSetting(8.0))


def test_tier_replay_is_identical_and_serves_hits_from_the_tier(tier_run: dict[str, Any]) -> None:
    r = tier_run
    assert r["identical"], r["first_difference"]
    off, on = r["off"], r["on"]
    assert (off["tier_queries"], off["tier_hits"], off["prefill_tokens"]) == (
        on["tier_queries"], on["tier_hits"], on["prefill_tokens"])
    assert r["tier_hit_tokens"] > 0 and r["tier"]["loads"] > 0 and r["tier"]["stores"] > 0
    assert r["hit_rate"] == pytest.approx(r["gpu_hit_rate"] + r["tier_hit_rate"])
    assert r["hit_rate"] == pytest.approx((r["gpu_hit_tokens"] + r["tier_hit_tokens"]) / r["prompt_tokens"])
    # Every computed or hit prompt token is accounted for.
    assert r["prefill_tokens"] + r["gpu_hit_tokens"] + r["tier_hit_tokens"] >= r["prompt_tokens"]
    assert on["tier_lookups"] == off["tier_lookups"] > 0
    assert r["ttft_p50_ms"] is not None and r["ttft_p90_ms"] >= r["ttft_p50_ms"] > 0


def _offload_misses() -> Any:
    """vLLM's lookups, with the offload scan made to miss wherever vLLM's
    finds a sliding-window run (a miss is always safe to serve)."""
    from dataclasses import replace

    from benchmarks.harness import OFFLOAD_ORIGINAL, VLLM_PATCH

    def wrong(self: Any, *args: Any, **kwargs: Any) -> Any:
        end = OFFLOAD_ORIGINAL(self, *args, **kwargs)
        return 0 if end else end

    return replace(VLLM_PATCH, offload=wrong)


def test_a_wrong_offload_lookup_is_caught() -> None:
    layout = replay_layouts.load("gpt-oss-120b")
    sample = mooncake.load(mooncake.DEFAULT_TRACE, 24)
    r = replay.replay(sample, layout, pool_fraction=0.02, model=replay.StepModel.for_layout(layout),
                      log=lambda line: None, tier=replay.TierSetting(8.0),
                      on_patch=_offload_misses())
    assert not r["identical"]
    assert r["steps"] == r["first_difference"]["step"] + 1


@pytest.mark.parametrize("gib", [None, 8.0])
def test_an_eagle_draft_drops_its_block_only_with_a_tier(gib: float | None) -> None:
    """gpt-oss-120b with an EAGLE-3 draft: the draft's layer joins the
    full-attention group, which vLLM marks ``is_eagle_group``. Without a KV
    connector vLLM hashes one token ahead and drops nothing. With the host
    tier, 0.33.0 keeps the legacy hashes and drops the last block of every
    hit; 0.34.0's offloading connector supports the look-ahead hashes, so
    nothing drops there either. The replay is identical either way, and the
    reference store, told the same, bounds the hits vLLM serves; with the
    tier (which holds every prompt here) it is met within a block per
    request."""
    from vllm import __version__
    layout = replay_layouts.load("gpt-oss-120b-eagle3")
    sample = mooncake.load(mooncake.DEFAULT_TRACE, 24)
    tier = None if gib is None else replay.TierSetting(gib)
    r = replay.replay(sample, layout, pool_fraction=0.02, model=replay.StepModel.for_layout(layout),
                      log=lambda line: None, tier=tier)
    assert r["identical"], r["first_difference"]
    assert r["groups"] == ["SlidingWindowSpec x18", "FullAttentionSpec x19"]
    reference = r["reference"]
    legacy = gib is not None and __version__ == "0.33.0"
    assert (reference["hash_lookahead"], reference["eagle_drop"]) == ((0, True) if legacy else (1, False))
    hits = r["gpu_hit_tokens"] + r["tier_hit_tokens"]
    assert hits > 0
    assert reference["hit_tokens"] >= hits
    assert r["short_of_reference"]["above_reference"]["requests"] == 0
    if gib is not None:
        assert reference["hit_tokens"] - hits <= 16 * len(sample)
