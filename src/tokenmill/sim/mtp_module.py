"""What drafting costs with a model's own next-token-prediction (MTP) module.

A DeepSeek-V3/R1 checkpoint ships one MTP module (``num_nextn_predict_layers``;
model/deepseek_mtp.py): two norms, ``eh_proj`` [2 x hidden -> hidden], one MoE decoder
layer with its own KV cache, and the main model's LM head. Speculative decoding with
N drafts runs it N times per decode step, one pass after another, as TensorRT-LLM's
"MTP3_Autoregressive" (its tech blog 1: the module called once per draft token):

- pass 1 over the rows the main model just computed (each sequence's verified
  tokens and any prompt chunk: the module keeps its KV cache over every position),
  drafting each sequence's first token;
- passes 2..N over one row per drafting sequence (its previous draft).

Each pass is priced as a one-layer model (``module_shape``) by the same cost model
as the main step (cost.py ``shape_step_cost``), communication included; the step's
host overhead is paid once. Without CUDA graphs (sim/cuda_graphs.py) each pass also launches
its layer's kernels, overlapping its device work as a step's launches do. Pass 1 also
computes logits for every row it takes, where one per sequence is needed: at most ``1 + N``
LM-head rows per sequence, an overcount kept for simplicity.

Models without an MTP module (the Llama family, gpt-oss, a DeepSeek config with
``num_nextn_predict_layers`` 0) get drafts for free: ``--mtp`` there stands for a
drafter whose cost is not modelled (n-gram lookup runs on the host).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import numpy as np

from tokenmill.model.deepseek_arch import DeepseekArch
from tokenmill.model.protocol import ArchInfo
from tokenmill.sim.cost import Parallel, shape_step_cost, step_time
from tokenmill.sim.hardware import Hardware
from tokenmill.sim.models import ModelShape, model_shape
from tokenmill.sim.shapes import StepShape


def has_mtp_module(arch: ArchInfo) -> bool:
    return isinstance(arch, DeepseekArch) and arch.num_mtp_layers > 0


@lru_cache(maxsize=8)  # asked once per simulated step
def module_shape(s: ModelShape) -> ModelShape:
    """One MTP module as a one-layer model: the main model's MoE layer (or dense layer, for
    a model without MoE layers) plus ``eh_proj`` and its three norms, sharing the LM head."""
    moe = s.num_moe_layers > 0
    return replace(s, num_layers=1, num_dense_layers=0 if moe else 1, num_moe_layers=1 if moe else 0,
                   attention_params=s.attention_params + 2 * s.hidden * s.hidden,
                   norm_params=5 * s.hidden, num_sliding_layers=0)


def later_pass(shape: StepShape) -> StepShape:
    """Passes 2..N: one row per sequence that drafts (every decode, and a prompt whose last
    chunk this step computed), attending over its context and the rows since."""
    prompts = np.array([p.context + p.num_tokens for p in shape.prefills], dtype=np.int64)
    return StepShape(decode_contexts=np.concatenate([shape.decode_context_array() + shape.tokens_per_decode, prompts]))


def draft_seconds(arch: ArchInfo, shape: StepShape, depth: int, parallel: Parallel, precision: str,
                  kv_dtype_bytes: float, hardware: Hardware, fused_allreduce: bool = False) -> float:
    """Seconds the ``depth`` MTP passes add to a step of ``shape`` (0 without a module or drafts)."""
    if depth <= 0 or not has_mtp_module(arch):
        return 0.0
    module = module_shape(model_shape(arch))

    eff = hardware.efficiency

    def forward(s: StepShape) -> float:
        cost = shape_step_cost(module, s, parallel, precision, kv_dtype_bytes)
        t = step_time(cost, hardware, precision, fused_allreduce)
        device = t.total_s - t.overhead_s
        if eff.eager_layer_s and eff.eager_step_overhead_s is not None and not eff.replays(cost):
            launch = module.num_layers * eff.eager_layer_s  # the pass launched eagerly (--no-cuda-graphs)
            return math.hypot(device, launch) if hardware.overlap else device + launch
        return device

    first = forward(shape)
    return first if depth == 1 else first + (depth - 1) * forward(later_pass(shape))
