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


def test_the_trace_cut_to_short_prompts() -> None:
    """``max_input``: the first N of the requests whose prompt is at most
    that long, in the trace's order, arrival times kept."""
    whole = mooncake.load(limit=3000)
    short = mooncake.load(limit=500, max_input=4096)
    assert len(short) == 500 and all(r.input_length <= 4096 for r in short)
    assert short == [r for r in whole if r.input_length <= 4096][:500]


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
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="max_input"):
            mooncake.load(tmp_path / "none", max_input=bad)
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


def _req(ids: tuple[int, ...], tokens: int, ts: int = 0) -> mooncake.TraceRequest:
    return mooncake.TraceRequest(ts, tokens, 10, ids)


def test_prefix_ceiling_is_the_longest_earlier_shared_prefix() -> None:
    """Blocks of 16 tokens: the second prompt shares two trace blocks (1,024
    tokens) with the first, but the first has only 700 tokens; the third
    extends the second (a conversation's next turn); the fourth shares only
    the system block; a prompt never serves its own last token."""
    prompts = [((0, 1, 2), 700), ((0, 1, 5, 6), 1800), ((0, 1, 5, 6, 7), 2100), ((0, 9), 600),
               ((0, 1, 5, 6, 7), 2100)]
    assert mooncake.prefix_ceiling(prompts, 16) == [0, 688, 1792, 512, 2096]
    assert mooncake.prefix_ceiling(prompts, 512) == [0, 512, 1536, 512, 2048]
    # Brute force over the first 300 requests of the trace.
    trace = mooncake.load(limit=300)
    got = mooncake.prefix_ceiling([(r.hash_ids, r.input_length) for r in trace], 16)
    for k, r in enumerate(trace):
        best = 0
        for e in trace[:k]:
            d = 0
            for x, y in zip(e.hash_ids[:-(-e.input_length // 512)], r.hash_ids[:-(-r.input_length // 512)]):
                if x != y:
                    break
                d += 1
            best = max(best, min(d * 512, e.input_length, r.input_length))
        assert got[k] == min(best, r.input_length - 1) // 16 * 16


def test_instance_share_keeps_conversations_whole_and_partitions_the_trace() -> None:
    trace = mooncake.load(limit=2000)
    shares = [mooncake.instance_share(trace, 4, i) for i in range(4)]
    assert sorted(id(r) for s in shares for r in s) == sorted(id(r) for r in trace)
    home = {}
    for i, share in enumerate(shares):
        assert len(share) > 300  # roughly a quarter each
        for r in share:
            key = mooncake.conversation_key(r)
            if key is not None:
                assert home.setdefault(key, i) == i  # a conversation never splits
    assert mooncake.instance_share(trace, 1, 0) == trace
    for bad in ((0, 0), (2, 2), (2, -1), (True, 0), (2.0, 0)):
        with pytest.raises(ValueError, match="instance"):
            mooncake.instance_share(trace, *bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="block"):
        mooncake.prefix_ceiling([], 24)


def test_continued_turns_names_a_shorter_earlier_prompt_of_the_same_conversation() -> None:
    """A prompt continues the latest shorter earlier one whose whole blocks
    (two at least: past the system prompt) lead it and which ends inside its
    next block; the system prompt alone is no conversation."""
    reqs = [_req((0, 1, 2), 1100),        # 0: whole blocks 0, 1; ends inside block 2
            _req((0, 1, 3, 4), 1900),     # 1: continues 0
            _req((0, 5, 6), 1200),        # 2: shares only the system block
            _req((0, 1, 3, 4, 8), 2300),  # 3: continues 1 (longest prefix first)
            _req((0, 1, 2), 1000),        # 4: shorter than 0: continues nothing
            _req((0, 9), 700)]            # 5: one whole block: a continuation of nothing
    assert mooncake.continued_turns(reqs) == [None, 0, None, 1, None, None]
    trace = mooncake.load(limit=2000)
    parents = mooncake.continued_turns(trace)
    assert 0 < sum(p is not None for p in parents) < len(trace)
    for k, p in enumerate(parents):
        if p is not None:
            whole = trace[p].input_length // 512
            assert p < k and trace[p].input_length < trace[k].input_length and whole >= 2
            assert trace[p].hash_ids[:whole] == trace[k].hash_ids[:whole]
            assert mooncake.conversation_key(trace[p]) == mooncake.conversation_key(trace[k])
