"""The Router: worker table, index modes, routing, metrics, config (cluster/router/router.py)."""

from __future__ import annotations

import pytest

from tokenmill.cluster.router import (
    NoWorkerAvailable,
    POLICIES,
    Router,
    RouterConfig,
    WorkerLoad,
    make_policy,
)
from tokenmill.engine.block_hash import hash_full_blocks
from tokenmill.engine.client import EngineStats
from tokenmill.engine.kv_events import BlockStored, KVEventBatch

BS = 16
PROMPT = list(range(1000, 1070))  # 4 full blocks + 6 tokens
HASHES = tuple(hash_full_blocks(PROMPT, BS))


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def router(*names: str, **config) -> Router:
    """Weight 1 unless given: the tests' cost arithmetic reads block for block."""
    r = Router(RouterConfig(**{"overlap_weight": 1.0, **config}), clock=FakeClock())
    for name in names:
        r.add_worker(name)
    return r


def stored_batch(n_blocks: int, first_seq: int = 0) -> KVEventBatch:
    """The worker's engine stored the prompt's first n blocks."""
    event = BlockStored(HASHES[:n_blocks], None, tuple(PROMPT[:n_blocks * BS]), BS)
    return KVEventBatch(first_seq, (event,))


def test_kv_events_route_to_the_worker_holding_the_prefix():
    r = router("a", "b", "c")
    assert r.apply_kv_events("b", stored_batch(3))
    decision = r.route(PROMPT)
    assert (decision.worker_id, decision.overlap_blocks, decision.score) == ("b", 3, 1.0)
    r.release("b", len(PROMPT))  # that request ended
    assert r.route(PROMPT[:40]).worker_id == "b"  # a shorter prompt sharing 2 blocks


def test_routed_requests_count_as_load_until_released():
    """Requests sent to a worker weigh on it at once, queued or not, until they end:
    a burst of one prefix spreads once its queue outweighs the cached prefix."""
    r = router("a", "b")
    r.apply_kv_events("b", stored_batch(4))  # b caches 4 of PROMPT's 4 full blocks (+ a partial one)
    picks = [r.route(PROMPT).worker_id for _ in range(3)]
    # costs (uncached blocks + routed blocks): b 0+0 < a 4+0; then b 0+5 > a 4+0; then b 0+5 < a 4+5
    assert picks == ["b", "a", "b"]
    r.release("b", len(PROMPT))
    r.release("b", len(PROMPT))
    assert r.route(PROMPT).worker_id == "b"


def test_load_updates_move_requests_away():
    r = router("a", "b")
    r.apply_kv_events("b", stored_batch(4))
    r.update_load("b", WorkerLoad(num_running=3, kv_blocks_used=6, kv_blocks_total=100))  # 0 + 6 > 4 + 0
    assert r.route(PROMPT).worker_id == "a"


def test_approximate_mode_learns_from_its_decisions_and_forgets_after_ttl():
    clock = FakeClock()
    r = Router(RouterConfig(kv_events=False, approx_ttl_s=30.0), clock=clock)
    r.add_worker("a")
    r.add_worker("b")
    assert r.route(PROMPT).worker_id == "a"  # all tied: table order
    r.release("a", len(PROMPT))  # each request here ends before the next one comes
    r.update_load("a", WorkerLoad(kv_blocks_used=2))
    clock.now = 29.0
    assert (r.route(PROMPT).worker_id, r.metrics.last_overlap_blocks) == ("a", 4)  # 0 + 2 < 4 + 0; renews
    r.release("a", len(PROMPT))
    clock.now = 59.0  # 30 s after the renewal: expired
    decision = r.route(PROMPT)
    assert (decision.worker_id, decision.overlap_blocks) == ("b", 0)  # a: 4 + 2 > b: 4 + 0
    with pytest.raises(ValueError, match="kv_events"):
        r.apply_kv_events("a", stored_batch(1))


def test_dead_workers_never_chosen_and_leave_the_index():
    r = router("a", "b")
    r.apply_kv_events("b", stored_batch(4))
    r.mark_dead("b")
    assert {r.route(PROMPT).worker_id for _ in range(5)} == {"a"}
    assert not r.apply_kv_events("b", stored_batch(4, first_seq=1))  # a dead worker's late batch is dropped
    assert r.index.overlap(HASHES) == {}
    r.mark_alive("b")
    assert r.apply_kv_events("b", stored_batch(2, first_seq=0))  # restarted: relearns from scratch
    assert r.route(PROMPT).worker_id == "b"


def test_removed_worker_and_no_live_worker():
    r = router("a", "b")
    r.apply_kv_events("a", stored_batch(4))
    r.remove_worker("a")
    assert [w.worker_id for w in r.workers] == ["b"]
    assert not r.apply_kv_events("a", stored_batch(4, first_seq=1))  # unknown now: dropped
    assert r.index.overlap(HASHES) == {}
    r.mark_dead("b")
    with pytest.raises(NoWorkerAvailable):
        r.route(PROMPT)
    with pytest.raises(NoWorkerAvailable):
        router().route(PROMPT)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_routes_and_reports_overlap(policy):
    r = router("a", "b", policy=policy)
    r.apply_kv_events("a", stored_batch(4))
    r.apply_kv_events("b", stored_batch(2))
    decisions = [r.route(PROMPT) for _ in range(6)]
    for d in decisions:
        assert d.overlap_blocks == {"a": 4, "b": 2}[d.worker_id]  # filled in for cache-blind policies too
    assert sum(r.metrics.decisions.values()) == 6
    assert all(name == r.policy.name == policy for name, _ in r.metrics.decisions)
    assert sum(r.metrics.overlap_blocks.values()) == 6


def test_metrics_count_decisions_per_worker_and_overlap_histogram():
    r = router("a", "b", policy="round-robin")
    r.apply_kv_events("a", stored_batch(4))
    for _ in range(4):
        r.route(PROMPT)
    assert r.metrics.decisions == {("round-robin", "a"): 2, ("round-robin", "b"): 2}
    assert r.metrics.overlap_blocks == {4: 2, 0: 2}
    assert r.metrics.last_overlap_blocks == 0


def test_short_prompt_has_no_blocks():
    r = router("a", "b")
    decision = r.route([1, 2, 3], session="someone")
    assert decision.overlap_blocks == 0
    with pytest.raises(ValueError, match="token_ids"):
        r.route([])


def test_worker_table_errors():
    r = router("a")
    with pytest.raises(ValueError, match="worker_id"):
        r.add_worker("a")
    for call in (r.remove_worker, r.mark_dead, r.mark_alive):
        with pytest.raises(ValueError, match="worker_id"):
            call("nobody")
    with pytest.raises(ValueError, match="worker_id"):
        r.update_load("nobody", WorkerLoad())


def test_worker_load_from_engine_stats():
    stats = EngineStats(num_running=3, num_waiting=2, kv_blocks_total=64, kv_blocks_used=40, prefix_cache_queries=0,
                        prefix_cache_hits=0, num_preemptions=0, prompt_tokens=0, generation_tokens=0,
                        prefill_tokens_queued=128)
    assert WorkerLoad.from_stats(stats) == WorkerLoad(3, 2, 40, 64, 128)
    with pytest.raises(ValueError, match="kv_blocks_used"):
        WorkerLoad(kv_blocks_used=65, kv_blocks_total=64)
    with pytest.raises(ValueError, match="num_waiting"):
        WorkerLoad(num_waiting=-1)


@pytest.mark.parametrize("field, value", [
    ("policy", "fastest"), ("overlap_weight", -1.0), ("temperature", float("nan")), ("block_size", 0),
    ("block_size", 1.5), ("approx_ttl_s", 0.0), ("seed", "x"), ("kv_events", 1),
])
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        RouterConfig(**{field: value})


def test_make_policy_registry():
    assert make_policy("least-loaded").name == "least-loaded"
    with pytest.raises(ValueError, match="choose one of kv, least-loaded, random, round-robin"):
        make_policy("fastest")
    with pytest.raises(ValueError, match="round-robin"):
        make_policy("round-robin", seed=1)
    with pytest.raises(ValueError, match="kv"):
        make_policy("kv")  # needs its index
