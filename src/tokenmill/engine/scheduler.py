"""Continuous batching under a per-step token budget, with chunked prefill (or,
switched off, whole prompts only) and preemption by recompute.

Each step: running requests first (oldest first), each taking
``min(remaining, budget)`` tokens, so decodes and prefill chunks share a step;
then waiting requests are admitted (after a prefix-cache lookup) while budget,
blocks and ``max_num_seqs`` allow; without chunked prefill a waiting request is
admitted only when all of its uncached prompt fits what is left of the budget,
and nobody passes it meanwhile. When a running request needs a block and
none is free, the newest running request is preempted: its blocks are freed
(their cached hashes survive until evicted) and it goes back to the front of
the queue to be recomputed later. No admission happens in a step that
preempted, so the engine slows down under overload instead of thrashing.

The scheduler owns the live requests (``requests``) and one verb ends them,
whatever the reason: ``finish_requests`` (stop, length, abort, error) frees
their blocks and forgets them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tokenmill.engine.kv_cache_manager import KVCacheManager
from tokenmill.engine.request import Request, RequestStatus
from tokenmill.errors import RequestError


@dataclass
class ScheduledRequest:
    request: Request
    start: int
    """num_computed_tokens when scheduled: the first position computed this step."""
    num_new_tokens: int
    """Positions computed this step; the last ``num_draft_tokens`` of them are drafts."""
    num_draft_tokens: int = 0
    """Draft tokens (request.draft_token_ids[:n]) fed after the request's last token."""
    samples: bool = field(init=False)
    """This step reaches the request's last known token (fixed when scheduled:
    update() then appends tokens to the request)."""

    def __post_init__(self) -> None:
        self.samples = self.start + self.num_new_tokens == self.request.num_tokens + self.num_draft_tokens

    @property
    def num_sample_rows(self) -> int:
        """Rows sampled for it: its last token's and each draft's (0 mid-prompt)."""
        return 1 + self.num_draft_tokens if self.samples else 0


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    def __bool__(self) -> bool:
        return bool(self.scheduled)


class Scheduler:
    def __init__(self, kv: KVCacheManager, max_num_seqs: int, max_num_batched_tokens: int,
                 chunked_prefill: bool = True):
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.chunked_prefill = chunked_prefill
        """False: whole prompts only (the budget must then hold the longest: EngineCore raises it)."""
        self.requests: dict[str, Request] = {}
        """Every request not yet finished (waiting, preempted or running), by id."""
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    def add(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise RequestError("request_id", f"duplicate request id {request.request_id!r}")
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def num_prefill_tokens_queued(self) -> int:
        """Prompt (and resumed) tokens admitted or waiting whose K/V is not yet
        computed: the prefill work ahead of this engine. A decoding request's
        one pending token is not prefill; a waiting request counts in full
        (its prefix-cache hits are not known before admission)."""
        pending = (req.num_tokens - req.num_computed_tokens for req in self.requests.values())
        return sum(n for n in pending if n > 1)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self._schedule_running(out, self.max_num_batched_tokens)
        if not out.preempted:
            self._admit_waiting(out, budget)
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            real = req.num_tokens - req.num_computed_tokens
            n = min(real + self._num_drafts(req), budget)
            while not self.kv.allocate(req, n):
                victim = self.running[-1]
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is req:
                    break
            else:
                out.scheduled.append(ScheduledRequest(req, req.num_computed_tokens, n, max(n - real, 0)))
                budget -= n
                i += 1
        return budget

    @staticmethod
    def _num_drafts(req: Request) -> int:
        """Drafts it may verify: each must leave room for the token after it
        within max_model_len (the budget may cut them further)."""
        return max(min(len(req.draft_token_ids), req.max_model_len - req.num_tokens - 1), 0)

    def _admit_waiting(self, out: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            if req.num_computed_tokens:  # its KV arrived with it (KVCacheManager.adopt): no lookup
                prefix, cached = [], req.num_computed_tokens
            else:
                prefix = self.kv.find_prefix(req)
                cached = len(prefix) * self.kv.block_size
            n = min(req.num_tokens - cached, budget)
            if not self.chunked_prefill and n < req.num_tokens - cached:
                break  # it waits, whole, for a step with room for it
            if not self.kv.allocate(req, n, prefix):
                break
            self.waiting.popleft()
            if not req.num_computed_tokens:
                self.kv.count_lookup(req, len(prefix))
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = cached
            req.num_computed_tokens = cached
            req.status = RequestStatus.RUNNING
            self.running.append(req)
            out.scheduled.append(ScheduledRequest(req, cached, n))
            budget -= n

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self.kv.free(req)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        req.status = RequestStatus.PREEMPTED
        self.waiting.appendleft(req)
        self.num_preemptions += 1

    def update(self, out: SchedulerOutput, sampled: dict[str, list[int]]) -> list[tuple[Request, int]]:
        """Append each request's new tokens, checking stops after each one (a
        stop ends the request there; later tokens are dropped), advance its
        computed counter, index newly full blocks, and finish requests that hit
        a stop. Returns (request, tokens appended) for every request that got
        tokens this step (finished ones included).

        ``sampled[id]`` is the verified run for a request that sampled: its
        drafts the model confirmed, then one token of the model's own. Every
        token but the last is thus a draft whose K/V this step computed and
        that stays valid; the K/V of rejected drafts is not counted as computed
        (their slots are rewritten by later steps), so the computed counter,
        and the prefix-cache index built from it, only ever cover accepted
        tokens.

        max_tokens=0 (scoring a prompt: prompt_logprobs): the step that computes
        the prompt's end samples a token like any other, and it is dropped here;
        the request ends with 'length' having generated nothing, and is listed
        with 0 tokens appended (its output carries the prompt logprobs). This
        keeps the runner and sampler free of a special case."""
        advanced = []
        for s in out.scheduled:
            req = s.request
            if req.status is not RequestStatus.RUNNING:
                continue  # preempted later in the same step
            tokens = sampled.get(req.request_id, ())
            confirmed = max(len(tokens) - 1, 0)  # drafts the run claims were accepted
            if len(tokens) > s.num_sample_rows or list(tokens[:confirmed]) != req.draft_token_ids[:confirmed]:
                raise ValueError(f"sampled: request {req.request_id} got {list(tokens)}; expected up to "
                                 f"{s.num_sample_rows} tokens, all but the last from its drafts")
            status, appended = None, 0
            if s.samples and req.params.max_tokens == 0:
                status, tokens = RequestStatus.FINISHED_LENGTH, ()
            for token in tokens:
                req.append_token(token)
                appended += 1
                status = req.check_stop()
                if status is not None:
                    break
            req.num_computed_tokens = s.start + s.num_new_tokens - s.num_draft_tokens + max(appended - 1, 0)
            req.draft_token_ids, req.draft_probs = [], []
            self.kv.cache_computed_blocks(req)
            if appended or status is not None:
                advanced.append((req, appended))
            if status is not None:
                self.finish_requests([req.request_id], status)
        return advanced

    def finish_requests(self, request_ids, status: RequestStatus) -> list[Request]:
        """End requests (stop, length, abort, error, transfer): take them off the
        queues, free their blocks (a transfer holds them instead) and forget
        them. Unknown or already finished ids are skipped. Returns the requests
        it ended."""
        ended = []
        for rid in request_ids:
            req = self.requests.pop(rid, None)
            if req is None:
                continue
            if req.status is RequestStatus.RUNNING:
                self.running.remove(req)
            else:
                self.waiting.remove(req)
            if status is RequestStatus.FINISHED_TRANSFER:
                self.kv.hold(req)  # its prompt's blocks wait for the decode engine
            else:
                self.kv.free(req)
            req.status = status
            ended.append(req)
        return ended
