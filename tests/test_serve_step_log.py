"""`tokenmill serve --step-log FILE`: the served engine's steps, one line each as they run (engine/step_log.py)."""

from __future__ import annotations

import os
import time
import uuid

import httpx
import pytest

from tokenmill.engine.step_log import LoggedStep, StepLogFile, load_steps

MAX_TOKENS = 5


def test_the_server_logs_each_step_of_a_request(server):
    """One request on the idle server: its prompt in one step over an empty cache (a prompt no test sent
    before), then a decode per further token over a KV length one longer each time, each step logged by
    the time the answer is back, its start in Unix seconds within the request's span."""
    before = len(load_steps(server.step_log))
    sent = time.time()
    reply = httpx.post(f"{server.v1}/completions", timeout=120, json={
        "model": httpx.get(f"{server.v1}/models", timeout=10).json()["data"][0]["id"],
        "prompt": f"A prompt of its own, {uuid.uuid4().hex}, to count the steps of", "max_tokens": MAX_TOKENS,
        "temperature": 0.0, "ignore_eos": True})
    back = time.time()
    assert reply.status_code == 200, reply.text
    prompt = reply.json()["usage"]["prompt_tokens"]
    steps = load_steps(server.step_log)[before:]
    assert [(s.decodes, s.chunks) for s in steps] == [(0, ((prompt, 0),))] + [(1, ())] * (MAX_TOKENS - 1)
    assert [s.decode_context_sum for s in steps[1:]] == list(range(prompt, prompt + MAX_TOKENS - 1))
    assert all(sent <= s.start <= s.start + s.seconds <= back for s in steps)


def test_the_file_is_written_as_steps_run_and_read_on_a_runs_clock(tmp_path):
    log = StepLogFile(tmp_path / "steps.jsonl")
    log.append(LoggedStep(3, 16, 0.02, 1000.5, 300, ((16, 32),)))
    assert len(load_steps(tmp_path / "steps.jsonl")) == 1  # on disk before the file is closed
    log.append(LoggedStep(4, 0, 0.01, 1001.0, 410))
    log.close()
    steps = load_steps(tmp_path / "steps.jsonl", t0_unix=1000.0)
    assert steps == [LoggedStep(3, 16, 0.02, 0.5, 300, ((16, 32),)), LoggedStep(4, 0, 0.01, 1.0, 410)]
    again = StepLogFile(tmp_path / "steps.jsonl")  # a restarted server appends
    again.append(LoggedStep(1, 0, 0.01, 1002.0, 9))
    again.close()
    assert len(load_steps(tmp_path / "steps.jsonl")) == 3


def test_a_failed_write_stops_the_log_not_the_engine(caplog):
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full, a device whose every write fails as a full disk's")
    log = StepLogFile("/dev/full")
    log.append(LoggedStep(1, 0, 0.01, 1.0, 9))  # a warning, no exception
    log.append(LoggedStep(1, 0, 0.01, 2.0, 10))  # stopped: not tried again
    log.close()
    assert caplog.text.count("step log /dev/full stopped") == 1
