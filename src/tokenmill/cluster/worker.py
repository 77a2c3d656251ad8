"""EngineWorker: one EngineCore in its own process, as a Ray actor.

The worker speaks only the engine-core messages (engine/core_messages.py), as
msgpack bytes: ``submit(EngineCoreRequest)``, ``finish(EngineCoreFinish)``,
and ``poll() -> [EngineCoreOutputs]``. Tokens go back batched per step, not
per token per request: the frontend keeps one ``poll`` call outstanding per
worker, and each answer carries every step the worker ran since the last one
(a long poll). So one Ray round trip serves a whole batch of requests'
tokens, and the per-token cost of the hop stays small.

Inside, the core is built and stepped on its own thread (torch releases the
GIL in its kernels); the actor's asyncio loop only moves bytes. Only the loop
thread touches the core. The worker subscribes to the core's KV events, so
every step's outputs carry them for the router (a KV-aware router mirrors
each worker's cache from them).

Roles (disaggregated serving): an ``aggregated`` worker (the default) does
everything; a ``prefill`` worker gets prefill-only requests and keeps each
finished prompt's blocks until the frontend asks for them
(``export_kv``: copied out on the actor's thread while the core steps on,
then released on the core's thread); a ``decode`` worker reports which leading
blocks of a prompt it already holds (``held_prefix``) and takes the rest with
the request (``import_kv``). A decode worker also serves whole requests (a
prefill kept local). How the blocks travel is the transport's
(cluster/kv_transport.py). A worker may run at a lower CPU priority (``nice``:
prefill workers under ``--prefill-worker-nice``, cluster/cpu_priority.py).

The class is plain Python; ``cluster/launch.py`` wraps it with ``ray.remote``
at placement time (CPUs, GPUs, restarts), so it can be tested without Ray.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time

import msgspec

from tokenmill.cluster.cpu_priority import lower_process_priority
from tokenmill.cluster.kv_transport import make_transport
from tokenmill.config import EngineConfig
from tokenmill.engine.core import EngineCore
from tokenmill.engine.core_messages import (
    EngineCoreOutput,
    EngineCoreOutputs,
    decode_finish,
    decode_request,
    encode,
    failure_message,
)
from tokenmill.engine.gc_heap import freeze_startup_heap
from tokenmill.engine.kv_transfer import KVLayout
from tokenmill.engine.step_log import StepLogFile, logged_step
from tokenmill.engine.step_thread import start_step_thread

log = logging.getLogger(__name__)

ROLES = ("aggregated", "prefill", "decode")

HOLD_CHECK_S = 1.0
"""How often an idle worker that holds exported-to-be blocks checks their expiry."""


class WorkerInfo(msgspec.Struct, frozen=True):
    """What the frontend learns about a worker when it starts."""

    worker_id: str
    node_id: str
    pid: int
    model_name: str
    max_model_len: int
    vocab_size: int
    block_size: int
    tokenizer_source: str | None
    """Where the frontend loads the tokenizer from (it tokenizes, the worker never does)."""
    role: str = "aggregated"
    """aggregated | prefill | decode (ROLES)."""
    kv_layout: KVLayout | None = None
    """What one block of its cache holds: prefill and decode workers must agree."""
    nice: int = 0
    """The nice value its step thread runs at (cluster/cpu_priority.py)."""


class EngineWorker:
    def __init__(self, worker_id: str, config_json: bytes, role: str = "aggregated",
                 kv_transport: str = "ray-object-store", nice: int = 0, step_log: str | None = None):
        """config_json: an EngineConfig as msgspec JSON (plain data, no pickle);
        role: one of ROLES; kv_transport: a cluster.kv_transport name; nice: the
        nice value to run at (0..19), set before the step thread starts so that
        it and its OpenMP threads inherit it; step_log: a file on this worker's
        node to append each step to (engine/step_log.py; `tokenmill serve
        --step-log`), None for none."""
        config = msgspec.json.decode(config_json, type=EngineConfig)
        if role not in ROLES:
            raise ValueError(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
        lower_process_priority(nice)
        self.worker_id, self.role = worker_id, role
        self.transport = make_transport(kv_transport)
        self._inbox: list[tuple[str, object]] = []  # ("submit" | "finish", bytes), ("import", (request, blocks)),
        # ("release", request id)
        self._cv = threading.Condition()
        self._stopped = False
        self._outbox: list[bytes] = []  # encoded EngineCoreOutputs, oldest first
        self._out_lock = threading.Lock()
        self._wakeup: asyncio.Event | None = None  # set from the loop thread when the outbox fills
        self._step_log = StepLogFile(step_log) if step_log else None
        self._loop: asyncio.AbstractEventLoop | None = None

        def build() -> None:  # on the step thread: engine/step_thread.py says why
            self.core = EngineCore(config)
            self.core.subscribe_kv_events()
            self.info = WorkerInfo(worker_id, _node_id(), os.getpid(), self.core.config.served_model_name,
                                   self.core.max_model_len, self.core.arch.vocab_size,
                                   self.core.config.block_size, self.core.tokenizer_source, role,
                                   self.core.kv_layout, os.getpriority(os.PRIO_PROCESS, 0))
            freeze_startup_heap()  # the actor's process lives as long as its engine (engine/gc_heap.py)

        self._thread = start_step_thread(build, self._run, f"tokenmill-{worker_id}")

    # ---- actor methods (the actor's event loop) -------------------------------------

    def describe(self) -> bytes:
        return msgspec.msgpack.encode(self.info)

    async def submit(self, data: bytes) -> None:
        decode_request(data)  # a malformed message fails the caller's call, not the loop
        self._put("submit", data)

    async def finish(self, data: bytes) -> None:
        decode_finish(data)
        self._put("finish", data)

    async def poll(self, timeout_s: float = 1.0) -> list[bytes]:
        """Every step's outputs since the last poll; waits up to ``timeout_s`` for one."""
        if self._wakeup is None:
            self._loop, self._wakeup = asyncio.get_running_loop(), asyncio.Event()
        if not self._outbox:
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout_s)
            except asyncio.TimeoutError:
                pass
        self._wakeup.clear()
        with self._out_lock:
            batch, self._outbox = self._outbox, []
        return batch

    def held_prefix(self, block_hashes: list[int]) -> int:
        """How many leading blocks of a prompt (its chained hashes) this worker's
        prefix cache holds now. Read off the core's thread: a block may be
        evicted right after, and the import then recomputes instead."""
        cached = self.core.pool.cached
        n = 0
        for h in block_hashes:
            if h not in cached:
                break
            n += 1
        return n

    async def export_kv(self, request_id: str, first_block: int) -> tuple[list, int, int] | None:
        """Publish a held prompt's blocks from ``first_block`` on -> (transport
        handle, bytes, blocks), or None if nothing is held for the request. The
        hold is released either way once the copy is made."""
        try:
            blocks = self.core.export_kv(request_id, first_block)
            if blocks is None:
                return None
            return self.transport.publish(blocks), blocks.nbytes, blocks.num_blocks
        finally:
            self._put("release", request_id)

    async def import_kv(self, data: bytes, handle: list) -> None:
        """Fetch a prompt's blocks and queue its request (a continuation after
        the first token) to adopt them. A layout mismatch raises here, to the
        caller, before anything is queued."""
        request = decode_request(data)
        blocks = await self.transport.fetch(handle)
        self.core.kv_layout.check_matches(blocks.layout)
        self._put("import", (request, blocks))

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify()
        self._thread.join(timeout=10)
        if self._step_log is not None and not self._thread.is_alive():
            self._step_log.close()

    def pid(self) -> int:
        return os.getpid()

    # ---- the core's thread --------------------------------------------------------

    def _put(self, kind: str, data: bytes) -> None:
        with self._cv:
            self._inbox.append((kind, data))
            self._cv.notify()

    def _run(self) -> None:
        core = self.core
        while True:
            with self._cv:
                while not self._stopped and not self._inbox and not core.has_unfinished_requests():
                    if not self._cv.wait(HOLD_CHECK_S if core.kv.held else None):
                        break  # idle with held blocks: time to expire the abandoned ones
                if self._stopped:
                    return
                inbox, self._inbox = self._inbox, []
            start = time.perf_counter()  # a step's time runs from taking the inbox, as AsyncEngine's log has it
            if core.kv.held:
                core.kv.expire_holds()
            refused = [self._apply(kind, data) for kind, data in inbox]
            refused = [out for out in refused if out is not None]
            stepped = False
            try:
                outputs = core.step() if core.has_unfinished_requests() else None
                stepped = outputs is not None
            except Exception:  # a model failure: end every request with an error, keep serving
                log.exception("worker %s: engine step failed", self.worker_id)
                outputs = self._fail_all()
            if stepped:
                self._log_step(start)
            if outputs is None:  # messages changed the load (a finish, a refusal): say so
                outputs = EngineCoreOutputs([], core.stats())
            if outputs is not None:
                outputs.outputs[:0] = refused
                self._publish(encode(outputs))

    def _log_step(self, start: float) -> None:
        """The step just run, to the step log (a cycle that scheduled nothing ran no step)."""
        scheduled = self.core.last_schedule
        if self._step_log is not None and scheduled:
            seconds = time.perf_counter() - start
            self._step_log.append(logged_step(scheduled, seconds, time.time() - seconds))

    def _apply(self, kind: str, data) -> EngineCoreOutput | None:
        """Apply one message; a request the core refuses comes back as an error output."""
        if kind == "finish":
            self.core.apply_finish(decode_finish(data))
            return None
        if kind == "release":
            self.core.release_kv(data)
            return None
        request, blocks = data if kind == "import" else (decode_request(data), None)
        if blocks is not None and request.request_id in self.core.scheduler.requests:
            return None  # a retried import whose first try landed after all: keep that one
        try:
            try:
                self.core.add_request(request, kv_blocks=blocks)
            except ValueError as exc:
                if blocks is None:
                    raise
                # Blocks that do not fit (a transfer defect, not the client's doing) lose no request:
                # it computes its prompt here, as when its blocks were evicted (kv_imports_recomputed).
                log.warning("worker %s: request %s's imported KV refused (%s); computing its prompt here",
                            self.worker_id, request.request_id, exc)
                self.core.add_request(request)
                self.core.kv_imports_recomputed += 1
        except Exception as exc:
            log.warning("worker %s refused request %s: %s", self.worker_id, request.request_id, exc)
            return EngineCoreOutput(request.request_id, [], "error", error=str(exc))
        return None

    def _fail_all(self) -> EngineCoreOutputs:
        from tokenmill.engine.request import RequestStatus

        ids = list(self.core.scheduler.requests)
        self.core.finish_requests(ids, RequestStatus.FINISHED_ABORTED, "error")  # counted as the in-process engine does
        error = failure_message("forward", "the worker's engine step raised")
        return EngineCoreOutputs([EngineCoreOutput(rid, [], "error", error=error) for rid in ids], self.core.stats())

    def _publish(self, data: bytes) -> None:
        with self._out_lock:
            self._outbox.append(data)
        if self._loop is not None and self._wakeup is not None:
            try:
                self._loop.call_soon_threadsafe(self._wakeup.set)
            except RuntimeError:  # the actor's loop is closing
                pass


def _node_id() -> str:
    """The Ray node this worker runs on ('local' outside Ray)."""
    try:
        import ray
        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"
    except ImportError:
        return "local"
