"""Two Ray nodes faked on this machine (ray.cluster_utils.Cluster): workers are
spread over both nodes, serve, and a request moves across nodes when its
worker dies."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.sampling_params import SamplingParams

ray = pytest.importorskip("ray")

CONFIG = EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", num_kv_blocks=64,
                      max_model_len=256, deterministic=load_cpu_kernels() is not None, num_threads=1)


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    from tokenmill.cluster.client import ClusterEngine
    from tokenmill.cluster.launch import launch_workers
    from tokenmill.cluster.router import Router, RouterConfig

    if ray.is_initialized():
        ray.shutdown()
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 * 2 ** 20})
    nodes.add_node(num_cpus=1, object_store_memory=80 * 2 ** 20)
    ray.init(address=nodes.address, include_dashboard=False)
    nodes.wait_for_nodes()
    # One CPU per node and one per worker: Ray must put one worker on each node.
    engine = ClusterEngine(launch_workers(CONFIG, 2, num_cpus=1, num_gpus=0),
                           Router(RouterConfig(policy="round-robin", block_size=CONFIG.block_size)))
    yield engine
    engine.shutdown()
    ray.shutdown()
    nodes.shutdown()


def test_workers_on_two_nodes_serve_and_migrate_across_them(two_nodes):
    engine = two_nodes
    assert len({h.info.node_id for h in engine.workers.values()}) == 2
    params = SamplingParams(max_tokens=200, temperature=0.9, seed=21, ignore_eos=True)
    prompt = list(range(50, 70))
    expected = LLMEngine(CONFIG).generate([prompt], params)[0].token_ids

    async def scenario():
        agen = engine.generate(prompt, params, "moves")
        outs = [await agen.__anext__()]
        os.kill(engine.workers[engine._route["moves"]].info.pid, signal.SIGKILL)
        outs += [out async for out in agen]
        return outs

    outs = asyncio.run(scenario())
    assert outs[-1].finish_reason == "length", outs[-1].error
    assert [t for o in outs for t in o.new_token_ids] == expected
    assert engine.num_migrations == 1
