"""sim/shapes.py: a StepShape given its decode contexts as an array (the serving simulation's way)
is the same shape as one given them as a tuple, for every reader."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tokenmill.sim.cost import Parallel, step_cost
from tokenmill.sim.models import get_model
from tokenmill.sim.mtp_module import later_pass
from tokenmill.sim.shapes import PrefillChunk, StepShape

CHUNK = (PrefillChunk(num_tokens=5, context=16),)


def test_an_array_and_a_tuple_of_contexts_make_the_same_shape():
    a = StepShape(np.array([30, 41, 7], dtype=np.int64), CHUNK, 2)
    t = StepShape((30, 41, 7), CHUNK, 2)
    assert a == t and hash(a) == hash(t) and repr(a) == repr(t)
    assert a.decode_contexts == (30, 41, 7) and a.num_decodes == 3 and a.decode_context_sum == 78
    assert a.num_tokens == t.num_tokens == 3 * 2 + 5
    assert np.array_equal(a.decode_context_array(), t.decode_context_array())
    assert pickle.loads(pickle.dumps(a)) == t
    assert a != StepShape((30, 41, 8), CHUNK, 2) and a != StepShape((30, 41, 7), CHUNK, 1)


def test_a_shape_cannot_be_changed_and_takes_any_iterable_of_contexts():
    s = StepShape(c for c in (1, 2))
    assert s.num_decodes == 2 and s.decode_context_sum == 3 and s == StepShape((1, 2))
    with pytest.raises(AttributeError, match="immutable"):
        s.tokens_per_decode = 3


@pytest.mark.parametrize("model", ["llama3.1-8b", "gpt-oss-120b", "deepseek-r1"])  # plain, sliding window, MLA + MoE
def test_the_cost_model_prices_both_alike(model):
    arch = get_model(model)
    contexts = np.arange(100, 1100, 7, dtype=np.int64)
    a, t = StepShape(contexts, CHUNK), StepShape(tuple(contexts.tolist()), CHUNK)
    p = Parallel(tp=8, ep=8) if model == "deepseek-r1" else Parallel()
    assert step_cost(arch, a, p, "fp8", 1) == step_cost(arch, t, p, "fp8", 1)
    assert later_pass(a) == later_pass(t) == StepShape(tuple((contexts + 1).tolist()) + (21,))
