"""benchmarks/mooncake.py: prompts made from the trace share exactly the
prefixes the trace's block ids say they share."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from benchmarks import mooncake

FIRST, LAST = 3, 509


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@pytest.fixture(scope="module")
def trace() -> list[mooncake.TraceRequest]:
    return mooncake.load(limit=300)


@pytest.mark.parametrize("scale", [1, 16])
def test_shared_prefix_is_the_shared_block_ids(trace: list[mooncake.TraceRequest], scale: int) -> None:
    """For every pair of the first 300 requests, the common token prefix
    covers the common leading block ids whole and stops within the next
    block (or at the shorter prompt's end)."""
    per_block = mooncake.TRACE_BLOCK // scale
    prompts = [mooncake.prompt_ids(r, scale=scale, first=FIRST, last=LAST) for r in trace]
    sharing = 0
    for (ra, pa), (rb, pb) in itertools.combinations(zip(trace, prompts), 2):
        blocks = _common_prefix(ra.hash_ids, rb.hash_ids)
        tokens = _common_prefix(pa, pb)
        shorter = min(len(pa), len(pb))
        assert tokens >= min(blocks * per_block, shorter)
        if blocks * per_block < shorter:
            assert tokens < (blocks + 1) * per_block, (ra, rb)
        sharing += blocks > 0
    assert sharing > 0  # the first 300 requests do share prefixes


def test_lengths_scale_and_cap(trace: list[mooncake.TraceRequest]) -> None:
    for r in trace[:50]:
        assert len(mooncake.prompt_ids(r, first=FIRST, last=LAST)) == r.input_length
        assert len(mooncake.prompt_ids(r, scale=16, first=FIRST, last=LAST)) == -(-r.input_length // 16)
        capped = mooncake.prompt_ids(r, scale=16, first=FIRST, last=LAST, max_tokens=100)
        assert capped == mooncake.prompt_ids(r, scale=16, first=FIRST, last=LAST)[:100]
        assert mooncake.output_tokens(r, scale=16, cap=8) == min(8, -(-r.output_length // 16))
    assert all(FIRST <= t <= LAST for t in mooncake.prompt_ids(trace[0], first=FIRST, last=LAST))


def test_a_block_is_the_same_wherever_it_appears() -> None:
    a = mooncake.TraceRequest(0, 1024, 1, (7, 8))
    b = mooncake.TraceRequest(0, 1024, 1, (9, 7))
    pa = mooncake.prompt_ids(a, scale=16, first=FIRST, last=LAST)
    pb = mooncake.prompt_ids(b, scale=16, first=FIRST, last=LAST)
    assert pa[:32] == pb[32:] and pa[32:] != pb[:32]


def test_bad_input(tmp_path: Path) -> None:
    r = mooncake.TraceRequest(0, 10, 1, (1,))
    with pytest.raises(ValueError, match="scale"):
        mooncake.prompt_ids(r, scale=3, first=FIRST, last=LAST)
    with pytest.raises(ValueError, match="first and last"):
        mooncake.prompt_ids(r, first=9, last=3)
    with pytest.raises(ValueError, match="max_tokens"):
        mooncake.prompt_ids(r, first=FIRST, last=LAST, max_tokens=0)
    with pytest.raises(ValueError, match="limit"):
        mooncake.load(tmp_path / "none", limit=-1)
    rows = {
        "notjson.jsonl": "{",
        "short.jsonl": json.dumps({"timestamp": 0, "input_length": 600, "output_length": 1,
                                   "hash_ids": [1]}),
        "neg.jsonl": json.dumps({"timestamp": -1, "input_length": 6, "output_length": 1,
                                 "hash_ids": [1]}),
        "ids.jsonl": json.dumps({"timestamp": 0, "input_length": 6, "output_length": 1,
                                 "hash_ids": ["a"]}),
    }
    for name, text in rows.items():
        path = tmp_path / name
        path.write_text(text + "\n")
        with pytest.raises(ValueError, match=f"{name}:1"):
            mooncake.load(path)
