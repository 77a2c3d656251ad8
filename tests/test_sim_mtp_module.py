"""The MTP module's draft passes in the simulator's step (sim/mtp_module.py): its size against
DeepSeek's published figure, the passes it prices, and the step the serving simulation sees."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tokenmill.sim.cost import Parallel, shape_step_cost, step_cost, step_time
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model, model_shape
from tokenmill.sim.mtp_module import draft_seconds, has_mtp_module, later_pass, module_shape
from tokenmill.sim.predict import Deployment, Workload, predict
from tokenmill.sim.shapes import PrefillChunk, StepShape

R1 = get_model("deepseek-r1")
GB300 = get_hardware("gb300")
DEP8 = Parallel(tp=1, ep=8, attention_dp=True)


def test_the_module_is_one_moe_layer_the_size_deepseek_publishes():
    s = model_shape(R1)
    m = module_shape(s)
    assert (m.num_layers, m.num_moe_layers, m.num_dense_layers) == (1, 1, 0)
    assert m.attention_params == s.attention_params + 2 * 7168 * 7168  # + eh_proj [2h -> h]
    # deepseek-ai/DeepSeek-V3 README: 685B = 671B main model + 14B MTP module (its embedding and
    # head included, which the module shares with the main model).
    assert m.total_params() == pytest.approx(14e9, rel=0.05)
    assert has_mtp_module(R1) and not has_mtp_module(get_model("llama3.1-8b"))
    assert not has_mtp_module(replace(R1, num_mtp_layers=0))


def test_draft_passes_are_priced_as_the_module_over_the_step_and_then_one_row_per_sequence():
    shape = StepShape(decode_contexts=(1000, 2000), prefills=(PrefillChunk(300, 0),), tokens_per_decode=4)
    later = later_pass(shape)
    assert later == StepShape(decode_contexts=(1004, 2004, 300))
    m = module_shape(model_shape(R1))

    def forward(s):
        t = step_time(shape_step_cost(m, s, DEP8, "fp4", 1.0), GB300, "fp4")
        return t.total_s - t.overhead_s

    assert draft_seconds(R1, shape, 3, DEP8, "fp4", 1.0, GB300) == pytest.approx(forward(shape) + 2 * forward(later))
    assert draft_seconds(R1, shape, 1, DEP8, "fp4", 1.0, GB300) == pytest.approx(forward(shape))
    assert draft_seconds(R1, shape, 0, DEP8, "fp4", 1.0, GB300) == 0.0
    assert draft_seconds(get_model("llama3.1-8b"), shape, 3, Parallel(), "fp8", 1.0, get_hardware("h100")) == 0.0
    # At a large decode batch the three passes add a few percent to the verification step.
    big = StepShape(decode_contexts=(3000,) * 2048, tokens_per_decode=4)
    main = step_time(step_cost(R1, big, DEP8, "fp4", 1.0), GB300, "fp4").total_s
    assert 0.02 < draft_seconds(R1, big, 3, DEP8, "fp4", 1.0, GB300) / main < 0.10


def test_a_served_step_with_mtp_includes_the_draft_passes():
    d = Deployment(8, DEP8, "fp4", max_num_seqs=8, mtp_depth=3, mtp_tokens_per_step=4.0)
    w = Workload("offline", 64, 33, num_requests=8)
    with_module = predict(R1, GB300, d, w)["tpot_ms"]["p50"]
    without = predict(replace(R1, num_mtp_layers=0), GB300, d, w)["tpot_ms"]["p50"]
    shape = StepShape(decode_contexts=(80,) * 8, tokens_per_decode=4)
    drafts_ms = 1e3 * draft_seconds(R1, shape, 3, DEP8, "fp4", 1.0, GB300)
    # Every step verifies 3 drafts and accepts all of them: 4 tokens per step, so TPOT grows by a
    # quarter of the drafting time (the contexts move a little over the run).
    assert with_module - without == pytest.approx(drafts_ms / 4, rel=0.1)
