"""The simulator's GPU efficiency factors, measured: a model's linear layers on
this GPU vs what ``tokenmill sim``'s cost model predicts for them.

On the GPU: the device-to-device copy bandwidth, one large bf16 GEMM, and the
chain of every linear layer of ``--model`` (bf16 weights, replayed as a CUDA
graph so launch gaps do not count) at ``--rows`` rows: 1 (a batch-1 decode
step: weight streaming) and a prefill-sized count (compute). Beside each chain,
the cost model's prediction for the same rows (max of its compute and memory
times, no attention, no per-step overhead) on ``--hardware``, and the ratio.

    python -m benchmarks.gpu_roofline --model llama3.1-8b --hardware h200
"""

from __future__ import annotations

import argparse

import torch

from tokenmill.sim.cost import Parallel, step_cost, step_time
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.shapes import PrefillChunk, StepShape


def timed(fn, repeats: int = 20) -> float:
    """Seconds per call of ``fn`` captured in a CUDA graph (after warm-up)."""
    for _ in range(3):
        fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def linear_shapes(arch) -> list[tuple[int, int]]:
    """(in, out) of every linear layer of a dense Llama-family model, LM head included."""
    h, kv, inter = arch.hidden_size, arch.num_kv_heads * arch.head_dim, arch.intermediate_size
    q = arch.num_heads * arch.head_dim
    layer = [(h, q), (h, kv), (h, kv), (q, h), (h, inter), (h, inter), (inter, h)]
    return layer * arch.num_layers + [(h, arch.vocab_size)]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama3.1-8b")
    ap.add_argument("--hardware", default="h200")
    ap.add_argument("--rows", default="1,4096")
    args = ap.parse_args(argv)
    dev, bf16 = torch.device("cuda"), torch.bfloat16
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; profile: {args.hardware}")
    hw = get_hardware(args.hardware)

    a = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    copy_s = timed(lambda: b.copy_(a))
    print(f"copy: {2 * a.numel() / copy_s / 1e12:.2f} TB/s (read + write) vs {hw.memory_bw / 1e12:.2f} TB/s peak")
    m = torch.randn(8192, 8192, dtype=bf16, device=dev)
    gemm_s = timed(lambda: m @ m)
    print(f"8192^3 bf16 GEMM: {2 * 8192 ** 3 / gemm_s / 1e12:.0f} TFLOP/s vs {hw.flops['bf16'] / 1e12:.0f} peak")

    arch = get_model(args.model)
    shapes = linear_shapes(arch)
    weights = [torch.randn(i, o, dtype=bf16, device=dev) * 0.01 for i, o in shapes]
    params = sum(i * o for i, o in shapes)
    for rows in (int(r) for r in args.rows.split(",")):
        inputs = {i: torch.randn(rows, i, dtype=bf16, device=dev) for i in {s[0] for s in shapes}}
        chain_s = timed(lambda: [inputs[w.shape[0]] @ w for w in weights], repeats=10)
        shape = StepShape(decode_contexts=(0,)) if rows == 1 else StepShape(prefills=(PrefillChunk(rows, 0),))
        t = step_time(step_cost(arch, shape, Parallel(), "bf16", 2), hw, "bf16")
        predicted = t.forward_s
        print(f"{args.model} linears, {rows} rows: {chain_s * 1e3:.2f} ms measured "
              f"({params * 2 / chain_s / 1e12:.2f} TB/s, {2 * rows * params / chain_s / 1e12:.0f} TFLOP/s); "
              f"sim {predicted * 1e3:.2f} ms ({t.bound}-bound); sim/measured {predicted / chain_s:.2f}")


if __name__ == "__main__":
    main()
