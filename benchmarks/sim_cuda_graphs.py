"""``--no-cuda-graphs`` against published eager vs CUDA-graph decode steps at batch 1.

Each row is a published pair: one engine, one GPU, one model, a batch-1 decode step's time (or
per-token latency, or only the speedup) with the engine's CUDA graphs and in its eager mode. The
cost model prices an eager step as ``overhead + sqrt(device^2 + launches^2)`` (cost.step_time,
sim/cuda_graphs.py): the host's launches overlap the device's forward. Each pair is inverted for
the launches it implies: the device time is the cost model's forward for the step (a decode of one
sequence at the row's context, on the datasheet profile), capped at the published graph step;
whatever else the graph step holds is per-step overhead that both modes pay (for per-token
figures of whole requests, the prompt and the request's handling); the launches are what the
eager figure leaves. ``EAGER_LAYER_S`` is the median of the pairs' launches per layer. Then each
pair is simulated eagerly at that figure, against its published eager time. Prints a markdown
table:

    python -m benchmarks.sim_cuda_graphs
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from tokenmill.model.arch import ModelArch
from tokenmill.sim.cost import Parallel, step_cost, step_time
from tokenmill.sim.hardware import EAGER_LAYER_S, get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.shapes import StepShape

# GPT-2 small (124M) in the cost model's terms: its 2-matrix GELU MLP priced as a 3-matrix one of
# two-thirds the width (the same weights); the device's work is ~0.1 ms a step either way.
GPT2 = ModelArch(family="llama", vocab_size=50257, hidden_size=768, intermediate_size=2048, num_layers=12,
                 num_heads=12, num_kv_heads=12, head_dim=64, rms_norm_eps=1e-5, rope_theta=10000.0,
                 max_position_embeddings=1024, tie_word_embeddings=True, bos_token_id=50256, eos_token_ids=(50256,))
# Qwen2.5-7B (its config.json: 28 layers, hidden 3584, MLP 18944, 28 heads, 4 KV heads, vocab 152064).
QWEN25_7B = ModelArch(family="qwen2", vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_layers=28,
                      num_heads=28, num_kv_heads=4, head_dim=128, rms_norm_eps=1e-6, rope_theta=1e6,
                      max_position_embeddings=32768, tie_word_embeddings=False, bos_token_id=151643,
                      eos_token_ids=(151645,), attention_bias=True)


@dataclass(frozen=True)
class Pair:
    name: str
    source: str
    model: object
    hardware: str
    context: int
    graph_ms: float | None
    """The published graph step; None where only the speedup is published (the cost model's step stands in)."""
    eager_ms: float | None = None
    speedup: float | None = None
    """Eager over graph, where that is all that is published."""


PAIRS = [
    Pair("vLLM, GPT-2 (124M), H200", "deepspeedai/DeepSpeed PR 8352: 41.8 / 154.1 ms a request of 32 tokens "
         "(128-token prompts)", GPT2, "h200", 144, 41.8 / 32, 154.1 / 32),
    Pair("SGLang, GPT-2 (124M), H200", "deepspeedai/DeepSpeed PR 8352: 33.2 / 156.0 ms a request of 32 tokens",
         GPT2, "h200", 144, 33.2 / 32, 156.0 / 32),
    Pair("PyTorch, Llama-3.1-8B, H100 SXM", "cloudai.pt/tag/cuda-graphs: a decode step, 5.1 / 8.4 ms",
         get_model("llama3.1-8b"), "h100", 512, 5.1, 8.4),
    Pair("PyTorch SDPA harness, Qwen2.5-7B, H100 SXM", "arXiv 2605.30571: graphs 1.259x faster at batch 1, "
         "context 2,048", QWEN25_7B, "h100", 2048, None, speedup=1.259),
]


def _cost(pair: Pair):
    return step_cost(pair.model, StepShape(decode_contexts=(pair.context,)), Parallel(), "bf16", 2.0)


def modelled_graph_ms(pair: Pair) -> tuple[float, float]:
    """(device, whole step) ms of the cost model's graph-replayed step (bf16 weights and cache)."""
    t = step_time(_cost(pair), get_hardware(pair.hardware), "bf16")
    return (t.total_s - t.overhead_s) * 1e3, t.total_s * 1e3


def implied_launch_ms(pair: Pair) -> tuple[float, float, float]:
    """(device, overhead, launches) ms the published pair implies under the eager rule."""
    device, step = modelled_graph_ms(pair)
    graph = pair.graph_ms if pair.graph_ms is not None else step
    eager = pair.eager_ms if pair.eager_ms is not None else pair.speedup * graph
    device = min(device, graph)
    overhead = graph - device
    return device, overhead, math.sqrt(max((eager - overhead) ** 2 - device ** 2, 0.0))


def main() -> None:
    rows, per_layer = [], []
    for p in PAIRS:
        device, overhead, launch = implied_launch_ms(p)
        layer = launch / p.model.num_layers
        per_layer.append(layer)
        graph = p.graph_ms if p.graph_ms is not None else device + overhead
        eager = p.eager_ms if p.eager_ms is not None else p.speedup * graph
        simulated = overhead + math.hypot(device, p.model.num_layers * EAGER_LAYER_S * 1e3)
        rows.append(f"| {p.name} | {graph:.2f} / {eager:.2f}{' (speedup only)' if p.speedup else ''} | "
                    f"{device:.2f} | {launch:.2f} ({layer:.3f} a layer) | {simulated:.2f} | {simulated / eager:.2f} "
                    f"| {p.source} |")
    print(f"median launches a layer: {statistics.median(per_layer):.3f} ms "
          f"(range {min(per_layer):.3f}-{max(per_layer):.3f}); EAGER_LAYER_S = {EAGER_LAYER_S * 1e3:.3f} ms\n")
    print("| pair | published graph / eager (ms) | device (ms, cost model) | launches it implies (ms) "
          "| simulated eager (ms) | sim / published eager | source |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
