"""Block pool and KV cache manager on integer prompts (no model)."""

import pytest

from tokenmill.engine.block_hash import hash_block, hash_full_blocks
from tokenmill.engine.block_pool import BlockPool
from tokenmill.engine.kv_cache_manager import KVCacheManager
from tokenmill.engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from tokenmill.engine.request import Request
from tokenmill.sampling_params import SamplingParams


def make_request(rid, tokens):
    return Request(rid, list(tokens), SamplingParams(max_tokens=4))


def compute_all(kv, req):
    """Pretend the model computed every token the request holds blocks for."""
    req.num_computed_tokens = req.num_tokens
    kv.cache_computed_blocks(req)


def test_hash_chain_depends_on_parent_and_tokens():
    a = hash_full_blocks(list(range(8)), 4)
    b = hash_full_blocks([0, 1, 2, 3, 9, 5, 6, 7], 4)
    assert a[0] == b[0] and a[1] != b[1]
    assert a[1] == hash_block(a[0], [4, 5, 6, 7])
    assert hash_block(None, [4, 5, 6, 7]) != a[1]  # same tokens, different parent
    assert len(hash_full_blocks(list(range(11)), 4)) == 2  # partial block not hashed


def test_allocate_release_refcounts_return_to_zero():
    pool = BlockPool(8, 4)
    kv = KVCacheManager(pool)
    reqs = [make_request(str(i), range(i * 10, i * 10 + 6)) for i in range(3)]
    for r in reqs:
        assert kv.allocate(r, r.num_tokens)
    assert pool.num_free_blocks == 8 - 6
    pool.check_invariants()
    for r in reqs:
        kv.free(r)
    assert pool.num_free_blocks == 8
    assert all(c == 0 for c in pool.ref_cnt)
    pool.check_invariants()


def test_allocate_fails_without_side_effects():
    pool = BlockPool(2, 4)
    kv = KVCacheManager(pool)
    r = make_request("a", range(12))
    assert not kv.allocate(r, 12)
    assert pool.num_free_blocks == 2 and "a" not in kv.blocks


def test_prefix_hit_shares_blocks_and_keeps_last_token():
    pool = BlockPool(16, 4)
    kv = KVCacheManager(pool)
    a = make_request("a", range(10))
    assert kv.allocate(a, 10)
    compute_all(kv, a)
    b = make_request("b", list(range(8)) + [99, 98, 97])
    prefix = kv.find_prefix(b)
    assert prefix == kv.blocks["a"][:2]
    assert kv.allocate(b, b.num_tokens - 8, prefix)
    assert pool.ref_cnt[prefix[0]] == 2 and pool.ref_cnt[prefix[1]] == 2
    # A prompt that is exactly the cached blocks still recomputes its last block.
    c = make_request("c", range(8))
    assert len(kv.find_prefix(c)) == 1
    kv.free(a)
    kv.free(b)
    pool.check_invariants()
    assert all(x == 0 for x in pool.ref_cnt)


def test_freed_cached_blocks_still_hit_until_evicted_lru():
    pool = BlockPool(4, 2)
    pool.subscribe_events()
    kv = KVCacheManager(pool, enable_prefix_caching=True)
    a = make_request("a", [1, 2, 3, 4])
    b = make_request("b", [5, 6, 7, 8])
    for r in (a, b):
        assert kv.allocate(r, 4)
        compute_all(kv, r)
    a_blocks, b_blocks = list(kv.blocks["a"]), list(kv.blocks["b"])
    kv.free(a)  # a's blocks are now the least recently used
    kv.free(b)
    assert kv.find_prefix(make_request("a2", [1, 2, 3, 4, 0])) == a_blocks
    pool.take_events()
    # Allocating two fresh blocks must evict a's (LRU), tail block first.
    c = make_request("c", [9, 9, 9, 9])
    assert kv.allocate(c, 4)
    assert sorted(kv.blocks["c"]) == sorted(a_blocks)
    assert kv.blocks["c"][0] == a_blocks[1]
    assert kv.find_prefix(make_request("a3", [1, 2, 3, 4, 0])) == []
    assert kv.find_prefix(make_request("b2", [5, 6, 7, 8, 0])) == b_blocks
    events = pool.take_events().events
    assert isinstance(events[0], BlockRemoved) and len(events[0].block_hashes) == 2
    pool.check_invariants()


def test_events_mirror_pool_state():
    pool = BlockPool(6, 2)
    pool.subscribe_events()
    kv = KVCacheManager(pool)
    mirror: set[int] = set()
    requests = [make_request(str(i), [i, i, i + 1, i + 1, 5]) for i in range(5)]
    live = []
    for r in requests:
        if not kv.allocate(r, r.num_tokens):
            kv.free(live.pop(0))  # oldest first; its cached blocks get evicted later
            assert kv.allocate(r, r.num_tokens)
        live.append(r)
        compute_all(kv, r)
        for ev in pool.take_events().events:
            if isinstance(ev, BlockStored):
                assert ev.block_size == 2 and len(ev.token_ids) == 2 * len(ev.block_hashes)
                mirror.update(ev.block_hashes)
            elif isinstance(ev, BlockRemoved):
                mirror.difference_update(ev.block_hashes)
            elif isinstance(ev, AllBlocksCleared):
                mirror.clear()
        assert mirror == set(pool.cached)
    for r in live:
        kv.free(r)
    assert pool.reset_prefix_cache()
    assert isinstance(pool.take_events().events[-1], AllBlocksCleared) and not pool.cached


def test_reset_refused_while_blocks_in_use():
    pool = BlockPool(4, 2)
    kv = KVCacheManager(pool)
    r = make_request("a", [1, 2])
    kv.allocate(r, 2)
    assert not pool.reset_prefix_cache()


def test_double_release_is_an_error():
    pool = BlockPool(2, 2)
    blocks = pool.allocate(1)
    pool.release(blocks)
    with pytest.raises(RuntimeError):
        pool.release(blocks)


def test_no_subscriber_no_events_recorded():
    pool = BlockPool(4, 2)
    kv = KVCacheManager(pool)
    for i in range(6):  # stores and evictions
        r = make_request(str(i), [i, i, i, i, 9])
        assert kv.allocate(r, r.num_tokens)
        compute_all(kv, r)
        kv.free(r)
    assert pool.num_pending_events == 0
    assert pool.take_events().events == ()


def test_duplicate_blocks_are_not_reported_as_stored():
    pool = BlockPool(8, 2)
    pool.subscribe_events()
    first = pool.allocate(3)
    pool.store(first[1:2], [22], 11, [3, 4])  # the middle hash is cached already
    pool.take_events()
    blocks = pool.allocate(3)
    pool.store(blocks, [11, 22, 33], None, [1, 2, 3, 4, 5, 6])
    events = pool.take_events().events
    assert events == (BlockStored((11,), None, (1, 2), 2), BlockStored((33,), 22, (5, 6), 2))
    assert pool.cached == {22: first[1], 11: blocks[0], 33: blocks[2]}
    pool.check_invariants()


def test_event_buffer_is_bounded_and_numbers_its_events():
    pool = BlockPool(8, 2)
    pool.subscribe_events(capacity=3)
    for i in range(5):
        pool.store(pool.allocate(1), [100 + i], None, [i, i])
    batch = pool.take_events()
    assert batch.dropped == 2 and batch.first_seq == 2
    assert [ev.block_hashes for ev in batch.events] == [(102,), (103,), (104,)]
    pool.store(pool.allocate(1), [200], None, [7, 7])
    batch = pool.take_events()
    assert (batch.first_seq, batch.dropped, len(batch.events)) == (5, 0, 1)
