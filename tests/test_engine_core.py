"""The engine-core boundary: typed messages that cross it as msgpack, a core
driven only by them, resume, and the one verb that ends a request."""

from __future__ import annotations

import time

import msgspec
import pytest

from tokenmill.config import EngineConfig
from tokenmill.engine.client import EngineStats
from tokenmill.engine.core import EngineCore
from tokenmill.engine.core_messages import (
    EngineCoreFinish,
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    ResumeState,
    decode_finish,
    decode_outputs,
    decode_request,
    encode,
)
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch
from tokenmill.engine.output_processor import OutputProcessor
from tokenmill.engine.request import RequestStatus
from tokenmill.errors import RequestError
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.outputs import TokenLogprob
from tokenmill.sampling_params import SamplingParams

TINY = dict(model="dummy:tiny", load_format="dummy", device="cpu", num_kv_blocks=64, max_model_len=256,
            max_num_batched_tokens=32)
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], list(range(20, 60)), [300, 301]]


def test_messages_round_trip_through_msgpack():
    params = SamplingParams(max_tokens=9, temperature=0.7, top_p=0.9, seed=3, stop=["\n\n", "END"],
                            stop_token_ids=[4], logprobs=2, extra={"trace": "abc"})
    request = EngineCoreRequest("r1", [1, 2, 3], params, (2, 0), ResumeState([7, 8]), arrival_time=12.5)
    stats = EngineStats(1, 2, 64, 10, 100, 48, 0, 300, 20, 1, {"sampling": 1}, {"client_disconnect": 2})
    events = KVEventBatch(40, (BlockStored((11, 12), None, tuple(range(32)), 16), BlockRemoved((9,)),
                               AllBlocksCleared()), dropped=3)
    outputs = EngineCoreOutputs(
        [EngineCoreOutput("r1", [42], None, num_cached_tokens=16,
                          logprobs=[TokenLogprob(42, -0.25, [(42, -0.25), (7, -1.5)])]),
         EngineCoreOutput("r2", [2], "stop", stop_reason=2),
         EngineCoreOutput("r3", [], "error", error="the engine failed while sampling this request (boom)")],
        stats, events, timestamp=99.0)
    finish = EngineCoreFinish(["r1", "r2"], "abort", "client_disconnect")
    for message, decode in ((request, decode_request), (outputs, decode_outputs), (finish, decode_finish)):
        data = encode(message)
        assert isinstance(data, bytes) and not data.startswith(b"\x80")  # msgpack, not a pickle stream
        assert decode(data) == message
    assert decode_request(encode(request)).params.stop == ("\n\n", "END")


def test_bad_fields_in_a_message_are_refused_by_name():
    raw = msgspec.msgpack.encode({"request_id": "x", "prompt_token_ids": [1], "params": {"top_p": 1.5}})
    with pytest.raises(msgspec.ValidationError, match="top_p"):
        decode_request(raw)
    with pytest.raises(msgspec.ValidationError, match="prompt_token_ids"):
        decode_request(msgspec.msgpack.encode({"request_id": "x", "prompt_token_ids": "hi", "params": {}}))


@pytest.fixture(scope="module")
def core() -> EngineCore:
    return EngineCore(EngineConfig(**TINY, dtype="float32"))


def run_core(core: EngineCore, requests: list[EngineCoreRequest]) -> dict[str, list[EngineCoreOutput]]:
    """Drive a core with encoded messages only, as a worker process would."""
    for r in requests:
        core.add_request(decode_request(encode(r)))
    got: dict[str, list[EngineCoreOutput]] = {r.request_id: [] for r in requests}
    while core.has_unfinished_requests():
        step = decode_outputs(encode(core.step()))
        assert step.stats.num_running + step.stats.num_waiting == len(core.scheduler.requests)
        for out in step.outputs:
            got[out.request_id].append(out)
    return got


def test_a_core_driven_by_messages_matches_the_engine(core):
    params = [SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True),
              SamplingParams(max_tokens=6, temperature=0.9, seed=5, ignore_eos=True, logprobs=1),
              SamplingParams(max_tokens=8, temperature=0.0, stop_token_ids=[7, 8, 9, 10, 11, 12, 13, 14, 15])]
    requests = [EngineCoreRequest(f"m{i}", p, sp) for i, (p, sp) in enumerate(zip(PROMPTS, params))]
    got = run_core(core, requests)
    engine = LLMEngine(EngineConfig(**TINY, dtype="float32"))
    expected = engine.generate(PROMPTS, params)
    for r, want in zip(requests, expected):
        outs = got[r.request_id]
        assert [t for o in outs for t in o.new_token_ids] == want.token_ids
        assert outs[-1].finish_reason == want.finish_reason and all(o.finish_reason is None for o in outs[:-1])
        if r.params.logprobs is not None:
            assert all(len(o.logprobs) == len(o.new_token_ids) for o in outs)
    assert core.pool.num_used_blocks == 0


def test_finish_is_the_one_verb_and_counts_aborts(core):
    params = SamplingParams(max_tokens=50, temperature=0.0, ignore_eos=True)
    for rid in ("a", "b", "c"):
        core.add_request(EngineCoreRequest(rid, PROMPTS[1], params))
    core.step()
    before = dict(core.stats().aborted_requests)
    assert core.apply_finish(decode_finish(encode(EngineCoreFinish(["a", "zz"], "abort", "client_disconnect")))) == 1
    assert core.finish_requests(["b"], RequestStatus.FINISHED_STOPPED) == 1  # a stop string the caller found
    with pytest.raises(RequestError, match="cause"):
        core.apply_finish(EngineCoreFinish(["c"], "abort", "because"))
    with pytest.raises(RequestError, match="status"):
        core.apply_finish(EngineCoreFinish(["c"], "pause"))
    assert core.finish_requests(["c", "c"], RequestStatus.FINISHED_ABORTED, "shutdown") == 1
    after = core.stats().aborted_requests
    assert after.get("client_disconnect", 0) == before.get("client_disconnect", 0) + 1
    assert after.get("shutdown", 0) == before.get("shutdown", 0) + 1
    assert not core.has_unfinished_requests() and core.pool.num_used_blocks == 0


def test_steps_are_counted_and_timed_by_kind_and_cross_the_boundary(core):
    """A 40-token prompt in a 32-token budget is two prefill steps (a chunk, then the rest with
    its first token sampled); its 7 more tokens are 7 decode steps. A second request arriving
    mid-decode makes one more prefill step (its prompt beside the first's decode)."""
    before = core.stats()
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    core.add_request(EngineCoreRequest("s1", list(range(100, 140)), params))  # no other test's: no prefix hit
    for _ in range(4):  # two prefill steps, then two decodes
        core.step()
    core.add_request(EngineCoreRequest("s2", PROMPTS[2], SamplingParams(max_tokens=2, ignore_eos=True)))
    while core.has_unfinished_requests():
        stats = decode_outputs(encode(core.step())).stats  # the counters cross the msgpack boundary
    steps = {k: stats.engine_steps[k] - before.engine_steps.get(k, 0) for k in ("prefill", "decode")}
    seconds = {k: stats.engine_step_seconds[k] - before.engine_step_seconds.get(k, 0.0) for k in steps}
    cpu = {k: stats.engine_step_cpu_seconds[k] - before.engine_step_cpu_seconds.get(k, 0.0) for k in steps}
    assert steps == {"prefill": 3, "decode": 6}  # s1: 2 prefill + 7 decode steps, one of those decodes s2's prefill
    assert all(s > 0 for s in seconds.values())
    # The stepping thread's CPU time within the steps: some, and never more than their wall time
    # (the clocks' granularity aside).
    assert all(0 < cpu[k] <= seconds[k] * 1.01 + 1e-3 for k in steps)
    core.step()  # nothing scheduled: not a step
    assert core.stats().engine_steps == stats.engine_steps


def test_a_step_that_waits_off_the_cpu_counts_its_wall_time_not_its_cpu_time(core, monkeypatch):
    """A step whose thread sleeps 100 ms (as a thread waiting for a core does) takes that long on the
    wall clock and almost no CPU time: the two counters tell computing from waiting."""
    run = core._run

    def waiting_run(out):
        time.sleep(0.1)
        return run(out)

    monkeypatch.setattr(core, "_run", waiting_run)
    before = core.stats()
    core.add_request(EngineCoreRequest("w1", list(range(200, 210)), SamplingParams(max_tokens=1, ignore_eos=True)))
    while core.has_unfinished_requests():
        core.step()
    after = core.stats()
    wall = after.engine_step_seconds["prefill"] - before.engine_step_seconds.get("prefill", 0.0)
    cpu = after.engine_step_cpu_seconds["prefill"] - before.engine_step_cpu_seconds.get("prefill", 0.0)
    assert after.engine_steps["prefill"] - before.engine_steps.get("prefill", 0) == 1
    assert wall >= 0.1 and cpu < wall - 0.09


def test_core_refuses_bad_requests_and_registers_nothing(core):
    params = SamplingParams(max_tokens=4)
    with pytest.raises(RequestError, match="vocabulary"):
        core.add_request(EngineCoreRequest("v", [1, 10 ** 6], params))
    with pytest.raises(RequestError, match="prompt"):
        core.add_request(EngineCoreRequest("e", [], params))
    with pytest.raises(RequestError, match="resume.output_token_ids"):
        core.add_request(EngineCoreRequest("r", [1, 2], params, resume=ResumeState([3, 4, 5, 6])))
    core.add_request(EngineCoreRequest("d", [1, 2], params))
    with pytest.raises(RequestError, match="duplicate"):
        core.add_request(EngineCoreRequest("d", [3], params))
    core.finish_requests(["d"], RequestStatus.FINISHED_ABORTED)
    assert not core.scheduler.requests


def test_kv_events_travel_with_the_step_outputs():
    core = EngineCore(EngineConfig(**TINY, dtype="float32"))
    core.add_request(EngineCoreRequest("x", list(range(100, 140)), SamplingParams(max_tokens=2)))
    assert all(core.step().kv_events is None for _ in range(3))  # nobody subscribed
    core.subscribe_kv_events()
    core.add_request(EngineCoreRequest("y", list(range(200, 240)), SamplingParams(max_tokens=2)))
    batches = [b for b in (decode_outputs(encode(core.step())).kv_events for _ in range(4)) if b is not None]
    stored = [h for b in batches for e in b.events if isinstance(e, BlockStored) for h in e.block_hashes]
    assert len(stored) == 2 and batches[0].first_seq == 0  # two full 16-token blocks of y's prompt
    assert core.pool.num_pending_events == 0


# ---- resume ----------------------------------------------------------------------

RESUME_PARAMS = [SamplingParams(max_tokens=14, temperature=0.0, ignore_eos=True),
                 SamplingParams(max_tokens=14, temperature=0.9, top_p=0.95, seed=1234, ignore_eos=True,
                                frequency_penalty=0.5),
                 SamplingParams(max_tokens=14, temperature=1.3, top_k=40, seed=7, ignore_eos=True)]


@pytest.mark.skipif(load_cpu_kernels() is None, reason="exact resume is checked in deterministic mode")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_resumed_request_continues_token_identically(dtype):
    """Prompt + the first k generated tokens, resumed on a fresh engine (as after
    a migration: nothing cached) and on the same one (its blocks in the prefix
    cache), continue with exactly the tokens the uninterrupted request produced,
    greedy and seeded. Deterministic mode makes a prefill row equal the decode
    row it replaces, so the comparison can be exact."""
    config = EngineConfig(**TINY, dtype=dtype, deterministic=True, enable_prefix_caching=True)
    origin, elsewhere = LLMEngine(config), LLMEngine(config)
    full = origin.generate(PROMPTS, RESUME_PARAMS)
    for engine in (elsewhere, origin):
        for k in (1, 6, 13):
            ids = [engine.add_request(None, p, sp, resume_output_ids=r.token_ids[:k])
                   for p, sp, r in zip(PROMPTS, RESUME_PARAMS, full)]
            got = {rid: [] for rid in ids}
            finish = {}
            while engine.has_unfinished_requests():
                for out in engine.step():
                    got[out.request_id] += out.new_token_ids
                    if out.finished:
                        finish[out.request_id] = (out.finish_reason, out.num_output_tokens)
            for rid, r in zip(ids, full):
                assert got[rid] == r.token_ids[k:], (engine is origin, k)
                assert finish[rid] == ("length", 14)
    assert origin.core.pool.num_used_blocks == elsewhere.core.pool.num_used_blocks == 0


def test_resumed_text_continues_where_the_client_left_off():
    """With a tokenizer: the resumed request's text deltas are the rest of the
    uninterrupted answer (its earlier tokens are detokenizer context, not output)."""
    from tokenmill.model.embedded import embedded_gguf_path
    from tokenmill.model.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(str(embedded_gguf_path()))
    prompt = tokenizer.encode("Once upon a time")
    answer = tokenizer.encode(" there lived a king whose daughters were all beautiful.", add_special_tokens=False)
    for k in (1, 4, 7):
        processor = OutputProcessor(tokenizer)
        request = EngineCoreRequest("t", prompt, SamplingParams(max_tokens=50), resume=ResumeState(answer[:k]))
        processor.add(request)
        outs = processor.process([EngineCoreOutput("t", [t]) for t in answer[k:]]).outputs
        final = processor.process([EngineCoreOutput("t", [2], "stop", stop_reason=2)]).outputs
        text = "".join(o.new_text for o in outs + final)
        assert tokenizer.decode(answer[:k]) + text == tokenizer.decode(answer)
        assert final[-1].num_output_tokens == len(answer) + 1



# ---- several tokens per request per step ---------------------------------------


@pytest.mark.skipif(load_cpu_kernels() is None, reason="exact comparison needs deterministic mode")
def test_verifying_drafts_keeps_the_tokens_and_saves_steps():
    """Drafts fed through the step (each request's last token + k drafts as query
    rows, one sample row each) change how many steps a request takes, never its
    tokens: right drafts are accepted, wrong ones replaced by the model's token."""
    config = EngineConfig(**TINY, dtype="float32", deterministic=True)
    params = [SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True, logprobs=1),
              SamplingParams(max_tokens=16, temperature=0.8, seed=99, ignore_eos=True),
              SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)]
    plain = EngineCore(config)
    requests, outputs, _ = _run_with_drafts(plain, params, lambda *_: [])
    want = {r.request_id: [t for o in outs for t in o.new_token_ids] for r, outs in zip(requests, outputs)}
    for name, propose in {"right": lambda out, truth: truth[len(out):len(out) + 3],
                          "wrong": lambda out, truth: [(t + 1) % 512 for t in truth[len(out):len(out) + 3]],
                          "half": lambda out, truth: truth[len(out):len(out) + 2] + [0, 0]}.items():
        requests, outputs, steps = _run_with_drafts(EngineCore(config), params, propose, want)
        for r, outs in zip(requests, outputs):
            assert [t for o in outs for t in o.new_token_ids] == want[r.request_id], name
            assert outs[-1].finish_reason == "length"
            if r.params.logprobs is not None:
                assert all(len(o.logprobs) == len(o.new_token_ids) for o in outs)
                assert [lp.token_id for o in outs for lp in o.logprobs] == want[r.request_id]
        if name == "right":
            assert steps < 0.5 * _run_with_drafts.steps_without
        if name == "wrong":
            assert all(len(o.new_token_ids) == 1 for outs in outputs for o in outs)


def _run_with_drafts(core: EngineCore, params, propose, want=None):
    """Run PROMPTS with ``propose(output so far, true output) -> drafts`` before every step."""
    requests = [EngineCoreRequest(f"d{i}", p, sp) for i, (p, sp) in enumerate(zip(PROMPTS, params))]
    for r in requests:
        core.add_request(r)
    outputs = {r.request_id: [] for r in requests}
    steps = 0
    while core.has_unfinished_requests():
        for rid, req in core.scheduler.requests.items():
            req.draft_token_ids = propose(req.output_token_ids, want[rid]) if want else []
        for out in core.step().outputs:
            outputs[out.request_id].append(out)
        steps += 1
    if want is None:
        _run_with_drafts.steps_without = steps
    return requests, [outputs[r.request_id] for r in requests], steps


def test_without_chunked_prefill_the_budget_holds_the_longest_prompt_and_outputs_are_the_same():
    chunked = EngineCore(EngineConfig(**TINY, dtype="float32"))
    whole = EngineCore(EngineConfig(**TINY, dtype="float32", enable_chunked_prefill=False))
    assert whole.config.max_num_batched_tokens == whole.max_model_len == 256  # raised from 32
    assert whole.scheduler.max_num_batched_tokens == 256 and not whole.scheduler.chunked_prefill
    assert chunked.config.max_num_batched_tokens == 32 and chunked.scheduler.chunked_prefill
    params = [SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)] * len(PROMPTS)
    requests = [EngineCoreRequest(f"w{i}", p, sp) for i, (p, sp) in enumerate(zip(PROMPTS, params))]
    got = {name: run_core(core, requests) for name, core in (("chunked", chunked), ("whole", whole))}
    for r in requests:
        assert [t for o in got["whole"][r.request_id] for t in o.new_token_ids] == \
            [t for o in got["chunked"][r.request_id] for t in o.new_token_ids]
    assert whole.pool.num_used_blocks == 0
