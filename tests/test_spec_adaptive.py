"""The adaptive draft policy (spec/adaptive.py): step times interpolated by
rows, and drafts chosen only where they promise more tokens per second."""

from __future__ import annotations

import pytest

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.request import Request
from tokenmill.sampling_params import SamplingParams
from tokenmill.spec.adaptive import KNEE_ROWS, MIN_GAIN, PROBE_INTERVAL, DraftPolicy, StepTimes


def test_step_times_interpolate_stay_flat_below_and_grow_in_proportion_above():
    times = StepTimes()
    assert times.predict(4) is None
    times.record(1, 0.010)
    times.record(64, 0.050)
    assert times.predict(1) == pytest.approx(0.010)
    assert times.predict(0.5) == pytest.approx(0.010)  # below the smallest rows seen: flat
    assert times.predict(32.5) == pytest.approx(0.030)  # halfway between the two points
    assert times.predict(128) == pytest.approx(0.100)  # beyond: in proportion to rows


def test_an_unmeasured_step_is_flat_up_to_the_knee():
    times = StepTimes()
    times.record(1, 0.010)
    assert times.predict(KNEE_ROWS) == pytest.approx(0.010)
    assert times.predict(2 * KNEE_ROWS) == pytest.approx(0.020)


def test_step_times_average_within_a_bucket():
    times = StepTimes()
    times.record(8, 0.02)
    times.record(8, 0.04)
    assert 0.02 < times.predict(8) < 0.04


def requests(n, accepted=0, rejections=0):
    out = []
    for i in range(n):
        r = Request(f"r{i}", [1, 2, 3], SamplingParams(max_tokens=100))
        r.num_drafts_accepted, r.num_draft_rejections = accepted, rejections
        out.append(r)
    return out


def memory_bound(policy, up_to=512):
    """A step costs the same whatever its rows, up to ``up_to`` rows."""
    for rows in (1, 8, up_to):
        policy.record_step(rows, 0.02)


def compute_bound(policy):
    """Every row costs its share: time in proportion to rows."""
    for rows in (1, 16, 256, 1024):
        policy.record_step(rows, 0.001 * rows)


def test_before_any_measurement_small_batches_try_and_large_ones_do_not():
    policy = DraftPolicy(drafts_cost_passes=False)
    assert policy.choose(requests(2), [4, 2]) == [4, 2] and policy.may_pay(2, 4)
    assert policy.choose(requests(64), [4] * 64) == [0] * 64 and not policy.may_pay(64, 4)


def test_free_drafts_go_where_steps_are_memory_bound():
    policy = DraftPolicy(drafts_cost_passes=False)
    memory_bound(policy)
    assert policy.choose(requests(2, accepted=30, rejections=5), [4, 3]) == [4, 3]


def test_no_drafts_where_every_row_costs_its_share():
    policy = DraftPolicy(drafts_cost_passes=False)
    compute_bound(policy)
    assert policy.choose(requests(256, accepted=30, rejections=5), [4] * 256) == [0] * 256
    assert not policy.may_pay(256, 4)  # not even if every draft were accepted: a free proposer skips its work
    assert policy.may_pay(1, 4) is False  # 1 row -> 5 rows costs 5x here too


def test_low_acceptance_turns_drafts_off_even_when_rows_are_nearly_free():
    policy = DraftPolicy(drafts_cost_passes=False)
    for rows in (1, 8):
        policy.record_step(rows, 0.02 + 0.002 * rows)  # each extra row: +10% of a step
    assert policy.choose(requests(1, accepted=0, rejections=40), [4]) == [0]
    assert policy.choose(requests(1, accepted=80, rejections=2), [4]) == [4]


def test_draft_passes_are_paid_for():
    """A draft pass at half a step: all four drafts pay at 98% acceptance, three at 89%, none at 40%."""
    policy = DraftPolicy(drafts_cost_passes=True)
    memory_bound(policy)
    policy.record_pass(1, 0.01)
    assert policy.choose(requests(1, accepted=300, rejections=5), [4]) == [4]
    assert policy.choose(requests(1, accepted=90, rejections=10), [4]) == [3]
    assert policy.choose(requests(1, accepted=3, rejections=7), [4]) == [0]
    # A cheap pass pays at lower acceptance: its first drafts only.
    policy.record_pass(1, 0.002)
    policy.record_pass(1, 0.002)
    policy.record_pass(1, 0.002)
    chosen = policy.choose(requests(1, accepted=5, rejections=5), [4])[0]
    assert 1 <= chosen < 4


def test_the_gain_must_clear_the_margin():
    """Drafts promising less than MIN_GAIN more tokens per second are not verified."""
    policy = DraftPolicy(drafts_cost_passes=False)
    policy.record_step(1, 0.02)
    policy.record_step(2, 0.04 / 1.02)  # a sure draft: 2 tokens in 1.96 steps' time, 1.02x the rate
    r = requests(1, accepted=10_000, rejections=1)  # acceptance ~ 1
    assert MIN_GAIN > 1.02 and policy.choose(r, [1]) == [0]
    policy.record_step(2, 0.02)  # the bucket's mean falls: now it pays
    policy.record_step(2, 0.02)
    assert policy.choose(r, [1]) == [1]


def test_a_policy_that_stopped_drafting_probes_and_learns_that_acceptance_rose():
    """After a run of rejections no drafts pay; every PROBE_INTERVAL-th such step
    still verifies one draft, and once probes are kept the drafts come back."""
    policy = DraftPolicy(drafts_cost_passes=True)
    memory_bound(policy)
    policy.record_pass(1, 0.005)
    for _ in range(200):
        policy.record_verification(4, 0)  # the old workload: nothing kept
    fresh = requests(1)  # a new request starts at the engine-wide estimate
    choices = [policy.choose(fresh, [4]) for _ in range(PROBE_INTERVAL)]
    assert choices[:-1] == [[0]] * (PROBE_INTERVAL - 1) and choices[-1] == [1] and policy.num_probes == 1
    steps = 0
    while (chosen := policy.choose(fresh, [4])[0]) < 2:  # the new workload keeps every draft it verifies
        if chosen:
            policy.record_verification(chosen, chosen)
        steps += 1
        assert steps < 40 * PROBE_INTERVAL, "drafting never came back"
    assert policy.num_probes >= 2


def test_no_probes_where_even_a_kept_draft_would_not_pay():
    policy = DraftPolicy(drafts_cost_passes=False)
    compute_bound(policy)
    for _ in range(3 * PROBE_INTERVAL):
        assert policy.choose(requests(256, accepted=0, rejections=40), [4] * 256) == [0] * 256
    assert policy.num_probes == 0


@pytest.mark.parametrize("method", ["ngram", "self-int4"])
def test_adaptive_engine_keeps_outputs_and_measures_its_steps(method):
    """With the policy on (the default) outputs stay those of plain decoding,
    and the engine feeds it every step's rows and time."""
    common = dict(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", max_model_len=128)
    plain = LLMEngine(EngineConfig(**common))
    spec = LLMEngine(EngineConfig(**common, speculative_config={"method": method, "num_speculative_tokens": 3}))
    prompts = [[(5 * i + j) % 9 + 3 for j in range(24)] for i in range(6)]
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    assert [r.token_ids for r in spec.generate(prompts, params)] == \
        [r.token_ids for r in plain.generate(prompts, params)]
    policy = spec.core.drafting.policy
    assert policy is not None and policy.step_times.buckets
    assert spec.stats().kv_blocks_used == 0


@pytest.mark.parametrize("cost_passes", [False, True])
def test_prompt_lookup_time_counts_in_the_step_and_draft_passes_do_not(cost_passes):
    """A proposer without draft passes (ngram) spends host time before the step,
    which the policy adds to the step's time; a model drafter's passes are
    timed apart (record_pass), so they are not added again."""
    from types import SimpleNamespace

    from tokenmill.spec.config import parse_speculative_config
    from tokenmill.spec.drafting import Drafting

    drafting = Drafting(parse_speculative_config({"method": "ngram", "num_speculative_tokens": 2}),
                        SimpleNamespace(drafts_cost_passes=cost_passes))
    drafting.propose_seconds = 0.003
    step = SimpleNamespace(num_tokens=8, scheduled=[SimpleNamespace(num_sample_rows=1, num_new_tokens=1)] * 8)
    drafting.record_step(step, 0.002)
    assert drafting.policy.step_times.predict(8) == pytest.approx(0.002 if cost_passes else 0.005)
