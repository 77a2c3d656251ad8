"""Property-based fuzz of the live server's sampling surface.

Each example sends a few requests with random combinations of every sampling
field (extreme floats, wrong types, out-of-range values) to a running
``tokenmill serve``, concurrently with a control greedy stream. Whatever they
hold: no 5xx, every error is a 4xx with the OpenAI error body, and the control
stream's text is exactly what it is alone.

The default example count keeps the suite fast; run it long with
``pytest --hypothesis-profile=long tests/test_fuzz_server.py`` (the status
histogram is printed at the end either way).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from _fuzz_strategies import junk, sampling_fields
from conftest import FUZZ_STATUSES

CONTROL = {"messages": [{"role": "user", "content": "Write a short story about a lighthouse keeper."}],
           "max_tokens": 32, "temperature": 0, "ignore_eos": True, "stream": True}
REQUESTS_PER_EXAMPLE = 3

SAMPLING_FIELDS = {
    **sampling_fields(49152),
    "stop": st.one_of(st.text(max_size=3), st.lists(st.text(max_size=3), max_size=3), junk),
    "n": st.one_of(st.sampled_from([1, 2, 0]), junk),
    "ignore_eos": st.one_of(st.booleans(), junk),
    "stream": st.one_of(st.booleans(), junk),
    "stream_options": st.one_of(st.just({"include_usage": True}), junk),
}
# Always a short answer (null or absent would mean "the rest of the context").
max_tokens = st.one_of(st.integers(1, 4), st.sampled_from([0, -1, "3", 2.5, True, 10 ** 30]))
chat = st.fixed_dictionaries(
    {"messages": st.just([{"role": "user", "content": "Hello there"}]), "max_tokens": max_tokens},
    optional={**SAMPLING_FIELDS, "logprobs": st.one_of(st.booleans(), junk),
              "top_logprobs": st.one_of(st.integers(-1, 21), junk)})
completion = st.fixed_dictionaries(
    {"prompt": st.sampled_from(["Hello", "Hello Hello Hello", "The sea"]), "max_tokens": max_tokens},
    optional={**SAMPLING_FIELDS, "logprobs": st.one_of(st.integers(-1, 21), junk)})
fuzz_request = st.one_of(st.tuples(st.just("/chat/completions"), chat),
                         st.tuples(st.just("/completions"), completion))


async def stream_text(client: httpx.AsyncClient, route: str, body: dict) -> str:
    parts = []
    async with client.stream("POST", route, json=body) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for line in resp.aiter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                assert "error" not in event, event
                parts += [c["delta"].get("content") or "" for c in event["choices"]]
    return "".join(parts)


async def send(client: httpx.AsyncClient, route: str, body: dict) -> httpx.Response:
    # NaN and Infinity go out as Python's json writes them (not strict JSON): a
    # client may send them, and the server must answer 400, not fail.
    content = json.dumps(body).encode()
    resp = await client.post(route, content=content, headers={"content-type": "application/json"})
    await resp.aread()
    return resp


def check_answer(resp: httpx.Response, body: dict) -> None:
    assert resp.status_code < 500, (body, resp.text)
    if resp.status_code >= 400:
        error = resp.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"], resp.text
        return
    assert resp.status_code == 200, resp.text
    if resp.headers["content-type"].startswith("text/event-stream"):
        lines = [line for line in resp.text.splitlines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]", resp.text
        for line in lines[:-1]:
            assert "error" not in json.loads(line[6:]), line
    else:
        assert resp.json()["choices"], resp.text


@pytest.fixture(scope="module")
def control_alone(server):
    async def run():
        async with httpx.AsyncClient(base_url=server.v1, timeout=120) as c:
            return await stream_text(c, "/chat/completions", CONTROL)
    return asyncio.run(run())


@pytest.fixture(scope="module")
def statuses(pytestconfig) -> Counter:
    """Status histogram of the fuzz requests; conftest prints it in the summary."""
    return pytestconfig.stash.setdefault(FUZZ_STATUSES, Counter())


@settings(max_examples=max(10, settings.default.max_examples // 10))
@given(requests=st.lists(fuzz_request, min_size=REQUESTS_PER_EXAMPLE, max_size=REQUESTS_PER_EXAMPLE))
def test_fuzzed_sampling_requests_never_5xx_nor_disturb_others(server, control_alone, statuses, requests):
    async def run():
        async with httpx.AsyncClient(base_url=server.v1, timeout=120) as c:
            control = asyncio.create_task(stream_text(c, "/chat/completions", CONTROL))
            await asyncio.sleep(0.05)  # the control is in the running batch when the fuzz arrives
            answers = await asyncio.gather(*(send(c, route, body) for route, body in requests))
            return await control, answers

    control, answers = asyncio.run(run())
    for (_, body), resp in zip(requests, answers):
        statuses[resp.status_code] += 1
        check_answer(resp, body)
    assert control == control_alone


# The issue's reproductions: each once took the whole step (and every stream in it) down.
ISSUE_BODIES = [{"prompt": "Hello", "max_tokens": 4, "temperature": 1.0, "top_k": 1},
                {"prompt": "Hello", "max_tokens": 4, "temperature": 1e-46},
                {"prompt": "Hello Hello", "max_tokens": 4, "temperature": 1.0, "repetition_penalty": 1e-38},
                {"prompt": "Hello", "max_tokens": 4, "top_k": 0},
                {"prompt": "Hello", "max_tokens": 4, "min_p": 1},
                {"prompt": "Hello", "max_tokens": 4, "temperature": 1e-41},
                {"prompt": "Hello", "max_tokens": 4, "repetition_penalty": 1e-10}]


def test_issue_reproductions_answer_cleanly_beside_a_stream(server, control_alone, statuses):
    async def run():
        async with httpx.AsyncClient(base_url=server.v1, timeout=120) as c:
            control = asyncio.create_task(stream_text(c, "/chat/completions", CONTROL))
            await asyncio.sleep(0.05)
            answers = await asyncio.gather(*(send(c, "/completions", body) for body in ISSUE_BODIES))
            return await control, answers

    control, answers = asyncio.run(run())
    for body, resp in zip(ISSUE_BODIES, answers):
        statuses[resp.status_code] += 1
        check_answer(resp, body)
    assert [r.status_code for r in answers] == [200, 200, 400, 200, 200, 200, 400]
    assert answers[2].json()["error"]["param"] == "repetition_penalty"
    assert control == control_alone


def test_fuzz_left_no_failure_behind(server):
    """After the fuzz: no 5xx was ever answered and the engine failed no request."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert 'status="5' not in text
    failures = [line for line in text.splitlines() if line.startswith("tokenmill:request_failures_total")]
    assert failures and all(line.endswith(" 0.0") for line in failures), failures
