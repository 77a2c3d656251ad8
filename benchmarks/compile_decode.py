"""Is a torch.compile'd decode forward faster than the eager one on this CPU?

    python -m benchmarks.compile_decode --batch 1 --batch 32

Builds the engine as `tokenmill serve` does (bf16 where the CPU has it, linears
prepacked for oneDNN, C++ attention and fused ops), runs BATCH requests' prefill,
then times one decode forward (model + LM head) two ways, alternating, in one
process: eager, and compiled with ``torch.compile(fullgraph=True, dynamic=False)``.
The compiled graph needs every op traceable, so here the C++ attention (with
the KV write it mutates the cache by) and the prepacked linear become
``torch.library`` custom ops, and the elementwise ops are the plain torch ones
(kernels/fused_ops.py), for inductor to fuse. Prints compile time, the largest
logit difference, and the median forward time of each.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import tokenmill.model.llama as llama
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.attention import CppAttentionMetadata
from tokenmill.kernels.fused_ops import TORCH_FUSED_OPS
from tokenmill.kernels.packed_linear import PackedLinear
from tokenmill.sampling_params import SamplingParams


def _register_ops(kernel) -> None:
    @torch.library.custom_op("tokenmill_bench::attention", mutates_args=("k_cache", "v_cache"))
    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  slot_blocks: torch.Tensor, slot_offsets: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor,
                  block_size: int, scale: float) -> torch.Tensor:
        k_cache.transpose(1, 2).index_put_((slot_blocks, slot_offsets), k)
        v_cache.transpose(1, 2).index_put_((slot_blocks, slot_offsets), v)
        return kernel(q, k_cache, v_cache, tables, lens, block_size, scale)

    @attention.register_fake
    def _(q, *args):
        return torch.empty_like(q)

    @torch.library.custom_op("tokenmill_bench::packed_linear", mutates_args=())
    def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

    @packed_linear.register_fake
    def _(x, packed, bias):
        return x.new_empty((x.shape[0], packed.shape[0]))  # a packed weight keeps its [out, in] sizes


def _traceable_attention(q, k, v, k_cache, v_cache, meta, scale):
    return torch.ops.tokenmill_bench.attention(q, k, v, k_cache, v_cache, meta.slot_blocks, meta.slot_offsets,
                                               meta.block_tables, meta.context_lens, meta.block_size, scale)


def measure(batch: int, repeats: int) -> None:
    engine = LLMEngine(EngineConfig(max_num_seqs=256, max_num_batched_tokens=2048))
    core = engine.core
    model, runner = core.model, core.runner
    if runner.decode_kernel is None:
        raise SystemExit("needs the C++ attention kernel (CPU, float32/bfloat16)")
    params = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
    for _ in range(batch):
        engine.add_request(None, list(range(100, 228)), params)
    while core.scheduler.waiting:  # every prefill done: the next step is decode only
        engine.step()
    inputs = runner.prepare(core.scheduler.schedule(), core.kv)
    m = inputs.meta
    args = (inputs.input_ids, inputs.positions, m.slot_blocks, m.slot_offsets, m.block_tables, m.context_lens)

    def forward(ids, pos, slot_blocks, slot_offsets, tables, lens):
        meta = CppAttentionMetadata(None, slot_blocks, slot_offsets, tables, lens, runner.block_size,
                                    runner.decode_kernel)
        return model.compute_logits(model(ids, pos, meta, runner.kv_caches))

    compiled = torch.compile(forward, fullgraph=True, dynamic=False)
    eager_ops, eager_attention, eager_linear = model.ops, llama.paged_attention, PackedLinear.forward

    def run_compiled():
        llama.paged_attention, model.ops = _traceable_attention, TORCH_FUSED_OPS
        PackedLinear.forward = lambda self, x: torch.ops.tokenmill_bench.packed_linear(x, self.packed, self.bias)
        try:
            return compiled(*args)
        finally:
            llama.paged_attention, model.ops, PackedLinear.forward = eager_attention, eager_ops, eager_linear

    with torch.inference_mode():
        t0 = time.perf_counter()
        got = run_compiled()
        compile_s = time.perf_counter() - t0
        diff = (got.float() - forward(*args).float()).abs().max().item()
        eager, comp = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            forward(*args)
            eager.append(time.perf_counter() - t)
            t = time.perf_counter()
            run_compiled()
            comp.append(time.perf_counter() - t)
    e, c = statistics.median(eager) * 1e3, statistics.median(comp) * 1e3
    print(f"batch {batch}: eager {e:.2f} ms, compiled {c:.2f} ms (compiled / eager {c / e:.2f}x); "
          f"compile {compile_s:.1f} s; largest logit difference {diff:.3g}; linears {core.linear_backend}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, action="append", help="decode batch size (repeat for several)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    _register_ops(_kernel())
    for batch in args.batch or [1]:
        measure(batch, args.repeats)


def _kernel():
    from tokenmill.kernels.cpu_kernels import load_cpu_kernels

    module = load_cpu_kernels()
    if module is None:
        raise SystemExit("the C++ kernels could not be built")
    return module.paged_decode_attention


if __name__ == "__main__":
    main()
