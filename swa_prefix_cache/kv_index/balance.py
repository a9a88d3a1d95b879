"""Choosing a data-parallel rank by exact hit traded against vLLM's load.

vLLM's front end (``DPLBAsyncMPClient.get_core_engine_for_request``, 0.32
and 0.33) sends a request to the engine of least *load score*;
``vllm_load_score`` is that score, transcribed (tests/test_dp_routing.py
checks it against vLLM's method on random states). ``choose`` adds the
prefix cache: sending the request to engine ``i`` costs

    cost_i = (prompt_tokens - hit_i) + tokens_per_load * load_i

tokens: the prompt tokens engine ``i`` must compute (its exact hit from
``KVIndex.score`` subtracted), plus its load score valued in tokens. One
unit of load is one request ahead in that engine's batch; vLLM's scheduler
gives the batch ``max_num_batched_tokens`` per step, so a request ahead
delays ours by at most about one step's token budget, and that is the
default for ``tokens_per_load`` (``SWA_PREFIX_CACHE_DP_TOKENS_PER_LOAD``
overrides it). With equal hits the cost orders engines as vLLM's score
does, and vLLM's own choice is kept whenever its cost is minimal, so the
router departs from vLLM only when a cache hit outweighs the extra load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# vLLM's penalty for waiting requests under KV-cache pressure: 0 up to 50%
# usage, rising to 3x the waiting count at 100%.
_WAITING_PENALTY = 6.0
_PRESSURE_FREE = 0.5


def vllm_load_score(
    waiting: int, running: int, kv_cache_usage: float, inflight: int, client_count: int
) -> float:
    """vLLM's load score of one engine: the greater of the coordinator's
    latest ``waiting + running`` and this client's in-flight count scaled by
    the number of clients, plus the KV-pressure penalty on waiting requests."""
    score: float = max(client_count * inflight, waiting + running)
    if waiting:
        score += waiting * _WAITING_PENALTY * max(0.0, kv_cache_usage - _PRESSURE_FREE)
    return score


def costs(
    hits: Sequence[int], loads: Sequence[float], prompt_tokens: int, tokens_per_load: float
) -> list[float]:
    """Each engine's cost in tokens (the module docstring)."""
    return [prompt_tokens - hit + tokens_per_load * load for hit, load in zip(hits, loads)]


def choose(
    hits: Sequence[int],
    loads: Sequence[float],
    prompt_tokens: int,
    vllm_choice: int,
    tokens_per_load: float,
) -> int:
    """The engine to serve the request: vLLM's choice when its cost is
    minimal, else the cheapest (ties to the lower load, then the lower index)."""
    _check(hits, loads, prompt_tokens, vllm_choice, tokens_per_load)
    cost = costs(hits, loads, prompt_tokens, tokens_per_load)
    best = min(cost)
    if cost[vllm_choice] <= best:
        return vllm_choice
    return min(range(len(cost)), key=lambda i: (cost[i], loads[i], i))


def _check(
    hits: Sequence[int],
    loads: Sequence[float],
    prompt_tokens: int,
    vllm_choice: int,
    tokens_per_load: float,
) -> None:
    if len(hits) != len(loads) or not hits:
        raise ValueError("hits and loads must be non-empty and of one length")
    if type(prompt_tokens) is not int or prompt_tokens < 0:
        raise ValueError(f"prompt_tokens must be an int >= 0, got {prompt_tokens!r}")
    for hit in hits:
        if type(hit) is not int or not 0 <= hit <= prompt_tokens:
            raise ValueError(f"hits must be ints in [0, prompt_tokens], got {hit!r}")
    if type(vllm_choice) is not int or not 0 <= vllm_choice < len(hits):
        raise ValueError(f"vllm_choice must index an engine, got {vllm_choice!r}")
    if not _finite_non_negative(tokens_per_load):
        raise ValueError(f"tokens_per_load must be a finite number >= 0, got {tokens_per_load!r}")
    for load in loads:
        if not _finite_non_negative(load):
            raise ValueError(f"loads must be finite numbers >= 0, got {load!r}")


def _finite_non_negative(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and value >= 0
