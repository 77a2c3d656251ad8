"""Disaggregated prefill/decode on Ray: one prefill and two decode workers
behind one ClusterEngine (one Ray instance for the module).

Deterministic (batch-invariant) kernels, as in test_cluster.py: a request's
tokens do not depend on which worker computed which part of it, so the
disaggregated answers must equal one in-process engine's, token for token."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from _collect import collect

from tokenmill.cluster.disagg import DisaggConfig, decide
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.sampling_params import SamplingParams

ray = pytest.importorskip("ray")

CONFIG = EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", num_kv_blocks=64,
                      max_model_len=256, max_num_batched_tokens=64, deterministic=load_cpu_kernels() is not None,
                      num_threads=1)
BS = CONFIG.block_size  # dummy:tiny: vocabulary of 512, so every token id here is < 512
RULE = DisaggConfig(min_prefill_tokens=32, max_prefill_queue=8, transfer_timeout_s=20)
PREFILL_NICE = 18  # the prefill worker runs below the decode workers' priority (Ray's 15; cluster/cpu_priority.py)


@pytest.fixture(scope="module")
def cluster():
    from tokenmill.cluster.client import ClusterEngine
    from tokenmill.cluster.launch import launch_workers, start_ray
    from tokenmill.cluster.router import Router, RouterConfig

    started = start_ray(None, num_cpus=4)
    actors = launch_workers(CONFIG, 3, num_cpus=1, num_gpus=0, scheduling_strategy=None,
                            roles=["prefill", "decode", "decode"], nice_by_role={"prefill": PREFILL_NICE})
    engine = ClusterEngine(actors, Router(RouterConfig(policy="kv", block_size=BS)), started_ray=started,
                           disagg=RULE)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def reference():
    engine = LLMEngine(CONFIG)
    return lambda prompts, params: [r.token_ids for r in engine.generate(prompts, params)]


def run_all(engine, prompts, params, prefix="r"):
    async def go():
        return await asyncio.gather(*(collect(engine, p, sp, f"{prefix}-{i}")
                                      for i, (p, sp) in enumerate(zip(prompts, params))))
    return asyncio.run(go())


def wait_idle(cluster, timeout_s=30):
    """Until every worker reports nothing running and no block used or held, and
    no handoff is under way (a request's last token can reach its client before
    the handoff thread that moved it has counted the transfer)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = cluster.stats()
        if s.num_running == 0 and s.num_waiting == 0 and s.kv_blocks_used == 0 and s.kv_blocks_held == 0 \
                and cluster.handoffs_in_flight == 0:
            return True
        time.sleep(0.05)
    return False


def test_the_rule_follows_its_flags():
    rule = DisaggConfig(min_prefill_tokens=100, max_prefill_queue=2)
    assert decide(rule, 300, 0, 16, [0]) == "remote"
    assert decide(rule, 99, 0, 16, [0]) == "local_short"
    assert decide(rule, 300, 13, 16, [0]) == "local_short"  # 300 - 13*16 = 92 uncached on the decode side
    assert decide(rule, 300, 0, 16, [2, 3]) == "local_queue"
    assert decide(rule, 300, 0, 16, [2, 1]) == "remote"
    assert decide(rule, 300, 0, 16, []) == "local_no_prefill_worker"
    send_all = DisaggConfig(min_prefill_tokens=0)
    assert decide(send_all, 5, 0, 16, [0]) == "remote"
    assert decide(send_all, 129, 8, 16, [0]) == "remote"  # one token not held: its partial block travels
    assert decide(send_all, 128, 8, 16, [0]) == "local_short"  # held whole: nothing to compute elsewhere
    with pytest.raises(ValueError, match="disagg_max_prefill_queue"):
        DisaggConfig(max_prefill_queue=0)


def test_disaggregated_answers_equal_one_engine(cluster, reference):
    prompts = [list(range(20, 20 + 3 * BS + 7)), list(range(300, 340)), [5, 6, 7, 8, 9], list(range(100, 196))]
    params = [SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True),
              SamplingParams(max_tokens=10, temperature=0.9, seed=3, ignore_eos=True),
              SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, logprobs=2),
              SamplingParams(max_tokens=9, temperature=1.2, top_k=30, seed=11, ignore_eos=True)]
    m = cluster.disagg_metrics
    before = (m.decisions["remote"], m.decisions["local_short"], m.transfers, m.transfer_blocks)
    results = run_all(cluster, prompts, params, "eq")
    for (tokens, final), want in zip(results, reference(prompts, params)):
        assert tokens == want and final.finish_reason == "length" and final.num_output_tokens == len(want)
    assert wait_idle(cluster)
    assert m.decisions["remote"] - before[0] == 3 and m.decisions["local_short"] - before[1] == 1
    assert m.transfers - before[2] == 3
    assert m.transfer_blocks - before[3] == 4 + 3 + 6  # every prompt block, the partial ones included
    assert m.transfer_bytes > 0 and m.bandwidth_bytes_per_s > 0


def test_only_the_blocks_the_decode_worker_lacks_are_sent(cluster, reference):
    prefix = list(range(200, 200 + 4 * BS))
    greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    m = cluster.disagg_metrics
    run_all(cluster, [prefix + [1]], [greedy], "warm")  # remote: its 4 full blocks land on a decode worker
    assert wait_idle(cluster)
    skipped, sent, transfers = m.blocks_skipped, m.transfer_blocks, m.transfers
    prompt = prefix + list(range(400, 400 + 2 * BS + 3))  # 4 held + 2 full + 1 partial block
    (tokens, _), = run_all(cluster, [prompt], [greedy], "hit")
    assert tokens == reference([prompt], [greedy])[0]
    assert wait_idle(cluster)
    assert m.transfers == transfers + 1  # 35 uncached tokens >= 32: still remote
    assert m.blocks_skipped - skipped == 4 and m.transfer_blocks - sent == 3


def test_a_prompt_its_decode_worker_holds_whole_is_sent_as_no_blocks(cluster, reference, monkeypatch):
    """A repeated prompt of whole blocks handed off to the decode worker that caches all of it (the
    rule keeps such a prompt local now; a decision made before the first copy landed still sends it):
    no block travels and the answer is the engine's (a live bug: the empty payload failed the request
    mid-stream, 83 of 240 queries of a `--disagg-min-prefill-tokens 0` run)."""
    import tokenmill.cluster.handoff as handoff

    prompt = list(range(330, 330 + 4 * BS))
    greedy = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    want = reference([prompt], [greedy])[0]
    m = cluster.disagg_metrics
    (tokens, _), = run_all(cluster, [prompt], [greedy], "whole")  # remote: its 4 blocks land on a decode worker
    assert tokens == want and wait_idle(cluster)
    assert decide(DisaggConfig(min_prefill_tokens=0), len(prompt), 4, BS, [0]) == "local_short"
    monkeypatch.setattr(handoff, "decide", lambda *args: "remote")  # as if decided before the blocks landed
    transfers, sent, skipped = m.transfers, m.transfer_blocks, m.blocks_skipped
    (tokens, final), = run_all(cluster, [prompt], [greedy], "whole-again")
    assert tokens == want and final.finish_reason == "length"
    assert wait_idle(cluster)
    assert (m.transfers - transfers, m.transfer_blocks - sent, m.blocks_skipped - skipped) == (1, 0, 4)


def test_a_short_uncached_part_stays_on_the_decode_worker(cluster, reference):
    prefix = list(range(264, 264 + 4 * BS))
    greedy = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)
    run_all(cluster, [prefix + [1]], [greedy], "warm2")
    assert wait_idle(cluster)
    m = cluster.disagg_metrics
    short, transfers = m.decisions["local_short"], m.transfers
    prompt = prefix + list(range(450, 460))  # 10 tokens not cached on the decode worker holding the prefix
    (tokens, _), = run_all(cluster, [prompt], [greedy], "short")
    assert tokens == reference([prompt], [greedy])[0]
    assert wait_idle(cluster)
    assert m.decisions["local_short"] == short + 1 and m.transfers == transfers, \
        (dict(m.decisions), cluster.router.metrics.last_overlap_blocks,
         {w: (h.stats.kv_blocks_used, h.stats.num_running) for w, h in cluster.workers.items()})


def test_a_deep_prefill_queue_keeps_new_prompts_local(cluster, reference):
    """With --disagg-max-prefill-queue 1, the first of three long prompts that
    arrive together goes to the prefill worker; the other two find its queue
    full and are computed on their decode workers."""
    import dataclasses

    prompts = [[(11 * j + i) % 509 for j in range(70)] for i in range(3)]
    params = [SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)] * 3
    m = cluster.disagg_metrics
    before = (m.decisions["remote"], m.decisions["local_queue"])
    cluster.disagg = dataclasses.replace(RULE, max_prefill_queue=1)
    try:
        results = run_all(cluster, prompts, params, "queue")
    finally:
        cluster.disagg = RULE
    assert [tokens for tokens, _ in results] == reference(prompts, params)
    assert (m.decisions["remote"] - before[0], m.decisions["local_queue"] - before[1]) == (1, 2)
    assert wait_idle(cluster)


def test_preemption_on_the_decode_side_keeps_the_answers(cluster, reference):
    prompts = [[(37 * i + j) % 500 + 5 for j in range(100)] for i in range(10)]
    params = [SamplingParams(max_tokens=150, temperature=0.0, ignore_eos=True) for _ in prompts]
    before = {w: h.stats.num_preemptions for w, h in cluster.workers.items() if h.stats}
    results = run_all(cluster, prompts, params, "pre")
    for (tokens, final), want in zip(results, reference(prompts, params)):
        assert tokens == want and final.finish_reason == "length"
    preempted = {w: h.stats.num_preemptions - before.get(w, 0) for w, h in cluster.workers.items()
                 if h.info.role == "decode"}
    assert sum(preempted.values()) > 0, preempted  # 10 x 16 blocks on two 64-block decode workers
    assert wait_idle(cluster)


def test_metrics_and_workers_list_roles_and_transfers(cluster):
    import httpx

    from tokenmill.serve.api import build_app

    async def scenario():
        transport = httpx.ASGITransport(app=build_app(cluster))
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            body = (await c.get("/v1/workers")).json()
            metrics = (await c.get("/metrics")).text
        return body, metrics

    body, metrics = asyncio.run(scenario())
    assert sorted(w["role"] for w in body["data"]) == ["decode", "decode", "prefill"]
    assert all(isinstance(w["kv_imports_recomputed"], int) for w in body["data"])
    d = body["disaggregation"]
    assert d["transfers"] >= 3 and d["transfer_bytes"] > 0 and d["decisions"]["remote"] >= 3
    assert d["kv_transport"] == "ray-object-store"
    for name in ("tokenmill:kv_transfer_bytes_total", "tokenmill:kv_transfers_total",
                 "tokenmill:kv_transfer_seconds_total", "tokenmill:kv_transfer_bandwidth_bytes_per_second",
                 'tokenmill:disagg_prefill_decisions_total{decision="remote"}',
                 'tokenmill:role_num_requests_waiting{role="prefill"}'):
        assert name in metrics, name


def _thread_nice_values(pid: int) -> dict[str, int]:
    """Thread name -> nice value, for every thread of process ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                out[f"{f.read().strip()}/{tid}"] = os.getpriority(os.PRIO_PROCESS, int(tid))
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads thread priorities from Linux's /proc")
def test_the_prefill_worker_runs_below_the_decode_workers_priority(cluster):
    """Every thread of the prefill worker (the step thread included: it starts
    after the worker lowered its priority) runs at PREFILL_NICE; the decode
    workers' step threads keep the value Ray started them at (its raylet's
    worker_niceness, 15 by default, which it sets on the main thread only), and
    /v1/workers reports each step thread's value."""
    workers = cluster.describe_workers()
    decode = {w["nice"] for w in workers if w["role"] == "decode"}
    if max(decode) >= PREFILL_NICE:
        pytest.skip(f"Ray starts its workers at nice {max(decode)}, not above PREFILL_NICE")
    (prefill,) = [w for w in workers if w["role"] == "prefill"]
    assert prefill["nice"] == PREFILL_NICE
    values = _thread_nice_values(prefill["pid"])
    assert len(values) >= 3 and set(values.values()) == {PREFILL_NICE}, values  # Ray's threads, the step thread
    for w in workers:
        if w["role"] == "decode":
            assert max(_thread_nice_values(w["pid"]).values()) < PREFILL_NICE


class _Wrapped:
    """An actor handle with one method replaced (the fault tests' hook)."""

    def __init__(self, actor, name, make):
        self._actor, self._name, self._make = actor, name, make

    def __getattr__(self, name):
        if name == self._name:
            return self._make(getattr(self._actor, name))
        return getattr(self._actor, name)


def _method(remote):
    class Method:
        pass
    m = Method()
    m.remote = remote
    return m


def test_a_failed_transfer_is_retried_then_prefilled_locally(cluster, reference):
    params = SamplingParams(max_tokens=10, temperature=0.7, seed=2, ignore_eos=True)
    m = cluster.disagg_metrics
    originals = {w: h.actor for w, h in cluster.workers.items()}
    for fails, fallbacks in ((1, 0), (2, 1)):  # one failure: the retry lands; two: the decode worker prefills
        prompt = [(3 * j + fails) % 509 for j in range(80)]  # a new prompt each time: none of it cached
        want = reference([prompt], [params])[0]
        count = {"n": 0}

        def failing_import(method, count=count, fails=fails):
            def remote(*args):
                count["n"] += 1
                if count["n"] <= fails:
                    raise RuntimeError("the transfer broke (simulated)")
                return method.remote(*args)
            return _method(remote)

        for w, h in cluster.workers.items():
            if h.info.role == "decode":
                h.actor = _Wrapped(originals[w], "import_kv", failing_import)
        before = (m.transfer_failures, m.local_fallbacks)
        try:
            (tokens, final), = run_all(cluster, [prompt], [params], f"flaky-{fails}")
        finally:
            for w, h in cluster.workers.items():
                h.actor = originals[w]
        assert tokens == want and final.finish_reason == "length"
        assert wait_idle(cluster)  # the prefill worker's hold was released either way
        assert (m.transfer_failures - before[0], m.local_fallbacks - before[1]) == (fails, fallbacks)


def _wait_alive(cluster, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while not all(h.alive for h in cluster.workers.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return all(h.alive for h in cluster.workers.values())


def test_a_prefill_worker_killed_mid_flight_loses_no_request(cluster, reference):
    """SIGKILL the prefill worker (a) right after a prompt was submitted to it,
    (b) after its first token, just before the transfer: every request ends
    with the tokens of a fault-free run."""
    params = SamplingParams(max_tokens=20, temperature=0.8, seed=4, ignore_eos=True)
    m = cluster.disagg_metrics
    prefill_id = next(w for w, h in cluster.workers.items() if h.info.role == "prefill")
    handle = cluster.workers[prefill_id]
    original = handle.actor

    def kill_after(method):
        def remote(*args):  # the call goes out, then its worker dies (once: a retry meets the dead worker)
            ref = method.remote(*args)
            if not killed:
                killed.append(handle.info.pid)
                os.kill(handle.info.pid, signal.SIGKILL)
            return ref
        return _method(remote)

    for step, name in enumerate(("submit", "export_kv")):
        prompt = [(5 * j + step) % 509 for j in range(90)]  # uncached: it goes to the prefill worker
        want = reference([prompt], [params])[0]
        assert _wait_alive(cluster)
        remote, killed = m.decisions["remote"], []
        handle.actor = _Wrapped(original, name, kill_after)
        try:
            (tokens, final), = run_all(cluster, [prompt], [params], f"kill-prefill-{step}")
        finally:
            handle.actor = original
        assert m.decisions["remote"] == remote + 1
        assert final.finish_reason == "length", final.error
        assert tokens == want
    assert _wait_alive(cluster)


def test_a_decode_worker_killed_mid_flight_loses_no_request(cluster, reference):
    """Runs last: SIGKILL a decode worker while it streams disaggregated
    requests; they migrate to the other decode worker with exactly the tokens
    of a fault-free run."""
    assert _wait_alive(cluster)
    prompts = [[(7 * j + i + 3) % 509 for j in range(100)] for i in range(3)]
    params = [SamplingParams(max_tokens=120, temperature=0.0, ignore_eos=True),
              SamplingParams(max_tokens=120, temperature=1.0, seed=5, ignore_eos=True),
              SamplingParams(max_tokens=100, temperature=0.0, ignore_eos=True)]
    want = reference(prompts, params)

    async def scenario():
        started = []
        for i, (p, sp) in enumerate(zip(prompts, params)):
            agen = cluster.generate(p, sp, f"kill-decode-{i}")
            started.append(([await agen.__anext__()], agen))
        while cluster._route.get("kill-decode-0") is None or \
                cluster.workers[cluster._route["kill-decode-0"]].info.role != "decode":
            await asyncio.sleep(0.01)  # its handoff is under way
        victim = cluster.workers[cluster._route["kill-decode-0"]]
        os.kill(victim.info.pid, signal.SIGKILL)
        for outs, agen in started:
            outs += [out async for out in agen]
        return started

    migrations = cluster.num_migrations
    for i, (outs, _) in enumerate(asyncio.run(scenario())):
        assert outs[-1].finish_reason == "length", outs[-1].error
        assert [t for o in outs for t in o.new_token_ids] == want[i]
    assert cluster.num_migrations > migrations
