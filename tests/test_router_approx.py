"""Approximate mode: overlap predicted from the router's own decisions, with a TTL (cluster/router/approx.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenmill.cluster.router.approx import ApproxIndex


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_recorded_blocks_predict_overlap():
    index = ApproxIndex(10.0, FakeClock())
    index.record("a", [1, 2, 3])
    index.record("b", [1, 5])
    assert index.overlap([1, 2, 3, 4]) == {"a": 3, "b": 1}
    assert index.overlap([2, 3]) == {"a": 2}  # hashes are chained, but the index only sees ints


def test_entries_expire_after_ttl():
    clock = FakeClock()
    index = ApproxIndex(10.0, clock)
    index.record("a", [1, 2])
    clock.now += 9.999
    assert index.overlap([1, 2]) == {"a": 2}
    clock.now += 0.001  # exactly t + ttl: gone
    assert index.overlap([1, 2]) == {}
    assert len(index) == 0
    assert index.hashes_of("a") == frozenset()


def test_recording_again_renews_only_what_was_sent():
    clock = FakeClock()
    index = ApproxIndex(10.0, clock)
    index.record("a", [1, 2, 3])
    clock.now += 6
    index.record("a", [1, 2])  # a shorter request with the same prefix
    clock.now += 6  # 12 s after the first record, 6 after the second
    assert index.overlap([1, 2, 3]) == {"a": 2}
    clock.now += 4
    assert index.overlap([1, 2, 3]) == {}


def test_remove_worker():
    index = ApproxIndex(10.0, FakeClock())
    index.record("a", [1, 2])
    index.record("b", [1])
    index.remove_worker("a")
    assert index.overlap([1, 2]) == {"b": 1}
    assert len(index) == 1
    index.remove_worker("nobody")  # harmless


@pytest.mark.parametrize("ttl", [0.0, -1.0, float("inf"), float("nan")])
def test_ttl_must_be_positive_and_finite(ttl):
    with pytest.raises(ValueError, match="approx_ttl_s"):
        ApproxIndex(ttl)


OPS = st.one_of(
    st.tuples(st.just("record"), st.sampled_from("abc"), st.lists(st.integers(0, 5), max_size=4)),
    st.tuples(st.just("advance"), st.floats(0, 6)),
    st.tuples(st.just("remove"), st.sampled_from("abc")),
)


@given(ops=st.lists(OPS, max_size=25), query=st.lists(st.integers(0, 5), max_size=5))
def test_matches_brute_force_model(ops, query):
    clock = FakeClock(0.0)
    index = ApproxIndex(10.0, clock)
    expiry: dict[tuple[str, int], float] = {}  # (worker, hash) -> expiry time
    for op in ops:
        if op[0] == "record":
            expiry.update({(op[1], h): clock.now + 10.0 for h in op[2]})
            index.record(op[1], op[2])
        elif op[0] == "advance":
            clock.now += op[1]
        else:
            expiry = {k: t for k, t in expiry.items() if k[0] != op[1]}
            index.remove_worker(op[1])
        want = {}
        for worker in "abc":
            n = 0
            while n < len(query) and expiry.get((worker, query[n]), -1.0) > clock.now:
                n += 1
            if n:
                want[worker] = n
        assert index.overlap(query) == want
