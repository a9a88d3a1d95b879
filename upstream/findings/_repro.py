"""Shared helper of the reproductions in this folder: the Python standard
library and vLLM 0.33.0's own classes only (nothing of swa-prefix-cache), so
that each ``<id>.py`` here can be run on a stock vLLM by anyone:

    python upstream/findings/L1.py        # exit 1 while the bug is there

* ``Local``: a real ``KVCacheManager`` (Unitary or Hybrid coordinator,
  ``SlidingWindowManager``, ``BlockPool``) stores one prompt through
  ``allocate_slots`` (-> ``cache_blocks`` -> ``reachable_block_mask`` ->
  ``cache_full_blocks``), frees it, and real ``Request`` s that share a
  prefix with it are looked up with ``get_computed_blocks``. The baseline,
  "every block stored", is the same with ``reachable_block_mask`` answering
  ``None`` (vLLM's own "cache every block").
* ``Offload``: a real ``OffloadingConnectorScheduler`` with a real
  ``CPUOffloadingManager`` (built as vLLM's own unit test
  ``test_swa_offload_window_covers_unaligned_hit`` builds it) stores a
  finished prompt through its store filter (``_build_store_jobs`` ->
  ``_reachable_store_block_mask``) and real lookups
  (``get_num_new_matched_tokens`` -> ``_lookup_complete_chunks``) read it
  back; the baseline stores every chunk of the prompt.
* ``Report``: prints what was asked and answered, and exits 1 when vLLM
  serves less than it would with every block stored (0 otherwise; 2 on an
  unexpected error).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from types import SimpleNamespace

# Modules of the swa-prefix-cache project: a reproduction must not need them.
PROJECT_MODULES = ("swa_prefix_cache",)

os.environ.setdefault("VLLM_PLUGINS", "")  # no vLLM plugin may change the answer
logging.getLogger("vllm").setLevel(logging.ERROR)


def _vllm():  # type: ignore[no-untyped-def]
    """vLLM's classes, imported once."""
    global _V
    if _V is None:
        import torch
        import vllm
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import sha256_cbor
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
            SlidingWindowSpec,
        )
        from vllm.v1.request import Request

        init_none_hash(sha256_cbor)
        logging.getLogger("vllm").setLevel(logging.ERROR)
        _V = SimpleNamespace(**locals())
        _V.ids = itertools.count()
    return _V


_V = None


def tokens(n: int) -> str:
    """``1 token``, ``2 tokens``."""
    return f"{n} token" if n == 1 else f"{n} tokens"


def spec(block_size: int, window: int | None):  # type: ignore[no-untyped-def]
    v = _vllm()
    kw = dict(block_size=block_size, num_kv_heads=1, head_size=1, dtype=v.torch.float32)
    if window is None:
        return v.FullAttentionSpec(**kw)
    return v.SlidingWindowSpec(**kw, sliding_window=window)


@contextmanager
def every_block_stored():  # type: ignore[no-untyped-def]
    """vLLM's store with ``SlidingWindowManager.reachable_block_mask``
    answering ``None``: cache every block (the baseline)."""
    cls = _vllm().SlidingWindowManager
    original = cls.__dict__["reachable_block_mask"]
    cls.reachable_block_mask = classmethod(lambda c, *a, **k: None)
    try:
        yield
    finally:
        cls.reachable_block_mask = original


@contextmanager
def _nothing():  # type: ignore[no-untyped-def]
    yield


@contextmanager
def blocks_dropped(drop: Sequence[int]):  # type: ignore[no-untyped-def]
    """vLLM's own store, except that the sliding-window blocks ``drop``
    (indices) are not cached: ``reachable_block_mask``'s answer with those
    entries cleared."""
    cls = _vllm().SlidingWindowManager
    original = cls.__dict__["reachable_block_mask"]

    def without(klass, *args, **kwargs):  # type: ignore[no-untyped-def]
        mask = original.__func__(klass, *args, **kwargs)
        start, end = kwargs["start_block"], kwargs["end_block"]
        mask = [True] * (end - start) if mask is None else list(mask)
        for i in drop:
            if start <= i < end:
                mask[i - start] = False
        return mask

    cls.reachable_block_mask = classmethod(without)
    try:
        yield
    finally:
        cls.reachable_block_mask = original


# ---- the local prefix cache ------------------------------------------------------


class Local:
    """A sliding-window group of ``window`` tokens at ``block_size``, alone
    (``full_block_size`` None: a ``UnitaryKVCacheCoordinator``) or under a
    full-attention group (a ``HybridKVCacheCoordinator``; hash block
    ``hash_block_size``, scheduler block = lcm of the block sizes). ``eagle``
    / ``full_eagle``: the group is an EAGLE/MTP group (drops its last
    matched block). ``retention``: ``prefix_cache_retention_interval``."""

    def __init__(
        self,
        window: int,
        block_size: int,
        *,
        eagle: bool = False,
        full_block_size: int | None = None,
        full_eagle: bool = False,
        hash_block_size: int | None = None,
        retention: int | None = None,
    ) -> None:
        self.window, self.block_size, self.eagle = window, block_size, eagle
        self.full_block_size, self.full_eagle = full_block_size, full_eagle
        self.h = block_size if hash_block_size is None else hash_block_size
        self.retention = retention

    @property
    def alignment(self) -> int:
        """The scheduler block ``B`` (every hit is a multiple of it)."""
        if self.full_block_size is None:
            return self.block_size
        return math.lcm(self.h, self.block_size, self.full_block_size)

    def describe(self) -> str:
        swa = f"sliding window of {tokens(self.window)} at block {self.block_size}" + (" (EAGLE)" if self.eagle else "")
        if self.full_block_size is None:
            groups = f"one group: {swa}"
        else:
            full = f"full attention at block {self.full_block_size}" + (" (EAGLE)" if self.full_eagle else "")
            groups = f"{full} + {swa}, hash block {self.h}, scheduler block {self.alignment}"
        retention = "dense (retention None)" if self.retention is None else f"prefix_cache_retention_interval={self.retention}"
        return f"{groups}; {retention}"

    def named_queries(self, prompt_tokens: int, junction: int = 0) -> dict[str, tuple[int, int]]:
        """``name -> (tokens shared with the prompt, request length)``: a
        resend of the prompt, a longer sibling continuing it, a sibling
        diverging right after the junction."""
        longer = prompt_tokens + 2 * self.alignment + 1
        out = {"resend": (prompt_tokens, prompt_tokens), "longer sibling": (prompt_tokens, longer)}
        if junction:
            out["junction sibling"] = (junction, longer)
        return out

    def _groups(self) -> list[tuple[int, int | None, bool]]:
        if self.full_block_size is None:
            return [(self.block_size, self.window, False)]
        return [(self.full_block_size, None, self.full_eagle), (self.block_size, self.window, self.eagle)]

    def manager(self, prompt_tokens: int):  # type: ignore[no-untyped-def]
        v = _vllm()
        groups = self._groups()
        room = prompt_tokens + 8 * self.alignment + 64
        config = v.KVCacheConfig(
            num_blocks=4 * room + 16,
            kv_cache_tensors=[],
            kv_cache_groups=[
                v.KVCacheGroupSpec([f"layer{i}"], spec(bs, w), is_eagle_group=e)
                for i, (bs, w, e) in enumerate(groups)
            ],
            prefix_cache_retention_interval=self.retention,
        )
        return v.KVCacheManager(
            kv_cache_config=config,
            max_model_len=room,
            scheduler_block_size=math.lcm(self.h, *(bs for bs, _, _ in groups)),
            hash_block_size=self.h,
            enable_caching=True,
            use_eagle=self.eagle or self.full_eagle,
        )

    def request(self, tokens: Sequence[int]):  # type: ignore[no-untyped-def]
        v = _vllm()
        sp = v.SamplingParams(max_tokens=1)
        sp.update_from_generation_config({}, eos_token_id=10**7)
        return v.Request(
            request_id=f"r{next(v.ids)}",
            prompt_token_ids=list(tokens),
            sampling_params=sp,
            pooling_params=None,
            block_hasher=v.get_request_block_hasher(self.h, v.sha256_cbor),
        )

    def store(self, prompt_tokens: int, junction: int = 0, every_block: bool = False, drop: Sequence[int] = ()):  # type: ignore[no-untyped-def]
        """A manager holding the prompt ``1000, 1001, ...`` (stored, then
        freed), the prompt, and the sliding-window blocks it cached."""
        manager = self.manager(prompt_tokens)
        prompt = [1000 + i for i in range(prompt_tokens)]
        req = self.request(prompt)
        req.shared_prefix_boundary = junction
        with every_block_stored() if every_block else (blocks_dropped(drop) if drop else _nothing()):
            assert manager.allocate_slots(req, prompt_tokens) is not None
        manager.free(req)
        gid = len(self._groups()) - 1  # the sliding-window group
        scale = self.block_size // self.h
        keys = [req.block_hashes[(i + 1) * scale - 1] for i in range(len(req.block_hashes) // scale)]
        kept = [i for i, key in enumerate(keys) if manager.block_pool.get_cached_block(key, [gid]) is not None]
        return manager, prompt, kept

    def kept_blocks(self, prompt_tokens: int, junction: int = 0) -> list[int]:
        """The sliding-window blocks vLLM caches for the prompt."""
        return self.store(prompt_tokens, junction)[2]

    def hits(
        self,
        prompt_tokens: int,
        queries: Sequence[tuple[int, int]],
        junction: int = 0,
        every_block: bool = False,
        drop: Sequence[int] = (),
    ) -> list[int]:
        """Store the prompt, then the hit (tokens) ``get_computed_blocks``
        gives each query ``(shared tokens, request length)``."""
        manager, prompt, _ = self.store(prompt_tokens, junction, every_block, drop)
        out = []
        for shared, length in queries:
            tag = next(_vllm().ids)
            tokens = prompt[:shared] + [2_000_000 + 4096 * tag + j for j in range(length - shared)]
            _, hit, _ = manager.get_computed_blocks(self.request(tokens))
            out.append(hit)
        return out

    def compare(self, prompt_tokens: int, queries: Sequence[tuple[int, int]], junction: int = 0) -> list[tuple[int, int]]:
        """``(vLLM's hit, the hit with every block stored)`` per query."""
        got = self.hits(prompt_tokens, queries, junction)
        want = self.hits(prompt_tokens, queries, junction, every_block=True)
        return list(zip(got, want))

    def every_query(self, prompt_tokens: int) -> list[tuple[int, int]]:
        """Requests sharing every prefix of the prompt: ending there, and
        going on with tokens of their own."""
        longer = prompt_tokens + 2 * self.alignment + 1
        return [(p, p) for p in range(1, prompt_tokens + 1)] + [(p, longer) for p in range(prompt_tokens + 1)]


# ---- the KV-offload connector ----------------------------------------------------


def block_hashes(num: int, salt: bytes) -> list:  # type: ignore[type-arg]
    """``num`` distinct 32-byte block hashes (sha256 of salt and index)."""
    return [hashlib.sha256(salt + i.to_bytes(8, "big")).digest() for i in range(num)]


class Offload:
    """The KV-offload connector's scheduler over ``groups`` = ``[(block
    size, window or None, is EAGLE group), ...]``, ``blocks_per_chunk``
    blocks per offload chunk, hash block ``hash_block_size``."""

    def __init__(
        self,
        groups: Sequence[tuple[int, int | None, bool]],
        *,
        hash_block_size: int,
        blocks_per_chunk: int = 1,
        retention: int | None = None,
    ) -> None:
        self.groups = list(groups)
        self.h, self.bpc, self.retention = hash_block_size, blocks_per_chunk, retention

    def describe(self) -> str:
        parts = []
        for bs, w, e in self.groups:
            kind = "full attention" if w is None else f"sliding window of {tokens(w)}"
            parts.append(f"{kind} at block {bs} (chunk {tokens(bs * self.bpc)})" + (" EAGLE" if e else ""))
        retention = "dense (retention None)" if self.retention is None else f"prefix_cache_retention_interval={self.retention}"
        return " + ".join(parts) + f", hash block {self.h}; {retention}"

    def scheduler(self, manager):  # type: ignore[no-untyped-def]
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
            get_sliding_window_size_in_chunks,
        )
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
            OffloadingConnectorScheduler,
        )
        from vllm.v1.kv_offload.base import OffloadingKVEventsConfig

        v = _vllm()
        specs = [
            v.KVCacheGroupSpec([f"layer{i}"], spec(bs, w), is_eagle_group=e)
            for i, (bs, w, e) in enumerate(self.groups)
        ]
        offloading_spec = SimpleNamespace(
            config=SimpleNamespace(
                groups=tuple(
                    SimpleNamespace(
                        group_id=i,
                        tokens_per_block=g.kv_cache_spec.block_size,
                        sliding_window_size_in_chunks=get_sliding_window_size_in_chunks(
                            g.kv_cache_spec, g.kv_cache_spec.block_size * self.bpc
                        ),
                    )
                    for i, g in enumerate(specs)
                )
            ),
            tokens_per_block=tuple(g.kv_cache_spec.block_size for g in specs),
            tokens_per_hash=self.h,
            blocks_per_chunk=self.bpc,
            offload_prompt_only=True,
            extra_config={},
            kv_events_config=OffloadingKVEventsConfig(
                enable_kv_cache_events=False, self_describing_kv_events=False
            ),
            get_manager=lambda: manager,
        )
        vllm_config = SimpleNamespace(
            speculative_config=None,
            cache_config=SimpleNamespace(
                enable_prefix_caching=True, prefix_cache_retention_interval=self.retention
            ),
            parallel_config=SimpleNamespace(world_size=1, decode_context_parallel_size=1),
            # Read from 0.34.0 on (lookahead hashing off, as in these cases).
            num_hash_lookahead_tokens=0,
        )
        kv_config = v.KVCacheConfig(num_blocks=1000, kv_cache_tensors=[], kv_cache_groups=specs)
        return OffloadingConnectorScheduler(offloading_spec, vllm_config, kv_config)

    @staticmethod
    def _request(rid: str, hashes, n: int, finished: bool, shared: int = 0):  # type: ignore[no-untyped-def]
        from unittest.mock import MagicMock

        from vllm.v1.request import RequestStatus

        req = MagicMock()
        req.request_id = rid
        req.kv_transfer_params = None
        req.kv_hints = None
        req.num_tokens = req.num_prompt_tokens = req.num_computed_tokens = n
        req.block_hashes = hashes
        req.skip_reading_prefix_cache = False
        req.skip_reading_external_kv = False  # read from 0.34.0 on
        req.resumable = False
        req.shared_prefix_boundary = shared
        req.status = RequestStatus.FINISHED_STOPPED if finished else RequestStatus.WAITING
        req.is_finished = lambda: finished
        return req

    def hits(
        self,
        prompt_tokens: int,
        queries: Sequence[tuple[int, int]],
        junction: int = 0,
        every_block: bool = False,
    ) -> list[int]:
        """Store a finished prompt through the store filter (or every chunk),
        then the hit ``get_num_new_matched_tokens`` gives each query
        ``(shared tokens, request length)`` (no local hit)."""
        from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

        manager = CPUOffloadingManager(num_chunks=100_000)
        sched = self.scheduler(manager)
        n, h = prompt_tokens, self.h
        hashes = block_hashes(n // h, b"prompt")
        store = self._request("store", hashes, n, True, junction)
        sched.on_new_request(store)
        state = sched._req_status["store"]
        state.update_offload_keys()
        state.update_block_id_groups(tuple(list(range(1, n // bs + 2)) for bs, _, _ in self.groups))
        offered: list = []  # type: ignore[type-arg]
        prepare = manager.prepare_store

        def recording_prepare_store(keys, req_context):  # type: ignore[no-untyped-def]
            keys = list(keys)
            offered.extend(keys)
            return prepare(keys, req_context)

        manager.prepare_store = recording_prepare_store
        if every_block:
            keys = [k for g in state.group_states for k in g.offload_keys]
            assert manager.prepare_store(keys, state.req_context) is not None
        else:
            sched._build_store_jobs(SimpleNamespace(num_scheduled_tokens={}, finished_req_ids={"store"}))
        manager.complete_store(list(offered), state.req_context)
        out = []
        for i, (p, length) in enumerate(queries):
            qh = (hashes[: p // h] + block_hashes(length // h, b"q%d" % i))[: length // h]
            req = self._request(f"q{i}", qh, length, False)
            sched.on_new_request(req)
            hit, _ = sched.get_num_new_matched_tokens(req, 0)
            sched._release_step()  # what build_connector_meta does at the end of a step
            out.append(hit)
        return out

    def named_queries(self, prompt_tokens: int, junction: int = 0) -> dict[str, tuple[int, int]]:
        """As ``Local.named_queries`` (the longer sibling 40 tokens longer)."""
        longer = prompt_tokens + 40
        out = {"resend": (prompt_tokens, prompt_tokens), "longer sibling": (prompt_tokens, longer)}
        if junction:
            out["junction sibling"] = (junction, longer)
        return out

    def compare(self, prompt_tokens: int, queries: Sequence[tuple[int, int]], junction: int = 0) -> list[tuple[int, int]]:
        """``(vLLM's hit, the hit with every chunk stored)`` per query."""
        got = self.hits(prompt_tokens, queries, junction)
        want = self.hits(prompt_tokens, queries, junction, every_block=True)
        return list(zip(got, want))


# ---- the hybrid coordinator's joint lookup ---------------------------------------------


class Joint:
    """A real ``HybridKVCacheCoordinator`` (built by vLLM's
    ``get_kv_cache_coordinator``) over ``groups`` = ``[(block size, window
    or None, is EAGLE group), ...]`` with hash block ``hash_block_size``;
    ``cached[g]`` says which of group ``g``'s blocks are in its pool
    (planted as vLLM's own unit tests plant them)."""

    def __init__(self, groups, *, hash_block_size: int, use_eagle: bool, cached, num_hashes: int) -> None:  # type: ignore[no-untyped-def]
        from vllm.v1.core.kv_cache_coordinator import get_kv_cache_coordinator
        from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id

        v = _vllm()
        self.groups, self.h = list(groups), hash_block_size
        sched = math.lcm(hash_block_size, *(bs for bs, _, _ in groups))
        config = v.KVCacheConfig(
            num_blocks=1 + sum(sum(map(bool, m)) for m in cached),
            kv_cache_tensors=[],
            kv_cache_groups=[
                v.KVCacheGroupSpec([f"layer{i}"], spec(bs, w), is_eagle_group=e)
                for i, (bs, w, e) in enumerate(groups)
            ],
        )
        self.coord = get_kv_cache_coordinator(
            kv_cache_config=config, max_model_len=(num_hashes + 2) * hash_block_size,
            max_in_flight_tokens=(num_hashes + 2) * hash_block_size, use_eagle=use_eagle,
            enable_caching=True, enable_kv_cache_events=False, dcp_world_size=1, pcp_world_size=1,
            scheduler_block_size=sched, hash_block_size=hash_block_size,
        )
        self.hashes = block_hashes(num_hashes, b"joint")
        pool = self.coord.block_pool
        free = (b for b in pool.blocks if b is not pool.null_block)
        for gid, ((bs, _, _), mask) in enumerate(zip(groups, cached)):
            scale = bs // hash_block_size
            for i, present in enumerate(mask):
                if present:  # block i of this group is keyed by the last hash inside it
                    key = make_block_hash_with_group_id(self.hashes[(i + 1) * scale - 1], gid)
                    pool.cached_block_hash_to_block.insert(key, next(free))

    def lookup(self, max_length: int) -> int:
        """``HybridKVCacheCoordinator.find_longest_cache_hit``'s hit."""
        return self.coord.find_longest_cache_hit(self.hashes, max_length)[1]

    def accepts(self, length: int) -> bool:
        """Does every attention group's own lookup, called as the
        coordinator's loop calls it at candidate ``length`` (an EAGLE group:
        with the drop and its margin), answer exactly ``length``?"""
        from vllm.v1.core.kv_cache_utils import eagle_proof_margin

        c = self.coord
        for spec_, group_ids, manager_cls, use_eagle in c.attention_groups:
            manager = c.single_type_managers[group_ids[0]]
            mx = length
            if use_eagle:
                mx = min(length + eagle_proof_margin(manager.block_size, self.h, False), len(self.hashes) * self.h)
            _, got = manager_cls.find_longest_cache_hit(
                block_hashes=self.hashes, max_length=mx, kv_cache_group_ids=group_ids,
                block_pool=manager.block_pool, kv_cache_spec=spec_, drop_eagle_block=use_eagle,
                alignment_tokens=c._cache_hit_alignment_tokens,
            )
            if got != length:
                return False
        return True

    def greatest_accepted(self, max_length: int) -> int:
        return next((L for L in range(max_length, 0, -1) if self.accepts(L)), 0)


def named_rows(model, prompt_tokens: int, junction: int = 0, only: Sequence[str] = ()) -> list[tuple[str, int, int]]:  # type: ignore[no-untyped-def]
    """``(query, vLLM's hit, the hit with everything stored)`` for the
    named queries of ``model`` (a ``Local`` or an ``Offload``)."""
    q = model.named_queries(prompt_tokens, junction)
    if only:
        q = {k: v for k, v in q.items() if k in only}
    pairs = model.compare(prompt_tokens, list(q.values()), junction)
    return [(f"{name} (shares {p} of {tokens(n)})", got, want) for (name, (p, n)), (got, want) in zip(q.items(), pairs)]


# ---- output and exit code --------------------------------------------------------


class Report:
    """Collects the cases of one reproduction; ``finish`` prints the verdict
    and exits 1 if any case shows the bug. A run in which no query hits even
    with every block stored measured nothing (the reproduction does not reach
    the lookup on this vLLM): it exits 2, never 0."""

    def __init__(self, finding: str, title: str) -> None:
        import vllm

        self.finding, self.bug, self.reached = finding, False, False
        print(f"{finding}: {title}")
        print(f"vLLM {vllm.__version__} from {os.path.dirname(vllm.__file__)}")

    def case(self, label: str, setup: str, rows: Sequence[tuple[str, int, int]]) -> bool:
        """``rows``: ``(query, vLLM's answer, the answer it should give)``;
        the bug shows when vLLM's answer is below."""
        print()
        print(f"[{label}] {setup}")
        shown = False
        for query, got, want in rows:
            mark = "  <-- LOST" if got < want else ""
            print(f"    {query}: vLLM serves {tokens(got)}, with every block stored {tokens(want)}{mark}")
            shown |= got < want
            self.reached |= want > 0
        self.bug |= shown
        return shown

    def note(self, text: str) -> None:
        print(f"    {text}")

    def flag(self, shown: bool, reached: bool = True) -> None:
        """A verdict the reproduction computed itself; ``reached``: its
        control hit something."""
        self.bug |= shown
        self.reached |= reached

    def finish(self) -> None:
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in PROJECT_MODULES)
        if loaded:
            print(f"\nERROR: this reproduction must not import swa-prefix-cache ({', '.join(loaded)})")
            sys.exit(2)
        print()
        if not self.reached:
            print(f"{self.finding}: NOTHING MEASURED: no query hit even with every block stored, "
                  "so this reproduction does not reach the lookup on this vLLM (exit 2)")
            sys.exit(2)
        if self.bug:
            print(f"{self.finding}: BUG PRESENT (exit 1)")
            sys.exit(1)
        print(f"{self.finding}: no loss (exit 0)")
        sys.exit(0)


def main(body: Callable[[], None]) -> None:
    """Run a reproduction; an unexpected error exits 2, not 1, so that it is
    never mistaken for the bug."""
    try:
        body()
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        print("\nunexpected error (exit 2)")
        sys.exit(2)
