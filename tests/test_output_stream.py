"""OutputStream: a step's outputs handed over in one wake-up, and deltas that
queued up while the consumer was busy merged into one."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tokenmill.engine.async_engine import OutputStream, put_all
from tokenmill.outputs import RequestOutput, TokenLogprob, merge_outputs


def _out(tokens, text, finished=False, logprobs=None, n=0):
    return RequestOutput("r", tokens, text, finished, "length" if finished else None, num_prompt_tokens=3,
                         num_output_tokens=n, logprobs=logprobs)


def test_merge_concatenates_tokens_text_and_logprobs_and_keeps_the_last_counts():
    a = _out([1], "a", logprobs=[TokenLogprob(1, -0.5)], n=1)
    b = _out([2, 3], "bc", logprobs=[TokenLogprob(2, -1.0), TokenLogprob(3, -2.0)], n=3)
    c = _out([4], "", finished=True, logprobs=[TokenLogprob(4, -0.1)], n=4)
    m = merge_outputs([a, b, c])
    assert (m.new_token_ids, m.new_text, m.num_output_tokens, m.finished, m.finish_reason) == \
        ([1, 2, 3, 4], "abc", 4, True, "length")
    assert [lp.token_id for lp in m.logprobs] == [1, 2, 3, 4]
    assert merge_outputs([_out([1], "x"), _out([2], "y")]).logprobs is None


def test_outputs_queued_behind_a_busy_consumer_arrive_as_one_delta():
    async def main():
        stream = OutputStream(asyncio.get_running_loop())
        got = []
        producer = threading.Thread(target=put_all, args=([(stream, _out([i], str(i), n=i + 1)) for i in range(5)],))
        producer.start()
        producer.join()
        await asyncio.sleep(0)  # the hand-off callback runs
        async for out in stream.outputs():
            got.append(out)
            if len(got) == 1:  # then the last one, alone
                put_all([(stream, _out([9], "9", finished=True, n=6))])
        return got

    got = asyncio.run(main())
    assert [o.new_token_ids for o in got] == [[0, 1, 2, 3, 4], [9]]
    assert got[0].new_text == "01234" and got[-1].finished


def test_an_error_behind_queued_outputs_is_raised_after_them():
    async def main():
        stream = OutputStream(asyncio.get_running_loop())
        put_all([(stream, _out([1], "a", n=1)), (stream, _out([2], "b", n=2)),
                 (stream, RuntimeError("engine step failed"))])
        await asyncio.sleep(0)
        got = []
        with pytest.raises(RuntimeError, match="engine step failed"):
            async for out in stream.outputs():
                got.append(out.new_token_ids)
        return got

    assert asyncio.run(main()) == [[1, 2]]


def test_a_failed_output_behind_queued_tokens_comes_after_them_not_merged():
    """The server sends a 500 when a request's first output is a failure and an
    error event when it comes later: a failure queued behind tokens must not be
    merged into them, or the answer would depend on how far the consumer lagged."""
    async def main():
        stream = OutputStream(asyncio.get_running_loop())
        failed = RequestOutput("r", [], "", True, "error", num_prompt_tokens=3, num_output_tokens=2,
                               error="detokenizer fault")
        put_all([(stream, _out([1], "a", n=1)), (stream, _out([2], "b", n=2)), (stream, failed)])
        await asyncio.sleep(0)
        return [out async for out in stream.outputs()]

    first, last = asyncio.run(main())
    assert (first.new_token_ids, first.finished) == ([1, 2], False)
    assert (last.new_token_ids, last.finish_reason, last.error) == ([], "error", "detokenizer fault")
