"""The served engine's steps under Server load, each priced on the this-machine profile: an in-process
AsyncEngine (the bench's engine: default threads, 128 sequences, 1,024-token budget) takes Poisson arrivals at
QPS of 128-token prompts drawn from 256 samples (a repeat hits the prefix cache), 128 tokens each, and logs every
step (decodes, prompt tokens, seconds: AsyncEngine.step_log, as sim calibrate times its steps); each step is then
priced with its decodes over 192-token contexts (the mean of 128-256) beside its prompt tokens from their start,
and the steps are grouped by their decodes:
    PYTHONPATH=src python results/sim-peak-xeon-2026-12-01-s48/served_steps.py QPS QUERIES"""
import asyncio
import random
import statistics
import sys
import numpy as np
from tokenmill.config import EngineConfig
from tokenmill.engine.async_engine import AsyncEngine
from tokenmill.sampling_params import SamplingParams
from tokenmill.sim.calibrate import load_profile
from tokenmill.sim.cost import Parallel, step_cost, step_time
from tokenmill.sim.models import get_model
from tokenmill.sim.shapes import PrefillChunk, StepShape


def price_table(log) -> str:
    """Each logged step (decodes, prompt tokens, seconds, start) priced on the this-machine profile, its
    decodes over 192-token contexts beside its prompt tokens from their start; the steps grouped by their
    decodes (bench_steps.py prints its log the same way)."""
    arch, profile = get_model("smollm2-135m"), load_profile()

    def price(d, p):
        shape = StepShape(decode_contexts=(192,) * d, prefills=(PrefillChunk(p, 0),) if p else ())
        return step_time(step_cost(arch, shape, Parallel(), "bf16", 2.0), profile, "bf16").total_s

    groups = {}
    for d, p, s, *_ in log:
        key = ("decode-only" if not p else "with a prompt", min(d // 16 * 16, 96))
        groups.setdefault(key, []).append((s, price(d, p), d, p))
    lines = [f"{len(log)} steps; measured busy {sum(x[2] for x in log):.1f} s, priced "
             f"{sum(price(d, p) for d, p, *_ in log):.1f} s",
             "| kind | decodes | steps | mean decodes / prompt tokens | measured median ms | priced median ms | "
             "priced / measured (sums) |",
             "|---|---|---|---|---|---|---|"]
    for (kind, lo), v in sorted(groups.items()):
        lines.append(f"| {kind} | {lo}-{lo + 15 if lo < 96 else ''} | {len(v)} | {statistics.mean(x[2] for x in v):.1f} / "
                     f"{statistics.mean(x[3] for x in v):.0f} | {statistics.median(x[0] for x in v) * 1e3:.1f} | "
                     f"{statistics.median(x[1] for x in v) * 1e3:.1f} | {sum(x[1] for x in v) / sum(x[0] for x in v):.2f} |")
    return "\n".join(lines)


def main():
    qps, queries = float(sys.argv[1]), int(sys.argv[2])
    engine = AsyncEngine(EngineConfig(max_num_seqs=128, max_num_batched_tokens=1024))
    samples = [[random.Random(1000 + i).randrange(1000, 40000) for _ in range(128)] for i in range(256)]
    rng = np.random.default_rng(0)
    gaps, picks = rng.exponential(1 / qps, queries), rng.integers(256, size=queries)
    params = SamplingParams(max_tokens=128, temperature=0.0, ignore_eos=True)

    async def one(prompt):
        async for _ in engine.generate(prompt, params):
            pass

    async def arrive():
        tasks = []
        for gap, pick in zip(gaps, picks):
            await asyncio.sleep(gap)
            tasks.append(asyncio.create_task(one(samples[pick])))
        await asyncio.gather(*tasks)

    engine.step_log = []
    asyncio.run(arrive())
    log, engine.step_log = engine.step_log, None
    engine.shutdown()
    print(f"at {qps} QPS, {queries} queries:")
    print(price_table(log))


if __name__ == "__main__":
    main()
