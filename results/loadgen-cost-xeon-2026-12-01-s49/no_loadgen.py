"""A measured `tokenmill bench` run's queries again, on a fresh in-process engine with no LoadGen and no bench
client: each query's prompt (the run's own workload, rebuilt from its params) is added at the time the run issued
it, greedy, its own output length, ignoring EOS, as the bench's engine backend asks; the engine keeps its steps
(engine/step_log.py), which are saved and priced at their shapes on the this-machine profile as `tokenmill sim
--replay` prices the bench's own steps (sim/served_steps.py). Set beside that replay, what the bench's LoadGen
and client cost the engine's steps of the same shapes:
    PYTHONPATH=src python results/loadgen-cost-xeon-2026-12-01-s49/no_loadgen.py RUN_FOLDER OUT_FOLDER"""
import asyncio
import sys
import time
from pathlib import Path

from tokenmill.bench.results import load_result
from tokenmill.bench.workloads.synthetic import SyntheticSpec, build_synthetic
from tokenmill.config import EngineConfig
from tokenmill.engine.async_engine import AsyncEngine
from tokenmill.engine.step_log import STEPS_FILE, save_steps
from tokenmill.sampling_params import SamplingParams
from tokenmill.sim.calibrate import load_profile
from tokenmill.sim.cost import Parallel
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment
from tokenmill.sim.served_steps import price_steps, served_steps_table
from tokenmill.sim.step_price import replica_step_seconds


def main():
    run, out = load_result(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    engine = AsyncEngine(EngineConfig(max_num_seqs=128, max_num_batched_tokens=1024))
    params = {k: v for k, v in run.workload["params"].items() if k != "workload"}
    samples = build_synthetic(engine.tokenizer, SyntheticSpec(**params)).samples
    queries = sorted((q.issued_s, samples[q.sample_index]) for q in run.queries)
    t0_unix = time.time()

    async def one(at: float, sample):
        await asyncio.sleep(max(0.0, at - (time.time() - t0_unix)))
        params = SamplingParams(max_tokens=sample.max_tokens, temperature=0.0, ignore_eos=True)
        async for _ in engine.generate(list(sample.prompt_token_ids), params):
            pass

    async def all_queries():
        await asyncio.gather(*(one(at - queries[0][0], s) for at, s in queries))

    engine.step_log = []
    asyncio.run(all_queries())
    steps, engine.step_log = engine.step_log, None
    engine.shutdown()
    save_steps(out / STEPS_FILE, steps, t0_unix)
    price = replica_step_seconds(get_model("smollm2-135m"), load_profile(), Deployment(
        1, Parallel(), "bf16", max_num_seqs=128, max_num_batched_tokens=1024))
    print(f"{len(queries)} queries of {sys.argv[1]} at their issue times, no LoadGen:")
    print(served_steps_table(price_steps(steps, price)))


if __name__ == "__main__":
    main()
