"""Hypothesis strategies shared by the sampler fuzz and the server fuzz: the
values of every sampling field, extreme floats and wrong types included."""

from __future__ import annotations

import math

from hypothesis import strategies as st

# Values that broke samplers before: subnormals, underflow to zero in float32,
# overflow on division, the bounds themselves and just past them, non-numbers.
EXTREME_FLOATS = [0.0, -0.0, 5e-324, 1e-310, 1e-46, 1e-45, 1e-40, 1e-38, 1e-10, 1e-6, 1e-5, 0.01, 0.0099,
                  0.5, 0.9999999, 1.0, 1.0000001, 2.0, 2.0000001, 100.0, 100.5, 1e38, 3.5e38, 1e300,
                  math.inf, -math.inf, math.nan, -1e-46, -1.0, -2.0, -2.5]
floats = st.one_of(st.sampled_from(EXTREME_FLOATS), st.floats(allow_nan=True, allow_infinity=True),
                   st.floats(-3.0, 3.0))
junk = st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.lists(st.integers(0, 3), max_size=2),
                 st.just({}))


def sampling_fields(vocab: int) -> dict[str, st.SearchStrategy]:
    """Field name -> values for the sampling fields SamplingParams and the API share."""
    ints = st.one_of(st.sampled_from([-2, -1, 0, 1, 2, vocab - 1, vocab, 10 ** 9, 2 ** 63, 2 ** 64,
                                      -(2 ** 63) - 1]), st.integers(-5, 2 * vocab))
    return {
        "temperature": st.one_of(floats, ints, junk),
        "top_p": st.one_of(floats, junk),
        "top_k": st.one_of(ints, floats, junk),
        "min_p": st.one_of(floats, junk),
        "repetition_penalty": st.one_of(floats, junk),
        "frequency_penalty": st.one_of(floats, junk),
        "presence_penalty": st.one_of(floats, junk),
        "seed": st.one_of(ints, junk),
    }
