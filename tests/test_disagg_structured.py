"""Structured outputs across workers: a constrained request prefilled on one Ray
worker (which samples its first token under the grammar) and decoded on
another (which replays that token through its own matcher) answers exactly
like one in-process engine, and the grammar holds.

The embedded model (grammars need its tokenizer), float32, batch-invariant
kernels as in test_disagg.py, so tokens do not depend on where they ran."""

from __future__ import annotations

import asyncio
import json
import re

import jsonschema
import pytest
from _collect import collect
from _spec_helpers import _plain_engine, chat

from tokenmill.cluster.disagg import DisaggConfig
from tokenmill.config import EngineConfig
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.sampling_params import SamplingParams
from tokenmill.structured.params import StructuredOutputsParams as Constraint

ray = pytest.importorskip("ray")

CONFIG = EngineConfig(dtype="float32", device="cpu", num_kv_blocks=96, max_model_len=512,
                      deterministic=load_cpu_kernels() is not None, num_threads=1)
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "minimum": 0}}}


@pytest.fixture(scope="module")
def cluster():
    from tokenmill.cluster.client import ClusterEngine
    from tokenmill.cluster.launch import launch_workers, start_ray
    from tokenmill.cluster.router import Router, RouterConfig

    started = start_ray(None, num_cpus=4)
    actors = launch_workers(CONFIG, 2, num_cpus=1, num_gpus=0, scheduling_strategy=None, roles=["prefill", "decode"])
    engine = ClusterEngine(actors, Router(RouterConfig(policy="kv", block_size=CONFIG.block_size)),
                           started_ray=started, disagg=DisaggConfig(min_prefill_tokens=16, transfer_timeout_s=60))
    yield engine
    engine.shutdown()


def test_constrained_requests_prefilled_and_decoded_on_different_workers(cluster):
    reference = _plain_engine()
    prompts = [chat(reference, "Invent a person."), chat(reference, "Give me a phone number.")]
    params = [SamplingParams(max_tokens=40, temperature=0.0, structured=Constraint(json=PERSON)),
              SamplingParams(max_tokens=16, temperature=1.0, seed=5, structured=Constraint(regex=r"\d{3}-\d{4}"))]
    want = [r.token_ids for r in reference.generate(prompts, params)]

    async def run():
        return await asyncio.gather(*(collect(cluster, p, sp, f"s-{i}")
                                      for i, (p, sp) in enumerate(zip(prompts, params))))

    before = cluster.disagg_metrics.transfers
    results = asyncio.run(run())
    assert [tokens for tokens, _ in results] == want
    assert cluster.disagg_metrics.transfers - before == 2  # both went prefill worker -> decode worker
    texts = [reference.tokenizer.decode(tokens) for tokens in want]
    jsonschema.validate(json.loads(texts[0]), PERSON)
    assert re.fullmatch(r"\d{3}-\d{4}", texts[1]), texts[1]
