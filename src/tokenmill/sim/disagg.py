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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from tokenmill.sim.cost import Parallel, kv_bytes_per_token
from tokenmill.sim.hardware import Hardware
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

    def __post_init__(self) -> None:
        if self.prefill_replicas < 1 or self.decode_replicas < 1:
            raise ValueError(f"disaggregation: needs >= 1 prefill and >= 1 decode replica, got "
                             f"{self.prefill_replicas}:{self.decode_replicas}")
        if self.decode_max_num_seqs is not None and self.decode_max_num_seqs < 1:
            raise ValueError(f"--decode-max-num-seqs: must be >= 1, got {self.decode_max_num_seqs}")

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
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    totals = np.zeros(5)  # steps, preemptions, scheduled seqs, scheduled tokens, prefill steps
    busy = np.zeros(2)  # seconds in steps, of them in prefill steps

    def run(staged: list[SimRequest], replicas: int, pool: Pool) -> SimResult:
        result = simulate_routed(staged, replicas, pool.step_time, pool.config)
        totals[:] += (result.steps, result.preemptions, result.scheduled_seqs, result.scheduled_tokens,
                      result.prefill_steps)
        busy[:] += (result.busy_s, result.prefill_busy_s)
        return result

    prefilled = run([replace(r, output_tokens=1) for r in requests], split.prefill_replicas, prefill)
    first[:] = prefilled.first_token_s
    finish[outputs == 1] = first[outputs == 1]

    rest = np.flatnonzero(outputs > 1)
    if rest.size:
        handoff = first[rest] + np.array([transfer_s(requests[i].prompt_tokens) for i in rest])
        context = [requests[i].prompt_tokens + 1 for i in rest]  # the prompt and the first token
        finish[rest] = run([SimRequest(float(t), c, int(outputs[i]) - 1, c) for i, t, c in zip(rest, handoff, context)],
                           split.decode_replicas, decode).finish_s
    steps, preemptions, seqs, tokens, prefill_steps = (int(v) for v in totals)
    # The prefix cache's counters are the prefill pool's: the decode pool receives each KV whole.
    return SimResult(arrival, first, finish, outputs.copy(), steps, preemptions, seqs, tokens, float(busy[0]),
                     prefilled.prefix_hit_tokens, prefilled.prefix_query_tokens, prefill_steps, float(busy[1]))


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
            "decode": {**asdict(d.decode_parallel), "max_num_seqs": d.decode_max_num_seqs,
                       "kv_blocks_per_replica": decode_blocks}}
