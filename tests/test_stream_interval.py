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


def test_one_event_per_interval_tokens_and_the_first_at_once(engine):
    assert _tokens_per_event(engine, 1, 10) == [1] * 10
    assert _tokens_per_event(engine, 4, 10) == [1, 4, 4, 1]  # the last event: the rest, at the finish
    assert _tokens_per_event(engine, 64, 10) == [1, 9]


def test_stream_interval_must_be_positive(capsys):
    from tokenmill.cli import main

    assert main(["serve", "--stream-interval", "0", "--model", "dummy:tiny"]) != 0
    assert "stream_interval: must be a positive number of tokens, got 0" in capsys.readouterr().err
