"""The rejection rule (engine/rejection.py) and the sampler rows that use it.

With drafts drawn from q and the rule applied at many rows at once, the
tokens that come out follow p (a chi-square goodness-of-fit test, which does
reject the draft distribution itself as a control), the drafts are kept at
the rate sum min(p, q), and a rejected row never returns its draft."""

from __future__ import annotations

import math

import pytest
import torch

from tokenmill.engine.counter_rng import STREAM_ACCEPT, seeded_uniform
from tokenmill.engine.distribution import draw
from tokenmill.engine.rejection import accept_or_resample
from tokenmill.engine.sampler import Sampler, SamplingRow
from tokenmill.sampling_params import SamplingParams

N = 40_000


def goodness_of_fit_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Chi-square test of counts [V] against probabilities [V]; 0 when a cell
    with p = 0 has counts (impossible under probs)."""
    expected = probs.double() * counts.sum()
    cells = probs > 0
    if counts[~cells].sum() > 0:
        return 0.0
    stat = float(((counts[cells] - expected[cells]) ** 2 / expected[cells]).sum())
    chi2 = torch.distributions.Chi2(torch.tensor(float(cells.sum() - 1)))
    return float(1 - chi2.cdf(torch.tensor(stat)))


def run_rule(p: torch.Tensor, q: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """N independent rows: draft ~ q, then the rule against weights proportional to p.
    Returns (tokens [N], drafts [N])."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.rand(3, N, dtype=torch.float64, generator=gen)
    drafts = draw(q.expand(N, -1).contiguous(), u[0])
    w = (p * 3.7).expand(N, -1).contiguous()  # unnormalised, as the sampler hands it over
    return accept_or_resample(w, drafts, q.expand(N, -1), u[1], u[2]), drafts


CASES = {
    "close": ([0.40, 0.25, 0.15, 0.10, 0.06, 0.04], [0.35, 0.30, 0.10, 0.15, 0.05, 0.05]),
    "far": ([0.05, 0.05, 0.10, 0.20, 0.60, 0.00], [0.50, 0.30, 0.10, 0.05, 0.03, 0.02]),
    "draft vocab shorter": ([0.10, 0.20, 0.30, 0.15, 0.15, 0.10], [0.25, 0.25, 0.25, 0.25]),
}


@pytest.mark.parametrize("case", CASES)
def test_tokens_follow_the_target_and_drafts_are_kept_at_one_minus_tv(case):
    p, q = (torch.tensor(v, dtype=torch.float32) for v in CASES[case])
    tokens, drafts = run_rule(p, q, seed=len(case))
    counts = torch.bincount(tokens, minlength=p.numel())
    assert goodness_of_fit_p_value(counts, p) > 1e-3
    q_full = torch.nn.functional.pad(q, (0, p.numel() - q.numel()))
    assert goodness_of_fit_p_value(torch.bincount(drafts, minlength=p.numel()), q_full) > 1e-3
    keep_rate = float(torch.minimum(p, q_full).sum())
    kept = float((tokens == drafts).sum()) / N
    assert abs(kept - keep_rate) < 4 * math.sqrt(keep_rate * (1 - keep_rate) / N) + 1e-9
    # The control: the drafts themselves do not pass for p (the test can fail).
    assert goodness_of_fit_p_value(torch.bincount(drafts, minlength=p.numel()), p) < 1e-3 or case == "close"


def test_a_draft_the_target_filtered_out_is_always_replaced():
    p = torch.tensor([0.5, 0.5, 0.0, 0.0])  # top-k 2 cut ids 2 and 3
    q = torch.tensor([0.1, 0.1, 0.4, 0.4])
    tokens, drafts = run_rule(p, q, seed=3)
    assert set(tokens.tolist()) <= {0, 1}
    rejected = tokens != drafts
    assert bool(rejected[drafts >= 2].all())


def test_equal_distributions_keep_every_draft():
    p = torch.tensor([0.2, 0.3, 0.5])
    tokens, drafts = run_rule(p, p.clone(), seed=4)
    assert torch.equal(tokens, drafts)


def test_sampler_rows_with_drafts_use_the_rule_and_seeded_numbers():
    """A sampled row carrying a draft and its q: kept where the seeded accept
    number says so, else a different token; greedy rows ignore drafts."""
    vocab = 8
    logits = torch.randn(64, vocab, generator=torch.Generator().manual_seed(5))
    q = torch.softmax(torch.randn(vocab, generator=torch.Generator().manual_seed(6)), dim=-1)
    p = torch.softmax(logits, dim=-1)
    rows = [SamplingRow(SamplingParams(temperature=1.0, seed=100 + i), [1, 2], [3] * (i % 3), draft=i % vocab,
                        draft_probs=q) for i in range(64)]
    out = Sampler(vocab)(logits, rows)
    again = Sampler(vocab, seed=9)(logits, rows)  # seeded rows: their own numbers, not the generator's
    assert out.token_ids == again.token_ids
    for i, row in enumerate(rows):
        u = seeded_uniform(row.params.seed, len(row.output_token_ids), STREAM_ACCEPT)
        keep = u * float(q[row.draft]) < float(p[i, row.draft])
        assert (out.token_ids[i] == row.draft) == keep, i
    greedy = [SamplingRow(SamplingParams(temperature=0.0), [1], [], draft=0, draft_probs=q)]
    assert Sampler(vocab)(logits[:1], greedy).token_ids == [int(logits[0].argmax())]


def test_logprobs_belong_to_the_token_returned():
    vocab = 8
    logits = torch.randn(1, vocab, generator=torch.Generator().manual_seed(7))
    q = torch.full((vocab,), 1 / vocab)
    row = SamplingRow(SamplingParams(temperature=1.0, seed=1, logprobs=1), [1], [], draft=3, draft_probs=q)
    out = Sampler(vocab)(logits, [row])
    token = out.token_ids[0]
    assert out.logprobs[0].token_id == token
    assert out.logprobs[0].logprob == pytest.approx(float(torch.log_softmax(logits[0], -1)[token]), abs=1e-6)
