"""AsyncEngine: the asyncio facade over LLMEngine (implements EngineClient).

The in-process client of an EngineCore, built and stepped on one loop thread
(engine/step_thread.py says why the same thread). Requests are validated and tokenized
on the caller's side (``InputProcessor``, in ``generate``), then handed as
``EngineCoreRequest`` messages to the loop thread through a locked inbox. The
loop thread runs the core's steps and the output processor (torch releases
the GIL inside kernels, so the event loop stays responsive); a step's text
deltas go back to the requests' asyncio.Queues in one ``call_soon_threadsafe``
(``put_all``). Only the loop thread touches the core.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import AsyncIterator

from tokenmill.config import EngineConfig
from tokenmill.engine.client import EngineStats
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.request import RequestStatus
from tokenmill.engine.step_log import LoggedStep, logged_step
from tokenmill.engine.step_thread import start_step_thread
from tokenmill.errors import QueueFullError, RequestError
from tokenmill.outputs import RequestOutput, merge_outputs
from tokenmill.sampling_params import SamplingParams

log = logging.getLogger(__name__)


class OutputStream:
    """One request's outputs, handed from an engine thread to the asyncio loop
    of the coroutine that consumes them."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()

    def put(self, item) -> None:
        put_all([(self, item)])

    async def outputs(self) -> AsyncIterator[RequestOutput]:
        """The request's outputs until the finished one; an exception put in
        its place (the engine stopped) is raised here. Outputs that queued up
        while the consumer was busy come as one merged delta (``merge_outputs``):
        a consumer that falls behind catches up in one iteration, not one per step.
        A failure (an exception or an output finished with "error") is never
        merged into the tokens before it: they come first, the failure next, so
        whether a stream had started when its request failed does not depend on
        how far its consumer had fallen behind."""
        held = None
        while True:
            if held is None:
                item = await self.queue.get()
            else:
                item, held = held, None
            if isinstance(item, BaseException):
                raise item
            ready = [item]
            while not self.queue.empty() and not ready[-1].finished:
                nxt = self.queue.get_nowait()
                if isinstance(nxt, BaseException) or nxt.finish_reason == RequestStatus.FINISHED_ERROR.value:
                    held = nxt  # yielded (or raised) on its own, after what came before it
                    break
                ready.append(nxt)
            item = merge_outputs(ready) if len(ready) > 1 else item
            yield item
            if item.finished:
                return


def put_all(items: list[tuple[OutputStream, object]]) -> None:
    """Hand each (stream, output or exception) to its stream, from any thread:
    one wake-up of each consumer loop for the whole list (a step's outputs),
    not one per output. A stream whose loop is gone (client finished, event
    loop closed) has nobody waiting for it: its items are dropped."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[OutputStream, object]]] = {}
    for stream, item in items:
        by_loop.setdefault(stream.loop, []).append((stream, item))
    for loop, batch in by_loop.items():
        if loop.is_closed():
            continue
        try:
            loop.call_soon_threadsafe(_put_batch, batch)
        except RuntimeError:
            log.debug("dropped %d outputs for a closed event loop", len(batch))


def _put_batch(batch: list[tuple[OutputStream, object]]) -> None:
    for stream, item in batch:
        stream.queue.put_nowait(item)


class AsyncEngine:
    def __init__(self, engine: LLMEngine | EngineConfig):
        """engine: an EngineConfig, built on the loop thread (the fast way on
        CPU: engine/step_thread.py), or an engine already built (tests)."""
        self._streams: dict[str, OutputStream] = {}
        self._inbox: list[tuple[str, object]] = []  # ("add", EngineCoreRequest) | ("abort", (request_id, reason))
        self._pending_adds = 0
        self._cv = threading.Condition()
        self._stopped = False
        self.step_log: list[LoggedStep] | None = None
        """When a list: each engine-thread cycle that ran a step appends its record
        (engine/step_log.py: one-token runs, the longer runs, seconds from taking the
        inbox to the outputs ready to hand off, its start as time.time()), before
        handing them off, so a consumer that has a step's outputs finds its entry;
        `tokenmill bench` (engine_steps.jsonl), `tokenmill sim calibrate` and
        benchmarks/serving_stalls.py read it."""

        def build() -> None:
            self.engine = engine if isinstance(engine, LLMEngine) else LLMEngine(engine)
            self.model_name = self.engine.model_name
            self.max_model_len = self.engine.max_model_len
            self.tokenizer = self.engine.tokenizer
            self._stats = self.engine.stats()

        self._thread = start_step_thread(build, self._loop, "tokenmill-engine")

    @classmethod
    def from_config(cls, config: EngineConfig) -> "AsyncEngine":
        return cls(config)

    async def generate(self, prompt: str | list[int], params: SamplingParams,
                       request_id: str | None = None) -> AsyncIterator[RequestOutput]:
        request = self.engine.make_request(prompt, params, request_id)
        limit = self.engine.config.max_waiting_requests
        stream = OutputStream(asyncio.get_running_loop())
        with self._cv:
            if limit is not None and self._stats.num_waiting + self._pending_adds >= limit:
                raise QueueFullError(f"the waiting queue is full ({limit} requests)")
            if request.request_id in self._streams:
                raise RequestError("request_id", f"duplicate request id {request.request_id!r}")
            self._streams[request.request_id] = stream
            self._inbox.append(("add", request))
            self._pending_adds += 1
            self._cv.notify()
        finished = False
        try:
            async for item in stream.outputs():
                finished = item.finished
                yield item
        finally:
            if not finished:  # the consumer stopped reading (client went away): free its blocks
                self._submit_abort(request.request_id, "client_disconnect")

    async def abort(self, request_id: str) -> None:
        self._submit_abort(request_id, "abort")

    def _submit_abort(self, request_id: str, reason: str) -> None:
        with self._cv:
            self._inbox.append(("abort", (request_id, reason)))
            self._cv.notify()

    def stats(self) -> EngineStats:
        return self._stats

    def shutdown(self) -> None:
        """Stop the loop thread; requests still in flight end with an error."""
        with self._cv:
            self._stopped = True
            self._cv.notify()
        self._thread.join(timeout=10)

    # ---- engine thread ------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and not self._inbox and not self.engine.has_unfinished_requests():
                    self._cv.wait()
                inbox, self._inbox = self._inbox, []
                stopping = self._stopped
            start = time.perf_counter()
            if stopping:
                self._apply(inbox)
                self._fail_all(RuntimeError("the engine is shutting down"), "shutdown")
                return
            self._apply(inbox)
            if not self.engine.has_unfinished_requests():
                self._refresh_stats()
                continue
            try:
                outputs = self.engine.step()
            except Exception as exc:  # a model failure must not strand the clients
                log.exception("engine step failed; failing the running requests")
                self._fail_all(exc, "error")
                continue
            self._refresh_stats()
            self._log_step(start)  # before the hand-off: whoever got this step's outputs finds its entry
            self._deliver(outputs)

    def _log_step(self, start: float) -> None:
        step_log = self.step_log  # one read: another thread may swap or clear it
        scheduled = self.engine.core.last_schedule
        if step_log is not None and scheduled:  # a cycle that scheduled nothing ran no step (nor counted one)
            seconds = time.perf_counter() - start
            step_log.append(logged_step(scheduled, seconds, time.time() - seconds))

    def _apply(self, inbox) -> None:
        adds = 0
        for kind, payload in inbox:
            if kind == "add":
                adds += 1
                try:
                    self.engine.add(payload)
                except Exception as exc:  # this request's problem (add registers nothing when it raises)
                    log.exception("adding request %s failed", payload.request_id)
                    self._deliver_final(payload.request_id, exc)
            else:
                request_id, reason = payload
                self._deliver_final(request_id, self.engine.abort(request_id, reason))
        # Move the adds from "pending" to "waiting" in one locked update, so the
        # queue-limit check in generate() never sees a request in neither.
        with self._cv:
            self._pending_adds -= adds
            self._stats = self.engine.stats()

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        """A step's outputs to their streams, in one hand-off (``put_all``)."""
        items = []
        for out in outputs:
            stream = self._streams.pop(out.request_id, None) if out.finished else self._streams.get(out.request_id)
            if stream is not None:
                items.append((stream, out))
        put_all(items)

    def _deliver_final(self, request_id: str, item: RequestOutput | Exception | None) -> None:
        """Hand a request's last item (its final output or an error) to its stream."""
        stream = self._streams.pop(request_id, None)
        if stream is not None and item is not None:
            stream.put(item)

    def _fail_all(self, exc: Exception, reason: str) -> None:
        for rid in list(self.engine.core.scheduler.requests):
            self.engine.abort(rid, reason)
            stream = self._streams.pop(rid, None)
            if stream is not None:
                stream.put(RuntimeError(f"engine step failed: {exc}"))

    def _refresh_stats(self) -> None:
        self._stats = self.engine.stats()
