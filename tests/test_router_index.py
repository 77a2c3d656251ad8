"""The global KV index: mirroring KV events, prefix overlap, gaps (cluster/router/index.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tokenmill.cluster.router.index import KVIndex
from tokenmill.engine.block_hash import hash_full_blocks
from tokenmill.engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch


def stored(*hashes: int, parent: int | None = None) -> BlockStored:
    return BlockStored(tuple(hashes), parent, tuple(hashes), 1)  # block_size 1: one token per block


def feed(index: KVIndex, worker, *events, first_seq: int | None = None, dropped: int = 0) -> bool:
    """Apply events as the worker's next batch (or at an explicit sequence number)."""
    seq = index.expected_seq(worker) if first_seq is None else first_seq
    return index.apply(worker, KVEventBatch(seq, tuple(events), dropped))


def test_overlap_counts_leading_blocks_and_stops_at_first_miss():
    index = KVIndex()
    feed(index, "a", stored(1, 2, 3))
    feed(index, "b", stored(1), stored(3, 4))  # holds 3 but not 2: only block 1 is usable
    assert index.overlap([1, 2, 3, 4]) == {"a": 3, "b": 1}
    assert index.overlap([9, 1]) == {}  # nobody holds the first block
    assert index.overlap([]) == {}


def test_chained_hashes_of_a_real_prompt():
    prompt = list(range(100))
    hashes = hash_full_blocks(prompt, 16)  # 6 full blocks
    index = KVIndex()
    feed(index, "w", BlockStored(tuple(hashes[:4]), None, tuple(prompt[:64]), 16))
    assert index.overlap(hashes) == {"w": 4}
    other = hash_full_blocks([7] + prompt[1:], 16)  # first token differs: every chained hash differs
    assert index.overlap(other) == {}


def test_removed_and_cleared():
    index = KVIndex()
    feed(index, "a", stored(1, 2, 3))
    feed(index, "b", stored(1, 2))
    feed(index, "a", BlockRemoved((2,)))
    assert index.overlap([1, 2, 3]) == {"a": 1, "b": 2}
    feed(index, "b", AllBlocksCleared())
    assert index.overlap([1, 2, 3]) == {"a": 1}
    assert index.holders(2) == frozenset()
    feed(index, "a", BlockRemoved((42,)))  # removing what it does not hold is harmless
    assert index.hashes_of("a") == {1, 3}


def test_in_order_batches_are_not_gaps():
    index = KVIndex()
    assert not index.apply("a", KVEventBatch(0, (stored(1), stored(2))))
    assert not index.apply("a", KVEventBatch(2, ()))  # an empty batch keeps the sequence
    assert not index.apply("a", KVEventBatch(2, (stored(3),)))
    assert index.hashes_of("a") == {1, 2, 3}
    assert index.gaps["a"] == 0


def test_dropped_events_clear_the_worker_then_apply_the_batch():
    index = KVIndex()
    feed(index, "a", stored(1, 2))
    feed(index, "b", stored(1, 2))
    assert feed(index, "a", stored(7), first_seq=5, dropped=3)  # 3 events lost before seq 5
    assert index.hashes_of("a") == {7}
    assert index.hashes_of("b") == {1, 2}  # other workers untouched
    assert index.gaps == {"a": 1}
    assert not feed(index, "a", stored(8), first_seq=6)  # back in step
    assert index.hashes_of("a") == {7, 8}


def test_skipped_sequence_number_is_a_gap():
    index = KVIndex()
    feed(index, "a", stored(1, 2))  # seq 0; next expected 1
    assert feed(index, "a", stored(3), first_seq=4)  # a batch of seqs 1..3 never arrived
    assert index.hashes_of("a") == {3}


def test_restarted_worker_starting_again_at_zero_is_a_gap():
    index = KVIndex()
    feed(index, "a", stored(1), stored(2))
    assert feed(index, "a", stored(5), first_seq=0)
    assert index.hashes_of("a") == {5}


def test_first_batch_expected_at_zero():
    index = KVIndex()
    assert index.apply("late", KVEventBatch(10, (stored(1),)))  # joined late: the mirror knows it missed some
    assert index.hashes_of("late") == {1}


def test_remove_worker_forgets_blocks_and_sequence():
    index = KVIndex()
    feed(index, "a", stored(1, 2))
    feed(index, "b", stored(1))
    index.remove_worker("a")
    assert index.overlap([1, 2]) == {"b": 1}
    assert not index.apply("a", KVEventBatch(0, (stored(4),)))  # a fresh start at 0 is no gap


# ---- consistency under interleaved events, against a brute-force model ------------------

WORKERS = st.sampled_from(["w0", "w1", "w2"])
HASHES = st.integers(0, 7)
EVENTS = st.one_of(
    st.lists(HASHES, min_size=1, max_size=4).map(lambda hs: stored(*hs)),
    st.lists(HASHES, min_size=1, max_size=4).map(lambda hs: BlockRemoved(tuple(hs))),
    st.just(AllBlocksCleared()),
)
OPS = st.one_of(
    st.tuples(st.just("batch"), WORKERS, st.lists(EVENTS, max_size=4),
              st.sampled_from(["next", "next", "skip", "dropped", "restart"])),
    st.tuples(st.just("remove"), WORKERS),
)


class Model:
    """Per worker a plain set of hashes, and the next sequence number expected."""

    def __init__(self):
        self.held: dict[str, set[int]] = {}
        self.next_seq: dict[str, int] = {}

    def apply(self, worker: str, batch: KVEventBatch) -> None:
        held = self.held.setdefault(worker, set())
        if batch.dropped or batch.first_seq != self.next_seq.get(worker, 0):
            held.clear()
        for e in batch.events:
            if isinstance(e, BlockStored):
                held.update(e.block_hashes)
            elif isinstance(e, BlockRemoved):
                held.difference_update(e.block_hashes)
            else:
                held.clear()
        self.next_seq[worker] = batch.first_seq + len(batch.events)

    def remove(self, worker: str) -> None:
        self.held.pop(worker, None)
        self.next_seq.pop(worker, None)

    def overlap(self, query: list[int]) -> dict[str, int]:
        out = {}
        for worker, held in self.held.items():
            n = 0
            while n < len(query) and query[n] in held:
                n += 1
            if n:
                out[worker] = n
        return out


def make_batch(model: Model, worker: str, events: list, kind: str) -> KVEventBatch:
    expected = model.next_seq.get(worker, 0)
    first_seq, dropped = {"next": (expected, 0), "skip": (expected + 2, 0),
                          "dropped": (expected + 1, 1), "restart": (0, 0)}[kind]
    return KVEventBatch(first_seq, tuple(events), dropped)


@given(ops=st.lists(OPS, max_size=30), queries=st.lists(st.lists(HASHES, max_size=6), min_size=1, max_size=4))
def test_index_matches_brute_force_model(ops, queries):
    index, model = KVIndex(), Model()
    for op in ops:
        if op[0] == "batch":
            _, worker, events, kind = op
            batch = make_batch(model, worker, events, kind)
            index.apply(worker, batch)
            model.apply(worker, batch)
        else:
            index.remove_worker(op[1])
            model.remove(op[1])
        for worker in ("w0", "w1", "w2"):
            assert index.hashes_of(worker) == model.held.get(worker, set())
        for h in range(8):
            assert index.holders(h) == {w for w, held in model.held.items() if h in held}
        for query in queries:
            assert index.overlap(query) == model.overlap(query)
