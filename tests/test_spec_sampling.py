"""Sampling with speculation draws from the model's own distribution.

Under exact match, seeded requests give the same tokens with and without
drafts (their random numbers belong to output positions: test_spec_ngram.py,
test_spec_self_int4.py); unseeded ones draw from a shared generator, which
speculation consumes in a different order, and under the rejection rule
drafts are drawn too, so there only the distribution can be compared. On the
tiny dummy model, many requests sample three tokens (the last two verified as
drafts where a draft was proposed) with and without speculation, and a
two-sample chi-square test compares the distributions of the third token.
The rejection rule must also keep more drafts than exact match does at
temperature 1 (its point)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams

COMMON = dict(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", max_model_len=64,
              max_num_seqs=256, num_kv_blocks=512)
PROMPT = [9, 10, 11, 12, 9, 10, 11, 12, 9, 10, 11]  # repeats: prompt lookup drafts too
N = 1500


def chi_square_p_value(a: Counter, b: Counter) -> float:
    """Two-sample chi-square homogeneity test; categories expected fewer than 5
    times in either sample are pooled."""
    total_a, total_b = sum(a.values()), sum(b.values())
    cells, pooled = [], [0, 0]
    for key in set(a) | set(b):
        both = a[key] + b[key]
        if min(both * total_a, both * total_b) / (total_a + total_b) < 5:
            pooled[0] += a[key]
            pooled[1] += b[key]
        else:
            cells.append((a[key], b[key]))
    if sum(pooled):
        cells.append(tuple(pooled))
    stat = 0.0
    for x, y in cells:
        both = x + y
        ex, ey = both * total_a / (total_a + total_b), both * total_b / (total_a + total_b)
        stat += (x - ex) ** 2 / ex + (y - ey) ** 2 / ey
    chi2 = torch.distributions.Chi2(torch.tensor(float(len(cells) - 1)))
    return float(1 - chi2.cdf(torch.tensor(stat)))


def third_tokens(engine: LLMEngine, seeded: bool = False) -> Counter:
    return Counter(r.token_ids[2] for r in engine.generate([PROMPT] * N, [
        SamplingParams(max_tokens=3, temperature=1.0, top_k=6, ignore_eos=True, seed=i if seeded else None)
        for i in range(N)]))


def spec_engine(method: str, acceptance: str) -> LLMEngine:
    return LLMEngine(EngineConfig(**COMMON, seed=1, speculative_config={
        "method": method, "num_speculative_tokens": 2, "adaptive": False, "acceptance_method": acceptance,
        **({"model": "dummy:tiny"} if method == "draft_model" else {})}))


@pytest.mark.parametrize("method, acceptance, seeded", [
    ("ngram", "exact_match", False), ("self-int4", "exact_match", False), ("self-int4", "rejection_sampler", False),
    ("self-int4", "rejection_sampler", True), ("draft_model", "rejection_sampler", True)])
def test_sampling_distribution_is_unchanged(method, acceptance, seeded):
    # The same seed: it also draws the dummy weights. The two engines still consume
    # their generators differently (verification samples rows that plain decoding never does).
    plain = LLMEngine(EngineConfig(**COMMON, seed=1))
    spec = spec_engine(method, acceptance)
    want, got = third_tokens(plain, seeded), third_tokens(spec, seeded)
    stats = spec.stats()
    assert stats.spec_accepted_tokens > 50  # drafts did decide some of these tokens
    assert chi_square_p_value(want, got) > 1e-3
    # The test can fail: a different distribution is caught (the plain one against top-5 sampling).
    narrower = Counter(r.token_ids[2] for r in plain.generate(
        [PROMPT] * N, SamplingParams(max_tokens=3, temperature=1.0, top_k=5, ignore_eos=True)))
    assert chi_square_p_value(want, narrower) < 1e-3


def test_rejection_sampling_keeps_more_drafts_than_exact_match_at_temperature_one():
    rates = {}
    for acceptance in ("exact_match", "rejection_sampler"):
        spec = spec_engine("self-int4", acceptance)
        third_tokens(spec)
        stats = spec.stats()
        rates[acceptance] = stats.spec_accepted_tokens / stats.spec_draft_tokens
    assert rates["rejection_sampler"] > 1.3 * rates["exact_match"], rates
