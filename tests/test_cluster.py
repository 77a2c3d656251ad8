"""Two engine workers on Ray behind one ClusterEngine (one Ray instance for the module)."""

from __future__ import annotations

import asyncio

import pytest

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.sampling_params import SamplingParams

ray = pytest.importorskip("ray")

# Deterministic mode: a request's tokens do not depend on which other requests
# share its steps, so two workers must answer exactly like one engine.
CONFIG = EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", num_kv_blocks=64,
                      max_model_len=256, max_num_batched_tokens=64, deterministic=load_cpu_kernels() is not None,
                      num_threads=1)
PREFIX = list(range(100, 164))  # 4 full blocks shared by the routing test's requests


@pytest.fixture(scope="module")
def cluster():
    from tokenmill.cluster.client import ClusterEngine
    from tokenmill.cluster.launch import launch_workers, start_ray
    from tokenmill.cluster.router import Router, RouterConfig

    started = start_ray(None, num_cpus=4)
    engine = ClusterEngine(launch_workers(CONFIG, 2, num_cpus=1, num_gpus=0, scheduling_strategy=None),
                           Router(RouterConfig(policy="kv", block_size=CONFIG.block_size)), started_ray=started)
    yield engine
    engine.shutdown()


async def collect(engine, prompt, params, request_id=None):
    tokens, final = [], None
    async for out in engine.generate(prompt, params, request_id):
        tokens += out.new_token_ids
        final = out
    return tokens, final


def test_two_workers_answer_like_one_engine(cluster):
    prompts = [[5, 6, 7, 8, 9], list(range(20, 60)), [300, 301, 302], list(range(200, 290))]
    params = [SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True),
              SamplingParams(max_tokens=10, temperature=0.9, seed=3, ignore_eos=True),
              SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, logprobs=2),
              SamplingParams(max_tokens=9, temperature=1.2, top_k=30, seed=11, ignore_eos=True)]
    expected = LLMEngine(CONFIG).generate(prompts, params)

    async def run():
        return await asyncio.gather(*(collect(cluster, p, sp) for p, sp in zip(prompts, params)))

    results = asyncio.run(run())
    for (tokens, final), want in zip(results, expected):
        assert tokens == want.token_ids
        assert final.finished and final.finish_reason == "length" and final.num_output_tokens == len(want.token_ids)
    used = {w: cluster.router.metrics.decisions[("kv", w)] for w in cluster.workers}
    assert sum(used.values()) >= 4


def test_kv_router_sends_a_shared_prefix_to_the_worker_that_holds_it(cluster):
    params = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)

    async def run():
        await collect(cluster, PREFIX + [1], params, "first")
        # The first request's KV events reached the router with its last step.
        return [await collect(cluster, PREFIX + [2 + i], params, f"next-{i}") for i in range(4)]

    before = dict(cluster.router.metrics.decisions)
    asyncio.run(run())
    after = cluster.router.metrics.decisions
    chosen = [w for w in cluster.workers if after[("kv", w)] > before.get(("kv", w), 0)]
    assert len(chosen) == 1  # all five went where the prefix is cached
    assert cluster.router.metrics.last_overlap_blocks == 4
    assert cluster.stats().prefix_cache_hits >= 4 * 64


def test_a_client_that_leaves_frees_its_blocks_on_the_worker(cluster):
    async def run():
        agen = cluster.generate(list(range(30, 90)), SamplingParams(max_tokens=200, ignore_eos=True))
        await agen.__anext__()
        await agen.aclose()  # the client goes away mid-stream
        for _ in range(100):  # the worker applies the finish message at its next step
            await asyncio.sleep(0.05)
            if cluster.stats().kv_blocks_used == 0 and cluster.stats().num_running == 0:
                return True
        return False

    assert asyncio.run(run())
    assert cluster.stats().aborted_requests.get("client_disconnect", 0) >= 1


def test_workers_endpoint_and_a_dead_worker(cluster):
    """GET /v1/workers lists both; a worker killed mid-stream (SIGKILL by its pid)
    ends its requests with an error instead of a hang, the other worker takes the
    next requests, and the killed one rejoins once Ray has restarted it.
    (Migrating the killed requests instead is the next increment of issue 13.)"""
    import os
    import signal
    import time

    import httpx

    from tokenmill.serve.api import build_app

    app = build_app(cluster)

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            listed = (await c.get("/v1/workers")).json()["data"]
            assert [w["alive"] for w in listed] == [True, True] and len({w["pid"] for w in listed}) == 2
            params = SamplingParams(max_tokens=5000, temperature=0.0, ignore_eos=True)
            agen = cluster.generate(list(range(10, 20)), params, "long")
            await agen.__anext__()
            victim = cluster.workers[cluster._route["long"]]
            os.kill(victim.info.pid, signal.SIGKILL)
            outs = [out async for out in agen]
            assert outs[-1].finished and outs[-1].finish_reason == "error" and "died" in outs[-1].error
            survivors = [w for w in (await c.get("/v1/workers")).json()["data"] if w["alive"]]
            assert len(survivors) == 1 and (await c.get("/health")).status_code == 200
            tokens, final = await collect(cluster, [7, 8, 9], SamplingParams(max_tokens=4, temperature=0.0))
            assert final.finish_reason in ("length", "stop") and tokens
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and not victim.alive:
                await asyncio.sleep(0.5)
            assert victim.alive and (await c.get("/v1/workers")).status_code == 200

    asyncio.run(scenario())
