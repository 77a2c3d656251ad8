"""The disaggregated half of ClusterEngine: where a prompt is computed, and
the handoff that moves it from a prefill worker to its decode worker.

A mixin, not a class of its own: it works on ClusterEngine's state (workers,
routers, routes, in-flight requests, the locks) under ClusterEngine's rules,
and is kept apart only so each file has one job. The rules it relies on:
``_route[rid]`` names the one worker that speaks for a request, and None while
it moves; whoever moves a request first (a handoff, a migration) sets None,
and the other then finds the route changed and leaves it alone. Lock order:
``_lock`` before ``_router_lock``.

A handoff runs on a handoff thread once the prefill worker's first token is
in: the decode worker says which leading blocks it holds, the prefill worker
publishes the rest, the decode worker imports them with the request's
continuation (the first token as ResumeState). A failed attempt is retried
once, then the decode worker computes the prompt itself.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from tokenmill.cluster.disagg import DisaggConfig, DisaggMetrics, decide
from tokenmill.cluster.kv_transport import RayObjectStoreTransport
from tokenmill.engine.block_hash import hash_full_blocks
from tokenmill.engine.core_messages import EngineCoreRequest, encode
from tokenmill.engine.request import RequestStatus

log = logging.getLogger(__name__)


class DisaggHandoffs:
    def _init_disagg(self, disagg: DisaggConfig | None) -> None:
        """After the routers exist: disaggregation is on when there is a prefill router."""
        self.disagg = (disagg or DisaggConfig()) if self.prefill_router is not None else None
        self.disagg_metrics = DisaggMetrics()
        self.kv_transport = RayObjectStoreTransport.name
        """How KV blocks travel between workers (the workers' default transport)."""
        self._prefill_legs: Counter = Counter()  # prefill worker -> prefills in flight there (under _router_lock)
        self._handoffs = ThreadPoolExecutor(4, thread_name_prefix="kv-handoff") if self.disagg else None
        self.handoffs_in_flight = 0
        """Handoffs queued or running (under _router_lock); the transfer metrics are final at 0."""

    def _plan_prefill(self, request: EngineCoreRequest, decision) -> str | None:
        """Under the router lock: the prefill worker to compute this prompt, or
        None to compute it on the decode worker ``decision`` chose (disagg.decide)."""
        if self.disagg is None:
            return None
        live = [w.worker_id for w in self.prefill_router.workers if w.alive]
        choice = decide(self.disagg, len(request.prompt_token_ids), decision.overlap_blocks or 0,
                        self.router.config.block_size, [self._prefill_legs[w] for w in live])
        self.disagg_metrics.decisions[choice] += 1
        if choice != "remote":
            return None
        prefill_id = self.prefill_router.route(request.prompt_token_ids).worker_id
        self._prefill_legs[prefill_id] += 1
        return prefill_id

    def _end_prefill_leg(self, flight) -> None:
        prefill_id, flight.prefill_worker = flight.prefill_worker, None
        if prefill_id is not None:
            with self._router_lock:
                self.prefill_router.release(prefill_id, len(flight.request.prompt_token_ids))
                self._prefill_legs[prefill_id] -= 1

    def describe_disagg(self) -> dict:
        """For GET /v1/workers: the rule, its decisions and the transfers so far."""
        d, m = self.disagg, self.disagg_metrics
        with self._router_lock:
            queues = dict(self._prefill_legs)
        return {"min_prefill_tokens": d.min_prefill_tokens, "max_prefill_queue": d.max_prefill_queue,
                "kv_transport": self.kv_transport, "decisions": dict(m.decisions),
                "transfers_in_flight": self.handoffs_in_flight,
                "prefill_queue": {w: n for w, n in queues.items() if n},
                "transfers": m.transfers, "transfer_bytes": m.transfer_bytes, "transfer_blocks": m.transfer_blocks,
                "blocks_skipped": m.blocks_skipped, "transfer_seconds": round(m.transfer_seconds, 6),
                "bandwidth_bytes_per_s": round(m.bandwidth_bytes_per_s, 1),
                "transfer_failures": m.transfer_failures, "local_fallbacks": m.local_fallbacks}

    def _handoff_counted(self, request_id: str, prefill_id: str) -> None:
        try:
            self._handoff(request_id, prefill_id)
        finally:
            with self._router_lock:
                self.handoffs_in_flight -= 1

    def _handoff(self, request_id: str, prefill_id: str) -> None:
        """Move a request whose prompt ``prefill_id`` computed to its decode
        worker (on a handoff thread). Only what the decode worker lacks is sent;
        a failed attempt is retried once, then the decode worker computes the
        prompt itself. The prefill worker's hold ends in every case (the export
        releases it; an abandoned one is released here or expires there)."""
        with self._lock:
            flight = self._inflight.get(request_id)
            if flight is None or self._route.get(request_id) != prefill_id:
                flight = None  # ended, or moved on by a migration meanwhile
            else:
                self._route[request_id] = None  # moving: see the module docstring
                continuation, decode_id = flight.continuation(), flight.decode_worker
        if flight is None:
            self._send_release(prefill_id, request_id)
            return
        self._end_prefill_leg(flight)
        if not self.workers[decode_id].alive:  # its decode worker died meanwhile: another one computes it
            with self._lock:
                self._route[request_id] = decode_id
            self._move_or_fail(request_id, decode_id, RuntimeError(f"decode worker {decode_id} is down"))
            self._send_release(prefill_id, request_id)
            return
        if self._transfer(request_id, prefill_id, decode_id, continuation):
            return
        with self._lock:
            if request_id not in self._inflight or self._route.get(request_id) is not None:
                return  # ended, or a migration took it
            self._route[request_id] = decode_id
        if not self.workers[decode_id].alive:  # the transfer failed because its decode worker died
            self._move_or_fail(request_id, decode_id, RuntimeError(f"decode worker {decode_id} is down"))
            return
        self.disagg_metrics.local_fallbacks += 1
        log.warning("request %s: KV transfer from %s to %s failed; %s computes the prompt", request_id,
                    prefill_id, decode_id, decode_id)
        self._send_continuation(request_id, decode_id, continuation)

    def _transfer(self, request_id: str, prefill_id: str, decode_id: str, continuation: EngineCoreRequest) -> bool:
        """Ask the decode worker what it holds, have the prefill worker publish
        the rest, have the decode worker import it with the continuation; True
        once the request is on the decode worker (or ended meanwhile)."""
        import ray

        timeout = self.disagg.transfer_timeout_s
        prefill, decode = self.workers[prefill_id].actor, self.workers[decode_id].actor
        hashes = hash_full_blocks(list(continuation.prompt_token_ids), self.router.config.block_size)
        exported = None
        for attempt in (1, 2):
            start = time.perf_counter()
            try:
                if exported is None:
                    held = ray.get(decode.held_prefix.remote(hashes), timeout=timeout)
                    exported = ray.get(prefill.export_kv.remote(request_id, held), timeout=timeout)
                    if exported is None:
                        log.warning("request %s: %s no longer holds its prompt", request_id, prefill_id)
                        return False
                handle, nbytes, nblocks = exported
                with self._lock:  # routed before it lands: its first outputs may beat the call's answer
                    if request_id not in self._inflight:
                        return True
                    self._route[request_id] = decode_id
                ray.get(decode.import_kv.remote(encode(continuation), handle), timeout=timeout)
            except Exception as exc:  # a dead or unreachable worker, a timeout, a refused layout
                self.disagg_metrics.transfer_failures += 1
                log.warning("request %s: KV transfer attempt %d %s -> %s failed: %s: %s", request_id, attempt,
                            prefill_id, decode_id, type(exc).__name__, exc)
                with self._lock:
                    route, live = self._route.get(request_id), request_id in self._inflight
                    if live and route == decode_id:
                        self._route[request_id] = route = None  # ours again
                if not live:  # the client left; in case the import landed after all, end it there
                    self._send_finish(decode_id, [request_id], RequestStatus.FINISHED_ABORTED, "abort")
                    return True
                if route is not None:
                    return True  # a migration (its decode worker died) moved it on
                if not self.workers[decode_id].alive:
                    return False  # no retry into a dead worker
                continue
            m = self.disagg_metrics
            m.transfers += 1
            m.transfer_bytes += nbytes
            m.transfer_blocks += nblocks
            m.blocks_skipped += held
            m.transfer_seconds += time.perf_counter() - start
            self._take_back_if_ended(request_id, decode_id)
            return True
        return False

    def _send_continuation(self, request_id: str, worker_id: str, request: EngineCoreRequest) -> None:
        """Submit a request's continuation to ``worker_id`` (its route already
        says so); a worker that fails the submit is handled like a dead one."""
        import ray

        try:
            ray.get(self.workers[worker_id].actor.submit.remote(encode(request)),
                    timeout=self.disagg.transfer_timeout_s)
        except Exception as exc:
            self._submit_failed(request_id, worker_id, exc)
            return
        self._take_back_if_ended(request_id, worker_id)

    def _take_back_if_ended(self, request_id: str, worker_id: str) -> None:
        """The client left while the request moved: end it where it landed."""
        with self._lock:
            ended = request_id not in self._inflight
        if ended:
            self._send_finish(worker_id, [request_id], RequestStatus.FINISHED_ABORTED, "abort")

    def _send_release(self, worker_id: str, request_id: str) -> None:
        """End a prefill worker's hold on a prompt nobody will take (the finish
        verb releases held blocks; the request itself has ended there)."""
        self._send_finish(worker_id, [request_id], RequestStatus.FINISHED_ABORTED, "abort")
