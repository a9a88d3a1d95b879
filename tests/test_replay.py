"""benchmarks/replay.py: the trace replayed through vLLM's real Scheduler on
real layouts, plugin off and on. These tests check the harness, not speed:
the layouts are built by vLLM's own sizing, the two runs agree step for
step, a wrong lookup is caught at the step it changes, and the command line
keeps the shape outside harnesses parse."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks import mooncake, replay, replay_layouts

REPLAY_LINE = re.compile(r"^replay layout=(\S+) requests=(\d+) steps=(\d+) identical=(yes|no) "
                         r"sched_ms_off=([\d.]+) sched_ms_on=([\d.]+) speedup=([\d.]+) "
                         r"hit_rate=([\d.]+) gpu_hit_rate=([\d.]+) tier_hit_rate=([\d.]+)$")


@pytest.fixture(scope="module")
def sample() -> list[mooncake.TraceRequest]:
    return mooncake.load(mooncake.DEFAULT_TRACE, 12)


def _run(sample: list[mooncake.TraceRequest], name: str, **kwargs: Any) -> dict[str, Any]:
    layout = replay_layouts.load(name)
    return replay.replay(sample, layout, pool_fraction=1.0, model=replay.StepModel.for_layout(layout),
                         log=lambda line: None, **kwargs)


def test_layouts_are_grouped_and_sized_by_vllm() -> None:
    """gpt-oss: one sliding-window and one full group of 18 layers each;
    gemma 3: 52 sliding-window layers in six groups next to the 10 full
    ones; llama: one full group. The half pool is vLLM's block override."""
    kinds = {}
    for name in replay_layouts.names():
        built = replay_layouts.build_scheduler(replay_layouts.load(name))
        kinds[name] = built.groups
        assert built.num_blocks == built.full_pool_blocks > 1000
        if name == "qwen3-next-80b":
            manager = built.scheduler.kv_cache_manager
            assert built.block_size % 64 == 0 and built.block_size > 16
            assert {type(m).__name__ for m in manager.coordinator.single_type_managers} == {
                "MambaManager", "FullAttentionManager"}
            assert built.scheduler.vllm_config.cache_config.mamba_cache_mode == "align"
            continue
        assert built.block_size == built.hash_block_size == 16
        assert built.max_model_len == 131072
    assert kinds["gpt-oss-120b"] == ["SlidingWindowSpec x18", "FullAttentionSpec x18"]
    assert sorted(kinds["gemma-3-27b"]) == ["FullAttentionSpec x10"] + ["SlidingWindowSpec x8"] * 2 \
        + ["SlidingWindowSpec x9"] * 4
    assert kinds["llama-3.1-8b"] == ["FullAttentionSpec x32"]
    # An EAGLE-3 draft's one layer joins gpt-oss's full-attention group.
    assert kinds["gpt-oss-120b-eagle3"] == ["SlidingWindowSpec x18", "FullAttentionSpec x19"]
    # Qwen3-Next: 36 gated-delta-net layers in three Mamba groups, 12 full
    # ones; the attention block grew to hold one Mamba state page (align mode).
    assert kinds["qwen3-next-80b"] == ["MambaSpec x12"] * 3 + ["FullAttentionSpec x12"]
    half = replay_layouts.build_scheduler(replay_layouts.load("gpt-oss-120b"), pool_fraction=0.5)
    assert half.num_blocks == half.full_pool_blocks // 2
    assert half.scheduler.kv_cache_manager.block_pool.num_gpu_blocks == half.num_blocks
    # One 131,072-token request no longer fits the half pool: vLLM's auto-fit shortens it.
    assert half.max_model_len < 131072


def test_off_and_on_schedule_identically(sample: list[mooncake.TraceRequest]) -> None:
    r = _run(sample, "gpt-oss-120b")
    assert r["identical"], r["first_difference"]
    assert r["requests"] == r["arrived"] == len(sample)
    assert r["steps"] > len(sample)
    off, on = r["off"], r["on"]
    assert (off["prefix_cache_queries"], off["prefix_cache_hits"], off["lookups"]) == (
        on["prefix_cache_queries"], on["prefix_cache_hits"], on["lookups"])
    assert on["prefix_cache_hits"] > 0  # the sample shares prefixes: real hits were compared
    assert len(on["cdf_ms"]) == replay.CDF_POINTS and on["cdf_ms"] == sorted(on["cdf_ms"])
    if r["core"] == "native":
        assert r["native_lookups"]["native"] > 0 and r["native_lookups"]["delegated"] == 0


def _short_by_one_block() -> Any:
    """A full-attention lookup that returns every hit one block short."""
    from benchmarks.harness import FULL_ORIGINAL, ORIGINAL, Patch
    from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager

    vllm_own = FULL_ORIGINAL.__get__(None, FullAttentionManager)

    def wrong(cls: Any, **kwargs: Any) -> Any:
        blocks, length = vllm_own(**kwargs)
        if not length:
            return blocks, length
        size = kwargs["kv_cache_spec"].block_size
        return tuple(b[:-1] for b in blocks), length - size

    return Patch(ORIGINAL, classmethod(wrong))


def test_a_wrong_lookup_is_caught_at_its_step(sample: list[mooncake.TraceRequest]) -> None:
    r = _run(sample, "llama-3.1-8b", on_patch=_short_by_one_block())
    assert not r["identical"]
    step = r["first_difference"]["step"]
    assert r["steps"] == step + 1  # the run stops at the first difference
    diff = r["first_difference"]
    # The short hit shows first in the new request's computed tokens and blocks.
    assert diff["field"].startswith("scheduled_new_reqs["), diff
    assert diff["off"] != diff["on"]


def test_command_line_and_receipt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    code = replay.main(["--trace", str(mooncake.DEFAULT_TRACE), "--layout", "gpt-oss-120b", "--requests", "6",
                        "--json", str(out)])
    assert code == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    m = REPLAY_LINE.match(last)
    assert m, last
    receipt = json.loads(out.read_text())
    assert m.group(1) == receipt["layout"] == "gpt-oss-120b"
    assert int(m.group(2)) == receipt["requests"] == 6
    assert int(m.group(3)) == receipt["steps"]
    assert float(m.group(5)) == pytest.approx(receipt["off"]["total_ms"], abs=0.05)
    assert float(m.group(6)) == pytest.approx(receipt["on"]["total_ms"], abs=0.05)
    assert float(m.group(8)) == pytest.approx(receipt["hit_rate"], abs=5e-5)
    assert float(m.group(10)) == receipt["tier_hit_rate"] == 0.0  # no host tier asked for
    for key in ("p50_ms", "p90_ms", "p99_ms", "max_ms", "lookup_share", "steps_over_ms"):
        assert key in receipt["on"] and key in receipt["off"]


@pytest.mark.parametrize("argv", [
    ["--layout", "no-such-model"],
    ["--layout", "llama-3.1-8b", "--requests", "0"],
    ["--layout", "llama-3.1-8b", "--trace", "/no/such/trace.jsonl"],
    ["--layout", "llama-3.1-8b", "--step-fixed-ms", "-1"],
    ["--layout", "llama-3.1-8b", "--pool", "quarter"],
    ["--layout", "llama-3.1-8b", "--offload-gb", "0"],
    ["--layout", "llama-3.1-8b", "--offload-gb", "8", "--link-gb-s", "-1"],
    ["--layout", "llama-3.1-8b", "--store", "corrected"],
    ["--layout", "llama-3.1-8b", "--instances", "0"],
    ["--layout", "llama-3.1-8b", "--turns", "chat"],
    ["--layout", "llama-3.1-8b", "--instances", "many"],
    ["--layout", "llama-3.1-8b", "--instances", "2", "--instance", "2"],
    ["--layout", "llama-3.1-8b", "--offload-gb", "8", "--store", "dense"],
])
def test_bad_command_lines_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        replay.main(argv)
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_bad_layout_arguments_name_the_argument() -> None:
    with pytest.raises(ValueError, match="layout"):
        replay_layouts.load("no-such-model")
    layout = replay_layouts.load("llama-3.1-8b")
    for bad in (0.0, 1.5, 1):
        with pytest.raises(ValueError, match="pool_fraction"):
            replay_layouts.build_scheduler(layout, pool_fraction=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen3-next-80b"])
def test_step_model_is_the_stated_formula(name: str) -> None:
    layout = replay_layouts.load(name)
    tp = layout.tensor_parallel_size
    model = replay.StepModel.for_layout(layout)
    assert model.fixed_ms == pytest.approx(layout.weights_bytes / tp / (3.35e12 * 0.8) * 1e3)
    assert model.us_per_token == pytest.approx(2 * layout.active_params / tp / (989e12 * 0.4) * 1e6)
    assert model.step_ms(1000) == pytest.approx(model.fixed_ms + model.us_per_token)


def test_layer_kinds_follow_the_config() -> None:
    oss = replay_layouts.load("gpt-oss-120b").layer_types()
    assert oss[:4] == ["sliding_attention", "full_attention"] * 2 and len(oss) == 36
    qwen = replay_layouts.load("qwen3-next-80b").layer_types()
    assert qwen[:4] == ["linear_attention"] * 3 + ["full_attention"] and qwen.count("full_attention") == 12
    gemma = replay_layouts.load("gemma-3-27b").layer_types()
    assert gemma.count("full_attention") == 10 and gemma[5] == "full_attention"
    assert gemma[:5] == ["sliding_attention"] * 5
    assert set(replay_layouts.load("llama-3.1-8b").layer_types()) == {"full_attention"}


def test_suite_refuses_a_missing_trace(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import replay_suite

    with pytest.raises(SystemExit) as exc:
        replay_suite.main(["--trace", "/no/such/trace.jsonl"])
    assert exc.value.code == 2
    assert "--trace" in capsys.readouterr().err


def test_suite_merges_receipts_each_run_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--merge joins the runs of receipts written by separate invocations,
    in the suite's layout order, each tagged with its receipt; a layout and
    pool twice, receipts of different request counts, or a missing receipt
    are refused, naming the receipt."""
    from benchmarks import replay_suite

    def receipt(name: str, requests: int | None, *runs: tuple[str, str]) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps({"requests": requests, "pools": [],
                                    "runs": [{"layout": layout, "pool": pool} for layout, pool in runs]}))
        return path

    a = receipt("a.json", None, ("llama-3.1-8b", "half"), ("llama-3.1-8b", "full"))
    b = receipt("b.json", None, ("gemma-3-27b", "full"))
    runs, requests = replay_suite.merged_runs([a, b])
    assert requests is None
    assert [(r["layout"], r["pool"], r["receipt"]) for r in runs] == [
        ("gemma-3-27b", "full", "b.json"), ("llama-3.1-8b", "full", "a.json"), ("llama-3.1-8b", "half", "a.json")]
    with pytest.raises(ValueError, match="llama-3.1-8b full pool is in both .*a.json and .*c.json"):
        replay_suite.merged_runs([a, receipt("c.json", None, ("llama-3.1-8b", "full"))])
    with pytest.raises(ValueError, match="different numbers of requests"):
        replay_suite.merged_runs([a, receipt("d.json", 2000, ("gpt-oss-120b", "full"))])
    with pytest.raises(SystemExit) as exc:
        replay_suite.main(["--merge", str(tmp_path / "missing.json")])
    assert exc.value.code == 2
    assert "missing.json" in capsys.readouterr().err


def test_instances_for_is_the_stated_formula() -> None:
    """The fewest instances whose share of the prompts one GPU computes in at
    most 70% of the trace's time by the step model."""
    layout = replay_layouts.load("gemma-3-27b")
    model = replay.StepModel.for_layout(layout)
    trace = mooncake.load()
    busy_ms = sum(r.input_length for r in trace) * model.us_per_token / 1000
    span_ms = trace[-1].timestamp_ms - trace[0].timestamp_ms
    k = replay.instances_for(trace, model)
    assert busy_ms / k <= 0.7 * span_ms < busy_ms / (k - 1)
    with pytest.raises(ValueError, match="trace"):
        replay.instances_for([], model)


def test_extended_turns_start_with_the_earlier_whole_prompt() -> None:
    trace = mooncake.load(limit=300)
    blocks, _ = replay.make_requests(trace, 131072, 50_000, "blocks")
    extend, _ = replay.make_requests(trace, 131072, 50_000, "extend")
    parents = mooncake.continued_turns(trace)
    assert any(p is not None for p in parents)
    for k, p in enumerate(parents):
        a, b = blocks[k][1], extend[k][1]
        assert len(a) == len(b)
        if p is None:
            assert a == b
        else:
            n = len(extend[p][1])
            assert b[:n] == extend[p][1] and b[n:] == a[n:]
            assert a[:n] != b[:n]  # the earlier prompt's last, partial block differs under "blocks"
    with pytest.raises(ValueError, match="turns"):
        replay.make_requests(trace, 131072, 50_000, "chat")


def test_tier_sweep_plans_and_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    """The sweep runs the corrected store only where it can differ (a layout
    with a sliding-window layer), takes ``--requests all`` as the whole
    trace, and refuses a bad count naming the argument."""
    from benchmarks import tier_sweep

    both = ["stock", "corrected"]
    assert tier_sweep.stores_for("gemma-3-27b", both) == both
    assert tier_sweep.stores_for("gpt-oss-120b", both) == both
    assert tier_sweep.stores_for("llama-3.1-8b", both) == ["stock"]
    assert tier_sweep.stores_for("qwen3-next-80b", both) == ["stock"]
    assert tier_sweep.stores_for("llama-3.1-8b", ["corrected"]) == ["corrected"]
    parser = tier_sweep.argparse.ArgumentParser()
    assert tier_sweep.parse_requests("all", parser) is None
    assert tier_sweep.parse_requests("12", parser) == 12
    for bad in ("0", "-3", "many", ""):
        with pytest.raises(SystemExit) as exc:
            tier_sweep.main(["--requests", bad])
        assert exc.value.code == 2
        assert "--requests" in capsys.readouterr().err


def test_findings_on_trace_refuses_what_it_cannot_run() -> None:
    """benchmarks/findings_on_trace.py: J1's fix changes a function the
    plugin's lookups are bound to (the replay would stop), and an unknown
    finding is named, before anything is built or run."""
    from benchmarks import findings_on_trace

    with pytest.raises(SystemExit) as exc:
        findings_on_trace.main(["--findings", "J1", "--layout", "gpt-oss-120b"])
    assert exc.value.code == 2
    with pytest.raises(SystemExit, match="'X9' is not one of"):
        findings_on_trace.fixed_site("X9")
