"""The full-attention lookup alone: ``FullAttentionManager.find_longest_cache_hit``,
vLLM's own against ours, one group.

With the native core the plugin also replaces this lookup by the
extension's proved ``full_hit`` (the python core leaves vLLM's own, so its
column is not timed here: it would time vLLM twice). The lookup is itself
``O(N)``, in vLLM and in ours alike: it reads every cached block, so the
gain is the cost per block. Three rows, answers checked (length and block
identity, answered in C) before timing:

* all cached: 2,048 blocks of 16 tokens, every one cached (phase 1 reads
  them all), and the same with the pool probe's read-ahead off (warm
  caches: what the read-ahead costs when there is nothing to fetch);
* fine-grained: hashes of 16 tokens, blocks of 64, alignment 16, a partial
  tail cached, so phase 2 probes the tail too;
* small N: N = 1..64 blocks, a cached prefix of 0/50/100% then misses;
  never slower than vLLM.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from vllm.v1.core.single_type_kv_cache_manager import FullAttentionManager

from benchmarks.harness import BS, VLLM_PATCH, Impls, Planter, call_checked
from benchmarks.kv_cache_configs import full_attention_spec
from benchmarks.side_by_side import (
    NO_AHEAD,
    Job,
    check_against_vllm,
    lookup_call,
    medians_us,
    ours_vs_vllm,
    quartiles_us,
    read_ahead_off,
    time_interleaved,
)
from vllm_support import count_get_cached_block, make_block_hashes, make_block_pool

FULL_SPEEDUP = 6.0  # target: the full-attention lookup alone, 2,048 cached blocks
FULL_BLOCKS = 2048
FINE_TOKENS = 32768  # the fine-grained row's prompt (2,048 hashes of 16 tokens, blocks of 64)
API = "FullAttentionManager.find_longest_cache_hit"


def _full_names(impls: Impls) -> list[str]:
    """vLLM, ours, and the other core only when it replaces the
    full-attention lookup (the python core leaves vLLM's own: timing it
    would time vLLM twice)."""
    return [name for name, p in impls.table.items()
            if name in ("vllm", "ours") or p.full_replaced]


def _full_kwargs(hashes: Sequence[Any], max_length: int, pool: Any, block_size: int = BS,
                alignment: int = BS) -> dict[str, Any]:
    return dict(block_hashes=list(hashes), max_length=max_length, kv_cache_group_ids=[0],
                block_pool=pool, kv_cache_spec=full_attention_spec(block_size),
                drop_eagle_block=False, alignment_tokens=alignment)


def _vllm_probes(pool: Any, call: Any) -> int:
    """The ``get_cached_block`` calls vLLM's own lookup makes on ``call``."""
    with count_get_cached_block(pool) as counter:
        call_checked(VLLM_PATCH, None, call)
    return counter[0]


def _timed_row(med: dict[str, float], quartiles: dict[str, list[float]],
              **extra: Any) -> dict[str, Any]:
    """A row's keys, then its medians (us) and quartiles per implementation."""
    return {**extra, **ours_vs_vllm(med), "median_us_by_impl": med, "quartiles_us": quartiles}


def full_bench(impls: Impls, n_blocks: int, sizes: Sequence[int], hits: Sequence[float],
               fine_tokens: int, rounds: int, target_ns: float, filler: int,
               rng: random.Random) -> dict[str, Any]:
    """``FullAttentionManager.find_longest_cache_hit`` alone, one group, on
    a pool with ``filler`` other cached blocks: vLLM's own against ours (the
    extension's ``full_hit``), interleaved.

    * ``all cached``: ``n_blocks`` blocks of 16 tokens, every one cached
      (phase 1 reads them all), ``max_length`` the whole prompt;
    * ``sweep``: N = ``sizes`` blocks, a cached prefix of ``round(h * N)``
      blocks then misses, ``max_length`` N blocks;
    * ``fine``: fine-grained mode (``hash_block_size`` 16, ``block_size``
      64, ``alignment_tokens`` 16) on a prompt of ``fine_tokens`` tokens
      (``max_length`` one less, as the scheduler asks): every 16-token
      hash cached up to two hashes into the last block, so phase 1 reads
      the full blocks and phase 2 probes the tail high to low and hits its
      second hash."""
    names = _full_names(impls)
    fine_n = fine_tokens // BS  # 16-token hashes
    fine_bs = 4 * BS
    sweep_keys = [(n, h) for n in sizes for h in hits]
    planted = n_blocks + sum(round(h * n) for n, h in sweep_keys) + fine_n
    pool = Planter(filler + planted)
    pool.fill(filler, [0], rng)
    fine_pool = Planter(filler + fine_n, pool=make_block_pool(filler + fine_n + 1, BS))
    fine_pool.fill(filler, [0], rng)

    # all cached
    hashes = make_block_hashes(n_blocks, b"full-all")
    pool.plant(hashes, {0: [True] * n_blocks})
    call = lookup_call(FullAttentionManager, _full_kwargs(hashes, n_blocks * BS, pool.pool))
    check_against_vllm(impls, names, call, "full attention, all cached", n_blocks * BS)
    groups: list[dict[str, Job]] = [{name: (impls.table[name], call) for name in names}]
    ahead_off = read_ahead_off(impls, call)
    if ahead_off is not None:
        call_checked(impls.table["ours"], "native", ahead_off)
        groups[0][NO_AHEAD] = (impls.table["ours"], ahead_off)
    all_probes = _vllm_probes(pool.pool, call)

    # fine-grained, partial tail
    fhashes = make_block_hashes(fine_n, b"full-fine")
    full_blocks = (fine_tokens - 1) // fine_bs
    tail = full_blocks * 4 + 1  # the last cached 16-token hash (the tail's second)
    fine_pool.plant(fhashes, {0: [i <= tail for i in range(fine_n)]})
    fcall = lookup_call(FullAttentionManager, _full_kwargs(fhashes, fine_tokens - 1, fine_pool.pool,
                                                          block_size=fine_bs, alignment=BS))
    fref = check_against_vllm(impls, names, fcall, "full attention, fine-grained", (tail + 1) * BS)
    if len(fref[0][0]) != full_blocks + 1:
        raise AssertionError(f"fine-grained: vLLM returns {len(fref[0][0])} blocks, want "
                             f"{full_blocks} full + the tail")
    groups.append({f"fine/{name}": (impls.table[name], fcall) for name in names})
    fine_probes = _vllm_probes(fine_pool.pool, fcall)

    samples, reps = time_interleaved(groups, rounds, target_ns)
    med = medians_us(samples)
    quart = quartiles_us(samples)

    def row(prefix: str, **extra: Any) -> dict[str, Any]:
        return _timed_row({name: med[f"{prefix}{name}"] for name in names},
                         {name: quart[f"{prefix}{name}"] for name in names}, **extra)

    all_row = row("", n_blocks=n_blocks, block_size=BS, hit_tokens=n_blocks * BS,
                  vllm_probes=all_probes)
    all_row["target"] = {"want": FULL_SPEEDUP, "ok": all_row["speedup"] >= FULL_SPEEDUP}
    all_row["read_ahead_off_us"] = med.get(NO_AHEAD)
    fine_row = row("fine/", hash_block_size=BS, block_size=fine_bs, alignment_tokens=BS,
                   prompt_tokens=fine_tokens, max_length=fine_tokens - 1, full_blocks=full_blocks,
                   tail_hash_index=tail, hit_tokens=fref[1], vllm_probes=fine_probes)

    # small-N sweep
    rows = []
    for n, h in sweep_keys:
        k = round(h * n)
        shashes = make_block_hashes(n, b"full-sweep-%d-%r" % (n, h))
        pool.plant(shashes, {0: [i < k for i in range(n)]})
        scall = lookup_call(FullAttentionManager, _full_kwargs(shashes, n * BS, pool.pool))
        check_against_vllm(impls, names, scall, f"full attention sweep N={n} hits {h}", k * BS)
        s, _ = time_interleaved([{name: (impls.table[name], scall) for name in names}],
                                rounds, target_ns / 2)
        m = medians_us(s)
        sweep_row = _timed_row(m, quartiles_us(s), mode="full attention", api=API, n_blocks=n,
                              hit_rate=h, cached_prefix_blocks=k)
        sweep_row["ok"] = m["ours"] <= m["vllm"]
        rows.append(sweep_row)
    return {"api": API, "names": names,
            "pool_entries": len(pool.pool.cached_block_hash_to_block),
            "all_cached": all_row, "fine_grained": fine_row, "sweep": rows,
            "reps_per_sample": reps}
