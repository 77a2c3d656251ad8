"""Pipeline parallelism (``--pp N``): a replica's decoder layers split into N stages, each
stage on its own group of devices laid out as ``Parallel`` says, N micro-batches in flight.

The published runs that use it: MLPerf Llama-3.1-405B Offline on 8 x B200 and the GB200 rack
(TP2 PP2; NVIDIA's v5.1 configs, Google's v6.0 copy) and on 8 x H200 (TP4 PP2, Nebius's v5.1
config). How the simulator prices it:

- **Memory.** A stage holds ceil(L / N) of the L decoder layers (``stage_shape``: the
  busiest stage, the last, which also holds the LM head; the first holds the embedding
  instead, no larger), so a device holds about 1/N of the layers' weights and of every
  cached token's KV: the replica's KV cache is sized on that stage.
- **Scheduling.** A replica runs N schedulers, one per micro-batch (predict.py
  ``Deployment.engines``), each with 1/N of the replica's KV blocks and its own
  ``max_num_seqs`` and token budget (vLLM's per-virtual-engine scheduling; TensorRT-LLM
  schedules each micro-batch under the same limits); arrivals are routed among them as
  among replicas (sim/routed.py).
- **Time.** The stages are a flow shop (``FlowShop``): a micro-batch's step enters the first
  stage when that stage is done with the step before, passes every stage in turn, each
  taking the step's stage time once it is free, and its tokens (a prompt's first token too)
  come out of the last; the micro-batch schedules its next step then. A stage's time is the
  cost model's step over the busiest stage's layers (cost.py ``shape_step_cost`` of
  ``stage_shape``), tensor-parallel all-reduces inside the stage included; the host's
  per-step work is paid once per step, after the last stage. So micro-batches of unequal
  size hold each other up, as in a pipeline: one with a long prompt chunk delays the
  others' next stages. Alike micro-batches step once every N stage times
  (``cycle_seconds``, also a lone micro-batch's latency). Activations cross to the next
  stage while it still works on the micro-batch before: not priced.

Not modelled: stages of unequal time (each is priced as the busiest), MTP drafts (``--mtp``
with ``--pp`` is refused) and disaggregated pools of pipelines.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache

from tokenmill.sim.cost import Parallel, shape_step_cost, step_time
from tokenmill.sim.hardware import Hardware
from tokenmill.sim.models import ModelShape
from tokenmill.sim.shapes import StepShape


@lru_cache(maxsize=16)  # asked once per simulated step
def stage_shape(s: ModelShape, pp: int) -> ModelShape:
    """The busiest of ``pp`` pipeline stages as a model of its own: ceil(L / pp) decoder layers
    (dense, MoE and sliding-window layers in the model's proportions) and the LM head, no
    embedding (the first stage's, which holds it instead of the head); ``s`` itself at pp 1.
    ValueError naming --pp when there are fewer layers than stages."""
    if pp < 1:
        raise ValueError(f"--pp: must be >= 1, got {pp}")
    if pp == 1:
        return s
    if pp > s.num_layers:
        raise ValueError(f"--pp: {pp} pipeline stages for a model of {s.num_layers} layers")
    layers = -(-s.num_layers // pp)

    def share(n: int) -> int:
        return min(layers, round(n * layers / s.num_layers))

    moe = share(s.num_moe_layers)
    return replace(s, num_layers=layers, num_moe_layers=moe, num_dense_layers=layers - moe,
                   num_sliding_layers=share(s.num_sliding_layers), embed_params=0, tied=False,
                   norm_params=-(-s.norm_params * layers // s.num_layers))


def stage_seconds(s: ModelShape, shape: StepShape, parallel: Parallel, pp: int, precision: str,
                  kv_dtype_bytes: float, hardware: Hardware, fused_allreduce: bool = False) -> tuple[float, float]:
    """(one stage's device seconds, the host's seconds once) for a micro-batch step of ``shape``."""
    cost = shape_step_cost(stage_shape(s, pp), shape, parallel, precision, kv_dtype_bytes)
    t = step_time(cost, hardware, precision, fused_allreduce)
    return t.total_s - t.overhead_s, t.overhead_s


def cycle_seconds(s: ModelShape, shape: StepShape, parallel: Parallel, pp: int, precision: str,
                  kv_dtype_bytes: float, hardware: Hardware, fused_allreduce: bool = False) -> float:
    """Seconds one micro-batch step of ``shape`` takes through an otherwise idle pipeline, and
    between two steps of alike micro-batches in steady state: ``pp`` stage times, the host once."""
    device, host = stage_seconds(s, shape, parallel, pp, precision, kv_dtype_bytes, hardware, fused_allreduce)
    return pp * device + host


StageTime = Callable[[StepShape], tuple[float, float]]
"""A micro-batch step's (seconds in each stage, host seconds after the last): ``stage_seconds``."""


class FlowShop:
    """One pipeline replica's stages, shared by its micro-batches' schedulers (sim/routed.py):
    ``start`` says when a micro-batch ready at ``t`` enters the first stage, ``step_time(start)``
    is the step-time function for the step entering then (module docstring)."""

    def __init__(self, stages: int, stage_time: StageTime, min_seconds: Callable[[StepShape], float] | None = None):
        self.free = [-math.inf] * stages
        """When each stage is done with the last step that entered it."""
        self.stage_time = stage_time
        self.min_seconds = min_seconds
        """A floor on a step's seconds from its start (the host's time per sequence), or None."""

    def start(self, t: float) -> float:
        return max(t, self.free[0])

    def step_time(self, start: float) -> Callable[[StepShape], float]:
        def seconds(shape: StepShape) -> float:
            device, host = self.stage_time(shape)
            leaves = start
            for s, free in enumerate(self.free):
                leaves = max(leaves, free) + device
                self.free[s] = leaves
            took = leaves - start + host
            return max(took, self.min_seconds(shape)) if self.min_seconds else took
        return seconds


def flow_shops(s: ModelShape, parallel: Parallel, pp: int, precision: str, kv_dtype_bytes: float,
               hardware: Hardware, fused_allreduce: bool = False, scale: float = 1.0,
               min_seconds: Callable[[StepShape], float] | None = None) -> Callable[[], FlowShop]:
    """A maker of one deployment's ``FlowShop``s: stage times from the cost model (``stage_seconds``)
    x ``scale`` (the kernel generation, sim/kernels.py), and ``min_seconds`` as each step's floor."""
    def stage(shape: StepShape) -> tuple[float, float]:
        device, host = stage_seconds(s, shape, parallel, pp, precision, kv_dtype_bytes, hardware, fused_allreduce)
        return device * scale, host * scale
    return lambda: FlowShop(pp, stage, min_seconds)
