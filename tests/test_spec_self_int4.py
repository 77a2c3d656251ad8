"""Speculative decoding with the ``self-int4`` proposer: the model's own weights
in int4 draft into the target's KV cache, the full-precision model verifies.
Outputs token-identical to decoding without drafts (batch 1 and batched, chat
and raw prompts; prefix hits, chunked prefill, preemption and seeded sampling
in tests/test_spec_stress.py), drafts accepted, and no block left behind
(finished or aborted mid-draft)."""

from __future__ import annotations

import pytest
import torch
from _spec_helpers import (
    assert_abort_with_drafts_pending_frees_every_block,
    embedded_engines,
    greedy_drafts_on_everyday_prompts,
)

from tokenmill.config import EngineConfig
from tokenmill.engine.core import EngineCore
from tokenmill.kernels.int4_linear import Int4Linear
from tokenmill.model.loaders import load_model
from tokenmill.spec.model_drafter import int4_twin

SELF_INT4 = {"method": "self-int4", "num_speculative_tokens": 3, "adaptive": False}
"""Not adaptive: the counts asserted below must not depend on this machine's step times
(tests/test_spec_adaptive.py runs the policy)."""
DUMMY = dict(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", max_model_len=96)


def test_the_twin_shares_all_but_its_linears():
    model = load_model("dummy:tiny", "dummy", torch.device("cpu"), torch.float32, seed=0).model
    twin = int4_twin(model)
    assert twin.embed_tokens.weight is model.embed_tokens.weight
    assert twin.norm.weight is model.norm.weight
    owners = twin.decoder_linears()
    assert owners and all(isinstance(getattr(o, a), Int4Linear) for o, a in owners)
    assert all(isinstance(getattr(o, a), torch.nn.Linear) for o, a in model.decoder_linears())


def test_the_engines_twin_takes_int8_activations_by_default_where_the_kernel_has_them():
    from tokenmill.kernels.cpu_kernels import load_cpu_kernels
    from tokenmill.kernels.int4_linear import has_int8_activations

    int8 = has_int8_activations(load_cpu_kernels())  # AVX512-VNNI or AVX2 builds
    for setting, expected in (("auto", int8), ("float", False)):
        core = EngineCore(EngineConfig(**DUMMY, speculative_config=SELF_INT4, int4_activations=setting))
        twin = core.drafting.proposer.draft
        layers = [getattr(o, a) for o, a in twin.decoder_linears()]
        assert layers and all(isinstance(layer, Int4Linear) for layer in layers)
        assert {layer.int8_activations for layer in layers} == {expected}, setting
    served = EngineCore(EngineConfig(**DUMMY, quantization="int4"))  # auto: the served model's layers stay float
    assert not any(getattr(o, a).int8_activations for o, a in served.model.decoder_linears())


def test_refused_with_quantization():
    with pytest.raises(ValueError, match="speculative_config.method: self-int4.*quantization"):
        EngineCore(EngineConfig(**DUMMY, quantization="int4", speculative_config=SELF_INT4))


@pytest.fixture(scope="module")
def embedded():
    return embedded_engines(SELF_INT4)


def test_greedy_outputs_are_identical_and_most_drafts_are_accepted(embedded):
    drafts, accepted = greedy_drafts_on_everyday_prompts(*embedded)
    # The int4 twin agrees with its own full-precision model far more often than not.
    assert drafts > 40 and accepted > 0.5 * drafts


def test_abort_with_drafts_pending_frees_every_block():
    assert_abort_with_drafts_pending_frees_every_block(EngineCore(EngineConfig(**DUMMY, speculative_config=SELF_INT4)))
