"""Two engine workers on Ray behind one ClusterEngine (one Ray instance for the module)."""

from __future__ import annotations

import asyncio
import time

import pytest
from _collect import collect

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
def step_log(tmp_path_factory):
    """Where the workers append their steps: this path plus .worker-0 and .worker-1."""
    return tmp_path_factory.mktemp("cluster") / "steps.jsonl"


@pytest.fixture(scope="module")
def cluster(step_log):
    from tokenmill.cluster.client import ClusterEngine
    from tokenmill.cluster.launch import launch_workers, start_ray
    from tokenmill.cluster.router import Router, RouterConfig

    started = start_ray(None, num_cpus=4)
    workers = launch_workers(CONFIG, 2, num_cpus=1, num_gpus=0, scheduling_strategy=None, step_log=str(step_log))
    engine = ClusterEngine(workers, Router(RouterConfig(policy="kv", block_size=CONFIG.block_size)),
                           started_ray=started)
    yield engine
    engine.shutdown()


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
    # The workers' step counters, summed: every worker that served a request stepped.
    total, each = cluster.stats(), [h.stats for h in cluster.workers.values() if h.stats is not None]
    for kind in ("prefill", "decode"):
        assert total.engine_steps[kind] == sum(s.engine_steps[kind] for s in each)
        assert total.engine_step_cpu_seconds[kind] == pytest.approx(sum(s.engine_step_cpu_seconds[kind] for s in each))
    assert sum(total.engine_steps.values()) >= 12 and total.engine_step_seconds["decode"] > 0
    assert 0 < total.engine_step_cpu_seconds["decode"] <= total.engine_step_seconds["decode"] * 1.01 + 1e-3
    assert all(sum(h.stats.engine_steps.values()) >= 1 for w, h in cluster.workers.items() if used[w])


def test_each_worker_logs_the_steps_it_counts(cluster, step_log):
    """The workers' step logs (`tokenmill serve --step-log` on a cluster): each worker's file holds a line
    for every step its counters count, written before the step's outputs went out."""
    from tokenmill.engine.step_log import load_steps

    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)

    async def run():
        return await asyncio.gather(*(collect(cluster, [40 + i, 41, 42, 43 + i], params) for i in range(4)))

    asyncio.run(run())
    for name, handle in cluster.workers.items():
        logged = load_steps(f"{step_log}.{name}")
        assert len(logged) == (sum(handle.stats.engine_steps.values()) if handle.stats else 0)
        assert sum(s.decodes + s.chunk_tokens for s in logged) > 0


def test_each_workers_step_time_is_on_v1_workers_and_metrics(cluster):
    """Per worker, the seconds of its steps and of its stepping thread on a core: GET /v1/workers and
    /metrics (what `tokenmill bench` reads per worker of a cluster target), equal to its counters."""
    import httpx

    from tokenmill.bench.server_metrics import parse_counters
    from tokenmill.serve.api import build_app

    async def scenario():
        await collect(cluster, [70, 71, 72, 73], SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
        transport = httpx.ASGITransport(app=build_app(cluster))
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            return (await c.get("/v1/workers")).json()["data"], (await c.get("/metrics")).text

    workers, metrics = asyncio.run(scenario())
    counters = parse_counters(metrics)
    served = 0
    for w in workers:
        stats = cluster.workers[w["id"]].stats
        wall, cpu = sum(stats.engine_step_seconds.values()), sum(stats.engine_step_cpu_seconds.values())
        assert (w["engine_step_seconds"], w["engine_step_cpu_seconds"]) == (pytest.approx(wall), pytest.approx(cpu))
        assert counters[f"worker|{w['id']}|aggregated|busy_s"] == pytest.approx(wall, rel=1e-6)
        assert counters[f"worker|{w['id']}|aggregated|busy_cpu_s"] == pytest.approx(cpu, rel=1e-6)
        assert cpu <= wall * 1.01 + 1e-3
        served += wall > 0
    assert served >= 1


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


class _SubmitReportsFailureOnce:
    """A worker's actor handle whose first submit reaches the worker but reports
    a failure, as Ray does for an actor that became unreachable ("the task may
    or may not have been executed on the actor")."""

    def __init__(self, actor, shared: dict):
        self._actor, self._shared = actor, shared

    def __getattr__(self, name):
        return getattr(self._actor, name)

    @property
    def submit(self):
        handle = self

        class Method:
            @staticmethod
            def remote(data):
                ref = handle._actor.submit.remote(data)
                if handle._shared.get("failed"):
                    return ref

                async def report_failure():
                    await ref
                    raise RuntimeError("the actor is temporarily unavailable (simulated)")
                handle._shared["failed"] = True
                return report_failure()
        return Method()


def test_a_request_whose_submit_fails_moves_on_without_duplicates(cluster):
    """The router chose a worker that the pollers still think alive, and the
    submit raised: the request moves to the other worker; the copy that did
    reach the first one is ended there, and the client gets exactly the tokens
    of a fault-free run. The first worker rejoins at its next answered poll."""
    prompt, params = list(range(400, 437)), SamplingParams(max_tokens=40, temperature=0.8, seed=9, ignore_eos=True)
    expected = LLMEngine(CONFIG).generate([prompt], [params])[0].token_ids
    originals, shared = {w: h.actor for w, h in cluster.workers.items()}, {}
    for handle in cluster.workers.values():
        handle.actor = _SubmitReportsFailureOnce(handle.actor, shared)
    migrations = cluster.num_migrations
    try:
        tokens, final = asyncio.run(collect(cluster, prompt, params, "flaky-submit"))
    finally:
        for worker_id, handle in cluster.workers.items():
            handle.actor = originals[worker_id]
    assert shared["failed"] and cluster.num_migrations == migrations + 1
    assert final.finish_reason == "length" and tokens == expected
    deadline = time.monotonic() + 30
    while not all(h.alive for h in cluster.workers.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert all(h.alive for h in cluster.workers.values())
    assert cluster.stats().num_running == 0  # the stale copy was ended, not left running


def test_a_dead_workers_requests_move_on_or_fail_cleanly(cluster):
    """GET /v1/workers lists both workers. A worker killed mid-stream (SIGKILL by
    its pid): its requests continue on the other worker with exactly the tokens
    of a run without the fault (greedy and seeded); with --migration-limit 0 a
    request whose worker dies ends with an error instead, and nobody hangs.
    Runs last: it leaves the cluster with dead workers."""
    import os
    import signal

    import httpx

    from tokenmill.serve.api import build_app

    prompts = [list(range(10, 20)), list(range(40, 45)), list(range(60, 90))]
    params = [SamplingParams(max_tokens=200, temperature=0.0, ignore_eos=True),
              SamplingParams(max_tokens=200, temperature=1.0, seed=5, ignore_eos=True),
              SamplingParams(max_tokens=180, temperature=0.0, ignore_eos=True)]
    expected = [r.token_ids for r in LLMEngine(CONFIG).generate(prompts, params)]
    app = build_app(cluster)

    async def first_then_rest(agen):
        outs = [await agen.__anext__()]
        return outs, agen

    async def scenario():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            listed = (await c.get("/v1/workers")).json()["data"]
            assert [w["alive"] for w in listed] == [True, True] and len({w["pid"] for w in listed}) == 2
            cluster.migration_limit = 3
            started = [await first_then_rest(cluster.generate(p, sp, f"mig-{i}"))
                       for i, (p, sp) in enumerate(zip(prompts, params))]
            victim = cluster.workers[cluster._route["mig-0"]]
            os.kill(victim.info.pid, signal.SIGKILL)
            for i, (outs, agen) in enumerate(started):
                outs += [out async for out in agen]
                assert outs[-1].finish_reason == "length", outs[-1].error
                assert [t for o in outs for t in o.new_token_ids] == expected[i]
            assert cluster.num_migrations >= 1
            assert "tokenmill:migrations_total" in (await c.get("/metrics")).text

            cluster.migration_limit = 0
            outs, agen = await first_then_rest(cluster.generate(prompts[0], params[0], "no-migration"))
            os.kill(cluster.workers[cluster._route["no-migration"]].info.pid, signal.SIGKILL)
            outs += [out async for out in agen]
            assert outs[-1].finish_reason == "error" and "died" in outs[-1].error
            alive = [w for w in (await c.get("/v1/workers")).json()["data"] if w["alive"]]
            health = await c.get("/health")
            assert health.status_code == (200 if alive else 503)
            if not alive:
                answer = await c.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 2})
                assert answer.status_code == 503 and answer.json()["error"]["code"] == "engine_unavailable"

    asyncio.run(scenario())
