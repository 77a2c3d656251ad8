"""Replicas behind a router: arrivals sent, one at a time, to a replica by the policy
of our cluster's router (``tokenmill serve --router``) of the same name:

- ``kv`` (the default, cluster/router/policies/kv.py): the worker of lowest cost,
  where cost = its overlap weight (4) x the prompt blocks it would compute there (less
  the prefix it already caches) + the worker's load, the larger of the KV blocks its
  running requests hold and the prompt blocks of the requests routed to it that have
  not finished; ties to the lowest index. A hit given up front (``cached_tokens``) is
  the same on every replica; a shared prefix (``prefix_group``) is cached where a
  replica computed it, so the first term sends its requests back there unless the
  load there outweighs it.
- ``least-loaded`` (policies/least_loaded.py): the fewest requests routed to it and
  not finished, then the fewest KV blocks in use. This is also what NVIDIA's MLPerf
  harness does by default for Server (llmlib ``load_balancing``: the core with the
  fewest pending samples; harness_llm ``loadBalancing``: the fewest transactions in
  flight), so ``sim validate`` routes those rows so.
- ``round-robin``: arrivals in turn; ``random``: uniformly, from a fixed seed.

Why it matters: a replica fed its 1/R share of a Poisson stream regardless of
its state (random routing, what ``predict`` simulated for Server before) queues
a prompt behind a long one that a neighbour would have taken at once, and
Server's p99 TTFT is that queue's tail. Sending each arrival to the least-loaded
replica pools the replicas' capacity.

The replicas run in one event loop, each with its own clock: the next event is
the earliest of the next arrival and the next step start of a replica with
work. An arrival is routed with what the replicas' states say at that moment,
which for a replica in the middle of a step is its state at that step's end
(a step's lookahead: milliseconds against Server's seconds of TTFT), and joins
the waiting queue of the step its replica starts next, as in ``simulate``.

With ``pipeline`` N the replicas are the micro-batch schedulers of pipeline
replicas, N to each (sim/pipeline.py): each group of N shares a ``FlowShop``, so a
scheduler's next step starts when it is ready and its pipeline's first stage is free,
and lasts until it leaves the last stage.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable

import numpy as np

from tokenmill.cluster.router.policies.kv import DEFAULT_OVERLAP_WEIGHT
from tokenmill.sim.pipeline import FlowShop
from tokenmill.sim.serving import ReplicaSim, SimConfig, SimRequest, StepTime
from tokenmill.sim.sim_result import SimResult

ROUTER_POLICIES = ("kv", "least-loaded", "round-robin", "random")
"""The policies of ``tokenmill serve --router``, as the simulation applies them (module docstring)."""


def simulate_routed(requests: Iterable[SimRequest], replicas: int, step_time: StepTime,
                    config: SimConfig, policy: str = "kv", pipeline: int = 1,
                    flow_shop: Callable[[], FlowShop] | None = None) -> SimResult:
    """The requests over ``replicas`` replicas of ``config`` behind the router's ``policy``;
    per-request arrays in the given order, ``steps``, ``scheduled_*`` and ``busy_s``
    summed over the replicas. ``pipeline`` > 1: the replicas are micro-batch schedulers,
    ``pipeline`` to each of ``replicas / pipeline`` pipelines, each a ``flow_shop()`` whose
    step times replace ``step_time`` (module docstring)."""
    requests = list(requests)
    if replicas < 1:
        raise ValueError(f"replicas: need at least 1, got {replicas}")
    if pipeline > 1 and (flow_shop is None or replicas % pipeline):
        raise ValueError(f"pipeline: {replicas} schedulers do not make pipelines of {pipeline} with a flow shop")
    shops = [flow_shop() for _ in range(replicas // pipeline)] if pipeline > 1 else None
    if policy not in ROUTER_POLICIES:
        raise ValueError(f"--router: unknown policy {policy!r}; choose from {', '.join(ROUTER_POLICIES)}")
    sims = [ReplicaSim(requests, config) for _ in range(replicas)]
    prompt_blocks = -(-sims[0].prompt // config.block_size)
    routed = np.zeros(replicas, dtype=np.int64)  # prompt blocks of routed requests not yet finished
    pending = np.zeros(replicas, dtype=np.int64)  # routed requests not yet finished
    choose = _chooser(policy, replicas, config, sims, routed, pending)
    owner = np.full(len(requests), -1, dtype=np.int64)
    clock = [0.0] * replicas
    nxt = 0

    def start(r: int) -> float:  # when scheduler r's next step would begin
        return shops[r // pipeline].start(clock[r]) if shops else clock[r]

    order = sims[0].order.tolist()  # request indices in arrival order, and their arrivals, as Python numbers
    arrivals = sims[0].arrival[order].tolist()
    while True:
        r_step, t = None, math.inf  # the busy replica whose next step begins first (the lowest index of a tie)
        for r in range(replicas):
            if sims[r].has_work():
                begins = start(r)
                if r_step is None or begins < t:
                    r_step, t = r, begins
        t_arrival = arrivals[nxt] if nxt < len(order) else math.inf
        if r_step is None and nxt == len(order):
            break
        if r_step is None or t_arrival <= t:
            i = order[nxt]
            r = choose(i)
            if not sims[r].has_work():
                clock[r] = max(clock[r], t_arrival)  # an idle replica starts its next step at the arrival
            sims[r].waiting.append(i)
            routed[r] += prompt_blocks[i]
            pending[r] += 1
            owner[i] = r
            nxt += 1
            continue
        sim = sims[r_step]
        clock[r_step] = t + sim.step(shops[r_step // pipeline].step_time(t) if shops else step_time, t)
        if sim.finished_last_step.size:
            routed[r_step] -= int(prompt_blocks[sim.finished_last_step].sum())
            pending[r_step] -= sim.finished_last_step.size
    return _merged(sims, owner)


def _chooser(policy: str, replicas: int, config: SimConfig, sims: list[ReplicaSim], routed: np.ndarray,
             pending: np.ndarray):
    """A function picking request i's replica from the replicas' states now (ties: lowest index)."""
    def used(r: int) -> int:
        return config.num_kv_blocks - sims[r].free

    if policy == "kv" and not sims[0].grouped:  # the first term is the same on every replica: load decides
        return lambda i: min(range(replicas), key=lambda r: max(used(r), int(routed[r])))
    if policy == "kv":
        def uncached(i: int, r: int) -> int:  # blocks of request i's prompt not cached on replica r
            return -(-int(sims[r].prompt[i]) // config.block_size) - sims[r].prefix_hit(i) // config.block_size

        return lambda i: min(range(replicas), key=lambda r: DEFAULT_OVERLAP_WEIGHT * uncached(i, r)
                             + max(used(r), int(routed[r])))
    if policy == "least-loaded":
        return lambda i: min(range(replicas), key=lambda r: (int(pending[r]), used(r)))
    if policy == "round-robin":
        turn = itertools.count()
        return lambda i: next(turn) % replicas
    rng = np.random.default_rng(0)
    return lambda i: int(rng.integers(replicas))


def _merged(sims: list[ReplicaSim], owner: np.ndarray) -> SimResult:
    """One result: each request's times from the replica it was routed to."""
    first, finish, gen = np.full(owner.size, np.nan), np.full(owner.size, np.nan), np.zeros(owner.size, np.int64)
    for r, sim in enumerate(sims):
        mine = owner == r
        first[mine], finish[mine], gen[mine] = sim.first[mine], sim.finish[mine], sim.gen[mine]
    return SimResult(sims[0].arrival, first, finish, gen, sum(s.steps for s in sims),
                     sum(s.preemptions for s in sims), sum(s.seqs for s in sims), sum(s.tokens for s in sims),
                     sum(s.busy for s in sims), sum(s.hit_tokens for s in sims), sum(s.query_tokens for s in sims),
                     sum(s.prefill_steps for s in sims), sum(s.prefill_busy for s in sims))
