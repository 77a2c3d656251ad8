"""A step's price on one replica of a deployment: the cost model's device time at the deployment's
kernel generation, drafts included, at least the host's time for the step's sequences. The serving
simulations step their clocks by it (sim/predict.py); ``tokenmill sim --replay`` prices a run's own
logged steps with it (sim/served_steps.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokenmill.sim.cost import Parallel, step_cost, step_time
from tokenmill.sim.cuda_graphs import without_cuda_graphs
from tokenmill.sim.hardware import Hardware
from tokenmill.sim.kernels import step_scale
from tokenmill.sim.models import model_shape
from tokenmill.sim.mtp_module import draft_seconds
from tokenmill.sim.pipeline import cycle_seconds
from tokenmill.sim.serving import StepTime
from tokenmill.sim.shapes import StepShape

if TYPE_CHECKING:
    from tokenmill.sim.predict import Deployment


def replica_step_seconds(arch, hw: Hardware, d: Deployment) -> StepTime:
    """A step's seconds on one replica of ``d``, as its simulation prices them (eager where CUDA
    graphs are off); ``tokenmill sim --replay`` prices a run's logged steps with it."""
    if not d.cuda_graphs:
        hw = without_cuda_graphs(hw, arch.num_layers, d.eager_layer_s)
    return step_seconds(arch, hw, d, d.parallel)


def step_seconds(arch, hw: Hardware, d: Deployment, parallel: Parallel) -> StepTime:
    """A step's seconds on a replica of ``parallel`` at the deployment's kernel generation, drafts
    included (a lone micro-batch's through a pipeline: sim/pipeline.py), at least the host's time
    for its sequences (``Deployment.host_seq_s``)."""
    kv_bytes, scale = d.kv_dtype_bytes, step_scale(d.kernels)

    def seconds(shape: StepShape) -> float:
        cost = step_cost(arch, shape, parallel, d.precision, kv_bytes)
        drafts = draft_seconds(arch, shape, d.mtp_depth, parallel, d.precision, kv_bytes, hw, d.fused_allreduce)
        return (step_time(cost, hw, d.precision, d.fused_allreduce).total_s + drafts) * scale

    def cycle(shape: StepShape) -> float:
        return cycle_seconds(model_shape(arch), shape, parallel, d.pipeline_parallel, d.precision, kv_bytes,
                             hw, d.fused_allreduce) * scale

    device = cycle if d.pipeline_parallel > 1 else seconds
    floor = host_floor(d)
    if floor is None:
        return device
    return lambda shape: max(device(shape), floor(shape))  # the host's work overlaps the device's step


def host_floor(d: Deployment) -> StepTime | None:
    """The host's seconds for a step's sequences (``Deployment.host_seq_s``); None where not modelled."""
    if not d.host_seq_s:
        return None
    return lambda shape: d.host_seq_s * (shape.num_decodes + len(shape.prefills))
