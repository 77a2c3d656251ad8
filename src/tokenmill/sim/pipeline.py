"""Pipeline parallelism (``--pp N``): a replica's decoder layers split into N stages, each
stage on its own group of devices laid out as ``Parallel`` says, N micro-batches in flight.

The published runs that use it: MLPerf Llama-3.1-405B Offline on 8 x B200 (TP2 PP2, two
replicas; NVIDIA's v5.1 and Google's v6.0 configs). How the simulator prices it:

- **Memory.** A stage holds ceil(L / N) of the L decoder layers (``stage_shape``: the
  busiest stage, the last, which also holds the LM head; the first holds the embedding
  instead, no larger), so a device holds about 1/N of the layers' weights and of every
  cached token's KV: the replica's KV cache is sized on that stage.
- **Time.** In steady state every stage works on a different micro-batch, and each stage
  takes the micro-batches in turn: one micro-batch steps once every N stage times
  (``cycle_seconds``), and its tokens (a prompt's first token too) come out N stage times
  after it was scheduled. A stage's time is the cost model's step over its own layers
  (cost.py ``shape_step_cost`` of ``stage_shape``), tensor-parallel all-reduces inside the
  stage included; the host's per-step work is paid once per cycle. Activations cross to the
  next stage while that stage still works on the micro-batch before: hidden in steady
  state, not priced.
- **Scheduling.** So a replica runs as N schedulers, one per micro-batch
  (predict.py ``Deployment.engines``), each with 1/N of the replica's KV blocks and its
  own ``max_num_seqs`` and token budget (vLLM's per-virtual-engine scheduling; TensorRT-LLM
  schedules each micro-batch under the same limits).

Not modelled: micro-batches of unequal size holding each other up. A stage takes the N
micro-batches one after another, so a round lasts the sum of their stage times and each
micro-batch steps once per round; the simulation runs each micro-batch's scheduler on its
own, at N times its own stage time, which is the same round when the micro-batches are
alike (Offline at a full batch) and optimistic where one carries a long prompt chunk and
the others only decodes. Nor the pipeline's fill and drain (one round each), MTP drafts
(``--mtp`` with ``--pp`` is refused) or disaggregated pools of pipelines.
"""

from __future__ import annotations

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


def cycle_seconds(s: ModelShape, shape: StepShape, parallel: Parallel, pp: int, precision: str,
                  kv_dtype_bytes: float, hardware: Hardware, fused_allreduce: bool = False) -> float:
    """Seconds between two steps of one micro-batch of ``shape`` (its rows; module docstring):
    ``pp`` times the busiest stage's device time, plus the host's per-step work once."""
    cost = shape_step_cost(stage_shape(s, pp), shape, parallel, precision, kv_dtype_bytes)
    t = step_time(cost, hardware, precision, fused_allreduce)
    return pp * (t.total_s - t.overhead_s) + t.overhead_s
