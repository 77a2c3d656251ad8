"""Runs one LoadGen test against a Backend and records every query.

Threads: LoadGen calls ``issue_queries`` on its own thread; each query becomes
a task on the driver's asyncio loop (its own thread), where the backend
streams it. The task reports to LoadGen from that loop thread:
``FirstTokenComplete`` when the first content token arrives, then
``QuerySamplesComplete`` with the output token count.

Invariant: every query LoadGen issues is completed exactly once, with
FirstTokenComplete before QuerySamplesComplete, even when the backend fails
(LoadGen waits forever for a missing completion, and its accuracy mode crashes
on a completion without a first token).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenmill.bench.backend import Backend, QueryOutcome
from tokenmill.bench.results import QueryRecord
from tokenmill.bench.settings import BenchSettings, to_test_settings
from tokenmill.bench.workload import Workload

log = logging.getLogger(__name__)


@dataclass
class DriverRun:
    records: list[QueryRecord]
    texts: dict[int, str]
    """Sample index -> output text of its last completed query (accuracy scoring)."""
    wall_s: float
    """Whole LoadGen test, start to end, on the client clock."""
    t0_unix: float
    """Wall-clock time (Unix seconds) of the records' time 0."""


class LoadGenDriver:
    def __init__(self, backend: Backend, workload: Workload, settings: BenchSettings, log_dir: str | Path,
                 progress: bool = True):
        if not workload.samples:
            raise ValueError("workload: no samples")
        self.backend = backend
        self.workload = workload
        self.settings = settings
        self.log_dir = Path(log_dir)
        self.progress = progress
        self._records: list[QueryRecord] = []
        self._texts: dict[int, str] = {}
        self._lock = threading.Lock()
        self._t0 = self._t0_unix = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._limit: asyncio.Semaphore | None = None
        self._bar = None

    # ---- public ---------------------------------------------------------------------

    def run(self) -> DriverRun:
        import mlperf_loadgen as lg

        self.log_dir.mkdir(parents=True, exist_ok=True)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="bench-client", daemon=True)
        thread.start()
        self._loop = loop
        try:
            self._call(self.backend.start())
            if self.settings.max_concurrency:
                self._limit = self._call(_make_semaphore(self.settings.max_concurrency))
            n = len(self.workload.samples)
            test_settings = to_test_settings(self.settings, n)
            log_settings = lg.LogSettings()
            log_settings.log_output.outdir = str(self.log_dir)
            log_settings.log_output.copy_summary_to_stdout = False
            sut = lg.ConstructSUT(self._issue_queries, _flush_queries)
            qsl = lg.ConstructQSL(n, n, _load_samples, _load_samples)
            self._bar = self._progress_bar(n)
            self._t0, self._t0_unix = time.perf_counter(), time.time()
            try:
                lg.StartTestWithLogSettings(sut, qsl, test_settings, log_settings)
            finally:
                wall = time.perf_counter() - self._t0
                lg.DestroyQSL(qsl)
                lg.DestroySUT(sut)
                if self._bar is not None:
                    self._bar.close()
        finally:
            try:
                self._call(self.backend.close())
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=10)
                loop.close()
        self._records.sort(key=lambda r: r.issued_s)
        return DriverRun(self._records, self._texts, wall, self._t0_unix)

    # ---- LoadGen callbacks (LoadGen's threads) --------------------------------------

    def _issue_queries(self, query_samples) -> None:
        now = time.perf_counter() - self._t0
        for q in query_samples:
            asyncio.run_coroutine_threadsafe(self._serve(q.id, q.index, now), self._loop)

    # ---- one query (the driver's loop thread) ---------------------------------------

    async def _serve(self, query_id: int, index: int, issued_s: float) -> None:
        import mlperf_loadgen as lg

        sample = self.workload.samples[index]
        record = QueryRecord(sample_index=index, issued_s=issued_s, prompt_tokens=len(sample.prompt_token_ids))
        first = np.zeros(1, dtype=np.int32)  # LoadGen wants a buffer with the first token; content unused

        def on_first_token() -> None:
            if record.first_token_s is None:
                record.first_token_s = time.perf_counter() - self._t0
                lg.FirstTokenComplete([lg.QuerySampleResponse(query_id, first.ctypes.data, first.nbytes)])

        try:
            if self._limit is not None:
                async with self._limit:
                    outcome = await self.backend.run(sample, on_first_token)
            else:
                outcome = await self.backend.run(sample, on_first_token)
        except Exception as exc:  # a backend bug must not leave LoadGen waiting forever
            log.exception("backend failed on sample %d", index)
            outcome = QueryOutcome(output_tokens=0, error=f"{type(exc).__name__}: {exc}")
        if record.first_token_s is None:  # failed before any token: LoadGen still needs the event
            on_first_token()
        record.finished_s = time.perf_counter() - self._t0
        record.output_tokens = outcome.output_tokens
        record.usage_output_tokens = outcome.usage_output_tokens
        record.error = outcome.error
        if outcome.prompt_tokens:
            record.prompt_tokens = outcome.prompt_tokens
        # The response data LoadGen logs (accuracy mode) is the output text.
        data = np.frombuffer(outcome.text.encode("utf-8") or b"\0", dtype=np.uint8).copy()
        # LoadGen's TPOT divides by this count: the server's, where it reported one (QueryRecord.generated_tokens).
        lg.QuerySamplesComplete([lg.QuerySampleResponse(query_id, data.ctypes.data, data.nbytes,
                                                        max(record.generated_tokens, 1))])
        with self._lock:
            self._records.append(record)
            self._texts[index] = outcome.text
        if self._bar is not None:
            self._bar.update(1)

    # ---- helpers ----------------------------------------------------------------------

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _progress_bar(self, num_samples: int):
        if not self.progress:
            return None
        from tqdm import tqdm

        s = self.settings
        if s.mode == "accuracy":
            total = num_samples
        elif s.scenario in ("server", "interactive"):
            total = max(s.effective_min_query_count(num_samples),
                        int(s.target_qps * s.effective_min_duration_s()))
        else:
            total = s.effective_min_query_count(num_samples)
        return tqdm(total=total, desc=f"{s.scenario} {self.backend.label}", unit="query", file=sys.stderr,
                    dynamic_ncols=True)


async def _make_semaphore(n: int) -> asyncio.Semaphore:
    return asyncio.Semaphore(n)  # created on the loop that will use it


def _flush_queries() -> None:
    """LoadGen's flush hook: nothing is buffered on our side."""


def _load_samples(indices) -> None:
    """LoadGen's load/unload hooks: samples are already in memory."""
