"""``--no-cuda-graphs``: a deployment whose engine launches every kernel from the host.

Engines replay a step's kernels as one CUDA graph: the host launches the graph, not the few
hundred kernels of the model's layers, so a small step costs its device time plus a fixed
per-step overhead (``Efficiency.step_overhead_s``). Eagerly, the host launches each kernel from
Python; the device runs them as they arrive, so a step costs the larger of the two streams of
work, by the cost model's imperfect overlap (cost.step_time): at batch 1 the launches (a few ms),
at a large batch, where each kernel runs longer than its launch, little more than the device
time. That is why graphs matter for latency (SingleStream, Interactive, TPOT) and barely for a
saturated Offline run.

The launches are priced per transformer layer (``Efficiency.eager_layer_s``: the datasheet
profiles' ``EAGER_LAYER_S``, from published eager vs graph pairs; ``--eager-layer-ms`` to give
another engine's). A calibrated GPU profile whose engine ran with graphs measured its eager
steps directly (``eager_step_overhead_s``), and that measurement prices every step. The MTP
module's draft passes launch their one layer's kernels each (sim/mtp_module.py).
"""

from __future__ import annotations

from dataclasses import replace

from tokenmill.sim.hardware import Hardware


def without_cuda_graphs(hw: Hardware, num_layers: int, eager_layer_s: float | None = None) -> Hardware:
    """``hw`` running every step eagerly: each step pays ``step_overhead_s`` plus ``num_layers``
    layers' launches (``eager_layer_s``, default the profile's), or, for a calibrated profile,
    its measured eager step (its launches spread over the layers for ``eager_layer_s``).
    ValueError where the profile has no eager price (a CPU; a GPU calibrated with graphs off,
    whose steps are eager already) and none is given."""
    eff = hw.efficiency
    if eager_layer_s is not None and eager_layer_s < 0:
        raise ValueError(f"--eager-layer-ms: must be >= 0, got {eager_layer_s * 1e3:g}")
    per_layer = eager_layer_s if eager_layer_s is not None else eff.eager_layer_s
    if per_layer is not None:
        eager = eff.step_overhead_s + num_layers * per_layer
    elif eff.eager_step_overhead_s is not None:
        eager = eff.eager_step_overhead_s
        per_layer = max(eager - eff.step_overhead_s, 0.0) / num_layers
    else:
        raise ValueError(f"--no-cuda-graphs: the {hw.name} profile replays no CUDA graphs (a CPU, or a GPU "
                         "calibrated with them off), so its steps are priced eagerly already; give "
                         "--eager-layer-ms to price launches per layer")
    return replace(hw, efficiency=replace(eff, eager_step_overhead_s=eager, eager_layer_s=per_layer, graph_max_rows=0))
