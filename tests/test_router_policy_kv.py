"""kv policy: uncached prefill vs decode load (cluster/router/policies/kv.py)."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from tokenmill.cluster.router.index import KVIndex
from tokenmill.cluster.router.policies.kv import KvPolicy, kv_cost, session_pick
from tokenmill.cluster.router.types import NoWorkerAvailable, RouteRequest, WorkerLoad, WorkerState
from tokenmill.engine.block_hash import hash_full_blocks
from tokenmill.engine.kv_events import BlockStored, KVEventBatch

BS = 16
PROMPT = list(range(70))  # 4 full blocks + 6 tokens
HASHES = tuple(hash_full_blocks(PROMPT, BS))
REQUEST = RouteRequest(HASHES, len(PROMPT))


def index_with(**held_blocks: int) -> KVIndex:
    """An index where each named worker holds the prompt's first n blocks."""
    index = KVIndex()
    for worker, n in held_blocks.items():
        index.apply(worker, KVEventBatch(0, (BlockStored(HASHES[:n], None, tuple(PROMPT[:n * BS]), BS),)))
    return index


def worker(name: str, used: int = 0, alive: bool = True) -> WorkerState:
    return WorkerState(name, WorkerLoad(kv_blocks_used=used, kv_blocks_total=1000), alive)


def test_cost_formula():
    assert kv_cost(4, 1, WorkerLoad(kv_blocks_used=7), overlap_weight=2.0) == 2.0 * (4 - 1) + 7


def test_goes_to_the_worker_holding_the_prefix():
    policy = KvPolicy(index_with(b=4, c=2))
    decision = policy.choose(REQUEST, [worker("a"), worker("b"), worker("c")])
    assert (decision.worker_id, decision.overlap_blocks, decision.score) == ("b", 4, 0.0)


def test_moves_away_when_load_outweighs_overlap():
    policy = KvPolicy(index_with(b=4), overlap_weight=1.0)
    # b: 0 uncached + 3 used = 3 < a: 4 uncached + 0 used -> stays on b
    assert policy.choose(REQUEST, [worker("a"), worker("b", used=3)]).worker_id == "b"
    # b: 0 + 5 = 5 > a: 4 + 0 -> the load term wins
    decision = policy.choose(REQUEST, [worker("a"), worker("b", used=5)])
    assert (decision.worker_id, decision.overlap_blocks, decision.score) == ("a", 0, 4.0)
    # a heavier overlap weight makes the cache worth more: b: 5 < a: 2 * 4
    heavy = KvPolicy(policy.index, overlap_weight=2.0)
    assert heavy.choose(REQUEST, [worker("a"), worker("b", used=5)]).worker_id == "b"
    # the default weight (4): b: 0 + 15 = 15 < a: 4 * 4 = 16 -> stays; one block more -> moves
    default = KvPolicy(policy.index)
    assert default.choose(REQUEST, [worker("a"), worker("b", used=15)]).worker_id == "b"
    assert default.choose(REQUEST, [worker("a"), worker("b", used=17)]).worker_id == "a"


def test_temperature_spreads_choices_by_softmax():
    policy = KvPolicy(index_with(), temperature=2.0, seed=1)
    workers = [worker("a", used=10), worker("b", used=11), worker("c", used=12), worker("far", used=100)]
    n = 4000
    counts = Counter(policy.choose(REQUEST, workers).worker_id for _ in range(n))
    weights = [math.exp(-k / 2.0) for k in (0, 1, 2)]
    for name, w in zip("abc", weights):
        assert abs(counts[name] / n - w / sum(weights)) < 0.03, counts
    assert counts["far"] == 0  # e^-44 relative weight


def test_temperature_sampling_is_seeded():
    workers = [worker("a", used=10), worker("b", used=11), worker("c", used=12)]

    def run(seed: int) -> list:
        policy = KvPolicy(index_with(), temperature=2.0, seed=seed)
        return [policy.choose(REQUEST, workers).worker_id for _ in range(40)]

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_temperature_zero_is_argmin():
    policy = KvPolicy(index_with(), temperature=0.0)
    workers = [worker("a", used=10), worker("b", used=9), worker("c", used=12)]
    assert {policy.choose(REQUEST, workers).worker_id for _ in range(50)} == {"b"}


def test_session_tie_break_is_stable_and_spreads_sessions():
    workers = [worker(name) for name in "abcd"]  # all tied: nothing cached, no load
    policy = KvPolicy(index_with())
    alice = {policy.choose(RouteRequest(HASHES, 70, "alice"), workers).worker_id for _ in range(20)}
    alice |= {KvPolicy(index_with()).choose(RouteRequest(HASHES, 70, "alice"), workers).worker_id}
    assert alice == {"abcd"[session_pick("alice", 4)]}
    spread = {policy.choose(RouteRequest(HASHES, 70, f"user{i}"), workers).worker_id for i in range(40)}
    assert len(spread) >= 3
    assert policy.choose(REQUEST, workers).worker_id == "a"  # no session: table order


def test_session_only_breaks_ties():
    workers = [worker("a", used=1), worker("b"), worker("c", used=1)]
    policy = KvPolicy(index_with())
    assert {policy.choose(RouteRequest(HASHES, 70, f"u{i}"), workers).worker_id for i in range(20)} == {"b"}


def test_session_pick_is_stable_across_processes():
    # pinned values: a per-process salted hash() would change these from run to run
    assert [session_pick(s, 4) for s in ("alice", "bob", "carol")] == [1, 0, 1]
    assert session_pick("alice", 1000003) == 783082


def test_dead_worker_never_chosen_even_with_the_whole_prefix():
    policy = KvPolicy(index_with(b=4), temperature=0.5, seed=3)
    workers = [worker("a", used=50), worker("b", alive=False)]
    assert {policy.choose(REQUEST, workers).worker_id for _ in range(100)} == {"a"}
    with pytest.raises(NoWorkerAvailable):
        policy.choose(REQUEST, workers[1:])


@pytest.mark.parametrize("field, value", [("overlap_weight", -1.0), ("temperature", -0.1),
                                          ("temperature", float("inf"))])
def test_bad_options(field, value):
    with pytest.raises(ValueError, match=field):
        KvPolicy(KVIndex(), **{field: value})
