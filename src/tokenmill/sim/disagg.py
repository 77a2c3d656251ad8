"""Disaggregated prefill/decode pools: the serving simulation run in two stages.

Our cluster's disaggregated mode (cluster/disagg, issue 14) sends each request
to a prefill worker, which computes the prompt's KV and samples the first
token; the KV blocks then move to a decode worker, which continues from
there and never runs a long prefill chunk. Simulated the same way, with the
single-replica simulation (serving.py) run once per pool:

1. **Prefill pool**, ``prefill_replicas`` identical replicas: the requests, in
   arrival order, are dealt round-robin to the replicas (an even load split,
   as the replicated aggregated deployment assumes), each request asking for
   one output token. Its first token (TTFT) comes at the end of the step that
   finishes its prompt there.
2. **KV transfer**: the request is handed off ``transfer_s(prompt_tokens)``
   after its first token (the caller prices the bytes over the link between
   the pools; the copy overlaps the pools' steps, so it delays only this
   request).
3. **Decode pool**, ``decode_replicas`` replicas: requests arrive at their
   hand-off time, dealt round-robin in that order, with prompt + first token as
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
from dataclasses import dataclass

import numpy as np

from tokenmill.sim.serving import SimConfig, SimRequest, SimResult, StepTime, simulate


@dataclass(frozen=True)
class PoolSplit:
    prefill_replicas: int
    decode_replicas: int

    def __post_init__(self) -> None:
        if self.prefill_replicas < 1 or self.decode_replicas < 1:
            raise ValueError(f"disaggregation: needs >= 1 prefill and >= 1 decode replica, got "
                             f"{self.prefill_replicas}:{self.decode_replicas}")

    @property
    def replicas(self) -> int:
        return self.prefill_replicas + self.decode_replicas


@dataclass(frozen=True)
class Pool:
    """One pool's step times and scheduler limits (per replica)."""

    step_time: StepTime
    config: SimConfig


def _deal(order: np.ndarray, replicas: int) -> list[np.ndarray]:
    """Request indices per replica: ``order`` dealt round-robin."""
    return [order[k::replicas] for k in range(replicas)]


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
    totals = np.zeros(4)  # steps, preemptions, scheduled seqs, scheduled tokens
    busy = 0.0

    def run(staged: list[SimRequest], pool: Pool) -> SimResult:
        nonlocal busy
        result = simulate(staged, pool.step_time, pool.config)
        totals[:] += (result.steps, result.preemptions, result.scheduled_seqs, result.scheduled_tokens)
        busy += result.busy_s
        return result

    for ids in _deal(np.argsort(arrival, kind="stable"), split.prefill_replicas):
        if ids.size:
            first[ids] = run([SimRequest(requests[i].arrival_s, requests[i].prompt_tokens, 1,
                                         requests[i].cached_tokens) for i in ids], prefill).first_token_s
    finish[outputs == 1] = first[outputs == 1]

    rest = np.flatnonzero(outputs > 1)
    handoff = np.full(n, np.nan)
    handoff[rest] = [first[i] + transfer_s(requests[i].prompt_tokens) for i in rest]
    for ids in _deal(rest[np.argsort(handoff[rest], kind="stable")], split.decode_replicas):
        if ids.size:
            context = [requests[i].prompt_tokens + 1 for i in ids]  # the prompt and the first token
            finish[ids] = run([SimRequest(float(handoff[i]), c, int(outputs[i]) - 1, c)
                               for i, c in zip(ids, context)], decode).finish_s
    steps, preemptions, seqs, tokens = (int(v) for v in totals)
    return SimResult(arrival, first, finish, outputs.copy(), steps, preemptions, seqs, tokens, busy)
