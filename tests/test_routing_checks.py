"""e2e/routing.py's reading of vllm-router's log and its pass criteria.

The live run (make e2e-routing) only shows them passing; here the log lines
are ones vllm-router 0.1.17 wrote in a run of ours (ANSI colours and all),
and the criteria are fed counts that must fail. No server is started.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

import routing  # noqa: E402
from run_e2e import Failure  # noqa: E402

PREFIX = ('\x1b[2m2026-12-04 01:14:54\x1b[0m \x1b[34mDEBUG\x1b[0m \x1b[2mvllm_router_rs::policies::kv_aware'
          '\x1b[0m\x1b[2m:\x1b[0m \x1b[2msrc/policies/kv_aware.rs\x1b[0m\x1b[2m:\x1b[0m\x1b[2m1314:\x1b[0m KV prefix'
          ' decision \x1b[3moutcome\x1b[0m\x1b[2m=\x1b[0m"prefix_cost" \x1b[3mworker\x1b[0m\x1b[2m=\x1b[0m'
          '"http://127.0.0.1:44659" \x1b[3minput_tokens\x1b[0m\x1b[2m=\x1b[0m458 \x1b[3mnew_prefill_tokens\x1b[0m'
          '\x1b[2m=\x1b[0m394 \x1b[3mcredited_prefix_tokens\x1b[0m\x1b[2m=\x1b[0m64 \x1b[3mused_binding\x1b[0m'
          '\x1b[2m=\x1b[0mfalse\n')
SELECTED = ('\x1b[2m2026-12-04 01:14:54\x1b[0m \x1b[34mDEBUG\x1b[0m \x1b[2mvllm_router_rs::routers::http::router'
            '\x1b[0m\x1b[2m:\x1b[0m \x1b[2msrc/routers/http/router.rs\x1b[0m\x1b[2m:\x1b[0m\x1b[2m1675:\x1b[0m KV'
            ' request selected \x1b[3mattempt\x1b[0m\x1b[2m=\x1b[0m0 \x1b[3mworker_url\x1b[0m\x1b[2m=\x1b[0m'
            '"http://127.0.0.1:44659" \x1b[3mtarget\x1b[0m\x1b[2m=\x1b[0mhttp://127.0.0.1:44659 \x1b[3mrank'
            '\x1b[0m\x1b[2m=\x1b[0m0 \x1b[3mnew_prefill_tokens\x1b[0m\x1b[2m=\x1b[0m394 \x1b[3minput_known'
            '\x1b[0m\x1b[2m=\x1b[0mfalse\n')
WARN = ('2026-12-04 01:14:54 \x1b[33m WARN\x1b[0m vllm_router_rs::kv_index::subscriber: '
        'src/kv_index/subscriber.rs:427: kv_index decode batch: KV event hashes must be a nonempty array\n')


def _router(tmp_path: Path) -> routing.Router:
    router = routing.Router.__new__(routing.Router)  # no process: only its log
    router.log = tmp_path / "vllm-router.log"
    router.names = {"http://127.0.0.1:44659": "r0", "http://127.0.0.1:48469": "r1"}
    router.offset = 0
    return router


def test_decisions_read_credit_and_worker(tmp_path: Path) -> None:
    router = _router(tmp_path)
    router.log.write_text(PREFIX + WARN + SELECTED + PREFIX[:80])  # a line still being written
    lines = router.decisions()
    assert [d["line"] for d in lines] == ["prefix", "selected"]
    assert lines[0]["credited_prefix_tokens"] == "64" and lines[0]["worker"] == "http://127.0.0.1:44659"
    assert router.replica(lines[1]["worker_url"]) == "r0"
    assert router.decisions() == []  # the partial line is not read until it ends
    with router.log.open("a") as f:
        f.write(PREFIX[80:] + SELECTED.replace("44659", "48469"))
    again = router.decisions()
    assert [d["line"] for d in again] == ["prefix", "selected"]
    assert router.replica(again[1]["worker_url"]) == "r1"
    stats = router.log_stats()
    assert stats["chosen"] == {"r0": 1, "r1": 1}
    assert list(stats["warnings"].values()) == [1]
    assert "nonempty array" in next(iter(stats["warnings"]))


def _row(worker: str, cached: int, ours: dict, credit: dict, dynamo: dict) -> routing.Compared:
    return routing.Compared(0, 400, worker, cached, ours, credit, dynamo)


def test_judge_counts() -> None:
    rows = [  # Dynamo's scores: over-credit, right, under-credit
        _row("r0", 384, {"r0": 384, "r1": 0}, {"r0": 64}, {"r0": 448, "r1": 0}),  # router under-credits
        _row("r1", 0, {"r0": 384, "r1": 0}, {"r1": 0}, {"r0": 384, "r1": 0}),  # chose the smaller hit
        _row("r0", 32, {"r0": 32, "r1": 32}, {"r0": 96}, {"r0": 0, "r1": 0}),  # over-credit
    ]
    j = routing.judge(rows)
    assert (j["ours_mismatches"], j["router_credit_wrong"], j["router_over_credit"],
            j["router_under_credit"]) == (0, 2, 1, 1)
    assert (j["chose_smaller_hit"], j["tokens_recomputed"]) == (1, 384)
    assert (j["served_cached"], j["best_cached"]) == (416, 800)
    assert (j["dynamo_credit_known"], j["dynamo_credit_wrong"], j["dynamo_over_credit"],
            j["dynamo_under_credit"]) == (3, 2, 1, 1)
    routing.check_compared("m", j)


@pytest.mark.parametrize("change", [
    {"ours_mismatches": 1},
    {"router_credit_known": 2},
    {"dynamo_credit_known": 2},
    {"requests": 0},
])
def test_check_compared_rejects(change: dict) -> None:
    good = {"requests": 3, "ours_mismatches": 0, "router_credit_known": 3, "dynamo_credit_known": 3}
    with pytest.raises(Failure):
        routing.check_compared("m", {**good, **change})


def test_summarize() -> None:
    replies = [routing.Reply("dp", i, float(i), 100, 40 * (i % 2), 0.1 * (i + 1), 1.0, 4) for i in range(10)]
    s = routing.summarize(replies)
    assert s["hit_rate"] == 0.2 and s["ttft_s"]["p50"] == 0.6 and s["ttft_s"]["mean"] == 0.55
    assert s["wall_s"] == 10.0
