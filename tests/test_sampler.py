"""Sampler against a straightforward per-row reference (float64, Python loops)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from tokenmill.engine.exact_head import ExactHead, ExactLogits
from tokenmill.engine.distribution import (
    apply_min_p,
    apply_penalties,
    apply_top_k,
    apply_top_p,
    draw,
    probability_weights,
)
from tokenmill.engine.sampler import Sampler, SamplingRow
from tokenmill.sampling_params import SamplingParams

# ---- reference ------------------------------------------------------------------


def ref_penalize(logits: torch.Tensor, prompt: list[int], output: list[int], p: SamplingParams) -> torch.Tensor:
    """One row [V] -> penalized float64 logits."""
    x = logits.double().clone()
    if p.repetition_penalty != 1.0:
        for t in set(prompt) | set(output):
            x[t] = x[t] / p.repetition_penalty if x[t] > 0 else x[t] * p.repetition_penalty
    for t, count in Counter(output).items():
        x[t] -= count * p.frequency_penalty + p.presence_penalty
    return x


def ref_allowed(x: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """Penalized logits [V] -> bool [V]: ids left after temperature, top-k, top-p, min-p."""
    z = x.double() / p.temperature
    allowed = torch.ones_like(z, dtype=torch.bool)
    if 0 < p.top_k < len(z):
        kth = sorted(z.tolist(), reverse=True)[p.top_k - 1]
        allowed &= z >= kth
    if p.top_p < 1.0:
        probs = torch.softmax(z.masked_fill(~allowed, float("-inf")), dim=0)
        ordered = sorted(probs.tolist(), reverse=True)
        mass_above, cut = 0.0, ordered[0]
        for q in ordered:
            if mass_above >= p.top_p:
                break
            cut, mass_above = q, mass_above + q
        allowed &= probs >= cut
    if p.min_p > 0.0:
        probs = torch.softmax(z.masked_fill(~allowed, float("-inf")), dim=0)
        allowed &= probs >= p.min_p * probs.max()
    return allowed


def ref_logprobs(x: torch.Tensor, n: int) -> list[tuple[int, float]]:
    lp = torch.log_softmax(x.double(), dim=0)
    order = sorted(range(len(lp)), key=lambda i: -lp[i].item())[:n]
    return [(i, lp[i].item()) for i in order]


def row(params: SamplingParams, prompt=(), output=()) -> SamplingRow:
    return SamplingRow(params, list(prompt), list(output))


def rand_logits(rows: int, vocab: int, seed: int, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * scale


# ---- greedy, padding, penalties, logprobs ----------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_equals_argmax_and_ignores_padding(dtype):
    vocab = 100
    logits = rand_logits(6, vocab + 28, 0).to(dtype)
    logits[:, vocab:] = 1e4  # padding columns would win if looked at
    before = logits.clone()
    out = Sampler(vocab)(logits, [row(SamplingParams(temperature=0.0)) for _ in range(6)])
    assert out.token_ids == logits[:, :vocab].float().argmax(dim=-1).tolist()
    assert out.logprobs == [None] * 6
    assert torch.equal(logits, before)


def test_greedy_ties_go_to_lowest_id():
    logits = torch.zeros(2, 10)
    logits[0, [7, 3, 9]] = 5.0
    logits[1, [4, 8]] = 2.0
    rows = [row(SamplingParams(temperature=0.0, logprobs=1)), row(SamplingParams(temperature=0.0))]
    out = Sampler(10)(logits, rows)
    assert out.token_ids == [3, 4]


def test_bf16_greedy_ties_are_broken_by_the_exact_logits(monkeypatch):
    """Columns 2 and 5 round to the same bf16 maximum in both rows; the exact
    logits say 5 in row 0 and 2 in row 1 (a genuine exact tie would keep the first)."""
    exact = torch.zeros(2, 8)
    exact[0, [2, 5]] = torch.tensor([10.01, 10.03])
    exact[1, [2, 5]] = torch.tensor([10.03, 10.01])
    logits = exact.bfloat16()
    assert logits[0, 2] == logits[0, 5] and logits[1, 2] == logits[1, 5]
    # A head whose hidden rows are one-hot: row r's exact logits are exact[r].
    head = ExactHead(weight=exact.T.contiguous(), scales=None, bias=None, input_dtype=None)
    hidden = torch.eye(2)
    asked = []
    real_columns = ExactHead.columns

    def columns(self, h, cols):
        asked.append((int(h.argmax()), cols.tolist()))
        return real_columns(self, h, cols)

    monkeypatch.setattr(ExactHead, "columns", columns)
    greedy = SamplingParams(temperature=0.0)
    out = Sampler(8)(logits, [row(greedy), row(greedy)], ExactLogits(head, hidden))
    assert out.token_ids == [5, 2]
    assert asked == [(0, [2, 5]), (1, [2, 5])]  # only the tied columns were recomputed
    # The same rows beside a sampled one (the mixed path) pick the same tokens.
    mixed = torch.cat([logits, logits[:1]])
    out = Sampler(8)(mixed, [row(greedy), row(greedy), row(SamplingParams(temperature=1.0))],
                     ExactLogits(head, torch.cat([hidden, hidden[:1]])))
    assert out.token_ids[:2] == [5, 2]
    # Float32 logits are exact: no recomputation, the first maximum wins.
    assert Sampler(8)(logits[:1].float(), [row(greedy)], ExactLogits(head, hidden[:1])).token_ids == [2]
    assert len(asked) == 4


def test_penalties_match_reference():
    vocab = 60
    logits = rand_logits(5, vocab, 1)
    cases = [
        (SamplingParams(repetition_penalty=1.3), [1, 2, 2, 59], [5, 1, 1]),
        (SamplingParams(frequency_penalty=0.7, presence_penalty=-0.4), [3, 4], [4, 4, 9, 4, 0]),
        (SamplingParams(), [1, 2, 3], [1, 2]),
        (SamplingParams(repetition_penalty=0.8, frequency_penalty=-1.5, presence_penalty=2.0), [7] * 5, [7, 8, 8]),
        (SamplingParams(presence_penalty=1.0), [], []),
    ]
    rows = [row(p, pr, o) for p, pr, o in cases]
    x = logits.clone()
    apply_penalties(x, rows)
    for i, (p, pr, o) in enumerate(cases):
        torch.testing.assert_close(x[i].double(), ref_penalize(logits[i], pr, o, p), atol=1e-5, rtol=1e-5)
    assert not torch.equal(x[0], logits[0]) and not torch.equal(x[3], logits[3])


def test_logprobs_are_of_the_penalized_untempered_distribution():
    vocab = 40
    logits = rand_logits(4, vocab + 8, 2)
    logits[:, vocab:] = 50.0  # padding must not enter the normaliser
    params = [
        SamplingParams(temperature=0.0, repetition_penalty=1.5, logprobs=5),
        SamplingParams(temperature=0.5, top_k=3, frequency_penalty=1.0, logprobs=20, seed=3),
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=2.0, logprobs=0),
    ]
    prompts, outputs = [[1, 2, 3], [4], [5], [6]], [[3, 3], [4, 4, 10], [], [7]]
    rows = [row(p, pr, o) for p, pr, o in zip(params, prompts, outputs)]
    out = Sampler(vocab, seed=5)(logits, rows)
    assert out.logprobs[2] is None
    for i in (0, 1, 3):
        x = ref_penalize(logits[i, :vocab], prompts[i], outputs[i], params[i])
        lp = out.logprobs[i]
        assert lp.token_id == out.token_ids[i]
        assert lp.logprob == pytest.approx(torch.log_softmax(x, 0)[lp.token_id].item(), abs=1e-4)
        want = ref_logprobs(x, params[i].logprobs)
        assert [t for t, _ in lp.top] == [t for t, _ in want]
        assert [v for _, v in lp.top] == pytest.approx([v for _, v in want], abs=1e-4)
    assert out.token_ids[0] == ref_penalize(logits[0, :vocab], prompts[0], outputs[0], params[0]).argmax().item()


# ---- truncation -------------------------------------------------------------------


TRUNCATIONS = [
    SamplingParams(temperature=0.7, top_k=5),
    SamplingParams(temperature=1.3, top_p=0.6),
    SamplingParams(temperature=1.0, min_p=0.05),
    SamplingParams(temperature=0.9, top_k=20, top_p=0.8, min_p=0.02),
    SamplingParams(temperature=1.0),
    SamplingParams(temperature=0.3, top_k=1000),  # wider than the vocab: off
    SamplingParams(temperature=2.0, top_p=0.97),
]


def masks(x: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    w = probability_weights(x, [p.temperature for p in params])
    apply_top_k(w, [p.top_k for p in params])
    apply_top_p(w, [p.top_p for p in params])
    apply_min_p(w, [p.min_p for p in params])
    return w > 0


def test_truncation_masks_match_reference():
    x = rand_logits(len(TRUNCATIONS), 300, 3)
    got = masks(x, TRUNCATIONS)
    for i, p in enumerate(TRUNCATIONS):
        assert torch.equal(got[i], ref_allowed(x[i], p)), p
    assert got[0].sum() == 5 and got[4].all() and got[5].all()
    # A subset of rows alone gives the same masks (per-row work, no batch effects).
    assert torch.equal(masks(x[1:3], TRUNCATIONS[1:3]), got[1:3])


def test_wide_nucleus_falls_back_past_the_candidates():
    # Nearly flat rows: the 0.9 nucleus spans thousands of ids (beyond 256 and 4096 candidates).
    x = rand_logits(3, 6000, 4, scale=0.05)
    params = [SamplingParams(top_p=0.9), SamplingParams(top_p=0.3), SamplingParams(top_p=0.7, top_k=500)]
    got = masks(x, params)
    for i, p in enumerate(params):
        assert torch.equal(got[i], ref_allowed(x[i], p))
    assert got[0].sum() > 4096 and 256 < got[1].sum() < 4096 and got[2].sum() < 500


def test_sampled_tokens_stay_in_the_allowed_set():
    vocab, draws = 50, 300
    x = rand_logits(len(TRUNCATIONS), vocab, 5)
    sampler = Sampler(vocab, seed=11)
    seen = [set() for _ in TRUNCATIONS]
    for _ in range(draws):
        out = sampler(x, [row(p) for p in TRUNCATIONS])
        for s, t in zip(seen, out.token_ids):
            s.add(t)
    for i, p in enumerate(TRUNCATIONS):
        allowed = set(torch.nonzero(ref_allowed(x[i], p)).view(-1).tolist())
        assert seen[i] <= allowed, p
    assert seen[0] == set(torch.nonzero(ref_allowed(x[0], TRUNCATIONS[0])).view(-1).tolist())
    assert len(seen[4]) > 5  # untruncated sampling really varies


def test_tiny_top_p_is_always_the_argmax():
    x = rand_logits(8, 200, 6)
    sampler = Sampler(200, seed=1)
    for _ in range(20):
        out = sampler(x, [row(SamplingParams(temperature=1.5, top_p=1e-6)) for _ in range(8)])
        assert out.token_ids == x.argmax(dim=-1).tolist()


def test_padding_never_sampled():
    vocab = 30
    logits = torch.zeros(64, vocab + 34)
    logits[:, vocab:] = 40.0
    sampler = Sampler(vocab, seed=2)
    for _ in range(10):
        ids = sampler(logits, [row(SamplingParams(temperature=1.0, seed=i))
                               if i % 2 else row(SamplingParams(temperature=3.0)) for i in range(64)]).token_ids
        assert max(ids) < vocab
    assert len(set(ids)) > 5


def test_draw_only_lands_on_positive_weights():
    w = torch.zeros(6, 600)
    w[:4, 100] = 1.0
    w[:4, 101] = 0.5
    w[4:, 590] = 1.0  # only the last, padded block has mass
    u = torch.tensor([0.0, 1.0 - 2 ** -53, 0.5, 0.7, 0.0, 1.0 - 2 ** -53], dtype=torch.float64)
    assert draw(w, u).tolist() == [100, 101, 100, 101, 590, 590]


# ---- distribution and seeds ------------------------------------------------------


@pytest.mark.parametrize("ids, vocab", [(range(8), 8), ([3, 255, 256, 511, 700, 950, 998, 999], 1000)])
def test_temperature_sampling_matches_softmax(ids, vocab):
    """Histogram vs softmax(logits / T); the second layout spreads the mass over several
    256-id blocks of the draw, including the padded last one."""
    temperature, rows, steps = 0.7, 2000, 10
    ids = list(ids)
    values = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, 0.2])
    logits = torch.full((vocab,), -40.0)
    logits[ids] = values
    probs = torch.softmax(values.double() / temperature, 0)
    sampler = Sampler(vocab, seed=1234)
    counts = torch.zeros(vocab, dtype=torch.float64)
    for _ in range(steps):
        got = sampler(logits.expand(rows, vocab), [row(SamplingParams(temperature=temperature))] * rows).token_ids
        counts += torch.bincount(torch.tensor(got), minlength=vocab)
    assert counts[ids].sum() == rows * steps
    counts = counts[ids]
    expected = probs * rows * steps
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 24.3  # 99.9% quantile of chi-square with 7 degrees of freedom
    # Temperature 1 would give a clearly different histogram.
    flat = torch.softmax(values.double(), 0) * rows * steps
    assert ((counts - flat) ** 2 / flat).sum().item() > 100


def step_logits(step: int, vocab: int, salt: int) -> torch.Tensor:
    return rand_logits(1, vocab, 1000 * salt + step, scale=2.0)[0]


def run_seeded(seed: int, batch: bool, steps: int = 20, vocab: int = 64) -> list[int]:
    """Generate with one seeded request, alone or at row 3 of a batch of 8."""
    params = SamplingParams(temperature=0.9, top_p=0.9, top_k=30, repetition_penalty=1.1,
                            frequency_penalty=0.3, seed=seed)
    target = row(params, [1, 2, 3], [])
    others = [row(SamplingParams(temperature=1.0, seed=77 + i), [i], []) if i % 2
              else row(SamplingParams(temperature=0.5 + 0.1 * i, min_p=0.1)) for i in range(7)]
    rows = others[:3] + [target] + others[3:] if batch else [target]
    sampler = Sampler(vocab, seed=99 if batch else 0)
    for step in range(steps):
        logits = torch.stack([step_logits(step, vocab, 0 if r is target else 1 + i) for i, r in enumerate(rows)])
        out = sampler(logits, rows)
        for r, t in zip(rows, out.token_ids):
            r.output_token_ids.append(t)
    return target.output_token_ids


def test_seeded_request_is_independent_of_its_batch():
    alone = run_seeded(1234, batch=False)
    assert run_seeded(1234, batch=True) == alone
    assert run_seeded(1234, batch=False) == alone
    assert run_seeded(4321, batch=False) != alone
    assert len(set(alone)) > 3


def test_seeded_draw_is_a_function_of_seed_and_position():
    """Counter-based: the same (seed, position) gives the same uniform whatever
    came before; neighbouring positions and seeds give unrelated ones."""
    from tokenmill.engine.counter_rng import seeded_uniform

    a = [seeded_uniform(5, i) for i in range(2000)]
    assert a == [seeded_uniform(5, i) for i in range(2000)]
    assert all(0.0 <= u < 1.0 for u in a)
    assert seeded_uniform(5, 7) != seeded_uniform(6, 7) and seeded_uniform(-1, 0) != seeded_uniform(0, 0)
    counts = torch.histc(torch.tensor(a), bins=10, min=0.0, max=1.0)
    assert ((counts - 200) ** 2 / 200).sum().item() < 27.9  # chi-square, 9 dof, 99.9%
    # The draw depends on the position (how many tokens were generated), not on
    # the history itself or the sampler instance: a resumed request draws what
    # the uninterrupted one drew there.
    params = SamplingParams(temperature=1.0, seed=11)
    logits = rand_logits(1, 64, 8, scale=1.0)
    tokens = {Sampler(64, seed=s)(logits, [row(params, prompt, out)]).token_ids[0]
              for s, prompt, out in ((0, [1], [3, 4, 5]), (9, [9, 9, 9], [0, 0, 0]), (2, [7, 7], [1, 2, 3]))}
    assert len(tokens) == 1
    drawn = {Sampler(64)(logits, [row(params, [1], [3] * n)]).token_ids[0] for n in range(40)}
    assert len(drawn) > 5  # other positions draw other numbers


# ---- edge cases (issue: one request's parameters must never fail the step) -------


def test_top_k_one_is_greedy_at_any_temperature():
    x = rand_logits(4, 300, 21)
    sampler = Sampler(300, seed=3)
    for temperature in (0.5, 1.0, 7.0, 100.0):
        params = SamplingParams(temperature=temperature, top_k=1)
        assert params.greedy
        assert sampler(x, [row(params)] * 4).token_ids == x.argmax(dim=-1).tolist()
    # The top-k mask itself keeps exactly the maximum (a [n, 1] partition once crashed here).
    w = probability_weights(x, [1.0] * 4)
    apply_top_k(w, [1] * 4)
    assert torch.equal(w > 0, torch.nn.functional.one_hot(x.argmax(dim=-1), 300).bool())


@pytest.mark.parametrize("temperature", [0.0, 5e-324, 1e-310, 1e-46, 1e-45, 1e-40, 1e-38, 9.9e-6])
def test_underflowing_temperature_is_greedy(temperature):
    params = SamplingParams(temperature=temperature, top_p=0.5, min_p=0.2, seed=4)
    assert params.greedy
    x = rand_logits(2, 500, 22, scale=30.0)
    assert Sampler(500)(x, [row(params)] * 2).token_ids == x.argmax(dim=-1).tolist()
    assert not SamplingParams(temperature=1e-5).greedy


def test_top_k_zero_and_minus_one_both_mean_off():
    x = rand_logits(3, 400, 23)
    tokens = {k: [Sampler(400)(x, [row(SamplingParams(top_k=k, seed=9))] * 3).token_ids
                  for _ in range(5)] for k in (-1, 0, 400, 10 ** 9)}
    assert tokens[-1] == tokens[0] == tokens[400] == tokens[10 ** 9]
    assert masks(x, [SamplingParams(top_k=0)]).all()


def test_min_p_one_keeps_only_the_maximum():
    x = rand_logits(3, 200, 24)
    x[2, [10, 20]] = x[2].max() + 1.0  # a tie at the top: both stay
    got = masks(x, [SamplingParams(min_p=1.0)] * 3)
    for i in range(3):
        assert torch.equal(got[i], ref_allowed(x[i], SamplingParams(min_p=1.0)))
        assert torch.equal(got[i], x[i] == x[i].max())
    assert got[2].sum() == 2


@pytest.mark.parametrize("field, value", [
    ("repetition_penalty", 0.0), ("repetition_penalty", 1e-38), ("repetition_penalty", 0.0099),
    ("repetition_penalty", 100.5), ("repetition_penalty", float("inf")), ("repetition_penalty", float("nan")),
    ("temperature", float("nan")), ("temperature", -1e-300), ("temperature", float("inf")),
    ("top_p", float("nan")), ("min_p", 1.0000001), ("frequency_penalty", float("nan")),
    ("presence_penalty", float("-inf")), ("top_k", -2), ("top_k", 1.5), ("top_k", True),
    ("temperature", "0.7"), ("max_tokens", 2.0),
])
def test_bad_values_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}: ") as info:
        SamplingParams(**{field: value})
    assert info.value.param == field


@pytest.mark.parametrize("penalty", [0.01, 100.0])
def test_penalty_arithmetic_at_the_bounds_stays_finite(penalty):
    vocab = 300
    x = rand_logits(2, vocab, 25, scale=1e3)  # logits far larger than any model's
    rows = [row(SamplingParams(repetition_penalty=penalty, frequency_penalty=2.0, presence_penalty=-2.0,
                               logprobs=5), list(range(vocab)), list(range(vocab)) * 3),
            row(SamplingParams(repetition_penalty=penalty, temperature=1e-5, logprobs=0), list(range(vocab)))]
    penalized = x.clone()
    apply_penalties(penalized, rows)
    assert torch.isfinite(penalized).all()
    out = Sampler(vocab)(x, rows)
    assert all(0 <= t < vocab for t in out.token_ids)
    assert all(torch.isfinite(torch.tensor([lp.logprob for lp in out.logprobs])))
    for i, r in enumerate(rows):
        torch.testing.assert_close(penalized[i].double(), ref_penalize(x[i], r.prompt_token_ids,
                                                                       r.output_token_ids, r.params),
                                   rtol=1e-5, atol=1e-2)


def test_rows_without_a_finite_distribution_fall_back_to_greedy():
    vocab = 100
    x = rand_logits(4, vocab, 26)
    x[0, 7] = float("nan")
    x[1, 3] = float("inf")
    x[2] = float("-inf")
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=5)
    out = Sampler(vocab)(x, [row(params) for _ in range(4)])
    assert out.token_ids[0] == torch.nan_to_num(x[0], nan=float("-inf")).argmax().item()
    assert out.token_ids[1] == 3
    assert 0 <= out.token_ids[2] < vocab
    assert out.errors == {}
    # The healthy (seeded) row is drawn exactly as it would be alone.
    assert out.token_ids[3] == Sampler(vocab)(x[3:], [row(params)]).token_ids[0]


def test_a_row_whose_sampling_raises_fails_alone(monkeypatch):
    """Fault injection: min_p raises whenever the poisoned value is in the batch.
    The other rows (greedy, seeded, penalized, logprobs) get exactly the tokens
    they get without the poisoned row, and the shared generator is not disturbed
    for the row-by-row retry."""
    import tokenmill.engine.distribution as distribution_module

    poison = 0.123
    real = distribution_module.apply_min_p

    def exploding(w, min_p):
        if poison in min_p:
            raise RuntimeError("injected sampler fault")
        real(w, min_p)

    monkeypatch.setattr(distribution_module, "apply_min_p", exploding)
    vocab = 500
    x = rand_logits(5, vocab, 27)

    def rows(with_poison: bool):
        good = [row(SamplingParams(temperature=0.0)),
                row(SamplingParams(temperature=0.9, seed=31, logprobs=2)),
                row(SamplingParams(temperature=0.0, repetition_penalty=1.5), [1, 2, 3]),
                row(SamplingParams(temperature=1.2, top_k=40, seed=32))]
        return good[:2] + [row(SamplingParams(min_p=poison))] + good[2:] if with_poison else good

    alone = Sampler(vocab, seed=6)(x[[0, 1, 3, 4]], rows(False))
    mixed = Sampler(vocab, seed=6)(x, rows(True))
    assert list(mixed.errors) == [2] and "injected sampler fault" in mixed.errors[2]
    assert mixed.token_ids[2] == -1 and mixed.logprobs[2] is None
    assert [mixed.token_ids[i] for i in (0, 1, 3, 4)] == alone.token_ids
    assert mixed.logprobs[1] == alone.logprobs[1]
