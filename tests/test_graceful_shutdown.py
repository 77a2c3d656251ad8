"""SIGTERM drains: a cluster server (2 Ray workers) lets its in-flight streams
finish, refuses new connections meanwhile, then stops its workers and the Ray
instance it started."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import pytest
from conftest import start_server, stop_server

pytest.importorskip("ray")

MAX_TOKENS = 1500
ARGS = ("--model", "dummy:tiny", "--load-format", "dummy", "--dtype", "float32", "--num-threads", "1",
        "--max-model-len", "2048", "--num-kv-blocks", "256", "--workers", "2", "--worker-num-cpus", "1",
        "--shutdown-timeout", "120")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _refused(url: str) -> bool:
    """No new request is served: the connection is refused, or (one that the
    kernel queued as the listening socket closed) dropped or reset without an
    answer."""
    try:
        httpx.get(f"{url}/health", timeout=2)
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
        return True
    return False


def test_sigterm_finishes_in_flight_streams_then_stops_workers_and_ray(tmp_path):
    srv = start_server(ARGS, tmp_path / "serve.log")
    try:
        workers = httpx.get(f"{srv.v1}/workers", timeout=10).json()["data"]
        model = httpx.get(f"{srv.v1}/models", timeout=10).json()["data"][0]["id"]
        body = {"model": model, "prompt": [5, 6, 7], "max_tokens": MAX_TOKENS, "ignore_eos": True,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        chunks, ended = [], []

        def read_stream(lines) -> None:
            for line in lines:
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line[len("data: "):]))
            ended.append(time.monotonic())

        with httpx.Client(timeout=120) as client, client.stream("POST", f"{srv.v1}/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            reader = threading.Thread(target=read_stream, args=(lines,))
            srv.proc.send_signal(signal.SIGTERM)  # the request is admitted: its 200 has started
            reader.start()
            deadline = time.monotonic() + 30
            while not _refused(srv.url) and time.monotonic() < deadline:
                time.sleep(0.05)
            refused_at = time.monotonic()
            reader.join(timeout=120)
        # New connections were refused while the stream still ran ...
        assert refused_at < deadline and ended and refused_at < ended[0], "no drain: refused after the stream ended"
        # ... and the stream ran to its end: every token, finish_reason length, no error.
        assert chunks[-1]["usage"]["completion_tokens"] == MAX_TOKENS
        finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
        assert finishes[-1] == "length" and "error" not in finishes
        srv.proc.wait(timeout=60)  # exits (with Ray's SIGTERM handler's code 15 when it started Ray)
        deadline = time.monotonic() + 30
        while not all(_gone(w["pid"]) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(_gone(w["pid"]) for w in workers), "engine workers outlived the server"
        assert "Traceback" not in srv.log(), srv.log()[-3000:]
    finally:
        if srv.proc.poll() is None:
            stop_server(srv.proc)
