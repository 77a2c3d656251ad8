"""spec/shortlist_head.py: a draft's greedy pick from an int4 copy of its LM
head, rescored on another head's rows (the int8 head's, or the target's own);
self-int4 drafts greedy rows with it and sampled rows from the int8 head's
whole distribution."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tokenmill.config import EngineConfig
from tokenmill.engine.core import EngineCore
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.exact_head import ExactHead
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.kernels.int8_linear import Int8Linear
from tokenmill.sampling_params import SamplingParams
from tokenmill.spec.shortlist_head import MAX_EXTRAS, shortlist_head

kernels = load_cpu_kernels()
needs_int4_kernel = pytest.mark.skipif(kernels is None or kernels.int4_linear_isa() == "portable",
                                       reason="needs the C++ int4 kernel with vector code")


def _head(vocab: int, hidden: int, bias: bool = False) -> nn.Linear:
    torch.manual_seed(0)
    head = nn.Linear(hidden, vocab, bias=bias)
    head.weight.data.normal_(0, 0.5)
    return head


@needs_int4_kernel
def test_the_pick_is_the_int8_heads_argmax():
    head = _head(1024, 128)
    int8 = Int8Linear(head, torch.bfloat16)
    shortlist = shortlist_head(head, int8, torch.bfloat16, "float", vocab_size=1000)
    assert shortlist is not None
    hidden = torch.randn(64, 128)
    # The int8 head's logits in float64 over the vocabulary (padding rows past 1000 never win).
    exact = (int8.qweight.double() @ hidden.double().t()).t() * int8.scales.double()
    expected = exact[:, :1000].argmax(dim=-1).tolist()
    assert shortlist.argmax(hidden) == expected


@needs_int4_kernel
def test_rescored_on_the_full_precision_head_the_pick_is_its_argmax():
    head = _head(1024, 128)
    shortlist = shortlist_head(head, Int8Linear(head, torch.bfloat16), torch.bfloat16, "float", vocab_size=1024)
    shortlist.rescore_on(ExactHead.of_linear(head))
    hidden = torch.randn(64, 128)
    expected = (hidden.double() @ head.weight.double().t()).argmax(dim=-1).tolist()
    assert shortlist.argmax(hidden) == expected


@needs_int4_kernel
def test_a_trimmed_head_scores_the_first_ids_and_the_requests_own_rarer_ones():
    head = _head(1024, 128)
    shortlist = shortlist_head(head, Int8Linear(head, torch.bfloat16), torch.bfloat16, "float", vocab_size=1000,
                               scored_vocab=250)
    assert shortlist.scored_vocab == 256  # rounded up to whole panels of 16
    assert shortlist.int4.out_features == 256  # the int4 copy holds those rows only
    shortlist.rescore_on(ExactHead.of_linear(head))
    hidden = torch.randn(64, 128)
    logits = hidden.double() @ head.weight.double().t()  # [64, 1024]
    best = logits[:, :1000].argmax(dim=-1)
    rare = [i for i in range(64) if best[i] >= 256]
    assert rare  # random rows: most argmaxes lie past the first 256 ids
    # Without extras: the best of the first 256 ids; with the row's own argmax among its extras: that.
    assert shortlist.argmax(hidden) == logits[:, :256].argmax(dim=-1).tolist()
    extras = [[int(best[i]), 999] if i % 2 else [] for i in range(64)]  # ragged rows, padded inside
    expected = [int(best[i]) if i % 2 else int(logits[i, :256].argmax()) for i in range(64)]
    assert shortlist.argmax(hidden, extras) == expected


@needs_int4_kernel
def test_extras_are_the_unscored_context_ids_latest_first():
    head = _head(1024, 128)
    shortlist = shortlist_head(head, Int8Linear(head, torch.bfloat16), torch.bfloat16, "float", vocab_size=1000,
                               scored_vocab=256)
    # 5 and 255 are scored; 1000+ is padding past the vocabulary; repeats count once, at their latest.
    assert shortlist.extras([5, 300, 255, 700, 300, 1010, 999]) == [999, 300, 700]
    assert shortlist.extras(list(range(256, 1000))) == list(range(999, 999 - MAX_EXTRAS, -1))
    whole = shortlist_head(head, Int8Linear(head, torch.bfloat16), torch.bfloat16, "float", vocab_size=1000,
                           scored_vocab=None)
    assert whole.scored_vocab == 1000 and whole.extras([300, 999]) == []


@needs_int4_kernel
def test_greedy_outputs_are_unchanged_by_a_trimmed_draft_head():
    common = dict(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", max_model_len=96)
    spec = {"method": "self-int4", "num_speculative_tokens": 3, "adaptive": False, "draft_head_vocab": 32}
    engine = LLMEngine(EngineConfig(**common, speculative_config=spec))
    shortlist = engine.core.drafting.proposer.draft.shortlist_head
    assert shortlist.scored_vocab == 32 < shortlist.vocab_size
    seen = []
    shortlist_argmax = shortlist.argmax

    def recorded(hidden, extras=None):
        seen.append(extras)
        return shortlist_argmax(hidden, extras)

    shortlist.argmax = recorded
    prompts = [[5, 6, 7, 8, 40, 41, 5, 6], [90, 91, 92, 3, 90, 91]]
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    with_drafts = [o.token_ids for o in engine.generate(prompts, params)]
    plain = LLMEngine(EngineConfig(**common))
    assert with_drafts == [o.token_ids for o in plain.generate(prompts, params)]
    # The context's ids from 32 up went along as extras (the prompts' 40, 41, 90, 91, 92 among them).
    assert seen and all(e is not None for e in seen)
    assert any({40, 41} <= set(row) or {90, 91, 92} <= set(row) for e in seen for row in e)


@needs_int4_kernel
def test_it_stands_aside_where_it_cannot_apply():
    head = _head(256, 64)
    int8 = Int8Linear(head, torch.bfloat16)
    assert shortlist_head(head, int8, torch.bfloat16, "float", 256) is not None
    assert shortlist_head(_head(256, 64, bias=True), int8, torch.bfloat16, "float", 256) is None
    assert shortlist_head(_head(250, 64), int8, torch.bfloat16, "float", 250) is None  # 250 rows: not whole panels
    assert shortlist_head(head, head, torch.bfloat16, "float", 256) is None  # no int8 copy to rescore on


@needs_int4_kernel
def test_self_int4_drafts_greedy_rows_from_the_shortlist_and_sampled_rows_from_the_int8_head():
    config = EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", max_model_len=96,
                          speculative_config={"method": "self-int4", "num_speculative_tokens": 3, "adaptive": False})
    engine = LLMEngine(config)
    twin = engine.core.drafting.proposer.draft
    assert twin.shortlist_head.rows is engine.core.exact_head  # rescored on the target's own head
    calls = {"shortlist": 0, "logits": 0}
    shortlist_argmax, compute_logits = twin.shortlist_head.argmax, twin.compute_logits

    def counted(name, fn):
        def call(*args):
            calls[name] += 1
            return fn(*args)
        return call

    twin.shortlist_head.argmax = counted("shortlist", shortlist_argmax)
    twin.compute_logits = counted("logits", compute_logits)
    engine.generate([[5, 6, 7, 8]], SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))
    assert calls["shortlist"] > 0 and calls["logits"] == 0
    calls.update(shortlist=0, logits=0)
    engine.generate([[5, 6, 7, 8]], SamplingParams(max_tokens=12, temperature=1.0, seed=3, ignore_eos=True))
    assert calls["logits"] > 0 and calls["shortlist"] == 0


def test_no_shortlist_without_the_cpp_int4_kernel(monkeypatch):
    import tokenmill.kernels.int4_linear as int4_linear

    monkeypatch.setattr(int4_linear, "_vector_int4_kernels", lambda: None)
    core = EngineCore(EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu",
                                   max_model_len=96, int4_activations="float",
                                   speculative_config={"method": "self-int4", "num_speculative_tokens": 2}))
    assert core.drafting.proposer.draft.shortlist_head is None
