"""Property-based fuzz of SamplingParams + Sampler: any combination of sampling
fields, extreme floats included, is either refused with a ValueError naming
the field, or sampled to a token inside the vocabulary without changing what
the other rows of the batch get.

Run long: ``pytest --hypothesis-profile=long tests/test_sampler_fuzz.py``.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from _fuzz_strategies import junk, sampling_fields
from tokenmill.engine.sampler import Sampler, SamplingRow
from tokenmill.errors import RequestError
from tokenmill.sampling_params import SamplingParams

VOCAB = 700  # three 256-id blocks of the draw, the last one padded
FIELDS = {f.name for f in dataclasses.fields(SamplingParams)}

field_values = {
    **sampling_fields(VOCAB),
    "logprobs": st.one_of(st.integers(-1, 21), junk),
    "max_tokens": st.one_of(st.integers(-1, 5), junk),
}
fuzz_params = st.fixed_dictionaries({}, optional=field_values)
history = st.lists(st.integers(-3, VOCAB + 3), max_size=40)  # out-of-vocabulary ids too


def control_rows() -> list[SamplingRow]:
    """A greedy, a seeded and a penalized-greedy row with logprobs: their tokens
    must not depend on what else is in the batch."""
    return [SamplingRow(SamplingParams(temperature=0.0), [1, 2], []),
            SamplingRow(SamplingParams(temperature=0.8, top_p=0.95, seed=7, logprobs=3), [3], [4]),
            SamplingRow(SamplingParams(temperature=0.0, repetition_penalty=1.3, logprobs=1), [5, 6], [5])]


@given(fields=fuzz_params, prompt=history, output=history, logit_scale=st.sampled_from([0.0, 1.0, 30.0, 1e4]),
       seed=st.integers(0, 2 ** 16))
def test_any_sampling_params_are_refused_by_name_or_sampled_in_isolation(fields, prompt, output, logit_scale, seed):
    try:
        params = SamplingParams(**fields)
    except RequestError as exc:
        assert exc.param in FIELDS and str(exc).startswith(f"{exc.param}: "), exc
        return
    logits = torch.randn(4, VOCAB + 12, generator=torch.Generator().manual_seed(seed)) * logit_scale
    fuzzed = SamplingRow(params, prompt, output)
    alone = Sampler(VOCAB)(logits[:3].clone(), control_rows())
    mixed = Sampler(VOCAB)(logits, control_rows() + [fuzzed])
    assert mixed.errors == {}
    assert 0 <= mixed.token_ids[3] < VOCAB
    assert mixed.token_ids[:3] == alone.token_ids
    assert mixed.logprobs[:3] == alone.logprobs
    if params.greedy and not params.uses_penalties:
        assert mixed.token_ids[3] == logits[3, :VOCAB].argmax().item()
    if params.logprobs is not None:
        assert math.isfinite(mixed.logprobs[3].logprob)
