"""Scheduler on integer prompts: the 'model' is a counter that returns token 7."""

import pytest

from tokenmill.engine.block_pool import BlockPool
from tokenmill.engine.kv_cache_manager import KVCacheManager
from tokenmill.engine.request import Request, RequestStatus
from tokenmill.engine.scheduler import Scheduler
from tokenmill.sampling_params import SamplingParams


def make(num_blocks=64, block_size=4, max_seqs=8, budget=32, prefix=True, chunked=True):
    pool = BlockPool(num_blocks, block_size)
    kv = KVCacheManager(pool, prefix)
    return pool, kv, Scheduler(kv, max_seqs, budget, chunked)


def req(rid, n_prompt, max_tokens=4, first=0):
    return Request(rid, list(range(first, first + n_prompt)), SamplingParams(max_tokens=max_tokens),
                   eos_token_ids=frozenset())


def run_step(sched):
    out = sched.schedule()
    sampled = {s.request.request_id: [7] for s in out.scheduled if s.samples}
    sched.update(out, sampled)
    return out


def drain(sched, pool, limit=500):
    steps = 0
    while sched.has_work():
        out = run_step(sched)
        assert out.num_tokens <= sched.max_num_batched_tokens
        assert len(sched.running) <= sched.max_num_seqs
        pool.check_invariants()
        steps += 1
        assert steps < limit, "scheduler made no progress"
    return steps


def test_chunked_prefill_mixes_with_decodes():
    pool, kv, sched = make(budget=8)
    a, b = req("a", 3, max_tokens=6), req("b", 20, max_tokens=2)
    sched.add(a)
    run_step(sched)  # a prefilled, sampled its first token
    sched.add(b)
    out = sched.schedule()
    sizes = {s.request.request_id: s.num_new_tokens for s in out.scheduled}
    assert sizes == {"a": 1, "b": 7}  # a decodes, b gets the rest of the budget
    assert not [s for s in out.scheduled if s.request is b][0].samples
    sched.update(out, {"a": [7]})
    assert b.num_computed_tokens == 7 and b.num_output_tokens == 0
    drain(sched, pool)
    assert a.status is RequestStatus.FINISHED_LENGTH and a.output_token_ids == [7] * 6
    assert b.output_token_ids == [7, 7]
    assert pool.num_free_blocks == pool.num_blocks


def test_prefill_tokens_queued_counts_prompt_tokens_not_yet_computed():
    pool, kv, sched = make(budget=8)
    a, b = req("a", 3, max_tokens=6), req("b", 20, max_tokens=2)
    sched.add(a)
    sched.add(b)
    assert sched.num_prefill_tokens_queued() == 23  # nothing computed yet
    run_step(sched)  # a's 3 tokens and 5 of b's
    assert sched.num_prefill_tokens_queued() == 15  # a decodes (its 1 pending token is not prefill)
    run_step(sched)
    assert sched.num_prefill_tokens_queued() == 8
    drain(sched, pool)
    assert sched.num_prefill_tokens_queued() == 0


def test_max_num_seqs_and_budget_respected():
    pool, kv, sched = make(max_seqs=3, budget=10)
    reqs = [req(str(i), 5, max_tokens=3, first=100 * i) for i in range(7)]
    for r in reqs:
        sched.add(r)
    drain(sched, pool)
    assert all(r.status is RequestStatus.FINISHED_LENGTH for r in reqs)
    assert all(c == 0 for c in pool.ref_cnt)


def test_preemption_under_block_pressure_recovers():
    # 10 blocks of 4 = 40 slots; 4 requests that grow to 18 tokens each cannot all fit.
    pool, kv, sched = make(num_blocks=10, block_size=4, budget=64, prefix=False)
    reqs = [req(str(i), 6, max_tokens=12, first=50 * i) for i in range(4)]
    for r in reqs:
        sched.add(r)
    drain(sched, pool)
    assert sched.num_preemptions > 0
    assert all(r.output_token_ids == [7] * 12 for r in reqs)
    assert pool.num_free_blocks == 10 and all(c == 0 for c in pool.ref_cnt)


def test_prefix_hit_sets_computed_tokens():
    pool, kv, sched = make(block_size=4)
    a = req("a", 10, max_tokens=1)
    sched.add(a)
    drain(sched, pool)
    b = Request("b", list(range(10)) + [500, 501], SamplingParams(max_tokens=1))
    sched.add(b)
    out = sched.schedule()
    (s,) = out.scheduled
    assert s.start == 8 and s.num_new_tokens == 4 and b.num_cached_tokens == 8
    assert kv.hits == 8


def test_finish_frees_waiting_and_running():
    pool, kv, sched = make(max_seqs=1)
    a, b = req("a", 5, max_tokens=50), req("b", 5, first=9)
    sched.add(a)
    sched.add(b)
    run_step(sched)
    assert sched.finish_requests(["a", "b"], RequestStatus.FINISHED_ABORTED) == [a, b]
    assert not sched.has_work() and pool.num_free_blocks == pool.num_blocks and not sched.requests
    assert sched.finish_requests(["a", "unknown"], RequestStatus.FINISHED_STOPPED) == []  # idempotent
    assert a.status is RequestStatus.FINISHED_ABORTED


def test_stop_token_and_eos():
    pool, kv, sched = make()
    a = Request("a", [1, 2, 3], SamplingParams(max_tokens=10), eos_token_ids=frozenset({7}))
    b = Request("b", [1, 2, 3], SamplingParams(max_tokens=3, ignore_eos=True), eos_token_ids=frozenset({7}))
    c = Request("c", [4, 5], SamplingParams(max_tokens=10, stop_token_ids=[7]))
    for r in (a, b, c):
        sched.add(r)
    drain(sched, pool)
    assert a.status is RequestStatus.FINISHED_STOPPED and a.output_token_ids == [7] and a.stop_reason == 7
    assert b.status is RequestStatus.FINISHED_LENGTH and b.num_output_tokens == 3
    assert c.status is RequestStatus.FINISHED_STOPPED and c.stop_reason == 7


def test_max_model_len_ends_with_length():
    pool, kv, sched = make()
    a = Request("a", [1, 2, 3], SamplingParams(max_tokens=100), max_model_len=8)
    sched.add(a)
    drain(sched, pool)
    assert a.status is RequestStatus.FINISHED_LENGTH and a.num_tokens == 8


# ---- several tokens per request per step (draft tokens) ----------------------------


def decode_with_drafts(sched, request, drafts, sampled):
    """One step in which ``request`` verifies ``drafts``; ``sampled`` is the
    verified run update() receives. Returns (scheduled entry, advanced)."""
    request.draft_token_ids = list(drafts)
    out = sched.schedule()
    entry = next(s for s in out.scheduled if s.request is request)
    return entry, sched.update(out, {request.request_id: sampled})


def test_drafts_are_scheduled_after_the_last_token_and_sampled_per_row():
    pool, kv, sched = make()
    a = req("a", 20, max_tokens=30)
    sched.add(a)
    run_step(sched)  # prefill + first token (7)
    entry, advanced = decode_with_drafts(sched, a, [8, 9, 10], [8, 9, 11])  # 2 accepted, then the model's 11
    assert (entry.start, entry.num_new_tokens, entry.num_draft_tokens, entry.num_sample_rows) == (20, 4, 3, 4)
    assert advanced == [(a, 3)] and a.output_token_ids == [7, 8, 9, 11]
    # K/V is valid for the real token and the 2 accepted drafts, not the rejected third.
    assert a.num_computed_tokens == 23 and a.num_tokens == 24 and a.draft_token_ids == []
    entry, advanced = decode_with_drafts(sched, a, [1, 2], [1, 2, 3])  # all accepted + the bonus token
    assert advanced == [(a, 3)] and a.num_computed_tokens == 26 and a.output_token_ids[-3:] == [1, 2, 3]


def test_multi_token_update_stops_at_the_right_token():
    pool, kv, sched = make()
    eos = Request("eos", [1, 2, 3], SamplingParams(max_tokens=20), eos_token_ids=frozenset({5}))
    stop = Request("stop", [4, 5, 6], SamplingParams(max_tokens=20, stop_token_ids=[9]))
    length = Request("length", [7, 8], SamplingParams(max_tokens=4, ignore_eos=True), eos_token_ids=frozenset({5}))
    for r in (eos, stop, length):
        sched.add(r)
    run_step(sched)  # all three prefill and sample 7
    _, advanced = decode_with_drafts(sched, eos, [3, 5, 6], [3, 5])  # EOS is the second token: stop there
    assert advanced == [(eos, 2)] and eos.output_token_ids == [7, 3, 5]
    assert eos.status is RequestStatus.FINISHED_STOPPED and eos.stop_reason == 5
    _, advanced = decode_with_drafts(sched, stop, [9, 1, 2], [9, 1, 2, 3])  # the stop id is the first draft
    assert advanced == [(stop, 1)] and stop.output_token_ids == [7, 9] and stop.stop_reason == 9
    _, advanced = decode_with_drafts(sched, length, [5, 1, 2], [5, 1, 2, 3])  # max_tokens=4 after 3 more
    assert advanced == [(length, 3)] and length.output_token_ids == [7, 5, 1, 2]
    assert length.status is RequestStatus.FINISHED_LENGTH
    assert not sched.has_work() and pool.num_free_blocks == pool.num_blocks


def test_drafts_respect_budget_and_context_and_bad_runs_are_refused():
    pool, kv, sched = make(budget=3)
    a = Request("a", [1, 2], SamplingParams(max_tokens=50))
    sched.add(a)
    run_step(sched)  # 3 tokens, 1 output
    entry, _ = decode_with_drafts(sched, a, [4, 4, 4, 4], [4, 4, 4])  # budget 3: the last token + 2 drafts
    assert entry.num_draft_tokens == 2 and a.num_tokens == 6 and a.num_computed_tokens == 5
    pool, kv, sched = make(budget=32)
    b = Request("b", [1, 2], SamplingParams(max_tokens=50), max_model_len=6)
    sched.add(b)
    run_step(sched)
    b.draft_token_ids = [4, 4, 4, 4]
    out = sched.schedule()
    assert out.scheduled[0].num_draft_tokens == 2  # each draft leaves room for the token after it
    with pytest.raises(ValueError, match="sampled"):
        sched.update(out, {"b": [5, 4, 4]})  # a run that does not follow the drafts
    sched.update(out, {"b": [4, 4, 4]})
    assert b.num_tokens == 6 and b.status is RequestStatus.FINISHED_LENGTH


def test_without_chunked_prefill_a_prompt_waits_whole_for_a_step_with_room():
    pool, kv, sched = make(budget=12, chunked=False)
    a, b, c = req("a", 3, max_tokens=6), req("b", 11, max_tokens=2, first=100), req("c", 2, max_tokens=2, first=200)
    sched.add(a)
    run_step(sched)  # a prefilled: it decodes from now on, one token a step
    sched.add(b)
    sched.add(c)
    out = run_step(sched)
    # a's decode leaves 11 of 12: b fits whole. (Chunked, it would have taken the same 11.)
    assert {s.request.request_id: s.num_new_tokens for s in out.scheduled} == {"a": 1, "b": 11}
    d = req("d", 11, max_tokens=2, first=300)
    sched.add(d)
    out = run_step(sched)
    # a and b decode (2 tokens) and c's 2 tokens fit, but d's 11 do not fit the 8 left: it waits, unchunked.
    assert {s.request.request_id: s.num_new_tokens for s in out.scheduled} == {"a": 1, "b": 1, "c": 2}
    assert d.num_computed_tokens == 0 and sched.waiting[0] is d
    drain(sched, pool)
    assert d.output_token_ids == [7, 7] and pool.num_free_blocks == pool.num_blocks


@pytest.mark.parametrize("budget, d_tokens", [(12, 11), (8, 7)])
def test_chunked_prefill_splits_the_prompt_that_waits_unchunked(budget, d_tokens):
    pool, kv, sched = make(budget=budget)
    a, d = req("a", 3, max_tokens=6), req("d", 11, max_tokens=2, first=300)
    sched.add(a)
    run_step(sched)
    sched.add(d)
    out = run_step(sched)
    # d takes what a's decode leaves: all of it at 12, a 7-token chunk at 8.
    assert {s.request.request_id: s.num_new_tokens for s in out.scheduled} == {"a": 1, "d": d_tokens}


def test_prefix_lookup_counted_once_per_admission_not_per_step_waited():
    # Whole prompts: b waits at the head of the queue while a decodes in a
    # step with no room for it; the hit-rate stats count its lookup once.
    pool, kv, sched = make(budget=12, chunked=False)
    first = req("first", 8, max_tokens=1)
    sched.add(first)
    drain(sched, pool)  # its two blocks are cached
    assert (kv.queries, kv.hits) == (8, 0)
    a, b = req("a", 11, max_tokens=6, first=50), req("b", 20, max_tokens=1)
    sched.add(a)
    run_step(sched)  # a admitted and prefilled
    sched.add(b)  # b's first 8 tokens are cached: 12 to compute, 1 more than a decode leaves
    waited = 0
    while b.status is RequestStatus.WAITING:
        run_step(sched)
        waited += 1
    assert waited > 1
    assert (kv.queries, kv.hits) == (8 + 11 + 20, 8)
    drain(sched, pool)
    assert (kv.queries, kv.hits) == (8 + 11 + 20, 8)
