"""The cost model's rule for one GEMM against DeepGEMM's published H800 FP8 kernel table.

DeepGEMM's README of 2025-03-25 (deepseek-ai/DeepGEMM @55ab91f, "Update performance") lists
measured FP8 GEMMs on an H800 (the H100's tensor cores and 3.35 TB/s HBM): dense GEMMs at the
M = 64 / 128 / 4096 rows of DeepSeek-V3's decode and prefill shapes, and grouped GEMMs in the
contiguous (prefill) and masked (decode) layouts. Each row is priced here as the simulator prices
a step's GEMM work (cost.step_time's forward on the ``h100`` profile: FP8 at the fitted GEMM
fraction, the bytes at ``Efficiency.memory``, combined by the sqrt rule), with the kernel's bytes:
FP8 weights and inputs, bf16 outputs. Prints the published and modelled microseconds per row and
their ratio's median and range:

    python -m benchmarks.sim_gemm_kernels
"""

from __future__ import annotations

import statistics

from tokenmill.sim.cost import StepCost, step_time
from tokenmill.sim.hardware import get_hardware

# (groups, M per group, N, K, published TFLOP/s): the README's three tables.
DENSE = [(1, m, n, k, t) for m, n, k, t in (
    (64, 2112, 7168, 206), (64, 24576, 1536, 289), (64, 32768, 512, 219), (64, 7168, 16384, 336),
    (64, 4096, 7168, 287), (64, 7168, 2048, 295), (128, 2112, 7168, 352), (128, 24576, 1536, 535),
    (128, 32768, 512, 358), (128, 7168, 16384, 645), (128, 4096, 7168, 533), (128, 7168, 2048, 510),
    (4096, 2112, 7168, 1058), (4096, 24576, 1536, 990), (4096, 32768, 512, 590), (4096, 7168, 16384, 1358),
    (4096, 4096, 7168, 1304), (4096, 7168, 2048, 1025))]
CONTIGUOUS = [(4, 8192, 4096, 7168, 1297), (4, 8192, 7168, 2048, 1099), (8, 4096, 4096, 7168, 1288),
              (8, 4096, 7168, 2048, 1093)]
MASKED = [(1, 1024, 4096, 7168, 1233), (1, 1024, 7168, 2048, 925), (2, 512, 4096, 7168, 1040),
          (2, 512, 7168, 2048, 916), (4, 256, 4096, 7168, 932), (4, 256, 7168, 2048, 815)]


def modelled_seconds(groups: int, m: int, n: int, k: int) -> float:
    """The forward time of the simulator's rule for these GEMMs on one H800 (``h100`` profile)."""
    flops = 2.0 * groups * m * n * k
    cost = StepCost(gemm_flops=flops, attention_flops=0.0, weight_bytes=groups * n * k,
                    kv_read_bytes=0.0, kv_write_bytes=0.0, activation_bytes=groups * (m * k + 2 * m * n),
                    allreduce_bytes=0.0, alltoall_bytes=0.0, num_collectives=0, devices=1)
    return step_time(cost, get_hardware("h100"), "fp8").forward_s


def main() -> None:
    ratios = []
    print("| layout | groups x M | N | K | published us | modelled us | modelled / published |")
    print("|---|---|---|---|---|---|---|")
    for layout, rows in (("dense", DENSE), ("grouped, contiguous", CONTIGUOUS), ("grouped, masked", MASKED)):
        for groups, m, n, k, tflops in rows:
            published = 2.0 * groups * m * n * k / (tflops * 1e12)
            modelled = modelled_seconds(groups, m, n, k)
            ratios.append(modelled / published)
            print(f"| {layout} | {groups} x {m} | {n} | {k} | {published * 1e6:,.1f} | {modelled * 1e6:,.1f} | "
                  f"{ratios[-1]:.2f} |")
    print(f"\n{len(ratios)} kernels: modelled / published median {statistics.median(ratios):.2f}, "
          f"range {min(ratios):.2f}-{max(ratios):.2f}")


if __name__ == "__main__":
    main()
