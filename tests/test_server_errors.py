"""End-to-end failure paths: bad input, size limit, auth, queue full, client disconnect.

None of these may produce a 500 or stop the server; each answer carries the
OpenAI error body naming the field at fault.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest

CHAT = [{"role": "user", "content": "Hi"}]
LONG_TEXT = "hello " * 700  # > 512 tokens: longer than the servers' context


def _post(server, route: str, body, **kwargs) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server.v1}{route}", content=content, timeout=60,
                      headers={"content-type": "application/json", **kwargs.pop("headers", {})}, **kwargs)


def _assert_error(resp: httpx.Response, status: int, param=None, code=None) -> dict:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    return error


BAD_INPUTS = [
    ("/chat/completions", b"{not json", None),
    ("/chat/completions", b"[1, 2]", None),
    ("/chat/completions", {"messages": "hi"}, "messages"),
    ("/chat/completions", {"messages": []}, "messages"),
    ("/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ("/chat/completions", {"messages": CHAT, "max_tokens": "many"}, "max_tokens"),
    ("/chat/completions", {"messages": CHAT, "max_completion_tokens": 0}, "max_completion_tokens"),
    ("/chat/completions", {"messages": CHAT, "n": 0}, "n"),
    ("/chat/completions", {"messages": CHAT, "temperature": -1}, "temperature"),
    ("/chat/completions", {"messages": CHAT, "logprobs": True, "top_logprobs": 50}, "top_logprobs"),
    ("/chat/completions", {"messages": CHAT, "tools": [{"type": "function"}]}, "tools[0].function"),
    ("/chat/completions", {"messages": CHAT, "functions": [{"name": "f"}]}, "functions"),  # the legacy form
    ("/completions", {}, "prompt"),
    ("/completions", {"prompt": ""}, "prompt"),
    ("/completions", {"prompt": [10 ** 9]}, "prompt"),
    ("/completions", {"prompt": "x", "top_p": 0}, "top_p"),
    ("/completions", {"prompt": "x", "stop": [""]}, "stop"),
    ("/completions", {"prompt": "x", "presence_penalty": 3}, "presence_penalty"),
    ("/completions", {"prompt": "x", "stream": "yes"}, "stream"),
    ("/completions", {"prompt": "x", "seed": 1 << 70}, "seed"),
    ("/completions", {"prompt": "x", "repetition_penalty": 1e-38}, "repetition_penalty"),
    ("/completions", {"prompt": "x", "repetition_penalty": 0}, "repetition_penalty"),
    ("/completions", {"prompt": "x", "top_k": -2}, "top_k"),
    ("/completions", {"prompt": "x", "min_p": 1.5}, "min_p"),
    ("/completions", b'{"prompt": "x", "temperature": NaN}', "temperature"),
    ("/completions", b'{"prompt": "x", "top_p": Infinity}', "top_p"),
]


@pytest.mark.parametrize("route,body,param", BAD_INPUTS)
def test_bad_input_is_400_naming_the_field(server, route, body, param):
    error = _assert_error(_post(server, route, body), 400, param)
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("route,body", [("/chat/completions", {"messages": CHAT}), ("/completions", {"prompt": "x"})])
def test_unknown_model_is_404(server, route, body):
    _assert_error(_post(server, route, {**body, "model": "gpt-17"}), 404, "model", "model_not_found")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route,body,param", [
    ("/chat/completions", {"messages": [{"role": "user", "content": LONG_TEXT}]}, "messages"),
    ("/completions", {"prompt": LONG_TEXT}, "prompt"),
])
def test_prompt_longer_than_context_is_400(server, route, body, param, stream):
    # Streaming too: the error must come as a plain 400, not inside a 200 stream.
    error = _assert_error(_post(server, route, {**body, "stream": stream}), 400, param)
    numbers = [int(n) for n in re.findall(r"\d+", error["message"])]
    assert 512 in numbers and any(n > 512 for n in numbers), error["message"]


@pytest.mark.parametrize("size", [3 << 19, 20 << 20])  # 1.5 MiB and 20 MiB > the 1 MiB default
@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("stream", [False, True])
def test_body_over_limit_is_413(server, size, chunked, stream):
    """Never a dropped connection: the refused body is read to its end first."""
    body = json.dumps({"prompt": "x" * size, "stream": stream}).encode()
    content = iter([body[i:i + 65536] for i in range(0, len(body), 65536)]) if chunked else body
    resp = httpx.post(f"{server.v1}/completions", content=content, timeout=60)
    _assert_error(resp, 413, None, "request_too_large")


def test_server_survives_bad_input(server):
    _post(server, "/completions", b"\xff\xfe garbage")
    resp = _post(server, "/completions", {"prompt": "Hello", "max_tokens": 2, "temperature": 0})
    assert resp.status_code == 200 and resp.json()["usage"]["completion_tokens"] == 2
    assert 'status="500"' not in httpx.get(f"{server.url}/metrics", timeout=10).text


def _wait_for(server, predicate, timeout_s: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        values = server.metrics()
        if predicate(values) or time.monotonic() > deadline:
            return values
        time.sleep(0.05)


def test_disconnect_mid_stream_frees_blocks(server):
    idle = _wait_for(server, lambda m: m["tokenmill:num_requests_running"] == 0)
    body = {"prompt": "Count slowly: one, two,", "max_tokens": 400, "temperature": 0,
            "ignore_eos": True, "stream": True}
    with httpx.Client(timeout=60) as c, c.stream("POST", f"{server.v1}/completions", json=body) as resp:
        assert resp.status_code == 200
        data_lines = (line for line in resp.iter_lines() if line.startswith("data: "))
        for _ in range(3):
            next(data_lines)
        busy = server.metrics()
    assert busy["tokenmill:kv_blocks_used"] > idle["tokenmill:kv_blocks_used"]
    assert busy["tokenmill:num_requests_running"] == 1
    after = _wait_for(server, lambda m: m["tokenmill:kv_blocks_used"] == idle["tokenmill:kv_blocks_used"]
                      and m["tokenmill:num_requests_running"] == 0)
    assert after["tokenmill:kv_blocks_used"] == idle["tokenmill:kv_blocks_used"]
    assert after["tokenmill:num_requests_running"] == 0
    # Aborted, not run to completion: far fewer than 400 tokens were generated.
    produced = after["tokenmill:generation_tokens_total"] - idle["tokenmill:generation_tokens_total"]
    assert 3 <= produced < 400


# ---- guarded server: --api-key, one running + one waiting request, --max-tokens-limit 64 ----

@pytest.mark.parametrize("variant", ["missing", "wrong", "no-bearer-scheme"])
def test_api_key_required(guarded_server, guarded_auth, variant):
    key = guarded_auth["Authorization"].removeprefix("Bearer ")
    headers = {"missing": {}, "wrong": {"Authorization": "Bearer wrong"},
               "no-bearer-scheme": {"Authorization": key}}[variant]
    resp = httpx.get(f"{guarded_server.v1}/models", headers=headers, timeout=10)
    _assert_error(resp, 401, None, "invalid_api_key")
    resp = _post(guarded_server, "/completions", {"prompt": "x"}, headers=headers)
    _assert_error(resp, 401, None, "invalid_api_key")


def test_api_key_accepted(guarded_server, guarded_auth):
    import openai

    key = guarded_auth["Authorization"].removeprefix("Bearer ")
    client = openai.OpenAI(base_url=guarded_server.v1, api_key=key, max_retries=0, timeout=60)
    resp = client.chat.completions.create(model=client.models.list().data[0].id, messages=CHAT, max_tokens=2)
    assert resp.usage.completion_tokens <= 2
    assert httpx.get(f"{guarded_server.url}/health", timeout=10).status_code == 200  # public


def test_default_max_tokens_is_capped_by_limit(guarded_server, guarded_auth):
    resp = _post(guarded_server, "/completions", {"prompt": "Hi", "ignore_eos": True, "temperature": 0},
                 headers=guarded_auth)
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["completion_tokens"] == 64
    assert resp.json()["choices"][0]["finish_reason"] == "length"
    _assert_error(_post(guarded_server, "/completions", {"prompt": "Hi", "max_tokens": 65}, headers=guarded_auth),
                  400, "max_tokens")
    _assert_error(_post(guarded_server, "/chat/completions", {"messages": CHAT, "max_completion_tokens": 65},
                        headers=guarded_auth), 400, "max_completion_tokens")


async def _stream_completion(client: httpx.AsyncClient, body: dict) -> tuple[int, dict | None]:
    """(status, usage of the final chunk) of a streamed completion."""
    usage = None
    async with client.stream("POST", "/completions", json=body) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage") or usage
    return resp.status_code, usage


async def _await_metric(client: httpx.AsyncClient, url: str, name: str, value: float) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = (await client.get(f"{url}/metrics")).text
        if f"\n{name} {float(value)}\n" in text:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{name} never reached {value}")


def test_queue_full_is_429_and_accepted_requests_finish(guarded_server, guarded_auth):
    long = {"prompt": "Tell me a story.", "max_tokens": 64, "ignore_eos": True, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}

    async def scenario():
        async with httpx.AsyncClient(base_url=guarded_server.v1, headers=guarded_auth, timeout=120) as c:
            first = asyncio.create_task(_stream_completion(c, long))
            await _await_metric(c, guarded_server.url, "tokenmill:num_requests_running", 1)
            second = asyncio.create_task(_stream_completion(c, long))
            await _await_metric(c, guarded_server.url, "tokenmill:num_requests_waiting", 1)
            rejected = await c.post("/completions", json={"prompt": "x", "max_tokens": 2})
            return rejected, await first, await second

    rejected, first, second = asyncio.run(scenario())
    _assert_error(rejected, 429, None, "rate_limit_exceeded")
    assert int(rejected.headers["retry-after"]) >= 1
    for status, usage in (first, second):
        assert status == 200 and usage["completion_tokens"] == 64
    after = _post(guarded_server, "/completions", {"prompt": "x", "max_tokens": 2}, headers=guarded_auth)
    assert after.status_code == 200
