"""swa_prefix_cache/pyspec/tier_reference.py: the reference store (keeps exactly what
vLLM's lookups can read, LRU at a byte budget), on hand-made prompts and on
the trace against the prefix ceiling."""

from __future__ import annotations

import pytest

from benchmarks import mooncake
from swa_prefix_cache.pyspec.tier_reference import Group, chained_keys, reference_hits, window_blocks

B = 16
FULL = Group(None, 100)
SWA = Group(2 * B + 1, 10)  # needs 2 blocks before a hit


def keys(prefix: str, n: int, shared: tuple[str, int] | None = None) -> list[str]:
    """``n`` block keys; the first ``shared[1]`` are ``shared[0]``'s."""
    k = 0 if shared is None else shared[1]
    return ([f"{shared[0]}{i}" for i in range(k)] if shared else []) + [f"{prefix}{i}" for i in range(k, n)]


def test_window_blocks_is_vllms_need() -> None:
    assert [window_blocks(w, 16) for w in (1, 2, 16, 17, 18, 1024, 1025)] == [1, 1, 1, 1, 2, 64, 64]


def test_full_attention_alone_hits_every_shared_prefix() -> None:
    a = (keys("a", 4), 4 * B + 3)
    b = (keys("b", 6, ("a", 4)), 6 * B)
    c = (keys("c", 3, ("a", 2)), 3 * B)
    again = (keys("b", 6, ("a", 4)), 6 * B)
    assert reference_hits([a, b, c, again], B, [FULL], None) == [0, 4 * B, 2 * B, 5 * B]


def test_sliding_window_hits_only_where_a_window_was_kept() -> None:
    """The longer sibling of a stored prompt hits its end; a prompt that
    diverges earlier finds no window there (its junction is stored for the
    next one); a resend hits its last whole block."""
    a = (keys("a", 4), 4 * B)
    sibling = (keys("s", 6, ("a", 4)), 6 * B)
    diverge = (keys("d", 5, ("a", 2)), 5 * B)
    diverge_again = (keys("e", 5, ("a", 2)), 5 * B)
    resend = (keys("a", 4), 4 * B)
    got = reference_hits([a, sibling, diverge, diverge_again, resend], B, [FULL, SWA], None)
    assert got == [0, 4 * B, 0, 2 * B, 3 * B]


def test_eagle_drop_lands_every_lookup_one_block_lower() -> None:
    """With the EAGLE drop (legacy hashes) the full-attention run loses its
    last block before the window is checked: a resend of a 4-block prompt
    hits 2 blocks (3 without), a longer sibling 3 (4 without), and the
    windows kept are the ones before those lower points."""
    a = (keys("a", 4), 4 * B)
    resend = (keys("a", 4), 4 * B)
    sibling = (keys("s", 6, ("a", 4)), 6 * B)
    assert reference_hits([a, resend, sibling], B, [FULL, SWA], None) == [0, 3 * B, 4 * B]
    assert reference_hits([a, resend, sibling], B, [FULL, SWA], None, eagle_drop=True) == [0, 2 * B, 3 * B]
    # Full attention alone: the drop is the only difference.
    assert reference_hits([a, sibling], B, [FULL], None, eagle_drop=True) == [0, 3 * B]


def test_hash_lookahead_keys_only_blocks_with_a_token_after_them() -> None:
    """A block's hash covers one token after it: a prompt of exactly 4
    blocks keys and stores 3, so its longer sibling hits 3 blocks; one
    token more and the fourth block is keyed too."""
    exact = (keys("a", 4), 4 * B)
    longer = (keys("a", 4), 4 * B + 1)
    sibling = (keys("s", 6, ("a", 4)), 6 * B)
    assert reference_hits([exact, sibling], B, [FULL, SWA], None, hash_lookahead=1) == [0, 3 * B]
    assert reference_hits([longer, sibling], B, [FULL, SWA], None, hash_lookahead=1) == [0, 4 * B]
    assert reference_hits([exact, sibling], B, [FULL, SWA], None) == [0, 4 * B]


def test_budget_evicts_least_recently_used_and_zero_keeps_nothing() -> None:
    a = (keys("a", 4), 4 * B)
    b = (keys("b", 4), 4 * B)
    a2 = (keys("x", 6, ("a", 4)), 6 * B)
    prompts = [a, b, a2]
    assert reference_hits(prompts, B, [FULL], None)[2] == 4 * B
    assert reference_hits(prompts, B, [FULL], 0) == [0, 0, 0]
    # Room for 4 full-attention blocks: b's evict a's.
    assert reference_hits(prompts, B, [FULL], 400)[2] == 0
    # Room for 8: both stay.
    assert reference_hits(prompts, B, [FULL], 800)[2] == 4 * B


def _trace_prompts(n: int) -> tuple[list[tuple[list[int], int]], list[tuple[tuple[int, ...], int]]]:
    """The trace's first ``n`` prompts as the replay makes them (each trace
    block its fixed tokens), keyed by chained block hashes."""
    trace = mooncake.load(limit=n)
    raw = [(r.hash_ids, r.input_length) for r in trace]
    tokens = [mooncake.prompt_ids(r, first=3, last=50_000) for r in trace]
    return [(chained_keys(t, B), len(t)) for t in tokens], raw


def test_unbounded_full_attention_is_the_prefix_ceiling_on_the_trace() -> None:
    prompts, raw = _trace_prompts(400)
    assert reference_hits(prompts, B, [FULL], None) == mooncake.prefix_ceiling(raw, B)


def test_on_the_trace_windows_cost_hits_and_bytes_bound_them() -> None:
    """Sliding windows never beat full attention alone, the ceiling bounds
    everything, and with one kind of block (LRU's inclusion property) more
    bytes never serve fewer tokens."""
    prompts, raw = _trace_prompts(400)
    ceiling = sum(mooncake.prefix_ceiling(raw, B))
    full = [sum(reference_hits(prompts, B, [FULL], cap)) for cap in (10**5, 10**6, 10**7, None)]
    assert full == sorted(full) and full[-1] == ceiling
    swa = sum(reference_hits(prompts, B, [FULL, SWA], None))
    assert 0 < swa <= ceiling
    hybrid = [sum(reference_hits(prompts, B, [FULL, Group(1024, 50)], cap)) for cap in (10**6, None)]
    assert hybrid[0] <= hybrid[1] <= ceiling


def test_chained_keys_are_equal_exactly_for_equal_prefixes() -> None:
    a = list(range(40))
    b = list(range(24)) + [99] * 16
    c = [7] + list(range(1, 40))
    ka, kb, kc = (chained_keys(x, B) for x in (a, b, c))
    assert len(ka) == 2 and ka[0] == kb[0] and ka[1] != kb[1]
    assert kc[0] != ka[0] and kc[1] != ka[1]  # same tokens, another prefix
    assert chained_keys(a[:15], B) == []


def test_bad_input_names_the_argument() -> None:
    with pytest.raises(ValueError, match="block"):
        reference_hits([], 0, [FULL], None)
    with pytest.raises(ValueError, match="groups"):
        reference_hits([], B, [], None)
    with pytest.raises(ValueError, match="capacity_bytes"):
        reference_hits([], B, [FULL], -1)
    with pytest.raises(ValueError, match="keys"):
        reference_hits([(["k"], 3 * B)], B, [FULL], None)
    with pytest.raises(ValueError, match="hash_lookahead"):
        reference_hits([], B, [FULL], None, hash_lookahead=-1)
    with pytest.raises(TypeError, match="eagle_drop"):
        reference_hits([], B, [FULL], None, eagle_drop=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window"):
        Group(0, 10)
    with pytest.raises(ValueError, match="block_bytes"):
        Group(None, 0)
    with pytest.raises(ValueError, match="block"):
        chained_keys([1, 2], 0)


# ---- benchmarks/tier_gap.py: the shortfalls against the reference, by cause --


def test_shortfall_causes() -> None:
    """A is stored; B shares A's first 2 blocks and diverges (its hit stops
    below them); C shares the same 2 blocks: the reference hits them, a
    store without B's junction does not (tier_junction). Had B been
    admitted with the 2 blocks, the cause would be something else."""
    from benchmarks.tier_gap import shortfalls

    a, b, c = ["a1", "a2", "a3", "a4"], ["a1", "a2", "b3", "b4"], ["a1", "a2", "c3"]
    got = shortfalls([a, b, c], [0, 0, 0], [0, 0, 2], 1)
    assert got["requests"] == 1 and got["tokens"] == 2
    assert got["by_cause"]["tier_junction"] == {"requests": 1, "tokens": 2}
    got = shortfalls([a, b, c], [0, 2, 0], [0, 0, 2], 1)
    assert got["by_cause"]["unattributed"] == {"requests": 1, "tokens": 2}
    assert got["above_reference"] == {"requests": 1, "tokens": 2}
    # One earlier sharer only: no junction between two earlier prompts.
    got = shortfalls([a, c], [0, 0], [0, 2], 1)
    assert got["by_cause"]["unattributed"]["requests"] == 1
    # In tokens: block 16, the point is the reference's hit in blocks.
    got = shortfalls([a, b, c], [0, 0, 16], [0, 0, 32], 16)
    assert got["by_cause"]["tier_junction"] == {"requests": 1, "tokens": 16}
    assert shortfalls([a, b, c], [0, 0, 2], [0, 0, 2], 1)["requests"] == 0


def test_shortfall_junction_under_the_eagle_drop() -> None:
    """With the EAGLE drop the reference lands one block below the shared
    run: C's reference hit is 1 block of the 2 it shares with A and B, and
    the junction B left unpinned is found at 2."""
    from benchmarks.tier_gap import shortfalls

    a, b, c = ["a1", "a2", "a3", "a4"], ["a1", "a2", "b3", "b4"], ["a1", "a2", "c3"]
    assert shortfalls([a, b, c], [0, 0, 0], [0, 0, 1], 1)["by_cause"]["unattributed"]["requests"] == 1
    got = shortfalls([a, b, c], [0, 0, 0], [0, 0, 1], 1, eagle_drop=True)
    assert got["by_cause"]["tier_junction"] == {"requests": 1, "tokens": 1}


def test_shortfall_bad_input() -> None:
    from benchmarks.tier_gap import shortfalls

    with pytest.raises(ValueError, match="equally long"):
        shortfalls([["a"]], [0, 0], [0], 1)
    with pytest.raises(ValueError, match="block"):
        shortfalls([["a"]], [0], [0], 0)
