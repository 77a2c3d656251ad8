"""benchmarks/sim_activation_steps.py: activation traffic priced apart from the overlapped forward."""

from dataclasses import replace

import pytest

from benchmarks.sim_activation_steps import step_time_apart
from tokenmill.sim.cost import Parallel, step_cost, step_time
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.shapes import PrefillChunk, StepShape


@pytest.mark.parametrize("passes", [0.0, 1.0, 3.0])
def test_the_activation_bytes_leave_the_forward_and_come_back_after_it(passes):
    hw = get_hardware("b200")
    shape = StepShape(decode_contexts=(900,) * 64, prefills=(PrefillChunk(num_tokens=2048, context=0),))
    cost = step_cost(get_model("llama3.1-8b"), shape, Parallel(tp=1), "fp4", kv_dtype_bytes=1)
    assert cost.activation_bytes > 0
    without = step_time(replace(cost, activation_bytes=0.0), hw, "fp4")
    apart = passes * cost.activation_bytes / (hw.memory_bw * hw.efficiency.memory)
    t = step_time_apart(cost, hw, "fp4", passes=passes)
    assert t.total_s == pytest.approx(without.total_s + apart, rel=1e-12)
    assert t.compute_s == without.compute_s
    if passes >= 1.0:  # added, not overlapped: slower than the model's own step
        assert t.total_s > step_time(cost, hw, "fp4").total_s
