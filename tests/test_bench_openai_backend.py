"""OpenAIBackend against a real HTTP server with scripted timing (tests/fake_openai_server.py).

Timing is proved against the fake's known schedule: the first content chunk
leaves ttft_s after the request arrives and the later ones tpot_s apart, so the
client's measured TTFT and TPOT must match within a few milliseconds of
loopback and scheduling noise. Token counts are proved exactly with the
embedded SmolLM2 tokenizer (no model weights are loaded).
"""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest
from fake_openai_server import FAULT_MESSAGE, TOKEN_TEXT, FakeOpenAIServer

from tokenmill.bench.backend import BackendError, QueryOutcome
from tokenmill.bench.openai_backend import OpenAIBackend
from tokenmill.bench.workload import Sample

TTFT_TOL_S = 0.03  # loopback connect + request parsing + scheduling noise on a shared 2-core machine
TPOT_TOL_S = 0.005  # per token: the fake's schedule is absolute, so noise is divided by n - 1


@pytest.fixture(scope="module")
def tokenizer():
    from tokenmill.model.embedded import embedded_gguf_path
    from tokenmill.model.tokenizer import load_tokenizer

    return load_tokenizer(embedded_gguf_path())


@pytest.fixture(scope="module")
def fake_server():
    with FakeOpenAIServer(models=("fake-model", "other-model")) as server:
        yield server


@pytest.fixture
def fake(fake_server):
    fake_server.reset()
    yield fake_server
    fake_server.reset()


def text_sample(max_tokens: int, index: int = 0) -> Sample:
    return Sample(index=index, prompt="The capital of France is", prompt_token_ids=(1, 2, 3, 4, 5),
                  max_tokens=max_tokens)


def chat_sample(max_tokens: int) -> Sample:
    return Sample(index=0, prompt="<rendered template>", prompt_token_ids=(1, 2, 3), max_tokens=max_tokens,
                  messages=({"role": "system", "content": "Be terse."},
                            {"role": "user", "content": "Name three colors."}))


class Timed:
    """on_first_token callback that records when (and how often) it was called."""

    def __init__(self):
        self.first: list[float] = []

    def __call__(self) -> None:
        self.first.append(time.perf_counter())


async def timed_run(backend: OpenAIBackend, sample: Sample) -> tuple[QueryOutcome, float, float, Timed]:
    """(outcome, ttft_s, tpot_s, callback); ttft/tpot are NaN when no/one token came."""
    cb = Timed()
    t0 = time.perf_counter()
    outcome = await backend.run(sample, cb)
    end = time.perf_counter()
    ttft = cb.first[0] - t0 if cb.first else float("nan")
    n = outcome.output_tokens
    tpot = (end - cb.first[0]) / (n - 1) if cb.first and n > 1 else float("nan")
    return outcome, ttft, tpot, cb


async def started(url: str, **kwargs) -> OpenAIBackend:
    backend = OpenAIBackend(url, **kwargs)
    await backend.start()
    return backend


async def one_query(url: str, sample: Sample, **kwargs):
    backend = await started(url, **kwargs)
    try:
        # A warm-up query opens the keep-alive connection, as a benchmark's earlier queries do.
        await backend.run(text_sample(1), lambda: None)
        return await timed_run(backend, sample)
    finally:
        await backend.close()


def test_token_text_is_one_token_per_chunk(tokenizer):
    # The fake's premise: n chunks of TOKEN_TEXT re-encode to exactly n tokens.
    [token_id] = tokenizer.encode(TOKEN_TEXT, add_special_tokens=False)
    for n in range(1, 260):
        assert tokenizer.encode(TOKEN_TEXT * n, add_special_tokens=False) == [token_id] * n


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_ttft_tpot_and_token_count(fake, tokenizer, api):
    ttft_s, tpot_s, n = 0.2, 0.05, 11
    fake.configure(ttft_s=ttft_s, tpot_s=tpot_s)
    outcome, ttft, tpot, cb = asyncio.run(one_query(fake.url, text_sample(n), api=api, tokenizer=tokenizer))
    assert outcome.error is None
    assert len(cb.first) == 1
    assert outcome.output_tokens == n
    assert outcome.text == TOKEN_TEXT * n
    assert outcome.usage_output_tokens == n
    assert outcome.prompt_tokens == 5  # the fake's usage: words of the prompt
    assert ttft == pytest.approx(ttft_s, abs=TTFT_TOL_S)
    assert tpot == pytest.approx(tpot_s, abs=TPOT_TOL_S)


def test_chat_request_body(fake, tokenizer):
    sample = chat_sample(4)
    outcome, *_ = asyncio.run(one_query(fake.url, sample, api="chat", tokenizer=tokenizer))
    assert outcome.error is None and outcome.output_tokens == 4
    request = fake.requests[-1]
    assert request.path == "/v1/chat/completions"
    assert request.body == {"model": "fake-model", "stream": True, "stream_options": {"include_usage": True},
                            "temperature": 0, "ignore_eos": True, "max_tokens": 4,
                            "messages": list(sample.messages)}
    assert outcome.prompt_tokens == 5  # "Be terse." + "Name three colors."


def test_text_sample_on_chat_route_is_one_user_message(fake):
    asyncio.run(one_query(fake.url, text_sample(2), api="chat"))
    assert fake.requests[-1].body["messages"] == [{"role": "user", "content": "The capital of France is"}]


def test_completions_request_body_and_extra_body(fake):
    sample = chat_sample(3)  # a chat sample still sends its rendered prompt to /v1/completions
    outcome, *_ = asyncio.run(one_query(fake.url, sample, api="completions",
                                        extra_body={"top_k": 1, "ignore_eos": None}))
    assert outcome.error is None
    request = fake.requests[-1]
    assert request.path == "/v1/completions"
    assert request.body["prompt"] == "<rendered template>" and "messages" not in request.body
    assert request.body["top_k"] == 1
    assert "ignore_eos" not in request.body  # None removes a default


def test_role_only_chunk_is_not_the_first_token(fake):
    fake.configure(ttft_s=0.3)
    # Premise: the fake sends the role chunk at once, ttft_s before the first content.
    with httpx.stream("POST", f"{fake.url}/v1/chat/completions",
                      json={"stream": True, "max_tokens": 1, "messages": []}) as resp:
        lines = (line for line in resp.iter_lines() if line)
        role_line, role_at = next(lines), time.perf_counter()
        content_line, content_at = next(lines), time.perf_counter()
    assert '"delta": {"role": "assistant", "content": ""}' in role_line
    assert '"delta": {"content": " the"}' in content_line
    assert content_at - role_at >= 0.25
    outcome, ttft, _, cb = asyncio.run(one_query(fake.url, chat_sample(3), api="chat"))
    assert len(cb.first) == 1 and outcome.output_tokens == 3
    assert ttft >= 0.3 - 0.005


def test_connection_is_kept_alive_between_queries(fake):
    async def scenario():
        backend = await started(fake.url)
        try:
            return [await backend.run(text_sample(3), lambda: None) for _ in range(4)]
        finally:
            await backend.close()

    outcomes = asyncio.run(scenario())
    assert [o.error for o in outcomes] == [None] * 4
    # /v1/models and all four queries over one TCP connection: the client reads past [DONE].
    assert len({r.client_port for r in fake.requests}) == 1


def test_usage_mismatch_is_visible(fake, tokenizer):
    fake.configure(reported_completion_tokens=5)
    outcome, *_ = asyncio.run(one_query(fake.url, text_sample(8), tokenizer=tokenizer))
    assert outcome.error is None
    assert (outcome.output_tokens, outcome.usage_output_tokens) == (8, 5)


def test_without_tokenizer_counts_content_chunks(fake, tokenizer):
    fake.configure(token_text=" the the")  # two tokens per chunk
    with_tok, *_ = asyncio.run(one_query(fake.url, text_sample(6), tokenizer=tokenizer))
    without, *_ = asyncio.run(one_query(fake.url, text_sample(6)))
    assert with_tok.output_tokens == 12
    assert without.output_tokens == 6


@pytest.mark.parametrize("fault, fault_after, expected", [
    ("http_500", 0, f"HTTP 500: {FAULT_MESSAGE}"),
    ("malformed_json", 3, "malformed JSON in stream chunk after 3 content chunks"),
    ("no_done", 3, "stream ended without [DONE] after 3 content chunks"),
    ("drop_connection", 3, "dropped (the response body ended before its end)"),
    ("error_chunk", 3, f"server error mid-stream after 3 content chunks: {FAULT_MESSAGE}"),
])
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_faults_become_outcome_errors(fake, tokenizer, api, fault, fault_after, expected):
    fake.configure(fault=fault, fault_after=fault_after)

    async def scenario():
        backend = await started(fake.url, api=api, tokenizer=tokenizer)
        try:
            return await timed_run(backend, text_sample(8))
        finally:
            await backend.close()

    outcome, _, _, cb = asyncio.run(scenario())
    assert outcome.error is not None and expected in outcome.error
    assert "\n" not in outcome.error
    assert outcome.output_tokens == fault_after  # what came before the fault is kept
    assert len(cb.first) == (1 if fault_after else 0)


def test_read_timeout_is_an_outcome(fake):
    fake.configure(ttft_s=2.0)

    async def scenario():
        backend = await started(fake.url, timeout_s=0.2)
        try:
            t0 = time.perf_counter()
            return await backend.run(text_sample(2), lambda: None), time.perf_counter() - t0
        finally:
            await backend.close()

    outcome, elapsed = asyncio.run(scenario())
    assert outcome.error is not None and outcome.error.startswith("timed out: no data from")
    assert outcome.output_tokens == 0
    assert elapsed < 1.0


def test_refused_connection():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(BackendError) as err:
        asyncio.run(started(url))
    assert str(err.value) == f"cannot connect to {url}: connection refused"


@pytest.mark.timeout(30)
def test_unresolvable_host():
    with pytest.raises(BackendError, match=r"cannot connect to http://no-such-host\.invalid: cannot resolve host"):
        asyncio.run(started("http://no-such-host.invalid", timeout_s=5))


def test_model_defaults_to_first_and_url_may_end_in_v1(fake):
    async def scenario():
        backend = await started(f"{fake.url}/v1/")
        await backend.close()
        return backend

    backend = asyncio.run(scenario())
    assert backend.model == "fake-model"
    assert backend.label == fake.url


def test_named_model_is_used(fake):
    asyncio.run(one_query(fake.url, text_sample(1), model="other-model"))
    assert fake.requests[-1].body["model"] == "other-model"


def test_unknown_model_lists_served_ones(fake):
    with pytest.raises(BackendError) as err:
        asyncio.run(started(fake.url, model="gpt-9"))
    assert str(err.value) == f"model 'gpt-9' is not served by {fake.url}; it lists: fake-model, other-model"


def test_server_listing_no_models(fake):
    # HF `transformers serve <dir>` lists nothing but serves the pinned model.
    fake.configure(models=())
    with pytest.raises(BackendError, match="lists no models; name one with --served-model-name"):
        asyncio.run(started(fake.url))
    backend = asyncio.run(started(fake.url, model="pinned-dir"))
    assert backend.model == "pinned-dir"


def test_api_key(fake):
    fake.configure(api_key="sesame")
    with pytest.raises(BackendError, match="refused the request.*HTTP 401.*invalid API key.*--api-key"):
        asyncio.run(started(fake.url))
    outcome, *_ = asyncio.run(one_query(fake.url, text_sample(2), api_key="sesame"))
    assert outcome.error is None and outcome.output_tokens == 2
    assert fake.requests[-1].headers["authorization"] == "Bearer sesame"


@pytest.mark.parametrize("fault, expected", [
    ("models_not_json", "did not return JSON"),
    ("models_malformed", "is not an OpenAI model list"),
])
def test_models_route_not_openai(fake, fault, expected):
    fake.configure(fault=fault)
    with pytest.raises(BackendError, match=expected):
        asyncio.run(started(fake.url))


def test_bad_arguments():
    with pytest.raises(ValueError, match="api must be one of"):
        OpenAIBackend("http://127.0.0.1:1", api="embeddings")
    with pytest.raises(ValueError, match="http:// or https://"):
        OpenAIBackend("127.0.0.1:8000")
    with pytest.raises(ValueError, match="extra_body may not set"):
        OpenAIBackend("http://127.0.0.1:1", extra_body={"stream": False})


def test_100_concurrent_queries(fake, tokenizer):
    # Every stream lasts over 1 s, longer than opening 100 connections takes on a loaded
    # machine, so all 100 must be open at once.
    fake.configure(ttft_s=1.0, tpot_s=0.01)
    samples = [text_sample(5 + i % 10, index=i) for i in range(100)]

    async def scenario():
        backend = await started(fake.url, tokenizer=tokenizer)
        try:
            return await asyncio.gather(*(backend.run(s, lambda: None) for s in samples))
        finally:
            await backend.close()

    t0 = time.perf_counter()
    outcomes = asyncio.run(scenario())
    elapsed = time.perf_counter() - t0
    assert [o.error for o in outcomes] == [None] * 100
    assert [o.output_tokens for o in outcomes] == [s.max_tokens for s in samples]
    assert [o.usage_output_tokens for o in outcomes] == [s.max_tokens for s in samples]
    assert fake.peak_streams == 100  # all streamed at once, none queued behind another
    assert elapsed < 5.0  # serialized, they would take over 100 s


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_complete_stream_without_done_is_a_success(api, fake, tokenizer):
    """HF `transformers serve` closes a finished stream without [DONE]: finish_reason
    was sent, so the answer is whole; a stream cut before it stays an error (no_done)."""
    fake.configure(send_done=False)
    outcome, *_ = asyncio.run(one_query(fake.url, text_sample(4), api=api, tokenizer=tokenizer))
    assert outcome.error is None and outcome.output_tokens == 4


def test_idle_connections_are_dropped_before_the_server_closes_them():
    """A pooled connection idle past the server's keep-alive is closed by the server;
    a request sent on it as it closes fails ("connection reset"), so the client lets
    its idle connections go sooner than uvicorn's default keep-alive."""
    import uvicorn

    from tokenmill.bench.openai_backend import KEEPALIVE_S

    assert KEEPALIVE_S < uvicorn.Config(app=None).timeout_keep_alive

    async def keepalive() -> float:
        session = OpenAIBackend("http://127.0.0.1:1")._make_session()
        try:
            return session.connector._keepalive_timeout
        finally:
            await session.close()

    assert asyncio.run(keepalive()) == KEEPALIVE_S
