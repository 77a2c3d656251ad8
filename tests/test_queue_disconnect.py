"""A client that leaves while its request waits in the queue frees its slot.

The scenario of the issue, on a server with one running slot and four waiting
slots: one long request runs; four clients with a 1 s read timeout queue up
and give up; the waiting gauge must fall to 0 (counted as client disconnects)
while the long request still runs, and a live client is then admitted instead
of getting 429.
"""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest

from conftest import DTYPE, NUM_THREADS, start_server, stop_server

ARGS = ("--max-num-seqs", "1", "--max-waiting-requests", "4", "--max-model-len", "2048",
        "--num-kv-blocks", "160", "--num-threads", str(NUM_THREADS), "--dtype", DTYPE)
LONG = {"prompt": "Count slowly: one, two,", "max_tokens": 1500, "ignore_eos": True, "temperature": 0,
        "stream": True}


@pytest.fixture(scope="module")
def queue_server(tmp_path_factory):
    srv = start_server(ARGS, tmp_path_factory.mktemp("queue") / "serve.log")
    yield srv
    stop_server(srv.proc)


def sample(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


async def metrics(client: httpx.AsyncClient, url: str) -> str:
    return (await client.get(f"{url}/metrics")).text


async def wait_until(client: httpx.AsyncClient, url: str, name: str, value: float, timeout_s: float) -> float:
    """Seconds until the metric reads ``value``; fails after ``timeout_s``."""
    start = time.monotonic()
    while sample(await metrics(client, url), name) != value:
        assert time.monotonic() - start < timeout_s, f"{name} did not reach {value} in {timeout_s}s"
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def impatient(url: str, route: str, body: dict) -> None:
    """A client that gives up after 1 s without an answer."""
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(10, read=1.0)) as c:
        with pytest.raises(httpx.ReadTimeout):
            if body.get("stream"):
                async with c.stream("POST", route, json=body) as resp:
                    await resp.aread()
            else:
                await c.post(route, json=body)


def test_disconnected_waiting_clients_free_their_queue_slots(queue_server):
    url, v1 = queue_server.url, queue_server.v1
    disconnects = 'tokenmill:aborted_requests_total{reason="client_disconnect"}'
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    waiting = [("/completions", {"prompt": "a", "max_tokens": 8}),
               ("/completions", {"prompt": "b", "max_tokens": 8, "stream": True}),
               ("/chat/completions", chat),
               ("/chat/completions", {**chat, "stream": True})]

    async def scenario():
        async with httpx.AsyncClient(base_url=v1, timeout=120) as c:
            before = sample(await metrics(c, url), disconnects)
            async with c.stream("POST", "/completions", json=LONG) as long_resp:
                lines = long_resp.aiter_lines()
                while not (await lines.__anext__()).startswith("data: "):
                    pass  # the long request is running
                await asyncio.gather(*(impatient(v1, route, body) for route, body in waiting))
                freed_after = await wait_until(c, url, "tokenmill:num_requests_waiting", 0.0, timeout_s=5)
                text = await metrics(c, url)
                assert sample(text, "tokenmill:num_requests_running") == 1.0  # the long one goes on
                assert sample(text, disconnects) == before + 4
                admitted = asyncio.create_task(c.post("/completions", json={"prompt": "x", "max_tokens": 2}))
                await wait_until(c, url, "tokenmill:num_requests_waiting", 1.0, timeout_s=10)
            # Leaving the long stream aborts it; the live client's request then runs.
            return freed_after, await admitted

    freed_after, admitted = asyncio.run(scenario())
    assert admitted.status_code == 200, admitted.text
    assert admitted.json()["usage"]["completion_tokens"] == 2
    assert freed_after < 2.0  # the issue asks for one step or 0.5 s; slack for a loaded CI machine
