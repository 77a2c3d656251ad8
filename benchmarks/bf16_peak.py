"""The CPU's bf16 compute ceiling next to what torch's GEMM reaches on it.

    python -m benchmarks.bf16_peak --threads 2

Compiles ``benchmarks/csrc/bf16_dot_peak.c`` with the system's C compiler (a
register-only loop of the AVX512-BF16 dot instruction, no memory traffic) and
runs it with 1 and THREADS threads, then times torch's bf16 GEMM (2048^3 and
the model's 256 x 576 x 1536) with THREADS threads. The ratio says how much a
faster GEMM kernel could still gain on this CPU: near 1.0, nothing.
Needs AVX512-BF16 (it exits with a message otherwise); AMX tiles are not used.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import torch

from benchmarks.engine_vs_hf import matmul_peak

SOURCE = pathlib.Path(__file__).parent / "csrc" / "bf16_dot_peak.c"


def has_avx512_bf16() -> bool:
    try:
        return "avx512_bf16" in pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def instruction_peak(binary: pathlib.Path, threads: int) -> float:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="close")
    out = subprocess.run([str(binary)], env=env, check=True, capture_output=True, text=True).stdout
    return float(out.split()[1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    if not has_avx512_bf16():
        sys.exit("this CPU has no AVX512-BF16; the instruction peak is not measured")
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        sys.exit("no C compiler (gcc or cc) on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        binary = pathlib.Path(tmp) / "bf16_dot_peak"
        subprocess.run([cc, "-O2", "-mavx512f", "-mavx512bf16", "-fopenmp", str(SOURCE), "-o", str(binary)],
                       check=True)
        one = instruction_peak(binary, 1)
        many = instruction_peak(binary, args.threads)
    torch.set_num_threads(args.threads)
    gemm = matmul_peak(torch.bfloat16)
    print(f"vdpbf16ps peak: {one:.1f} GFLOP/s on 1 thread, {many:.1f} on {args.threads}")
    for label, gflops in gemm.items():
        print(f"torch bf16 GEMM {label}: {gflops:.1f} GFLOP/s = {gflops / many:.2f} of the instruction peak")


if __name__ == "__main__":
    main()
