"""Disaggregated prefill/decode pools: the serving simulation run in two stages.

Our cluster's disaggregated mode (cluster/disagg, issue 14) sends each request
to a prefill worker, which computes the prompt's KV and samples the first
token; the KV blocks then move to a decode worker, which continues from
there and never runs a long prefill chunk. Simulated the same way, with the
routed simulation (sim/routed.py) run once per pool:

1. **Prefill pool**, ``prefill_replicas`` identical replicas behind the
   least-load router (sim/routed.py: each arrival to the replica holding the
   fewest KV blocks and routed prompt blocks, as our cluster's router and
   Dynamo's KV router send prefills), each request asking for one output
   token. Its first token (TTFT) comes at the end of the step that finishes
   its prompt there.
2. **KV transfer**: the request is handed off ``transfer_s(prompt_tokens)``
   after its first token (the caller prices the bytes over the link between
   the pools; the copy overlaps the pools' steps, so it delays only this
   request).
3. **Decode pool**, ``decode_replicas`` replicas, of their own layout and
   batch limit where the deployment names one (published runs prefill on small
   tensor-parallel replicas and decode on larger ones): requests arrive at
   their hand-off time, routed the same way, with prompt + first token as
   their context, all of it found in the cache (the simulation computes the
   tail of the last partial block again, at most ``block_size`` tokens: our
   transfer moves whole blocks and the decode worker recomputes the rest), and
   generate the remaining ``output_tokens - 1``.

Per request, the combined result keeps the prefill pool's first token and the
decode pool's finish, so TPOT includes the transfer and the decode pool's
queueing, as a client measures it. Every replica of both pools is simulated
(the work scales with the number of requests, not of replicas).

With ``min_prefill_tokens`` (``tokenmill serve --disagg-min-prefill-tokens``;
published disaggregated runs send every prompt, None) the rule of our cluster
decides first (cluster/disagg.py ``decide``): a prompt whose part its decode
replica does not cache is shorter than that, or nothing, is computed on the
decode pool, whole, beside its decodes. What the decode pool caches at an
arrival is read off a first pass that sends every prompt: a request's shared
prefix (``prefix_group``) counts from the hand-off of an earlier request of its
group on (the router learns of the blocks when they land), evictions aside;
the decode pool then runs the handed-off requests with their prefix group, so
its replicas cache what they imported, and the local ones as plain requests.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from tokenmill.sim.cost import Parallel, kv_bytes_per_token
from tokenmill.sim.hardware import Hardware
from tokenmill.sim.prefix_cache import whole_block_hits
from tokenmill.sim.routed import simulate_routed
from tokenmill.sim.serving import SimConfig, SimRequest, StepTime
from tokenmill.sim.sim_result import SimResult

if TYPE_CHECKING:
    from tokenmill.sim.predict import Deployment


@dataclass(frozen=True)
class PoolSplit:
    prefill_replicas: int
    decode_replicas: int
    decode_parallel: Parallel | None = None
    """Each decode replica's layout; None: the prefill replicas' (the deployment's ``parallel``)."""
    decode_max_num_seqs: int | None = None
    """Each decode replica's batch limit; None: the deployment's ``max_num_seqs``."""
    min_prefill_tokens: int | None = None
    """Our cluster's rule (``tokenmill serve --disagg-min-prefill-tokens``): prompts whose part the
    decode replica does not cache is shorter than this, or nothing, are computed there; None: every
    prompt goes to the prefill pool (module docstring)."""
    max_prefill_queue: int = 4
    """With the rule: the prefills in flight per prefill replica at which new prompts are computed on
    their decode replica too (``tokenmill serve --disagg-max-prefill-queue``, the same default)."""

    def __post_init__(self) -> None:
        if self.prefill_replicas < 1 or self.decode_replicas < 1:
            raise ValueError(f"disaggregation: needs >= 1 prefill and >= 1 decode replica, got "
                             f"{self.prefill_replicas}:{self.decode_replicas}")
        if self.decode_max_num_seqs is not None and self.decode_max_num_seqs < 1:
            raise ValueError(f"--decode-max-num-seqs: must be >= 1, got {self.decode_max_num_seqs}")
        if self.min_prefill_tokens is not None and self.min_prefill_tokens < 0:
            raise ValueError(f"--disagg-min-prefill-tokens: must be >= 0, got {self.min_prefill_tokens}")
        if self.max_prefill_queue < 1:
            raise ValueError(f"--disagg-max-prefill-queue: must be >= 1, got {self.max_prefill_queue}")

    @property
    def replicas(self) -> int:
        return self.prefill_replicas + self.decode_replicas

    def devices(self, prefill: Parallel) -> int:
        """GPUs the pools take, the prefill replicas being of ``prefill``'s layout."""
        return (self.prefill_replicas * prefill.devices
                + self.decode_replicas * (self.decode_parallel or prefill).devices)


@dataclass(frozen=True)
class Pool:
    """One pool's step times and scheduler limits (per replica)."""

    step_time: StepTime
    config: SimConfig


def simulate_disagg(requests: list[SimRequest], split: PoolSplit, prefill: Pool, decode: Pool,
                    transfer_s: Callable[[int], float]) -> SimResult:
    """The requests through both pools; per-request arrays in the given order.
    ``steps``, ``scheduled_*`` and ``busy_s`` sum over every simulated replica."""
    if not requests:
        raise ValueError("requests: need at least one")
    n = len(requests)
    arrival = np.array([r.arrival_s for r in requests], dtype=float)
    outputs = np.array([r.output_tokens for r in requests], dtype=np.int64)
    block = decode.config.block_size
    totals = np.zeros(7)  # steps, preemptions, scheduled seqs and tokens, prefill steps, prefix hits, lookups
    busy = np.zeros(2)  # seconds in steps, of them in prefill steps

    def run(staged: list[SimRequest], replicas: int, pool: Pool) -> SimResult:
        result = simulate_routed(staged, replicas, pool.step_time, pool.config)
        totals[:] += (result.steps, result.preemptions, result.scheduled_seqs, result.scheduled_tokens,
                      result.prefill_steps, result.prefix_hit_tokens, result.prefix_query_tokens)
        busy[:] += (result.busy_s, result.prefill_busy_s)
        return result

    def first_pass() -> tuple[np.ndarray, np.ndarray]:
        firsts = simulate_routed([replace(r, output_tokens=1) for r in requests], split.prefill_replicas,
                                 prefill.step_time, prefill.config).first_token_s
        return firsts, firsts + np.array([transfer_s(r.prompt_tokens) for r in requests])

    local = _kept_local(requests, split, block, first_pass)
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    remote = np.flatnonzero(~local)
    if remote.size:
        first[remote] = run([replace(requests[i], output_tokens=1) for i in remote], split.prefill_replicas,
                            prefill).first_token_s
    done = ~local & (outputs == 1)
    finish[done] = first[done]
    rest = np.flatnonzero(~local & (outputs > 1))
    rule = split.min_prefill_tokens is not None  # only the rule reads what the decode pool caches
    moved = [SimRequest(float(first[i] + transfer_s(requests[i].prompt_tokens)), requests[i].prompt_tokens + 1,
                        int(outputs[i]) - 1, requests[i].prompt_tokens + 1, requests[i].prefix_group if rule else -1,
                        requests[i].prefix_tokens if rule else 0)
             for i in rest]  # the prompt and the first token, imported
    kept = np.flatnonzero(local)
    staged = moved + [requests[i] for i in kept]
    if staged:
        decoded = run(staged, split.decode_replicas, decode)
        finish[rest] = decoded.finish_s[:rest.size]
        first[kept], finish[kept] = decoded.first_token_s[rest.size:], decoded.finish_s[rest.size:]
        # The engine counts a prefix lookup where a prompt is computed: an import is none (a preempted
        # import's readmission aside).
        totals[5:] -= (sum(int(whole_block_hits(r.cached_tokens, r.prompt_tokens, block)) for r in moved),
                       sum(r.prompt_tokens for r in moved))
    steps, preemptions, seqs, tokens, prefill_steps, hits, lookups = (int(v) for v in totals)
    return SimResult(arrival, first, finish, outputs.copy(), steps, preemptions, seqs, tokens, float(busy[0]),
                     hits, lookups, prefill_steps, float(busy[1]))


def _kept_local(requests: list[SimRequest], split: PoolSplit, block: int,
                handoffs: Callable[[], np.ndarray]) -> np.ndarray:
    """Which requests the rule keeps on their decode replica (``split.min_prefill_tokens``; none when
    None): short or cached there, or arriving when the prefill replicas have ``max_prefill_queue``
    prefills each in flight (sent and not yet at their first token). ``handoffs()``: each request's
    first token and the moment its KV would land on the decode pool were every prompt sent (the first
    pass); a prefix group counts as cached from the earliest landing of a request of it."""
    n = len(requests)
    if split.min_prefill_tokens is None:
        return np.zeros(n, dtype=bool)
    firsts, landed = handoffs()
    since: dict[int, float] = {}  # prefix group -> the earliest hand-off of a request of it so far
    in_flight: list[float] = []  # a heap of the sent prompts' first tokens
    local = np.zeros(n, dtype=bool)
    for i in np.argsort([r.arrival_s for r in requests], kind="stable").tolist():
        r = requests[i]
        while in_flight and in_flight[0] <= r.arrival_s:
            heapq.heappop(in_flight)
        held = r.cached_tokens
        if r.prefix_group >= 0 and since.get(r.prefix_group, math.inf) <= r.arrival_s:
            held = max(held, r.prefix_tokens)
        uncached = r.prompt_tokens - min(held, r.prompt_tokens) // block * block
        local[i] = (uncached < max(split.min_prefill_tokens, 1)
                    or len(in_flight) >= split.max_prefill_queue * split.prefill_replicas)
        if not local[i]:
            heapq.heappush(in_flight, float(firsts[i]))
        if r.prefix_group >= 0:
            since[r.prefix_group] = min(since.get(r.prefix_group, math.inf), float(landed[i]))
    return local


def transfer_time(arch, hw: Hardware, d: Deployment):
    """Seconds to move a prompt's KV from a prefill to a decode replica: each
    device sends its shard (and receives the decode layout's) over NVLink when both
    pools fit in one scale-up domain, else over the scale-out network, at the
    profile's communication efficiency, plus one collective latency; the larger
    shard of the two layouts sets the pace."""
    per_token = max(kv_bytes_per_token(arch, d.kv_dtype_bytes, p)
                    for p in (d.parallel, d.decode_parallel))
    link = hw.interconnect_bw if d.num_gpus <= hw.scale_up_size else hw.scale_out_bw
    rate = link * hw.efficiency.comm

    def seconds(prompt_tokens: int) -> float:
        return prompt_tokens * per_token / rate + hw.efficiency.collective_latency_s
    return seconds


def split_figures(d: Deployment, decode_blocks: int | None) -> dict:
    """``d``'s disaggregated split as ``--json`` reports it: replicas per pool and the decode replicas' own
    layout, batch limit and KV blocks (the prefill replicas' are the config's top-level fields)."""
    return {"prefill_replicas": d.disagg.prefill_replicas, "decode_replicas": d.disagg.decode_replicas,
            "min_prefill_tokens": d.disagg.min_prefill_tokens, "max_prefill_queue": d.disagg.max_prefill_queue,
            "decode": {**asdict(d.decode_parallel), "max_num_seqs": d.decode_max_num_seqs,
                       "kv_blocks_per_replica": decode_blocks}}
