"""Scheduler on integer prompts: the 'model' is a counter that returns token 7."""

from tokenmill.engine.block_pool import BlockPool
from tokenmill.engine.kv_cache_manager import KVCacheManager
from tokenmill.engine.request import Request, RequestStatus
from tokenmill.engine.scheduler import Scheduler
from tokenmill.sampling_params import SamplingParams


def make(num_blocks=64, block_size=4, max_seqs=8, budget=32, prefix=True):
    pool = BlockPool(num_blocks, block_size)
    kv = KVCacheManager(pool, prefix)
    return pool, kv, Scheduler(kv, max_seqs, budget)


def req(rid, n_prompt, max_tokens=4, first=0):
    return Request(rid, list(range(first, first + n_prompt)), SamplingParams(max_tokens=max_tokens),
                   eos_token_ids=frozenset())


def run_step(sched):
    out = sched.schedule()
    sampled = {s.request.request_id: 7 for s in out.scheduled if s.samples}
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
    sched.update(out, {"a": 7})
    assert b.num_computed_tokens == 7 and b.num_output_tokens == 0
    drain(sched, pool)
    assert a.status is RequestStatus.FINISHED_LENGTH and a.output_token_ids == [7] * 6
    assert b.output_token_ids == [7, 7]
    assert pool.num_free_blocks == pool.num_blocks


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
