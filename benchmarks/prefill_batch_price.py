"""A step of N whole prompts on the engine, timed, against a calibrated profile's price of that step.

`tokenmill sim calibrate` times prefills of one prompt (64 and 256 tokens); the live uplift's Offline
baseline (whole prompts, the budget raised to 8,192 tokens) opens with a step of 27. This says whether a
step of several prompts costs what the profile extrapolates:

    TOKENMILL_CACHE=results/uplift-sim-xeon-2026-12-01 python -m benchmarks.prefill_batch_price \\
        --profile torch-eager --baseline-engine --prompts 1 4 27 --tokens 302

``--baseline-engine``: the engine as `tokenmill bench --uplift`'s baseline (torch attention, ops and
linears, eager steps, no prefix caching, whole prompts); otherwise the engine's defaults, whole prompts.
Each size is the median of ``--repeats`` first steps, on random token ids (no prefix hits).
``--ops``: then one more step of the last size under torch's profiler, its operators by time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", default="this-machine", help="the calibrated profile that prices the steps")
    ap.add_argument("--baseline-engine", action="store_true", help="the uplift baseline's kernels (see above)")
    ap.add_argument("--prompts", type=int, nargs="+", default=[1, 4, 27], help="prompts per step")
    ap.add_argument("--tokens", type=int, default=302, help="tokens per prompt")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ops", action="store_true", help="profile one more step of the last size, by operator")
    a = ap.parse_args(argv)

    from tokenmill.bench.uplift import BASELINE
    from tokenmill.config import EngineConfig
    from tokenmill.engine.engine import LLMEngine
    from tokenmill.sampling_params import SamplingParams
    from tokenmill.sim.calibrate import load_profile
    from tokenmill.sim.cost import Parallel, step_cost, step_time
    from tokenmill.sim.models import get_model
    from tokenmill.sim.shapes import PrefillChunk, StepShape

    flags = BASELINE if a.baseline_engine else {"enable_prefix_caching": False, "enable_chunked_prefill": False}
    engine = LLMEngine(EngineConfig(**flags))
    arch, profile = get_model("smollm2-135m"), load_profile(a.profile)
    print(f"| prompts x {a.tokens} tokens | measured (ms) | {a.profile} prices (ms) | measured / priced |")
    print("|---|---|---|---|")

    def first_step(n: int, tag: str) -> float:
        for i in range(n):
            ids = [random.randrange(100, 40000) for _ in range(a.tokens)]
            engine.add_request(f"{tag}-{i}", ids, SamplingParams(max_tokens=1, ignore_eos=True))
        start = time.perf_counter()
        engine.step()  # every prompt whole in this one step (the budget is raised to max_model_len)
        seconds = time.perf_counter() - start
        while engine.has_unfinished_requests():
            engine.step()
        return seconds

    for n in a.prompts:
        times = [first_step(n, f"{n}-{rep}") for rep in range(a.repeats)]
        shape = StepShape(decode_contexts=(), prefills=tuple(PrefillChunk(a.tokens, 0) for _ in range(n)))
        price = step_time(step_cost(arch, shape, Parallel(), profile.default_precision, 2.0), profile,
                          profile.default_precision).total_s
        measured = statistics.median(times)
        print(f"| {n} | {measured * 1e3:,.1f} | {price * 1e3:,.1f} | {measured / price:.2f} |")
    if a.ops:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as ops:
            first_step(a.prompts[-1], "ops")
        print(ops.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
