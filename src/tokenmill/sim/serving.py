"""The serving simulation: our scheduler's rules (engine/scheduler.py) run
over step times from a cost model, one event per engine step.

The clock advances by ``step_time(StepShape)`` per step; requests join the
waiting queue at the start of the first step that begins at or after their
arrival, and when nothing is waiting or running the clock jumps to the next
arrival. Each step schedules as ``Scheduler.schedule`` does:

- running requests first, oldest first, each taking ``min(pending + drafts,
  budget)`` tokens, so decodes and prefill chunks share the step;
- a running request short of KV blocks preempts the newest running request
  (recompute: its blocks are freed, its computed counter drops to 0, its
  output is kept) until it fits or preempts itself; a step that preempted
  admits nobody;
- then waiting requests, front first, while budget, ``max_num_seqs`` and free
  blocks allow; a prompt longer than what is left of the budget takes the rest
  (chunked prefill);
- with ``adp_balance`` (TensorRT-LLM's attention-DP prompt balancing, not our
  scheduler's; sim/adp_balance.py) a step admits only when that rule lets prompts in;
- with ``overlap_scheduler`` (TensorRT-LLM's, on by default there; not ours) a
  step's batch is formed while the step before it runs, so while running
  requests keep the replica busy a step admits only requests that arrived
  before the step before it started: one step more of waiting (an idle
  replica, or one with nothing running, admits at once);
- after the step, ``Scheduler.update``'s counter rule: computed = start +
  scheduled - drafts + accepted drafts; a request samples when the step
  reaches its last token, so its first token comes at the end of the step
  that finishes its prompt;
- with ``host_path`` (sim/host_path.py) a request's first and last tokens are
  seen when the replica's host has handled that step's responses, not when the
  step ends; the schedule itself does not wait for the host.

Speculative decoding follows spec/drafting.py: a running request whose only
pending token is its last is "ready" and verifies ``min(draft_tokens, output
left - 1)`` drafts. Acceptance is deterministic fractional accumulation: each
verification adds ``tokens_per_step`` to the request's credit and emits
``floor(credit)`` tokens (at most its verified rows), keeping the fraction;
2.4 emits 2, 2, 3, 2, 3, ... Deterministic, so a run is reproducible and two
configurations compare without sampling noise.

Prefix hits: ``cached_tokens`` is a hit given up front; a request of a shared
prefix (``prefix_group``) also hits what the replica holds of it when admitted,
its blocks shared and evicted as the engine's block pool does (sim/prefix_cache.py):
the hit rate follows the schedule and the cache.

What the simulation does not model: sharing of an up-front hit (``cached_tokens``
blocks are counted as the request's own: exact when no running request holds
them, an upper bound on KV use otherwise), prefix hits on a preempted request's
own blocks (a recompute starts again from its hit), stop tokens (every request
produces exactly ``output_tokens``), and time spent outside steps (but for
``host_path``'s delivery).

State lives in per-request numpy arrays; a step costs a few vectorized
operations over the running batch plus Python work per admission or
preemption, never a scan over all requests.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from tokenmill.sim.adp_balance import AdpBalance, AdpGate
from tokenmill.sim.host_path import HostPath, HostQueue
from tokenmill.sim.prefix_cache import PrefixHits, SharedPrefixes
from tokenmill.sim.shapes import PrefillChunk, StepShape
from tokenmill.sim.sim_result import SimResult

StepTime = Callable[[StepShape], float]
"""Seconds one engine step takes (the cost model)."""


@dataclass(frozen=True)
class SimRequest:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    """Tokens it generates (no stop token ends it early)."""
    cached_tokens: int = 0
    """Prompt tokens the prefix cache holds at admission; rounded down to whole
    blocks and never the whole prompt, as KVCacheManager.find_prefix does."""
    prefix_group: int = -1
    """The shared prefix its prompt starts with (>= 0; e.g. a system prompt), or -1: none."""
    prefix_tokens: int = 0
    """Tokens of that prefix: hit as far as the replica holds them (sim/prefix_cache.py)."""


@dataclass(frozen=True)
class SimConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    """Token budget of one step (rows of the forward pass)."""
    num_kv_blocks: int
    block_size: int = 16
    tokens_per_step: float = 1.0
    """Mean tokens a ready request emits per verification (1 + accepted drafts),
    in [1, 1 + draft_tokens]; e.g. 2.4 for MTP with 3 drafts."""
    draft_tokens: int = 0
    """Drafts a ready request verifies per step (StepShape.tokens_per_decode - 1)."""
    chunked_prefill: bool = True
    """False: a waiting request is admitted only when its whole prompt fits in
    what is left of the step's budget (a recompute longer than the whole budget
    is still chunked when it is the step's first work, or it could never run)."""
    adp_balance: AdpBalance | None = None
    """TensorRT-LLM's attention-DP prompt balancing (sim/adp_balance.py); None: admit every step."""
    overlap_scheduler: bool = False
    """TensorRT-LLM's overlap scheduler (module docstring): admission one step later while busy."""
    host_path: HostPath | None = None
    """The host's response path (sim/host_path.py): first and last tokens are seen when it has
    handled their step's responses; None: when their step ends."""

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "num_kv_blocks", "block_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.draft_tokens < 0:
            raise ValueError(f"draft_tokens: must be >= 0, got {self.draft_tokens}")
        if not 1.0 <= self.tokens_per_step <= 1 + self.draft_tokens:
            raise ValueError(f"tokens_per_step: must be in [1, 1 + draft_tokens = {1 + self.draft_tokens}], "
                             f"got {self.tokens_per_step}")


def simulate(requests: Iterable[SimRequest], step_time: StepTime, config: SimConfig) -> SimResult:
    """Run the requests to completion through our scheduler's rules."""
    return ReplicaSim(list(requests), config).run(step_time)


@dataclass
class _Step:
    """What one step schedules, in scheduling order (running, then admitted)."""

    ids: np.ndarray
    start: np.ndarray
    """Computed tokens when scheduled: the first position computed this step."""
    num: np.ndarray
    """Positions computed this step (the last ``drafts`` of them are drafts)."""
    drafts: np.ndarray
    preempted: bool = field(default=False)


_EMPTY = np.zeros(0, dtype=np.int64)


class ReplicaSim(PrefixHits):
    """One replica's scheduler state over a list of requests: ``run`` feeds them by
    arrival time (``simulate``); sim/routed.py feeds each its routed ones and steps
    the replicas in time order (``has_work``, ``step``, ``result``)."""

    def __init__(self, requests: list[SimRequest], cfg: SimConfig):
        if not requests:
            raise ValueError("requests: need at least one")
        self.cfg = cfg
        self.arrival = np.array([r.arrival_s for r in requests], dtype=float)
        self.prompt = np.array([r.prompt_tokens for r in requests], dtype=np.int64)
        self.out_n = np.array([r.output_tokens for r in requests], dtype=np.int64)
        cached = np.array([r.cached_tokens for r in requests], dtype=np.int64)
        self.group = np.array([r.prefix_group for r in requests], dtype=np.int64)
        self.prefix = np.array([r.prefix_tokens for r in requests], dtype=np.int64)
        self._validate(cached)
        self.cached = self._whole_blocks(cached)
        self.grouped = bool((self.group >= 0).any())
        self.prefixes = SharedPrefixes(cfg.num_kv_blocks, int(self.group.max()) + 1) if self.grouped else None
        self.shared = np.zeros(len(requests), dtype=np.int64)
        """Blocks of its shared prefix a request holds (counted in ``held``, not its own: sim/prefix_cache.py)."""
        n = len(requests)
        self.ntok = self.prompt.copy()  # prompt + output so far
        self.computed = np.zeros(n, dtype=np.int64)
        self.held = np.zeros(n, dtype=np.int64)  # blocks held; 0 while waiting
        self.gen = np.zeros(n, dtype=np.int64)
        self.credit = np.zeros(n)  # fractional tokens owed by speculative acceptance
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.order = np.argsort(self.arrival, kind="stable")
        self.free = cfg.num_kv_blocks
        self.run_ids = _EMPTY  # running requests, oldest admission first
        self.waiting: deque[int] = deque()
        self.preemptions = 0
        self.steps = self.seqs = self.tokens = self.idle_steps = 0
        self.hit_tokens = self.query_tokens = 0  # the prefix cache's counters (SimResult)
        self.busy = self.prefill_busy = 0.0
        self.prefill_steps = 0
        self.finished_last_step = _EMPTY
        """Requests the last step finished (sim/routed.py subtracts their load)."""
        self.adp_gate = AdpGate(cfg.adp_balance) if cfg.adp_balance else None
        self.cutoff = math.inf
        """Latest arrival the step being scheduled may admit (``overlap_scheduler``)."""
        self.last_start = self.last_end = -math.inf  # of the last step that ran
        self.host = HostQueue(cfg.host_path) if cfg.host_path else None
        self.iters = np.zeros(n, dtype=np.int64)  # steps that emitted tokens, per request (host_path)
        self.zeros = np.zeros(n, dtype=np.int64)
        """Read only: slices of it are the drafts of a step without any (no copy per step)."""

    def _validate(self, cached: np.ndarray) -> None:
        cfg = self.cfg
        if not np.all(np.isfinite(self.arrival)):
            raise ValueError("arrival_s: must be finite")
        if self.prompt.min() < 1 or self.out_n.min() < 1:
            raise ValueError("prompt_tokens and output_tokens: must be >= 1")
        if cached.min() < 0 or np.any(cached > self.prompt):
            raise ValueError("cached_tokens: must be in [0, prompt_tokens]")
        if self.group.min() < -1 or np.any(self.prefix < 0) or np.any(self.prefix > self.prompt):
            raise ValueError("prefix_group: must be >= -1, and prefix_tokens in [0, prompt_tokens]")
        # The longest allocation covers every position but the last token's
        # (drafts are capped by the output left): prompt + output - 1.
        need = -(-(self.prompt + self.out_n - 1) // cfg.block_size)
        if need.max() > cfg.num_kv_blocks:
            raise ValueError(f"num_kv_blocks: a request needs {need.max()} blocks alone, "
                             f"only {cfg.num_kv_blocks} exist (it could never finish)")
        if not cfg.chunked_prefill and self.prompt.max() > cfg.max_num_batched_tokens:
            raise ValueError(f"prompt_tokens: {self.prompt.max()} exceeds max_num_batched_tokens "
                             f"{cfg.max_num_batched_tokens} without chunked prefill")

    # ---- the loop ----

    def run(self, step_time: StepTime) -> SimResult:
        total, nxt, t = len(self.order), 0, float(self.arrival[self.order[0]])
        while True:
            while nxt < total and self.arrival[self.order[nxt]] <= t:
                self.waiting.append(int(self.order[nxt]))
                nxt += 1
            if not self.has_work():
                if nxt == total:
                    break
                t = float(self.arrival[self.order[nxt]])
                continue
            t += self.step(step_time, t)
        return self.result()

    def has_work(self) -> bool:
        return bool(self.run_ids.size or self.waiting)

    def step(self, step_time: StepTime, t: float) -> float:
        """One engine step starting at ``t`` over what is running and waiting;
        returns its seconds (0 for a preempting step that scheduled nothing)."""
        self.finished_last_step = _EMPTY
        # With the overlap scheduler a busy replica formed this step's batch when the last one started.
        busy = self.cfg.overlap_scheduler and self.last_end >= t
        self.cutoff = self.last_start if busy else math.inf
        step = self._schedule()
        if not step.ids.size:  # only a preempting step can schedule nothing
            self.idle_steps += 1
            if self.idle_steps > len(self.order) + 1:
                raise RuntimeError("simulation made no progress")
            return 0.0
        self.idle_steps = 0
        shape = self._shape(step)
        dt = float(step_time(shape))
        if not (dt >= 0 and math.isfinite(dt)):
            raise ValueError(f"step_time: returned {dt}; need finite seconds >= 0")
        self.busy += dt
        self.steps += 1
        if shape.prefills:
            self.prefill_steps += 1
            self.prefill_busy += dt
        self.seqs += step.ids.size
        self.tokens += int(step.num.sum())
        self.finished_last_step = self._update(step, t + dt)
        self.last_start, self.last_end = t, t + dt
        return dt

    def result(self) -> SimResult:
        return SimResult(self.arrival, self.first, self.finish, self.gen, self.steps, self.preemptions,
                         self.seqs, self.tokens, self.busy, self.hit_tokens, self.query_tokens, self.prefill_steps,
                         self.prefill_busy)

    # ---- schedule (Scheduler.schedule) ----

    def _schedule(self) -> _Step:
        budget = self.cfg.max_num_batched_tokens
        step = self._schedule_running(budget)
        budget -= int(step.num.sum())
        if not step.ids.size:
            self.cutoff = math.inf  # nothing running: the batch is formed now
        gate = self.adp_gate  # asked every step: its counters count iterations
        if gate is not None:
            opens = gate.admits(self._admissible(), self.run_ids.size, self.run_ids.size < self.cfg.max_num_seqs)
        if not step.preempted and (gate is None or opens):
            admitted = self._admit(budget, step.ids.size)
            if admitted:
                ids, start, num = (np.array(col, dtype=np.int64) for col in zip(*admitted))
                step = _Step(np.concatenate([step.ids, ids]), np.concatenate([step.start, start]),
                             np.concatenate([step.num, num]), np.concatenate([step.drafts, np.zeros_like(ids)]))
                self.run_ids = np.concatenate([self.run_ids, ids])
        return step

    def _admissible(self) -> int:
        """Waiting requests this step may admit: all but the tail that arrived after ``cutoff``
        (the queue is in arrival order, preempted requests back at its front)."""
        late = 0
        if self.cutoff < math.inf:
            for r in reversed(self.waiting):
                if self.arrival[r] <= self.cutoff:
                    break
                late += 1
        return len(self.waiting) - late

    def _drafts(self, ids: np.ndarray, real: np.ndarray) -> np.ndarray:
        """Drafts each running request verifies (spec/drafting.py: ready ones only, capped by output left)."""
        d = self.cfg.draft_tokens
        if not d:
            return np.zeros_like(real)
        cap = np.clip(self.out_n[ids] - self.gen[ids] - 1, 0, d)
        return np.where(real == 1, cap, 0)

    def _schedule_running(self, budget: int) -> _Step:
        ids = self.run_ids
        if not ids.size:
            return _Step(_EMPTY, _EMPTY, _EMPTY, _EMPTY)
        # Every step runs this: the usual case (all fit the budget and get their blocks) takes
        # no searches and no partial copies; the result is the same either way.
        start = self.computed[ids]
        real = self.ntok[ids] - start  # >= 1: finished requests leave the running list
        want = real + self._drafts(ids, real) if self.cfg.draft_tokens else real
        k = ids.size
        if int(want.sum()) <= budget:  # everyone gets all it wants (a sum is cheaper than a cumsum)
            num = want
        else:
            before = np.cumsum(want) - want  # budget used by the requests ahead
            k = int(np.searchsorted(before, budget))  # the first k still find budget left
            ids, start, real = ids[:k], start[:k], real[:k]
            num = np.minimum(want[:k], budget - before[:k])
        held = self.held[ids]
        need = np.maximum((start + num + (self.cfg.block_size - 1)) // self.cfg.block_size - held, 0)
        taken = int(need.sum())
        if taken <= self.free:  # the first j get their blocks: all of them
            j = k
            self.held[ids] = held + need
        else:
            cum = np.cumsum(need)
            j = int(np.searchsorted(cum, self.free, side="right"))
            self.held[ids[:j]] += need[:j]
            taken = int(cum[j - 1]) if j else 0
        self._take(taken)
        drafts = np.maximum(num - real, 0) if self.cfg.draft_tokens else self.zeros[:k]
        head = _Step(ids, start, num, drafts) if j == k else _Step(ids[:j], start[:j], num[:j], drafts[:j])
        if j < k:  # request j is short of blocks: go on one by one, preempting
            return self._schedule_running_preempting(head, budget - int(num[:j].sum()))
        return head

    def _schedule_running_preempting(self, head: _Step, budget: int) -> _Step:
        """Scheduler._schedule_running's loop from the first request short of
        blocks on (``head``: those before it, already given theirs). Victims
        come from the tail, behind the request being scheduled, so ``head``
        stands."""
        running = self.run_ids.tolist()
        out: list[tuple[int, int, int, int]] = []
        preempted = False
        i = head.ids.size
        while i < len(running) and budget > 0:
            r = running[i]
            start, real = int(self.computed[r]), int(self.ntok[r] - self.computed[r])
            drafts = int(self._drafts(np.array([r]), np.array([real]))[0])
            num = min(real + drafts, budget)
            need = max(-(-(start + num) // self.cfg.block_size) - int(self.held[r]), 0)
            while need > self.free:
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim == r:
                    break
            else:
                self.held[r] += need
                self._take(need)
                out.append((r, start, num, max(num - real, 0)))
                budget -= num
                i += 1
        self.run_ids = np.array(running, dtype=np.int64)
        cols = [np.array(c, dtype=np.int64) for c in zip(*out)] if out else [_EMPTY] * 4
        return _Step(*(np.concatenate([h, c]) for h, c in zip((head.ids, head.start, head.num, head.drafts), cols)),
                     preempted=preempted)

    def _preempt(self, r: int) -> None:
        self._release(r)
        self.computed[r] = 0  # output so far is kept: the recompute covers prompt + output
        self.waiting.appendleft(r)
        self.preemptions += 1

    def _admit(self, budget: int, num_scheduled: int) -> list[tuple[int, int, int]]:
        """Scheduler._admit_waiting: returns (request, start, tokens) per admission."""
        cfg = self.cfg
        room = cfg.max_num_seqs - self.run_ids.size
        out: list[tuple[int, int, int]] = []
        while self.waiting and budget > 0 and len(out) < room:
            r = self.waiting[0]
            if self.arrival[r] > self.cutoff:
                break
            cached, shared, on_queue = int(self.cached[r]), 0, 0
            if self.grouped and (group_hit := self._group_hit(r)) > cached:  # the prefix's blocks, shared
                cached, shared = group_hit, group_hit // cfg.block_size
                on_queue = self.prefixes.on_queue(int(self.group[r]))
            pending = int(self.ntok[r]) - cached
            num = min(pending, budget)
            if not cfg.chunked_prefill and num < pending and (num_scheduled or out):
                break
            need = -(-(cached + num) // cfg.block_size)
            if need - shared > self.free - on_queue:  # KVCacheManager: free blocks but the hit's own
                break
            self.waiting.popleft()
            self.hit_tokens += cached
            self.query_tokens += int(self.ntok[r])
            self.computed[r] = cached
            if shared:
                self.free -= self.prefixes.hold(int(self.group[r]))
                self.shared[r] = shared
            self.held[r] = need
            self._take(need - shared)
            out.append((r, cached, num))
            budget -= num
        return out

    # ---- shape and update ----

    def _shape(self, step: _Step) -> StepShape:
        """Decode rows are sequences computing their last token plus the full
        draft_tokens; any other (a prompt chunk, a recompute, drafts cut by the
        budget or the output left) is a PrefillChunk of its rows at its context."""
        per_decode = 1 + self.cfg.draft_tokens
        decode = (self.ntok[step.ids] - step.start == 1) & (step.num == per_decode)
        if decode.all():  # the usual step
            return StepShape(step.start, (), per_decode)  # the array itself: step.start is never written
        chunks = ~decode
        prefills = tuple(PrefillChunk(n, c) for n, c in zip(step.num[chunks].tolist(), step.start[chunks].tolist()))
        return StepShape(step.start[decode], prefills, per_decode)

    def _update(self, step: _Step, t: float) -> np.ndarray:
        """Scheduler.update for a step that ended at ``t``; returns the requests it finished."""
        ids, start, num, drafts = step.ids, step.start, step.num, step.drafts
        ntok = self.ntok[ids]
        if self.cfg.draft_tokens:
            emitted = (start + num == ntok + drafts).astype(np.int64)  # reached its last token: samples
            verified = (emitted == 1) & (drafts > 0)
            if verified.any():
                vid = ids[verified]
                credit = self.credit[vid] + self.cfg.tokens_per_step
                whole = np.floor(credit)
                self.credit[vid] = credit - whole  # drafts cut short lose their share: those rows were not verified
                emitted[verified] = np.minimum(whole.astype(np.int64), 1 + drafts[verified])
            self.computed[ids] = start + num - drafts + np.maximum(emitted - 1, 0)
            emitting = emitted > 0
        else:  # no drafts: a row emits at most its one token (bool, added as 0 or 1)
            computed = start + num
            emitted = emitting = computed == ntok
            self.computed[ids] = computed
        if self.grouped:
            self._register_prefixes(ids)
        gen_before = self.gen[ids]
        gen_after = gen_before + emitted
        self.gen[ids] = gen_after
        self.ntok[ids] = ntok + emitted
        starts, ends = (gen_before == 0) & emitting, gen_after >= self.out_n[ids]
        first, done = ids[starts], ids[ends]
        seen = t if self.host is None else self._respond(ids[emitting], (starts | ends)[emitting], t)
        self.first[first] = seen
        if done.size:
            self.finish[done] = seen
            if self.grouped:
                for r in done.tolist():
                    self._release(r)
            else:
                self.free += int(self.held[done].sum())
                self.held[done] = 0
            # A step that scheduled as many requests as are running scheduled all of them, in their
            # order (running first, then those it admitted, which joined the running list's end).
            whole = ids.size == self.run_ids.size
            self.run_ids = ids[~ends] if whole else self.run_ids[np.isnan(self.finish[self.run_ids])]
        return done

    def _respond(self, emitting: np.ndarray, first_or_last: np.ndarray, t: float) -> float:
        """When the client sees this step's tokens: its responses through the host's queue. A
        sequence that emitted responds on its first token, on its last (``first_or_last``, a mask
        over ``emitting``), and every ``stream_interval``-th iteration that emitted (TensorRT-LLM's rule)."""
        self.iters[emitting] += 1
        due = first_or_last | (self.iters[emitting] % self.cfg.host_path.stream_interval == 0)
        return self.host.deliver(t, int(due.sum()))
