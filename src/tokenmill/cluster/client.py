"""ClusterEngine: N engine workers on Ray behind one EngineClient.

The frontend's side of the engine-core boundary, with a router in front: it
tokenizes and validates once (InputProcessor), routes the token ids to a
worker (cluster/router), sends an EngineCoreRequest as msgpack, and turns the
worker's token ids back into text (OutputProcessor). The server and the
benchmark use it exactly like the in-process AsyncEngine.

One poller thread per worker keeps a long ``poll`` outstanding and hands each
step's outputs to the request streams; the same outputs carry the worker's
load and KV events, which feed the router. A stop string found here ends the
request on its worker with an EngineCoreFinish message.

Disaggregated serving (prefill workers present, cluster/disagg.py): a request
routed to a decode worker may be sent to a prefill worker first, as a
prefill-only request; its first token streams to the client at once, then a
handoff moves it to the decode worker (cluster/handoff.py). Whoever moves a
request first sets its route to None (a handoff, a migration): the other
finds the route changed and leaves it alone.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import msgspec

from tokenmill.cluster.disagg import DisaggConfig
from tokenmill.cluster.handoff import DisaggHandoffs
from tokenmill.cluster.router.types import NoWorkerAvailable, WorkerLoad
from tokenmill.cluster.worker import WorkerInfo
from tokenmill.engine.async_engine import OutputStream, put_all
from tokenmill.engine.client import EngineStats
from tokenmill.engine.core_messages import (
    EngineCoreFinish,
    EngineCoreOutputs,
    EngineCoreRequest,
    ResumeState,
    decode_outputs,
    encode,
)
from tokenmill.engine.input_processor import InputProcessor
from tokenmill.engine.output_processor import OutputProcessor
from tokenmill.engine.request import RequestStatus
from tokenmill.errors import EngineUnavailableError, QueueFullError, RequestError
from tokenmill.outputs import RequestOutput
from tokenmill.sampling_params import SamplingParams

log = logging.getLogger(__name__)

POLL_TIMEOUT_S = 1.0
"""How long one long poll waits for a step before returning empty (bounds how
long a stopped frontend waits for its pollers)."""


@dataclass
class WorkerHandle:
    info: WorkerInfo
    actor: object
    """The Ray actor handle (EngineWorker)."""
    stats: EngineStats | None = None
    """Its load after its latest step."""
    alive: bool = True
    """False from a failed poll until Ray has restarted it and it answers again."""


class ClusterEngine(DisaggHandoffs):
    def __init__(self, actors: list, router, tokenizer_source: str | None = None,
                 max_waiting_requests: int | None = None, started_ray: bool = False, migration_limit: int = 3,
                 disagg: DisaggConfig | None = None):
        """actors: EngineWorker actor handles (cluster/launch.py); router: a
        cluster.router.Router (it routes among the decode and aggregated
        workers; prefill workers get a Router of their own with its config);
        tokenizer_source: overrides the workers' own; migration_limit: moves
        per request to a live worker when its worker dies (0: fail it
        instead); disagg: the conditional-disaggregation rule, when some
        workers are prefill workers (default DisaggConfig())."""
        import ray

        from tokenmill.cluster.router import Router

        described = ray.get([a.describe.remote() for a in actors])
        infos = [msgspec.msgpack.decode(data, type=WorkerInfo) for data in described]
        first = infos[0]
        for info in infos[1:]:
            if (info.model_name, info.max_model_len, info.vocab_size, info.block_size) != \
                    (first.model_name, first.max_model_len, first.vocab_size, first.block_size):
                raise ValueError(f"workers: {info.worker_id} serves a different model or shape than {first.worker_id}")
            if info.kv_layout is not None and first.kv_layout is not None:
                try:
                    first.kv_layout.check_matches(info.kv_layout)
                except ValueError as exc:
                    raise ValueError(f"workers: {info.worker_id} vs {first.worker_id}: {exc}") from None
        roles = Counter(info.role for info in infos)
        if roles["prefill"] and not (roles["decode"] or roles["aggregated"]):
            raise ValueError("workers: prefill workers need at least one decode worker to hand requests to")
        self.workers = {info.worker_id: WorkerHandle(info, actor) for info, actor in zip(infos, actors)}
        self.model_name, self.max_model_len = first.model_name, first.max_model_len
        self.tokenizer = _load_tokenizer(tokenizer_source or first.tokenizer_source)
        self.input_processor = InputProcessor(self.tokenizer, first.max_model_len, first.vocab_size)
        self.output_processor = OutputProcessor(self.tokenizer)
        self.router = router
        """Routes among decode and aggregated workers (every request ends on one)."""
        self.prefill_router = Router(router.config) if roles["prefill"] else None
        """Routes among prefill workers (None: no disaggregation)."""
        self._router_lock = threading.Lock()  # routers are not thread-safe: pollers feed them, routes read them
        for worker_id in self.workers:
            self._router_of(worker_id).add_worker(worker_id)
        self._init_disagg(disagg)
        self.max_waiting_requests = max_waiting_requests
        self._started_ray = started_ray
        self._lock = threading.Lock()  # output processor, streams, routes
        self._streams: dict[str, OutputStream] = {}
        self._route: dict[str, str] = {}  # request id -> worker id
        self._inflight: dict[str, _InFlight] = {}  # request id -> what a migration re-sends
        self.migration_limit = migration_limit
        self.num_migrations = 0
        self._output_failures = 0
        self._stopped = threading.Event()
        self._pollers = [threading.Thread(target=self._poll, args=(w,), name=f"poll-{w}", daemon=True)
                         for w in self.workers]
        for t in self._pollers:
            t.start()

    # ---- EngineClient ---------------------------------------------------------------

    async def generate(self, prompt: str | list[int], params: SamplingParams,
                       request_id: str | None = None) -> AsyncIterator[RequestOutput]:
        request = self.input_processor.process(prompt, params, request_id)
        rid = request.request_id
        if self.max_waiting_requests is not None and self._num_waiting() >= self.max_waiting_requests:
            raise QueueFullError(f"the waiting queue is full ({self.max_waiting_requests} requests)")
        try:
            with self._router_lock:
                decision = self.router.route(request.prompt_token_ids, session=params.extra.get("user"))
                prefill_id = self._plan_prefill(request, decision)
        except NoWorkerAvailable as exc:
            raise EngineUnavailableError(str(exc)) from exc
        stream = OutputStream(asyncio.get_running_loop())
        target = prefill_id or decision.worker_id
        flight = _InFlight(request, routed_tokens=len(request.prompt_token_ids), load_worker=decision.worker_id,
                           prefill_worker=prefill_id, decode_worker=decision.worker_id if prefill_id else None)
        with self._lock:
            if rid in self._streams:
                self._released(flight)
                raise RequestError("request_id", f"duplicate request id {rid!r}")
            self.output_processor.add(request)
            self._streams[rid], self._route[rid] = stream, target
            self._inflight[rid] = flight
        message = msgspec.structs.replace(request, prefill_only=True) if prefill_id else request
        finished = False
        try:
            try:
                await self.workers[target].actor.submit.remote(encode(message))
            except Exception as exc:  # its worker died after the router chose it: move the request on
                await asyncio.to_thread(self._submit_failed, rid, target, exc)
            async for item in stream.outputs():
                finished = item.finished
                yield item
        finally:
            if not finished:  # the consumer left: end the request on its worker
                self._end(rid, RequestStatus.FINISHED_ABORTED, "client_disconnect")

    def _router_of(self, worker_id: str):
        return self.prefill_router if self.workers[worker_id].info.role == "prefill" else self.router

    async def abort(self, request_id: str) -> None:
        self._end(request_id, RequestStatus.FINISHED_ABORTED, "abort")

    def stats(self) -> EngineStats:
        """The workers' stats summed (their latest step each)."""
        total = EngineStats(0, 0, 0, 0, 0, 0, 0, 0, 0)
        for handle in self.workers.values():
            s = handle.stats
            if s is None:
                continue
            for name in ("num_running", "num_waiting", "kv_blocks_total", "kv_blocks_used", "prefix_cache_queries",
                         "prefix_cache_hits", "num_preemptions", "prompt_tokens", "generation_tokens",
                         "forward_retries", "prefill_tokens_queued", "kv_blocks_held", "kv_blocks_imported",
                         "kv_imports_recomputed", "spec_draft_tokens", "spec_accepted_tokens",
                         "spec_verifications"):
                setattr(total, name, getattr(total, name) + getattr(s, name))
            for mine, theirs in ((total.request_failures, s.request_failures),
                                 (total.aborted_requests, s.aborted_requests),
                                 (total.spec_accepted_per_position, s.spec_accepted_per_position),
                                 (total.engine_steps, s.engine_steps),
                                 (total.engine_step_seconds, s.engine_step_seconds),
                                 (total.engine_step_cpu_seconds, s.engine_step_cpu_seconds)):
                for key, n in theirs.items():
                    mine[key] = mine.get(key, 0) + n
        if self._output_failures:
            total.request_failures["output"] = total.request_failures.get("output", 0) + self._output_failures
            total.aborted_requests["error"] = total.aborted_requests.get("error", 0) + self._output_failures
        return total

    def shutdown(self) -> None:
        """Stop polling, fail what is in flight, stop the workers (and Ray, if started here)."""
        import ray

        self._stopped.set()
        if self._handoffs is not None:
            self._handoffs.shutdown(wait=False, cancel_futures=True)
        for t in self._pollers:
            t.join(timeout=POLL_TIMEOUT_S * 3)
        with self._lock:
            streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.put(RuntimeError("the engine is shutting down"))
        for handle in self.workers.values():
            ray.kill(handle.actor, no_restart=True)
        if self._started_ray:
            ray.shutdown()

    # ---- the pollers' side -------------------------------------------------------

    def _poll(self, worker_id: str) -> None:
        import ray

        handle = self.workers[worker_id]
        while not self._stopped.is_set():
            try:
                batch = ray.get(handle.actor.poll.remote(POLL_TIMEOUT_S))
            except Exception as exc:
                if self._stopped.is_set():
                    return
                if handle.alive:
                    self._worker_died(worker_id, exc)
                self._stopped.wait(POLL_TIMEOUT_S)
                continue
            if not handle.alive:
                self._worker_back(worker_id)
            for data in batch:
                self._on_outputs(worker_id, decode_outputs(data))

    def _worker_died(self, worker_id: str, exc: Exception) -> None:
        """Take it out of routing at once; move each of its in-flight requests to
        a live worker (``migration_limit`` times at most), else end it with an
        error. Nothing is lost silently and no client waits forever."""
        log.error("worker %s is down (%s: %s); routing around it", worker_id, type(exc).__name__, exc)
        self.workers[worker_id].alive = False
        with self._router_lock:
            self._router_of(worker_id).mark_dead(worker_id)
        with self._lock:
            ids = [rid for rid, w in self._route.items() if w == worker_id]
        for rid in ids:
            self._move_or_fail(rid, worker_id, exc)

    def _submit_failed(self, request_id: str, worker_id: str, exc: Exception) -> None:
        """Submitting to ``worker_id`` raised (it died or is restarting; the
        poller may not have noticed yet): the worker is down for routing, and
        this request moves on like the ones it was already running."""
        if self.workers[worker_id].alive:
            self._worker_died(worker_id, exc)  # moves this request with the others
        else:
            self._move_or_fail(request_id, worker_id, exc)

    def _move_or_fail(self, request_id: str, worker_id: str, exc: Exception) -> None:
        if not self._migrate(request_id, worker_id):
            self._fail(request_id, f"the engine worker serving this request died ({type(exc).__name__})")

    def _migrate(self, request_id: str, from_worker: str) -> bool:
        """Re-send a request as a continuation: its prompt plus the tokens its
        client already has (core_messages.ResumeState). The new worker computes
        their KV and samples the next position; seeded sampling is counter-based,
        so the stream continues as if nothing happened, no token lost or repeated.
        Only the caller that finds the request still routed to ``from_worker``
        moves it (the poller and a failed submit can both try); the route is
        None while it moves."""
        with self._lock:
            flight = self._inflight.get(request_id)
            if flight is None or self._route.get(request_id) != from_worker:
                return True  # ended meanwhile, or already moved by the other caller
            if flight.migrations >= self.migration_limit:
                return False
            self._route[request_id] = None
            request = flight.continuation()
            flight.migrations += 1
            self._released(flight)
            tokens = list(request.prompt_token_ids) + request.resume.output_token_ids
        import ray

        try:
            with self._router_lock:
                decision = self.router.route(tokens)
        except NoWorkerAvailable as exc:
            log.error("migrating request %s failed: %s", request_id, exc)
            return False
        with self._lock:  # routed before it is sent: its first outputs may beat the submit's answer
            self._route[request_id] = decision.worker_id
            flight.load_worker, flight.routed_tokens = decision.worker_id, len(tokens)
        try:
            ray.get(self.workers[decision.worker_id].actor.submit.remote(encode(request)), timeout=30)
        except Exception as exc:  # that worker failed too: the request ends with an error
            log.error("migrating request %s to %s failed: %s", request_id, decision.worker_id, exc)
            with self._lock:
                if self._route.get(request_id) == decision.worker_id:
                    self._route[request_id] = None
                self._released(flight)
            return False
        with self._lock:
            if request_id not in self._inflight:  # finished or aborted meanwhile: take it back
                self._send_finish(decision.worker_id, [request_id], RequestStatus.FINISHED_ABORTED, "abort")
                return True
            self.num_migrations += 1
        log.warning("request %s moved to %s after %d tokens", request_id, decision.worker_id,
                    len(request.resume.output_token_ids))
        return True

    def _released(self, flight: _InFlight | None) -> None:
        """A request left its worker (ended, or moving): its blocks leave the
        routers' load figures (and its prefill leg, if any, ends)."""
        if flight is None:
            return
        self._end_prefill_leg(flight)
        if flight.load_worker is not None and flight.routed_tokens:
            with self._router_lock:
                self.router.release(flight.load_worker, flight.routed_tokens)
        flight.load_worker, flight.routed_tokens = None, 0

    def _fail(self, request_id: str, error: str) -> None:
        with self._lock:
            stream = self._streams.pop(request_id, None)
            out = self.output_processor.fail(request_id, error)
            self._route.pop(request_id, None)
            self._released(self._inflight.pop(request_id, None))
        if stream is not None and out is not None:
            stream.put(out)

    def _worker_back(self, worker_id: str) -> None:
        """Ray restarted it: a fresh engine (empty cache), routable again."""
        import ray

        handle = self.workers[worker_id]
        handle.info = msgspec.msgpack.decode(ray.get(handle.actor.describe.remote()), type=WorkerInfo)
        handle.alive, handle.stats = True, None
        with self._router_lock:
            self._router_of(worker_id).mark_alive(worker_id)
        log.warning("worker %s is back (pid %d)", worker_id, handle.info.pid)

    def describe_workers(self) -> list[dict]:
        """For GET /v1/workers: id, node, pid, alive, role, load, KV usage, and the seconds the worker
        has spent in engine steps since it started, wall and its stepping thread's on a core."""
        out = []
        for worker_id, h in self.workers.items():
            s = h.stats
            out.append({"id": worker_id, "node": h.info.node_id, "pid": h.info.pid, "alive": h.alive,
                        "role": h.info.role, "nice": h.info.nice,
                        "load": {"running": s.num_running, "waiting": s.num_waiting,
                                 "prefill_tokens_queued": s.prefill_tokens_queued} if s else None,
                        "kv_blocks_used": s.kv_blocks_used if s else None,
                        "kv_blocks_total": s.kv_blocks_total if s else None,
                        "kv_usage": s.kv_usage if s else None,
                        "kv_blocks_held": s.kv_blocks_held if s else None,
                        "kv_blocks_imported": s.kv_blocks_imported if s else None,
                        "kv_imports_recomputed": s.kv_imports_recomputed if s else None,
                        "engine_step_seconds": sum(s.engine_step_seconds.values()) if s else None,
                        "engine_step_cpu_seconds": sum(s.engine_step_cpu_seconds.values()) if s else None,
                        "prefix_cache_hit_rate": s.prefix_hit_rate if s else None})
        return out

    def _on_outputs(self, worker_id: str, step: EngineCoreOutputs) -> None:
        self.workers[worker_id].stats = step.stats
        router = self._router_of(worker_id)
        with self._router_lock:
            router.update_load(worker_id, WorkerLoad.from_stats(step.stats))
            if step.kv_events is not None:
                router.apply_kv_events(worker_id, step.kv_events)
        with self._lock:
            # Only the worker a request is routed to speaks for it: a copy left on
            # a worker it moved away from (one that was unreachable, not dead) is
            # ended there, and its tokens are not the client's.
            current = [o for o in step.outputs if self._route.get(o.request_id) == worker_id]
            stale = [o.request_id for o in step.outputs
                     if o.request_id in self._route and self._route[o.request_id] != worker_id
                     and o.finish_reason in (None, "transfer")]
            handoffs = []
            for o in current:  # a prefill worker's first token: the client's, and not the end
                if o.finish_reason == "transfer":
                    o.finish_reason = None
                    handoffs.append(o.request_id)
            done = self.output_processor.process(current)
            self._output_failures += len(done.failed)
            streams = []
            for out in done.outputs:
                stream = self._streams.pop(out.request_id, None) if out.finished else self._streams.get(out.request_id)
                if out.finished:
                    self._route.pop(out.request_id, None)
                    self._released(self._inflight.pop(out.request_id, None))
                elif out.request_id in self._inflight:
                    self._inflight[out.request_id].sent += out.new_token_ids
                streams.append((stream, out))
        for request_id, status in done.finish:
            self._send_finish(worker_id, [request_id], status, None)
        if stale:
            self._send_finish(worker_id, stale, RequestStatus.FINISHED_ABORTED, "abort")
        put_all([(stream, out) for stream, out in streams if stream is not None])
        for request_id in handoffs:
            with self._router_lock:
                self.handoffs_in_flight += 1
            try:
                self._handoffs.submit(self._handoff_counted, request_id, worker_id)
            except RuntimeError:  # shutting down: the executor takes no more work
                with self._router_lock:
                    self.handoffs_in_flight -= 1
                return

    def _end(self, request_id: str, status: RequestStatus, cause: str | None) -> None:
        """End a request here and on its worker (abort, disconnect); a consumer
        still reading gets the final output (the text held back, flushed)."""
        with self._lock:
            out, ok = self.output_processor.abort(request_id)
            self._output_failures += not ok
            stream = self._streams.pop(request_id, None)
            worker_id = self._route.pop(request_id, None)
            self._released(self._inflight.pop(request_id, None))
        if worker_id is not None:
            self._send_finish(worker_id, [request_id], status, cause)
        if stream is not None and out is not None:
            stream.put(out)

    def _send_finish(self, worker_id: str, ids: list[str], status: RequestStatus, cause: str | None) -> None:
        self.workers[worker_id].actor.finish.remote(encode(EngineCoreFinish(ids, status.value, cause)))

    def _num_waiting(self) -> int:
        return sum(h.stats.num_waiting for h in self.workers.values() if h.stats is not None)


@dataclass
class _InFlight:
    """What the frontend keeps of a request to move it to another worker."""

    request: EngineCoreRequest
    routed_tokens: int = 0
    """Tokens ``load_worker`` was routed for (Router.release gives them back)."""
    load_worker: str | None = None
    """The decode or aggregated worker whose load in the router counts this request."""
    prefill_worker: str | None = None
    """The prefill worker computing its prompt, until the handoff (disaggregated only)."""
    decode_worker: str | None = None
    """Where its KV goes after the prefill (disaggregated only)."""
    sent: list[int] = field(default_factory=list)
    """Tokens its client has received (since the request's own resume point, if any)."""
    migrations: int = 0

    def continuation(self) -> EngineCoreRequest:
        earlier = self.request.resume.output_token_ids if self.request.resume is not None else []
        return msgspec.structs.replace(self.request, resume=ResumeState(list(earlier) + self.sent))


def _load_tokenizer(source: str | None):
    if source is None:
        return None
    from tokenmill.model.tokenizer import load_tokenizer
    return load_tokenizer(source)
