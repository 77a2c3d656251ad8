"""engine/gc_heap.py: the startup heap out of the collector's walk, and the
pause log that `tokenmill bench` reports."""

from __future__ import annotations

import gc

from tokenmill.engine.gc_heap import GcPauseLog, freeze_startup_heap, unfreeze_heap


def _tracked(obj) -> bool:
    """Whether a collection would walk ``obj`` (frozen objects are in no generation)."""
    return any(o is obj for o in gc.get_objects())


def test_frozen_objects_leave_the_collectors_walk_until_unfrozen():
    marker = [object()]  # a tracked container alive at the freeze
    assert _tracked(marker)
    before = gc.get_freeze_count()
    try:
        frozen = freeze_startup_heap()
        assert frozen > before  # (refcounting may free a frozen object or two afterwards)
        assert not _tracked(marker)
        later = [object()]  # created after the freeze: still collected as usual
        assert _tracked(later)
    finally:
        unfreeze_heap()
    assert gc.get_freeze_count() == 0
    assert _tracked(marker)


def test_reference_cycles_made_garbage_while_frozen_are_collected_after_unfreeze():
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the collector frees it
    freeze_startup_heap()
    try:
        del a, b
        gc.collect()
        assert sum(isinstance(o, Node) for o in gc.get_objects()) == 0  # frozen: not walked, not freed
    finally:
        unfreeze_heap()
    assert sum(isinstance(o, Node) for o in gc.get_objects()) == 2
    gc.collect()
    assert sum(isinstance(o, Node) for o in gc.get_objects()) == 0


def test_pause_log_records_each_collection_with_its_generation_and_length():
    with GcPauseLog() as log:
        gc.collect(2)
        gc.collect(0)
    assert log._callback not in gc.callbacks  # removed on exit
    generations = [g for g, _, _ in log.pauses]
    assert generations[-2:] == [2, 0]
    assert all(seconds >= 0 for _, _, seconds in log.pauses)
    summary = log.summary()
    assert summary["gen2"]["collections"] >= 1
    assert summary["gen2"]["max_ms"] <= summary["gen2"]["total_ms"]
    start = log.pauses[0][1]
    assert log.stalls(since_unix=start, min_ms=0.0)[0][:2] == [log.pauses[0][0], 0.0]
    assert log.stalls(since_unix=start, min_ms=1e9) == []  # nothing lasts 1,000 s
