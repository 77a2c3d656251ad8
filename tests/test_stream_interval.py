"""--stream-interval: one SSE event per N tokens, the first token at once."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tokenmill.config import EngineConfig
from tokenmill.engine.async_engine import AsyncEngine
from tokenmill.serve.api import build_app


@pytest.fixture(scope="module")
def engine():
    engine = AsyncEngine(EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", num_kv_blocks=64,
                                      max_model_len=256))
    yield engine
    engine.shutdown()


def _tokens_per_event(engine, interval: int, max_tokens: int) -> list[int]:
    app = build_app(engine, stream_interval=interval)

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test/v1", timeout=60) as c:
            return await c.post("/completions", json={"prompt": [1, 5, 9], "max_tokens": max_tokens, "logprobs": 1,
                                                      "temperature": 0, "ignore_eos": True, "stream": True})

    resp = asyncio.run(scenario())
    assert resp.status_code == 200, resp.text
    events = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    return [len(c["choices"][0]["logprobs"]["tokens"]) for c in chunks]


def test_events_through_the_server_hold_interval_tokens(engine):
    """End to end: the tokens all arrive, and every event between the first and
    the last carries at least ``interval`` of them. (The first may carry more
    than one: deltas that reached the stream before it was read come merged.)"""
    for interval in (1, 4, 64):
        counts = _tokens_per_event(engine, interval, 10)
        assert sum(counts) == 10 and all(c >= 1 for c in counts)
        assert all(c >= interval for c in counts[1:-1]), (interval, counts)
    assert len(_tokens_per_event(engine, 64, 10)) <= 2


def test_sse_sends_the_first_delta_at_once_then_groups_of_interval_tokens():
    """One token per engine delta: exact event sizes."""
    from tokenmill.outputs import RequestOutput
    from tokenmill.serve.completions import CompletionFormatter
    from tokenmill.serve.fanout import Choice
    from tokenmill.serve.generation import _sse
    from tokenmill.serve.logprobs import TokenDecoder
    from tokenmill.serve.metrics import RequestTimer, ServerMetrics

    def deltas(n):
        return [RequestOutput("r", [i], f"t{i} ", i == n - 1, "length" if i == n - 1 else None,
                              num_prompt_tokens=3, num_output_tokens=i + 1) for i in range(n)]

    async def events(interval, n):
        outs = deltas(n)

        async def rest():
            for o in outs[1:]:
                yield o

        timer = RequestTimer(ServerMetrics(None))
        formatter = CompletionFormatter("m", TokenDecoder(None), False)
        choice = Choice(0, 0, None, formatter, timer)  # already started: its first output is in
        choice.outputs, choice.first = rest(), outs[0]
        return [e async for e in _sse([choice], 1, False, interval)]

    for interval, expected in ((1, ["t0 "] + [f"t{i} " for i in range(1, 10)]),
                               (4, ["t0 ", "t1 t2 t3 t4 ", "t5 t6 t7 t8 ", "t9 "]),
                               (64, ["t0 ", "".join(f"t{i} " for i in range(1, 10))])):
        got = asyncio.run(events(interval, 10))
        assert got[-1] == "data: [DONE]\n\n"
        texts = [json.loads(e[6:])["choices"][0]["text"] for e in got[:-1]]
        assert texts == expected, interval


def test_stream_interval_must_be_positive(capsys):
    from tokenmill.cli import main

    assert main(["serve", "--stream-interval", "0", "--model", "dummy:tiny"]) != 0
    assert "stream_interval: must be a positive number of tokens, got 0" in capsys.readouterr().err
