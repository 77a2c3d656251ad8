"""Start (or join) Ray and place engine workers on it.

``tokenmill serve --workers N`` starts a local Ray instance (no dashboard,
a small object store) unless ``--ray-address`` names a running cluster to
join. Workers are Ray actors placed by their resource request
(``--worker-num-cpus``, ``--worker-num-gpus``); Ray restarts a crashed worker
(``max_restarts``), and the frontend treats it as new when it comes back.

``--prefill-workers P --decode-workers D`` starts P prefill and D decode
workers instead (disaggregated serving, cluster/disagg.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import msgspec

from tokenmill.cluster.cpu_priority import MAX_NICE
from tokenmill.cluster.disagg import DisaggConfig
from tokenmill.cluster.router.policies.kv import DEFAULT_OVERLAP_WEIGHT
from tokenmill.config import EngineConfig

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class ClusterOptions:
    """``tokenmill serve --workers N`` and its placement and routing flags."""

    workers: int = 1
    """Engine workers (Ray actors); 1 serves in-process without Ray."""
    router: str = "kv"
    """Routing policy: kv, round-robin, random, least-loaded."""
    router_overlap_weight: float = DEFAULT_OVERLAP_WEIGHT
    """kv policy: cost of one prompt block not cached on a worker, in blocks of decode load."""
    router_temperature: float = 0.0
    """kv policy: 0 picks the lowest cost; > 0 samples softmax(-cost / T)."""
    ray_address: str | None = None
    """Join this Ray cluster ('auto' or host:port); None starts a local instance."""
    worker_num_cpus: float = 1.0
    """CPUs each worker asks Ray for (and its torch threads, unless --num-threads)."""
    worker_num_gpus: float = 0.0
    """GPUs each worker asks Ray for."""
    migration_limit: int = 3
    """Times a request may move to a live worker when its worker dies (0: it fails with an error)."""
    prefill_workers: int = 0
    """Disaggregated serving: workers that only compute prompts (0: none, every worker aggregated)."""
    decode_workers: int = 0
    """Disaggregated serving: workers that take the prompts' KV and decode (with prefill_workers)."""
    disagg: DisaggConfig = DisaggConfig()
    """When a prompt is computed on a prefill worker rather than on its decode worker."""
    prefill_worker_nice: int = 0
    """Nice value of prefill workers' processes (0..19): decode steps and the server take a shared core first."""

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers: must be at least 1, got {self.workers}")
        if self.prefill_workers < 0 or self.decode_workers < 0:
            raise ValueError("prefill_workers and decode_workers: must be >= 0")
        if self.prefill_workers and not self.decode_workers:
            raise ValueError("decode_workers: prefill workers need at least one decode worker")
        if self.decode_workers and not self.prefill_workers:
            raise ValueError("prefill_workers: decode workers need at least one prefill worker "
                             "(without prefill workers, use --workers)")
        if self.prefill_workers and self.workers > 1:
            raise ValueError("workers: give either --workers (aggregated) or --prefill-workers and "
                             "--decode-workers (disaggregated), not both")
        if self.worker_num_cpus <= 0 or self.worker_num_gpus < 0:
            raise ValueError("worker_num_cpus: must be positive (and worker_num_gpus >= 0)")
        if self.migration_limit < 0:
            raise ValueError(f"migration_limit: must be >= 0, got {self.migration_limit}")
        if not 0 <= self.prefill_worker_nice <= MAX_NICE:
            raise ValueError(f"prefill_worker_nice: must be 0..{MAX_NICE}, got {self.prefill_worker_nice}")

    @property
    def roles(self) -> list[str]:
        """One role per worker to start (cluster/worker.py ROLES)."""
        if self.prefill_workers:
            return ["prefill"] * self.prefill_workers + ["decode"] * self.decode_workers
        return ["aggregated"] * self.workers

    @property
    def is_cluster(self) -> bool:
        """More than one worker: serve through Ray (one worker is served in-process)."""
        return len(self.roles) > 1


def start_cluster(config: EngineConfig, options: ClusterOptions, step_log: str | None = None):
    """Ray (started or joined), the workers ``options.roles`` names and a router -> a
    ClusterEngine (an EngineClient the server uses like the in-process engine). ``step_log``:
    each worker appends its steps to this path plus ``.`` and its name (``launch_workers``)."""
    from tokenmill.cluster.client import ClusterEngine
    from tokenmill.cluster.router import Router, RouterConfig

    router = Router(RouterConfig(policy=options.router, overlap_weight=options.router_overlap_weight,
                                 temperature=options.router_temperature, block_size=config.block_size,
                                 seed=config.seed))
    started = start_ray(options.ray_address)
    try:
        actors = launch_workers(config, len(options.roles), options.worker_num_cpus, options.worker_num_gpus,
                                roles=options.roles, nice_by_role={"prefill": options.prefill_worker_nice},
                                step_log=step_log)
        return ClusterEngine(actors, router, config.tokenizer, config.max_waiting_requests, started_ray=started,
                             migration_limit=options.migration_limit, disagg=options.disagg)
    except BaseException:
        if started:
            import ray
            ray.shutdown()
        raise


OBJECT_STORE_BYTES = 256 * 1024 * 1024
"""The object store of a Ray instance we start: workers exchange small msgpack
messages, and KV transfers put each prompt's blocks there until the decode
worker has copied them (SmolLM2-135M: 30 KiB per token in bf16, so a
2k-token prompt is 60 MiB; Ray spills to disk past the store's size)."""


def start_ray(address: str | None, num_cpus: int | None = None) -> bool:
    """Connect to Ray: join ``address`` ('auto' or host:port), or start a local
    instance. Returns True when this process started it (and so stops it)."""
    import ray

    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, include_dashboard=False, log_to_driver=True)
        return False
    ray.init(num_cpus=num_cpus, include_dashboard=False, object_store_memory=OBJECT_STORE_BYTES,
             log_to_driver=True)
    return True


def launch_workers(config: EngineConfig, num_workers: int, num_cpus: float, num_gpus: float,
                   max_restarts: int = -1, scheduling_strategy: str | None = "SPREAD",
                   roles: list[str] | None = None, nice_by_role: dict[str, int] | None = None,
                   step_log: str | None = None) -> list:
    """Create ``num_workers`` EngineWorker actors; each loads the model itself.
    Threads per worker default to the CPUs it was given (at least 1).
    ``scheduling_strategy`` 'SPREAD' puts workers on different nodes when it can.
    ``roles``: one per worker (default: all aggregated); prefill and decode
    workers are named prefill-i and decode-i, aggregated ones worker-i.
    ``nice_by_role``: role -> the nice value its workers run at (default 0).
    ``step_log``: each worker appends its steps to ``{step_log}.{name}`` on its node (e.g.
    steps.jsonl.worker-0; engine/step_log.py), None for no log."""
    import ray

    from tokenmill.cluster.worker import EngineWorker

    if num_workers < 1:
        raise ValueError(f"workers: must be at least 1, got {num_workers}")
    threads = config.num_threads or max(int(num_cpus), 1)
    config_json = msgspec.json.encode(replace(config, num_threads=threads))
    actor_class = ray.remote(EngineWorker)
    options = dict(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=max_restarts, max_task_retries=0)
    if scheduling_strategy:
        options["scheduling_strategy"] = scheduling_strategy
    roles = roles or ["aggregated"] * num_workers
    if len(roles) != num_workers:
        raise ValueError(f"roles: {len(roles)} given for {num_workers} workers")
    names = [f"worker-{i}" if role == "aggregated" else f"{role}-{roles[:i].count(role)}"
             for i, role in enumerate(roles)]
    nice_by_role = nice_by_role or {}
    return [actor_class.options(**options).remote(name, config_json, role, nice=nice_by_role.get(role, 0),
                                                  step_log=f"{step_log}.{name}" if step_log else None)
            for name, role in zip(names, roles)]
