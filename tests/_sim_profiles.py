"""Two calibrated-looking CPU profiles for tests of `tokenmill sim` on calibrated hardware: a fast engine
(the full stack's kernels) and a slower one (the uplift baseline's torch kernels)."""

from __future__ import annotations

from dataclasses import replace

from tokenmill.sim.hardware import Efficiency, Hardware

FULL = Hardware(name="fast-engine", memory_bytes=24e9, memory_bw=2e10, flops={"bf16": 4e11}, interconnect_bw=1e9,
                scale_up_size=1, scale_out_bw=1e9, default_precision="bf16", price_per_hour=0.1, overlap=False,
                kv_cache_bytes=2**30, efficiency=Efficiency(memory=0.8, gemm=0.5, step_overhead_s=1e-3))
BASE = replace(FULL, name="torch-engine", efficiency=Efficiency(memory=0.5, gemm=0.25, step_overhead_s=4e-3))
