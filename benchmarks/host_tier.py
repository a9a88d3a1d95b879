"""A host-memory KV tier for the trace replay: vLLM's real
``OffloadingConnector`` on the scheduler side, its worker side simulated.

The scheduler side is vLLM's own code, configured the way a user's
``--kv-offloading-size GiB`` configures it (``CacheConfig.kv_offloading_size``:
vLLM's ``OffloadingConnector``, its ``CPUOffloadingSpec`` and
``CPUOffloadingManager`` with LRU eviction, one GPU block per chunk): its
lookups, store jobs, load jobs, eviction and fences all run unchanged.

The worker side (``SimulatedWorker``) replaces ``OffloadingConnectorWorker``
and the GPU copies it starts. It follows that worker's protocol step by step:

* ``handle_preemptions``: jobs the scheduler asks to flush are submitted at
  once and waited for (the step starts only when they are done);
* ``start_kv_transfers``: the stores deferred from the previous step are
  submitted first, then the step's loads; a synchronous load (vLLM's
  ``sync_load_budget_bytes``, off by default) is waited for before the
  forward pass;
* ``prepare_store_kv``: the step's store jobs are deferred to the start of
  the next step (vLLM's worker does this so that offloading never delays
  token sampling);
* ``get_finished``: every job whose copy has ended by the end of the step is
  reported in ``kv_connector_worker_meta.completed_jobs`` (one count per
  worker, as vLLM's per-worker metadata aggregate), and an asynchronous
  load's request in ``finished_recving``.

A copy takes its bytes (per GPU: the GPU blocks of each group it moves times
that group's block bytes, from the layout's real ``KVCacheConfig``) over the
host link at ``link_gb_s`` (default: PCIe Gen5 x16, 64 GB/s per direction,
at 80 %). Loads (host to device) and stores (device to host) each queue on
their own direction of the link, first in first out. An asynchronous load
overlaps other requests' steps (its request waits in vLLM's
``WAITING_FOR_REMOTE_KVS`` until it is reported); a waited-for copy (a
flush, a synchronous load) adds its time to the step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PCIE_GEN5_X16_GB_S = 64.0  # per direction, GB/s (10^9 bytes)
LINK_EFFICIENCY = 0.8
DEFAULT_LINK_GB_S = PCIE_GEN5_X16_GB_S * LINK_EFFICIENCY
GIB = 1 << 30


@dataclass
class _Copy:
    job_id: int
    req_id: str | None  # an asynchronous load's request (reported in finished_recving)
    done_ms: float  # when the copy ends on the simulated clock


@dataclass
class Link:
    """One direction of the host link: copies queue first in first out."""

    bytes_per_ms: float
    free_ms: float = 0.0

    def copy(self, start_ms: float, num_bytes: int) -> float:
        """Queue a copy of ``num_bytes`` at ``start_ms``; when it ends."""
        begin = max(start_ms, self.free_ms)
        self.free_ms = begin + num_bytes / self.bytes_per_ms
        return self.free_ms


@dataclass
class TierCounters:
    """What the simulated worker moved."""

    loads: int = 0
    load_bytes: int = 0
    stores: int = 0
    store_bytes: int = 0
    flushed: int = 0  # store jobs the scheduler asked to flush (waited for)
    wait_ms: float = 0.0  # step time spent waiting for copies (flushes, sync loads)


@dataclass
class SimulatedWorker:
    """The worker side of vLLM's ``OffloadingConnector`` for one scheduler:
    ``step`` takes a step's ``SchedulerOutput`` and returns the
    ``KVConnectorOutput`` the workers would report with its model output."""

    # Per offloaded KV-cache group, in the connector's group order: one GPU
    # block's bytes on one GPU.
    group_block_bytes: dict[int, int]
    num_workers: int
    link_gb_s: float = DEFAULT_LINK_GB_S
    counters: TierCounters = field(default_factory=TierCounters)

    def __post_init__(self) -> None:
        if not isinstance(self.link_gb_s, (int, float)) or not self.link_gb_s > 0:
            raise ValueError(f"link_gb_s must be a positive number, got {self.link_gb_s!r}")
        per_ms = self.link_gb_s * 1e9 / 1e3
        self.h2d = Link(per_ms)
        self.d2h = Link(per_ms)
        self._deferred: list[tuple[int, Any]] = []  # store jobs to submit at the next step's start
        self._copies: dict[int, _Copy] = {}

    def job_bytes(self, gpu_spec: Any) -> int:
        """Bytes one GPU moves for a job: per group, its GPU blocks times
        that group's block bytes (``GPULoadStoreSpec.group_sizes`` are in
        the order of the offloaded groups)."""
        sizes = [int(n) for n in gpu_spec.group_sizes]
        if len(sizes) != len(self.group_block_bytes):
            raise ValueError(f"a job names {len(sizes)} groups, the tier offloads "
                             f"{len(self.group_block_bytes)}")
        return sum(n * b for n, b in zip(sizes, self.group_block_bytes.values()))

    def _store(self, job_id: int, job: Any, start_ms: float) -> float:
        num_bytes = self.job_bytes(job.src_spec)
        self.counters.stores += 1
        self.counters.store_bytes += num_bytes
        done = self.d2h.copy(start_ms, num_bytes)
        self._copies[job_id] = _Copy(job_id, None, done)
        return done

    def step(self, out: Any, start_ms: float, forward_ms: float) -> tuple[Any, float]:
        """The step's ``KVConnectorOutput`` and its length in ms: the
        forward pass ``forward_ms`` plus any wait for a copy, the step
        starting at ``start_ms``."""
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
            OffloadingConnectorMetadata,
            OffloadingWorkerMetadata,
        )
        from vllm.v1.outputs import KVConnectorOutput

        meta = out.kv_connector_metadata
        if not isinstance(meta, OffloadingConnectorMetadata):
            raise TypeError(f"kv_connector_metadata must be OffloadingConnectorMetadata, "
                            f"got {type(meta).__name__}")
        now = start_ms
        # handle_preemptions: flushed stores are submitted and waited for.
        flush = set(meta.jobs_to_flush or ())
        store_jobs = dict(meta.store_jobs)
        for job_id in flush:
            job = store_jobs.pop(job_id, None)
            if job is not None:
                self._deferred.append((job_id, job))
                self.counters.flushed += 1
        for job_id, job in self._deferred:
            self._store(job_id, job, now)
        self._deferred.clear()
        waited = [self._copies[j].done_ms for j in flush if j in self._copies]
        if waited:
            now = max(now, *waited)
        # start_kv_transfers: the step's loads (a sync load is waited for).
        for job_id, job in meta.load_jobs.items():
            num_bytes = self.job_bytes(job.dst_spec)
            self.counters.loads += 1
            self.counters.load_bytes += num_bytes
            done = self.h2d.copy(now, num_bytes)
            self._copies[job_id] = _Copy(job_id, None if job.sync else job.req_id, done)
            if job.sync:
                now = max(now, done)
        self.counters.wait_ms += now - start_ms
        end = now + forward_ms
        # prepare_store_kv: this step's stores start with the next step.
        self._deferred.extend(store_jobs.items())
        # get_finished: every copy ended by the end of the step.
        finished = [c for c in self._copies.values() if c.done_ms <= end]
        completed = {}
        recving = set()
        for c in finished:
            del self._copies[c.job_id]
            completed[c.job_id] = self.num_workers
            if c.req_id is not None:
                recving.add(c.req_id)
        worker_meta = OffloadingWorkerMetadata(completed_jobs=completed) if completed else None
        return KVConnectorOutput(finished_recving=recving or None,
                                 kv_connector_worker_meta=worker_meta), end - start_ms

    def next_event_ms(self) -> float | None:
        """When the next copy in flight ends (None: nothing in flight)."""
        return min((c.done_ms for c in self._copies.values()), default=None)

    def busy(self) -> bool:
        """Copies in flight or stores waiting for the next step."""
        return bool(self._copies or self._deferred)


def group_block_bytes(kv_cache_config: Any) -> dict[int, int]:
    """Per offloaded group id, one GPU block's bytes on one GPU (vLLM's
    ``_group_kv_bytes_per_block`` over the groups the connector offloads)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
        _group_kv_bytes_per_block,
        get_offloading_group_ids,
    )

    return {g: _group_kv_bytes_per_block(kv_cache_config.kv_cache_groups[g])
            for g in get_offloading_group_ids(kv_cache_config)}


def metadata_form(meta: Any) -> tuple[Any, ...]:
    """The canonical form of an ``OffloadingConnectorMetadata``: each job's
    id, request, direction and the GPU blocks and host chunks it moves."""
    def spec(s: Any) -> tuple[Any, ...]:
        extra = tuple(tuple(int(x) for x in getattr(s, name)) for name in ("group_sizes", "block_indices")
                      if getattr(s, name, None) is not None)
        return (type(s).__name__, tuple(int(x) for x in s.block_ids)) + extra

    def jobs(table: dict[int, Any]) -> tuple[Any, ...]:
        return tuple((job_id, j.req_id, bool(j.sync), spec(j.src_spec), spec(j.dst_spec))
                     for job_id, j in sorted(table.items()))

    if meta is None:
        return ()
    return (jobs(meta.load_jobs), jobs(meta.store_jobs), tuple(sorted(meta.jobs_to_flush or ())))
