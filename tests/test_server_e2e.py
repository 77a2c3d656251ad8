"""End-to-end: the official openai SDK against a real ``tokenmill serve`` subprocess.

Greedy (temperature 0) answers must equal the engine's own output for the
same (chat-templated) prompt, streamed or not, alone or among 32 streams.
"""

from __future__ import annotations

import asyncio
import http.client
import time
from urllib.parse import urlsplit

import httpx
import openai

MAX_TOKENS = 16
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name three colors."}],
    [{"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "user", "content": "How many legs does a spider have?"}],
]
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "The three primary colors are"]



def test_health_and_models(server, client):
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    cards = client.models.list().data
    assert [c.id for c in cards] == ["SmolLM2-135M-Instruct"]
    assert cards[0].model_extra["max_model_len"] == 512


def test_idle_connection_outlives_uvicorns_default_keep_alive(server):
    """--timeout-keep-alive reaches uvicorn: one connection serves two requests 5.5 s apart
    (with uvicorn's default 5 s the server would have closed it and the second read gets EOF)."""
    url = urlsplit(server.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    try:
        sockets = []
        for gap_s in (0.0, 5.5):
            time.sleep(gap_s)
            conn.request("GET", "/health")  # a closed connection: RemoteDisconnected on the read
            response = conn.getresponse()
            assert response.status == 200 and not response.will_close
            response.read()
            sockets.append(conn.sock)
        assert sockets[0] is sockets[1]  # the one connection, not a silent reconnect
    finally:
        conn.close()


def test_banner_reports_engine(server):
    for needle in ("SmolLM2-135M-Instruct", "device:", "dtype:", "256 blocks", "max_model_len: 512", server.url):
        assert needle in server.banner


def test_chat_greedy_equals_engine(client, model, greedy):
    ref = greedy(CHATS[0], MAX_TOKENS)
    resp = client.chat.completions.create(model=model, messages=CHATS[0], max_tokens=MAX_TOKENS, temperature=0)
    choice = resp.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == ref.text
    assert choice.finish_reason == ref.finish_reason
    assert resp.usage.prompt_tokens == len(ref.prompt_token_ids)
    assert resp.usage.completion_tokens == len(ref.token_ids)
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_chat_stream_with_usage(client, model, greedy):
    ref = greedy(CHATS[1], MAX_TOKENS)
    stream = client.chat.completions.create(model=model, messages=CHATS[1], max_completion_tokens=MAX_TOKENS,
                                            temperature=0, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ref.text
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [ref.finish_reason]
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == len(ref.token_ids)
    assert last.usage.prompt_tokens == len(ref.prompt_token_ids)


def test_completion_greedy_equals_engine(client, model, greedy):
    ref = greedy(PROMPTS[0], MAX_TOKENS)
    resp = client.completions.create(model=model, prompt=PROMPTS[0], max_tokens=MAX_TOKENS, temperature=0)
    assert resp.choices[0].text == ref.text
    assert resp.choices[0].finish_reason == ref.finish_reason
    assert resp.usage.completion_tokens == len(ref.token_ids)
    assert resp.usage.prompt_tokens == len(ref.prompt_token_ids)


def test_completion_stream_equals_engine(client, model, greedy):
    ref = greedy(PROMPTS[1], MAX_TOKENS)
    stream = client.completions.create(model=model, prompt=PROMPTS[1], max_tokens=MAX_TOKENS, temperature=0,
                                       stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks) == ref.text
    assert chunks[-1].choices[0].finish_reason == ref.finish_reason
    assert len(chunks) >= 2  # really streamed, not one blob


def test_token_id_prompt_matches_text_prompt(client, model, greedy):
    ref = greedy(PROMPTS[0], MAX_TOKENS)
    resp = client.completions.create(model=model, prompt=ref.prompt_token_ids, max_tokens=MAX_TOKENS,
                                     temperature=0)
    assert resp.choices[0].text == ref.text


def test_stop_string_cuts_output(client, model, greedy):
    ref = greedy(PROMPTS[2], 24)
    words = ref.text.split()
    assert len(words) >= 3, ref.text
    stop = " " + words[2]
    cut = ref.text.index(stop)
    resp = client.completions.create(model=model, prompt=PROMPTS[2], max_tokens=24, temperature=0, stop=[stop])
    assert resp.choices[0].text == ref.text[:cut]
    assert resp.choices[0].finish_reason == "stop"


def test_seed_makes_sampling_reproducible(client, model):
    def sample(seed):
        return client.completions.create(model=model, prompt=PROMPTS[3], max_tokens=12, temperature=1.0,
                                         top_p=0.95, seed=seed).choices[0].text

    assert sample(1234) == sample(1234)


def test_sampling_extensions_accepted(client, model):
    resp = client.chat.completions.create(
        model=model, messages=CHATS[2], max_tokens=8, temperature=0.7, top_p=0.9, seed=7,
        presence_penalty=0.5, frequency_penalty=0.5,
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "ignore_eos": True})
    assert resp.usage.completion_tokens == 8  # ignore_eos: runs to max_tokens
    assert resp.choices[0].finish_reason == "length"


def test_chat_logprobs(client, model, greedy):
    ref = greedy(CHATS[3], 8)
    resp = client.chat.completions.create(model=model, messages=CHATS[3], max_tokens=8, temperature=0,
                                          logprobs=True, top_logprobs=3)
    content = resp.choices[0].logprobs.content
    assert len(content) == resp.usage.completion_tokens == len(ref.token_ids)
    for entry in content:
        assert entry.logprob <= 0.0 and len(entry.top_logprobs) == 3
        assert entry.bytes == list(entry.token.encode("utf-8"))
        assert entry.top_logprobs[0].token == entry.token  # greedy picks the most likely token
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob


def test_completion_logprobs(client, model, greedy):
    ref = greedy(PROMPTS[0], 8)
    resp = client.completions.create(model=model, prompt=PROMPTS[0], max_tokens=8, temperature=0, logprobs=2)
    lp = resp.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(ref.token_ids)
    assert all(len(top) <= 2 and max(top.values()) <= 0.0 for top in lp.top_logprobs)
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    if resp.choices[0].finish_reason == "length":  # no EOS token: the tokens spell the text
        assert "".join(lp.tokens) == resp.choices[0].text


def test_32_concurrent_streams_are_independent(server, model, greedy):
    refs = [greedy(p, MAX_TOKENS).text for p in PROMPTS]

    async def one(client, i):
        stream = await client.completions.create(model=model, prompt=PROMPTS[i % len(PROMPTS)],
                                                 max_tokens=MAX_TOKENS, temperature=0, stream=True)
        return "".join([c.choices[0].text async for c in stream if c.choices])

    async def run_all():
        async with openai.AsyncOpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=300) as c:
            return await asyncio.gather(*(one(c, i) for i in range(32)))

    texts = asyncio.run(run_all())
    for i, text in enumerate(texts):
        assert text == refs[i % len(PROMPTS)], f"stream {i}"


def test_metrics_after_traffic(server, client, model):
    for _ in range(2):  # the same chat twice: the second finds the templated prefix cached
        client.chat.completions.create(model=model, messages=CHATS[0], max_tokens=4, temperature=0)
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert 'tokenmill:requests_total{route="/v1/chat/completions",status="200"}' in text
    values = server.metrics()
    assert values["tokenmill:time_to_first_token_seconds_count"] > 0
    assert values["tokenmill:time_per_output_token_seconds_count"] > 0
    assert values["tokenmill:e2e_request_latency_seconds_count"] > 0
    assert values["tokenmill:generation_tokens_total"] > 0
    assert values["tokenmill:prompt_tokens_total"] > 0
    assert values["tokenmill:kv_blocks_total"] == 256
    assert values["tokenmill:num_requests_running"] == 0
    assert 0.0 <= values["tokenmill:prefix_cache_hit_rate"] <= 1.0
    assert values["tokenmill:prefix_cache_hits_total"] > 0
    assert "tokenmill:num_preemptions_total" in values
    labelled = {line.rpartition(" ")[0]: float(line.rpartition(" ")[2]) for line in text.splitlines()
                if line.startswith("tokenmill:engine_step")}
    for kind in ("prefill", "decode"):  # each chat: one prefill step, then 3 decode steps
        assert labelled[f'tokenmill:engine_steps_total{{kind="{kind}"}}'] >= 2
        assert labelled[f'tokenmill:engine_step_seconds_total{{kind="{kind}"}}'] > 0
        assert labelled[f'tokenmill:engine_step_cpu_seconds_total{{kind="{kind}"}}'] > 0


def test_two_apps_in_one_process_keep_separate_metrics():
    from starlette.testclient import TestClient

    from tokenmill.engine.client import EngineStats
    from tokenmill.serve.api import build_app

    class IdleEngine:  # enough of EngineClient for /health and /metrics
        model_name, max_model_len = "idle", 128

        def stats(self):
            return EngineStats(0, 0, 8, 0, 0, 0, 0, 0, 0)

    with TestClient(build_app(IdleEngine())) as first, TestClient(build_app(IdleEngine())) as second:
        first.get("/health")
        first.get("/health")
        assert 'tokenmill:requests_total{route="/health",status="200"} 2.0' in first.get("/metrics").text
        assert 'route="/health"' not in second.get("/metrics").text
        assert "tokenmill:kv_blocks_total 8.0" in second.get("/metrics").text
