"""`tokenmill serve --prefill-workers 1 --decode-workers 1` with the embedded
model: chat and raw prompts, streamed and not, answer exactly like the
in-process engine, the prompts' KV moves between the workers (only what the
decode worker lacks), and /v1/workers and /metrics say so."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from conftest import DTYPE, NUM_THREADS, start_server, stop_server

pytest.importorskip("ray")

MIN_PREFILL = 64
SYSTEM = " ".join(f"Fact {i}: the number {i} is {'even' if i % 2 == 0 else 'odd'}." for i in range(12))
"""A system prompt of ~150 tokens: above --disagg-min-prefill-tokens, so it is prefilled remotely."""


@pytest.fixture(scope="module")
def disagg_server(tmp_path_factory):
    srv = start_server(("--prefill-workers", "1", "--decode-workers", "1", "--max-model-len", "512",
                        "--num-kv-blocks", "256", "--num-threads", str(NUM_THREADS), "--dtype", DTYPE,
                        "--disagg-min-prefill-tokens", str(MIN_PREFILL)),
                       tmp_path_factory.mktemp("disagg") / "serve.log")
    yield srv
    stop_server(srv.proc)


def disaggregation(srv) -> dict:
    """/v1/workers' figures once no handoff is under way (an answer can be
    complete before the handoff thread that moved it has counted its transfer)."""
    deadline = time.monotonic() + 30
    while True:
        d = httpx.get(f"{srv.v1}/workers", timeout=10).json()["disaggregation"]
        if d["transfers_in_flight"] == 0 or time.monotonic() > deadline:
            return d
        time.sleep(0.05)


def chat(srv, messages, stream: bool, max_tokens: int = 24) -> str:
    body = {"model": "SmolLM2-135M-Instruct", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "stream": stream}
    if not stream:
        return httpx.post(f"{srv.v1}/chat/completions", json=body, timeout=120).json()["choices"][0]["message"][
            "content"]
    text = ""
    with httpx.stream("POST", f"{srv.v1}/chat/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                choices = json.loads(line[6:])["choices"]
                text += (choices[0]["delta"].get("content") or "") if choices else ""
    return text


def test_chat_and_raw_prompts_answer_like_the_engine(disagg_server, greedy):
    srv = disagg_server
    assert "1 prefill, 1 decode on Ray" in srv.banner
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Is 7 even or odd?"}]
    want = greedy(messages, 24).text
    before = disaggregation(srv)
    assert chat(srv, messages, stream=False) == want
    assert chat(srv, messages, stream=True) == want  # now cached on the decode worker: computed there
    raw = httpx.post(f"{srv.v1}/completions", json={"model": "SmolLM2-135M-Instruct", "prompt": SYSTEM,
                                                    "max_tokens": 16, "temperature": 0}, timeout=120).json()
    assert raw["choices"][0]["text"] == greedy(SYSTEM, 16).text
    after = disaggregation(srv)
    assert after["decisions"].get("remote", 0) - before["decisions"].get("remote", 0) == 2
    assert after["decisions"].get("local_short", 0) - before["decisions"].get("local_short", 0) == 1
    assert after["transfers"] - before["transfers"] == 2 and after["transfer_failures"] == 0


def test_a_prefix_the_decode_worker_holds_is_not_sent_again(disagg_server, greedy):
    srv = disagg_server
    question = "List the odd numbers among the facts above, then the even ones, then explain why. " * 4
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Is 3 odd?"}]
    second = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    chat(srv, first, stream=False, max_tokens=4)
    before = disaggregation(srv)
    assert chat(srv, second, stream=False, max_tokens=12) == greedy(second, 12).text
    after = disaggregation(srv)
    assert after["transfers"] == before["transfers"] + 1  # the long question is still remote work
    assert after["blocks_skipped"] - before["blocks_skipped"] >= 8  # the system prompt's blocks stayed home
    metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
    assert 'tokenmill:worker_alive{role="prefill",worker="prefill-0"} 1.0' in metrics
    assert "tokenmill:kv_transfer_bytes_total" in metrics
