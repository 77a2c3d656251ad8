"""`tokenmill sim calibrate` times the steps that mix a prefill with decodes even
when the event loop that reads the outputs lags far behind the engine thread
(CI saw the mixed step never taken inside the full suite)."""

import contextlib
import time

from tokenmill.config import EngineConfig
from tokenmill.engine.async_engine import AsyncEngine


def test_mixed_steps_are_timed_when_the_reader_lags():
    import tokenmill.sim.calibrate as calibrate

    engine = AsyncEngine(EngineConfig(model="dummy:tiny", load_format="dummy", device="cpu", dtype="float32"))
    try:
        served = engine.generate
        lags = [0]

        async def lagging(prompt, params, request_id=None):
            async with contextlib.aclosing(served(prompt, params, request_id)) as outputs:
                async for out in outputs:
                    time.sleep(0.03)  # holds the loop; the engine thread steps on (dozens of tiny steps)
                    lags[0] += 1
                    yield out

        engine.generate = lagging
        points = dict(calibrate.measure_served_steps(engine, batches=(2,), repeats=1, rounds=1, prefill_tokens=(32,)))
        assert lags[0] > 0
        assert set(points) == {(2, 0), (0, 32), calibrate.MIXED_STEP, calibrate.CACHED_STEP, calibrate.LONG_DECODE}
        assert all(seconds > 0 for seconds in points.values())
        # The decodes that waited for the late prompt were aborted once it was answered: nothing is left running.
        deadline = time.time() + 10
        while engine.stats().num_running and time.time() < deadline:
            time.sleep(0.05)
        assert engine.stats().num_running == 0 and engine.stats().num_waiting == 0
    finally:
        engine.shutdown()
