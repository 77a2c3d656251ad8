"""How much of a simulated MLPerf Offline run is drain: DeepSeek-R1 on one 8-GPU
TP8 EP8 attention-DP replica, the MLPerf dataset's lengths, N samples at once,
as docs/SIMULATOR-LOG.md's "Runs as long as the published ones" quotes it:

    python -m benchmarks.sim_offline_drain --hardware gb300 --samples 12000
    python -m benchmarks.sim_offline_drain --hardware gb300 --samples 105312    # the published run's count

Prints the run's length and tokens/s per GPU, and the time its steps spent
below a few decode-batch sizes (the drain: the queue is empty and the longest
outputs, up to 20,000 tokens, finish at small batches).
"""

from __future__ import annotations

import argparse

import numpy as np

from tokenmill.sim.cost import Parallel, step_cost, step_time
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.mlperf_lengths import dataset_means, length_draws
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import PRECISION_BYTES_KV, Deployment, check_deployment, step_budget
from tokenmill.sim.scenarios import offline_requests
from tokenmill.sim.serving import SimConfig, simulate

THRESHOLDS = (64, 256, 1024, 4096)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hardware", default="gb300")
    ap.add_argument("--samples", type=int, default=105312)
    ap.add_argument("--max-num-seqs", type=int, default=8192, help="per replica (1,024 per GPU)")
    args = ap.parse_args(argv)
    arch, hw = get_model("deepseek-r1"), get_hardware(args.hardware)
    d = Deployment(8, Parallel(tp=1, ep=8, attention_dp=True), "fp4", max_num_seqs=args.max_num_seqs)
    steps: list[tuple[int, float]] = []  # (decodes, seconds) per step

    def seconds(shape) -> float:
        dt = step_time(step_cost(arch, shape, d.parallel, d.precision, PRECISION_BYTES_KV["fp4"]), hw,
                       d.precision).total_s
        steps.append((shape.num_decodes, dt))
        return dt

    _, osl, cap = dataset_means("deepseek-r1")
    prompt, output = length_draws("deepseek-r1", osl, cap)
    config = SimConfig(max_num_seqs=d.max_num_seqs, max_num_batched_tokens=step_budget(d),
                       num_kv_blocks=check_deployment(arch, hw, d), block_size=d.block_size)
    result = simulate(offline_requests(args.samples, prompt, output), seconds, config)
    decodes, dt = (np.array(x) for x in zip(*steps))
    print(f"{args.samples:,} samples on 8 x {hw.name}: {result.duration_s:,.0f} s, "
          f"{result.output_tokens_per_s / 8:,.0f} tok/s per GPU, mean batch {result.mean_batch_size:,.0f}")
    for below in THRESHOLDS:
        print(f"  steps under {below:>5,} decodes: {dt[decodes < below].sum():7,.0f} s of {dt.sum():,.0f} s")


if __name__ == "__main__":
    main()
