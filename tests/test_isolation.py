"""One request's failure fails that request only (engine/isolation.py).

Faults are injected where they could really happen (the model's forward pass,
the sampler, the detokenizer) into a real engine on a tiny dummy model; the
other requests must finish with exactly the tokens they get without the
failing one, its blocks must be freed, and the failure counted and named.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

import tokenmill.engine.distribution as distribution_module
from tokenmill.config import EngineConfig
from tokenmill.engine.async_engine import AsyncEngine
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.output_processor import RequestTextState
from tokenmill.sampling_params import SamplingParams
from tokenmill.serve.api import build_app

POISON = 511  # the forward pass "fails" on any batch holding this token id
PROMPTS = [[1, 5, 9, 14, 3], [7, 7, 8], list(range(20, 60)), [100, 200, 300]]
PARAMS = [SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True),
          SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=2),
          SamplingParams(max_tokens=12, temperature=0.9, seed=5, ignore_eos=True),
          SamplingParams(max_tokens=12, temperature=0.0, repetition_penalty=1.4, ignore_eos=True)]


def tiny_engine(**overrides) -> LLMEngine:
    config = dict(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", num_kv_blocks=64,
                  max_model_len=256, max_num_batched_tokens=32)  # 32: the 40-token prompt is chunked
    return LLMEngine(EngineConfig(**{**config, **overrides}))


@pytest.fixture(scope="module")
def engine():
    return tiny_engine()


@pytest.fixture(scope="module")
def clean(engine):
    """The requests' tokens with no failing request beside them."""
    return [r.token_ids for r in engine.generate(PROMPTS, PARAMS)]


def poison_forward(engine: LLMEngine, monkeypatch) -> None:
    model = engine.core.runner.model
    real = model.forward

    def forward(input_ids, *args, **kwargs):
        if (input_ids == POISON).any():
            raise RuntimeError("injected forward fault")
        return real(input_ids, *args, **kwargs)

    monkeypatch.setattr(model, "forward", forward)


def check_others(results, clean, failed_index: int) -> None:
    for i, r in enumerate(results):
        if i == failed_index:
            assert r.finish_reason == "error" and r.token_ids == []
        else:
            assert (r.finish_reason, r.token_ids) == ("length", clean[i])


def test_forward_failure_retries_without_the_suspect(engine, clean, monkeypatch, caplog):
    poison_forward(engine, monkeypatch)
    before = engine.stats()
    bad = [3, 4, POISON, 6]
    results = engine.generate(PROMPTS[:2] + [bad] + PROMPTS[2:], PARAMS[:2] + [PARAMS[0]] + PARAMS[2:])
    check_others(results[:2] + results[3:], clean, failed_index=-1)
    assert results[2].finish_reason == "error"
    after = engine.stats()
    assert after.forward_retries == before.forward_retries + 1  # only the first step failed
    assert after.request_failures.get("forward", 0) == before.request_failures.get("forward", 0) + 1
    assert after.aborted_requests.get("error", 0) == before.aborted_requests.get("error", 0) + 1
    assert engine.core.pool.num_used_blocks == 0 and not engine.core.scheduler.requests
    assert any(results[2].request_id in rec.getMessage() and "forward" in rec.getMessage()
               for rec in caplog.records)


def test_sampling_failure_fails_that_request_only(engine, clean, monkeypatch):
    real = distribution_module.apply_top_p

    def exploding(w, top_p):
        if 0.77 in top_p:
            raise RuntimeError("injected sampler fault")
        real(w, top_p)

    monkeypatch.setattr(distribution_module, "apply_top_p", exploding)
    before = engine.stats().request_failures.get("sampling", 0)
    bad = SamplingParams(max_tokens=12, temperature=0.5, top_p=0.77)
    results = engine.generate(PROMPTS + [[9, 9, 9]], PARAMS + [bad])
    check_others(results, clean + [None], failed_index=4)
    assert engine.stats().request_failures["sampling"] == before + 1
    assert engine.core.pool.num_used_blocks == 0


def test_output_processing_failure_fails_that_request_only(engine, clean):
    ids = [engine.add_request(None, p, sp) for p, sp in zip(PROMPTS, PARAMS)]
    victim = ids[1]

    def broken(*_):
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "injected detokenizer fault")

    engine.output_processor.states[victim].process = broken
    tokens, finish = {rid: [] for rid in ids}, {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens[out.request_id] += out.new_token_ids
            if out.finished:
                finish[out.request_id] = (out.finish_reason, out.error)
    assert finish[victim][0] == "error" and "injected detokenizer fault" in finish[victim][1]
    for i, rid in enumerate(ids):
        if rid != victim:
            assert (finish[rid][0], tokens[rid]) == ("length", clean[i])
    assert engine.core.pool.num_used_blocks == 0


def test_server_answers_the_failed_request_and_serves_the_rest(monkeypatch):
    """Through the HTTP app: a request that fails before its first token gets a
    500 with the OpenAI error body (code engine_error), streamed or not; one that
    fails mid-stream gets an error event, then [DONE]; the others get 200."""
    engine = tiny_engine()
    expected = [r.token_ids for r in engine.generate(PROMPTS[:2], PARAMS[:2])]
    poison_forward(engine, monkeypatch)
    real_process = RequestTextState.process

    def process(self, *args):  # the request with max_tokens=7 fails at its third token
        if self.request.params.max_tokens == 7 and self.num_output_tokens == 2:
            raise RuntimeError("injected detokenizer fault")
        return real_process(self, *args)

    monkeypatch.setattr(RequestTextState, "process", process)
    async_engine = AsyncEngine(engine)
    app = build_app(async_engine)

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test/v1", timeout=60) as c:
            def body(prompt, **extra):
                return {"prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": True, **extra}

            answers = await asyncio.gather(
                c.post("/completions", json=body(PROMPTS[0])),
                c.post("/completions", json=body([1, POISON])),
                c.post("/completions", json=body(PROMPTS[1], logprobs=2)),
                c.post("/completions", json=body([POISON, 2], stream=True)),
                c.post("/completions", json=body([5, 6, 7], stream=True, max_tokens=7)))
            return answers, (await c.get("http://test/metrics")).text

    try:
        (ok0, bad, ok1, bad_stream, mid_stream), metrics = asyncio.run(scenario())
    finally:
        async_engine.shutdown()
    for resp, tokens in ((ok0, expected[0]), (ok1, expected[1])):
        assert resp.status_code == 200, resp.text
        assert resp.json()["usage"]["completion_tokens"] == len(tokens)
    for resp in (bad, bad_stream):
        assert resp.status_code == 500, resp.text
        error = resp.json()["error"]
        assert error["code"] == "engine_error" and error["type"] == "server_error"
        assert "injected forward fault" in error["message"]
    assert mid_stream.status_code == 200  # the answer had started: the failure came after token 1
    events = [line[6:] for line in mid_stream.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == "engine_error" and "injected detokenizer fault" in error["message"]
    assert 'tokenmill:request_failures_total{stage="forward"} 2.0' in metrics
    assert 'tokenmill:request_failures_total{stage="output"} 1.0' in metrics
    assert engine.core.pool.num_used_blocks == 0
