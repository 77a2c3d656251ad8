"""KV blocks from a prefill engine to a decode engine (engine level, no Ray):
prefill-only requests hold their prompt, export copies only what the decode
side lacks, the decode side adopts the blocks and continues exactly like a
single engine; bad payloads are refused by field; nothing leaks."""

from __future__ import annotations

import msgspec
import pytest

from tokenmill.config import EngineConfig
from tokenmill.engine.block_hash import hash_full_blocks
from tokenmill.engine.core import EngineCore
from tokenmill.engine.core_messages import EngineCoreRequest, ResumeState
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.kv_events import BlockStored
from tokenmill.engine.kv_transfer import KVLayout
from tokenmill.engine.request import RequestStatus
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.sampling_params import SamplingParams

# Deterministic (batch-invariant) kernels where the C++ ones load: a token's
# K/V and logits then do not depend on the step that computed them, so a
# transferred prompt continues bit-identically.
CONFIG = EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", num_kv_blocks=64,
                      max_model_len=256, max_num_batched_tokens=64, deterministic=load_cpu_kernels() is not None,
                      num_threads=1)
BS = CONFIG.block_size


@pytest.fixture(scope="module")
def engines():
    return EngineCore(CONFIG), EngineCore(CONFIG)


def run_to_end(core: EngineCore, request_id: str) -> tuple[list[int], str]:
    tokens, reason = [], None
    while reason is None:
        for out in core.step().outputs:
            if out.request_id == request_id:
                tokens += out.new_token_ids
                reason = out.finish_reason
    return tokens, reason


def prefill_then_decode(prefill: EngineCore, decode: EngineCore, rid: str, prompt: list[int],
                        params: SamplingParams, first_block: int = 0) -> tuple[list[int], str, int]:
    """The disaggregated path by hand: -> (tokens, finish reason, blocks sent)."""
    prefill.add_request(EngineCoreRequest(rid, prompt, params, prefill_only=True))
    first, reason = run_to_end(prefill, rid)
    assert reason == "transfer" and len(first) == 1
    blocks = prefill.export_kv(rid, first_block)
    assert prefill.release_kv(rid) and not prefill.kv.held
    decode.add_request(EngineCoreRequest(rid, prompt, params, resume=ResumeState(first)), kv_blocks=blocks)
    rest, reason = run_to_end(decode, rid)
    return first + rest, reason, blocks.num_blocks


PROMPT = list(range(40, 40 + 3 * BS + 5))  # 3 full blocks and a partial one
PARAMS = [SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True),
          SamplingParams(max_tokens=10, temperature=0.9, seed=7, ignore_eos=True)]


@pytest.mark.parametrize("params", PARAMS, ids=["greedy", "seeded"])
def test_a_transferred_prompt_continues_like_one_engine(engines, params):
    prefill, decode = engines
    want = LLMEngine(CONFIG).generate([PROMPT], [params])[0].token_ids
    imported = decode.stats().kv_blocks_imported
    tokens, reason, sent = prefill_then_decode(prefill, decode, f"t-{params.seed}", PROMPT, params)
    assert tokens == want and reason == "length"
    assert sent == 4 and decode.stats().kv_blocks_imported == imported + 4
    assert prefill.pool.num_used_blocks == 0 and decode.pool.num_used_blocks == 0
    prefill.pool.check_invariants()
    decode.pool.check_invariants()


def test_only_the_blocks_the_decode_side_lacks_are_sent_and_they_join_its_cache():
    prefill, decode = EngineCore(CONFIG), EngineCore(CONFIG)
    decode.subscribe_kv_events()
    params = PARAMS[0]
    shared = PROMPT[:2 * BS]
    decode.add_request(EngineCoreRequest("warm", shared + [7], SamplingParams(max_tokens=1)))
    run_to_end(decode, "warm")
    decode.step()  # drain
    hashes = hash_full_blocks(PROMPT, BS)
    held = sum(1 for h in hashes if decode.pool.lookup(h) is not None)
    assert held == 2  # the decode side reports 2 leading blocks; blocks 2.. (2 of 4) travel
    want = LLMEngine(CONFIG).generate([PROMPT], [params])[0].token_ids
    prefill.add_request(EngineCoreRequest("p", PROMPT, params, prefill_only=True))
    first, _ = run_to_end(prefill, "p")
    blocks = prefill.export_kv("p", held)
    assert blocks.num_blocks == 2 and blocks.block_hashes == hashes[2:]
    assert blocks.nbytes == 2 * decode.runner.kv_caches[0][0].nbytes * len(decode.runner.kv_caches)
    prefill.release_kv("p")
    decode.add_request(EngineCoreRequest("p", PROMPT, params, resume=ResumeState(first)), kv_blocks=blocks)
    out = decode.step()
    stored = [e for e in out.kv_events.events if isinstance(e, BlockStored)]
    assert stored and stored[0].block_hashes == (hashes[2],)  # the imported full block, announced to the router
    rest, _ = run_to_end(decode, "p")
    assert first + out.outputs[0].new_token_ids + rest == want
    assert decode.stats().prompt_tokens == len(shared) + 1  # the warm-up's prompt only: nothing recomputed


def test_a_prompt_the_decode_side_holds_whole_travels_as_no_blocks():
    """A prompt of whole blocks that the decode side caches entirely (a repeated prompt): the payload
    holds no block, and the decode side adopts its own cached blocks and continues from the first
    token, recomputing nothing (a live bug: an empty payload failed the request)."""
    prefill, decode = EngineCore(CONFIG), EngineCore(CONFIG)
    params = PARAMS[0]
    prompt = PROMPT[:3 * BS]  # whole blocks only: nothing partial to send
    want = LLMEngine(CONFIG).generate([prompt], [params])[0].token_ids
    assert prefill_then_decode(prefill, decode, "first", prompt, params)[:2] == (want, "length")
    hashes = hash_full_blocks(prompt, BS)
    assert all(decode.pool.lookup(h) is not None for h in hashes)  # the first import cached all three
    computed = decode.stats().prompt_tokens
    tokens, reason, sent = prefill_then_decode(prefill, decode, "again", prompt, params, first_block=len(hashes))
    assert (tokens, reason, sent) == (want, "length", 0)
    assert decode.stats().prompt_tokens == computed and decode.stats().kv_imports_recomputed == 0
    assert prefill.pool.num_used_blocks == 0 and decode.pool.num_used_blocks == 0
    decode.pool.check_invariants()


def test_engines_without_prefix_caching_transfer_too():
    plain = EngineConfig(**{**CONFIG.__dict__, "enable_prefix_caching": False})
    prefill, decode = EngineCore(plain), EngineCore(plain)
    params = PARAMS[1]
    want = LLMEngine(CONFIG).generate([PROMPT], [params])[0].token_ids
    tokens, reason, sent = prefill_then_decode(prefill, decode, "plain", PROMPT, params)
    assert tokens == want and reason == "length" and sent == 4
    assert not decode.pool.cached and decode.pool.num_used_blocks == 0


def test_a_stop_at_the_first_token_holds_nothing(engines):
    prefill, _ = engines
    greedy = LLMEngine(CONFIG).generate([PROMPT], [PARAMS[0]])[0].token_ids
    params = SamplingParams(max_tokens=5, temperature=0.0, stop_token_ids=[greedy[0]])
    prefill.add_request(EngineCoreRequest("s", PROMPT, params, prefill_only=True))
    tokens, reason = run_to_end(prefill, "s")
    assert (tokens, reason) == ([greedy[0]], "stop")
    assert prefill.export_kv("s", 0) is None and prefill.pool.num_used_blocks == 0


def test_holds_are_released_by_finish_and_by_expiry(engines):
    prefill, _ = engines
    for rid in ("a", "b"):
        prefill.add_request(EngineCoreRequest(rid, PROMPT, PARAMS[0], prefill_only=True))
    while prefill.has_unfinished_requests():
        prefill.step()
    assert set(prefill.kv.held) == {"a", "b"} and prefill.stats().kv_blocks_held == 8
    prefill.finish_requests(["a"], RequestStatus.FINISHED_ABORTED, "abort")  # an abandoned transfer
    assert set(prefill.kv.held) == {"b"}
    assert prefill.kv.expire_holds(now=prefill.kv.held["b"].deadline) == 1
    assert prefill.pool.num_used_blocks == 0 and prefill.export_kv("b", 0) is None
    prefill.pool.check_invariants()


def test_a_claimed_hold_does_not_expire_under_its_reader(engines):
    prefill, _ = engines
    prefill.add_request(EngineCoreRequest("c", PROMPT, PARAMS[0], prefill_only=True))
    run_to_end(prefill, "c")
    blocks = prefill.export_kv("c", 0)
    assert prefill.kv.expire_holds(now=float("inf")) == 0 and "c" in prefill.kv.held
    assert prefill.release_kv("c") and blocks.num_blocks == 4


def test_payloads_that_do_not_fit_are_refused_by_field(engines):
    prefill, decode = engines
    prefill.add_request(EngineCoreRequest("x", PROMPT, PARAMS[0], prefill_only=True))
    first, _ = run_to_end(prefill, "x")
    good = prefill.export_kv("x", 0)
    prefill.release_kv("x")
    resumed = EngineCoreRequest("x", PROMPT, PARAMS[0], resume=ResumeState(first))
    bf16 = msgspec.structs.replace(good.layout, dtype="bfloat16")
    cases = [({"layout": bf16}, "kv_layout.dtype"),
             ({"layout": msgspec.structs.replace(good.layout, block_size=32)}, "kv_layout.block_size"),
             ({"num_tokens": len(PROMPT) - 1}, "kv_blocks"),
             ({"block_hashes": list(reversed(good.block_hashes))}, "kv_blocks.block_hashes"),
             ({"data": good.data[:, :2]}, "kv_blocks"),
             ({"data": good.data[..., :8]}, "kv_blocks.data")]  # right block count, wrong rows: found mid-import
    for change, field in cases:
        bad = type(good)(**{**good.__dict__, **change})
        with pytest.raises(ValueError, match=field.replace(".", r"\.")):
            decode.add_request(resumed, kv_blocks=bad)
        assert "x" not in decode.scheduler.requests and decode.pool.num_used_blocks == 0
    prefill.add_request(EngineCoreRequest("y", PROMPT, PARAMS[0], prefill_only=True))
    run_to_end(prefill, "y")
    with pytest.raises(ValueError, match="first_block"):
        prefill.export_kv("y", 4)  # block 3 is the partial one: only full blocks can be held elsewhere
    assert prefill.release_kv("y")
    decode.pool.check_invariants()


def test_an_import_the_pool_cannot_take_is_recomputed_instead():
    small = EngineConfig(**{**CONFIG.__dict__, "num_kv_blocks": 8, "max_model_len": 128})
    prefill, decode = EngineCore(CONFIG), EngineCore(small)
    params = PARAMS[0]
    want = LLMEngine(CONFIG).generate([PROMPT], [params])[0].token_ids
    decode.add_request(EngineCoreRequest("busy", list(range(5, 5 + 6 * BS)), SamplingParams(max_tokens=20)))
    decode.step()
    decode.step()  # its prompt computed: 6 of 8 blocks taken, 4 imported blocks do not fit
    assert decode.pool.num_free_blocks == 2
    prefill.add_request(EngineCoreRequest("r", PROMPT, params, prefill_only=True))
    first, _ = run_to_end(prefill, "r")
    blocks = prefill.export_kv("r", 0)
    prefill.release_kv("r")
    decode.add_request(EngineCoreRequest("r", PROMPT, params, resume=ResumeState(first)), kv_blocks=blocks)
    assert decode.stats().kv_imports_recomputed == 1
    rest, _ = run_to_end(decode, "r")
    assert first + rest == want


def test_layout_names_model_dtype_and_block_size(engines):
    prefill, _ = engines
    layout = prefill.kv_layout
    assert layout == KVLayout(("k", "v"), layout.num_layers, layout.num_heads, layout.head_dim, BS, "float32")
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(layout), type=KVLayout) == layout  # crosses processes
