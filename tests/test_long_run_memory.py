"""A long-running engine's memory does not grow with the tokens it serves.

KV events used to be recorded whether or not anyone read them (~0.9 KB per
stored block, forever). Now they are recorded only for a subscriber, in a
bounded buffer. Measured with tracemalloc (Python allocations: where an event
log lives); the same measurement with an unbounded, undrained subscriber shows
that it does see such a leak.
"""

from __future__ import annotations

import random
import tracemalloc

from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams

FLAT_BYTES = 128 * 1024  # measured here: ~50 KB of noise (dict resizes, torch's small objects), not growing


def serve(engine: LLMEngine, rng: random.Random, n: int) -> None:
    prompts = [[rng.randrange(3, 512) for _ in range(rng.randint(16, 80))] for _ in range(n)]
    engine.generate(prompts, SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True))


def growth_while_serving(engine: LLMEngine, rng: random.Random, n: int) -> int:
    """Bytes of Python allocations still alive after serving n more requests."""
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        serve(engine, rng, n)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    return sum(stat.size_diff for stat in after.compare_to(before, "filename"))


def test_memory_stays_flat_over_a_long_run():
    engine = LLMEngine(EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu",
                                    num_kv_blocks=64, max_model_len=256))
    rng = random.Random(0)
    serve(engine, rng, 100)  # warm-up: the prefix index and allocator pools reach their steady size
    assert growth_while_serving(engine, rng, 450) < FLAT_BYTES  # ~2,000 blocks stored and evicted
    assert engine.core.pool.num_pending_events == 0 and engine.num_pending_kv_events == 0

    engine.subscribe_kv_events(capacity=100)  # a consumer that never reads: bounded
    serve(engine, rng, 100)
    # The core hands its events out with every step; the caller keeps at most 100 unread.
    assert engine.num_pending_kv_events == 100  # full before the measurement
    assert growth_while_serving(engine, rng, 450) < FLAT_BYTES
    assert engine.num_pending_kv_events == 100 and engine.core.pool.num_pending_events == 0
    batch = engine.take_kv_events()
    assert batch.dropped > 0 and len(batch.events) == 100


def test_the_measurement_sees_an_unread_event_log():
    engine = LLMEngine(EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu",
                                    num_kv_blocks=64, max_model_len=256))
    engine.subscribe_kv_events(capacity=10 ** 7)  # what every engine did before the fix
    rng = random.Random(1)
    serve(engine, rng, 100)
    assert growth_while_serving(engine, rng, 300) > 4 * FLAT_BYTES  # ~2.4 KB per request
