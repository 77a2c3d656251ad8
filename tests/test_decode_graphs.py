"""Decode graphs (engine/decode_graphs.py) without a GPU: the padded,
static-buffer decode forward a CUDA graph captures, run uncaptured on CPU
(``capture=False``), must give the eager engine's tokens and logprobs; the
bucket rules, the scratch block and the flags. tests/test_cuda.py runs the
captured graphs on a GPU."""

from __future__ import annotations

import argparse

import pytest
import torch

from tokenmill.cli_args import add_engine_args, engine_config_from_args
from tokenmill.config import EngineConfig
from tokenmill.engine.decode_graphs import block_buckets, default_batch_sizes
from tokenmill.engine.engine import LLMEngine
from tokenmill.engine.resolve import resolve_cuda_graph_sizes
from tokenmill.engine.runner import ModelRunner
from tokenmill.sampling_params import SamplingParams

# Lengths chosen so the batch shrinks through every size (requests finish one by
# one), prompts end mid-block, and contexts cross 128 tokens (the 8-block bucket).
PROMPTS = [list(range(10, 13)), list(range(40, 57)), list(range(100, 200)), list(range(300, 331)),
           list(range(7, 77)), [5, 6] * 9]
MAX_TOKENS = [6, 30, 40, 12, 22, 3]


def _engine(sizes: list[int] | None, **config) -> LLMEngine:
    """The tiny model on CPU, torch attention and ops (the path graphs record);
    ``sizes``: decode graph batch sizes, run uncaptured; None: eager."""
    engine = LLMEngine(EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu",
                                    num_kv_blocks=64, max_model_len=256, max_num_batched_tokens=64,
                                    attention_backend="torch", fused_ops="torch", linear_backend="torch", **config))
    if sizes is not None:
        core, c = engine.core, engine.core.config
        core.runner = ModelRunner(core.model, c.num_kv_blocks, c.block_size, core.device, core.dtype,
                                  scratch_block=True)
        core.runner.capture_decode_graphs(sizes, c.max_model_len, capture=False,
                                          multi_token_runs=c.cuda_graph_mode == "full")  # as the core does on CUDA
    return engine


def _run(engine: LLMEngine):
    params = [SamplingParams(max_tokens=n, temperature=0.0 if i % 2 else 0.8, seed=i, ignore_eos=True, logprobs=2)
              for i, n in enumerate(MAX_TOKENS)]
    return engine.generate(PROMPTS, params)


@pytest.fixture(scope="module")
def eager_results():
    return _run(_engine(None))


@pytest.mark.parametrize("sizes", [[1, 2, 4, 8], [1, 3], [16], [8, 32, 64]])
def test_padded_forward_matches_eager(eager_results, sizes):
    """Decode steps and, with sizes of up to 64 rows, steps with prompt chunks
    (up to 64 tokens per step here) replay."""
    engine = _engine(sizes)
    results = _run(engine)
    graphs = engine.core.runner.decode_graphs
    assert graphs.replays > 0  # decode steps took the graph path
    prompt_steps = engine.core.runner.graph_multi_token_steps
    assert prompt_steps > 0 if max(sizes) == 64 else prompt_steps == 0  # every step fits 64 rows; few fit 16
    for got, want in zip(results, eager_results):
        assert got.token_ids == want.token_ids
        for a, b in zip(got.logprobs, want.logprobs):
            assert a.token_id == b.token_id and abs(a.logprob - b.logprob) < 1e-4
    assert engine.stats().kv_blocks_used == 0


NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "adaptive": False}


@pytest.mark.parametrize("sizes", [[1, 2, 4, 8, 16, 24], [4, 12]])
def test_draft_verification_replays_and_matches_eager(sizes):
    """A request's last token and its drafts run as rows of the padded forward;
    tokens and logprobs equal the eager engine's (both verifying the same drafts)."""
    want = _run(_engine(None, speculative_config=NGRAM))
    engine = _engine(sizes, speculative_config=NGRAM)
    results = _run(engine)
    assert engine.stats().spec_draft_tokens > 0
    assert engine.core.runner.graph_multi_token_steps > 0  # verification steps took the graph path
    for got, expected in zip(results, want):
        assert got.token_ids == expected.token_ids
        for a, b in zip(got.logprobs, expected.logprobs):
            assert a.token_id == b.token_id and abs(a.logprob - b.logprob) < 1e-4
    assert engine.stats().kv_blocks_used == 0


def test_prompt_logprobs_and_prefix_hits_through_the_graphs():
    """Prompt rows' logits come from the replayed rows; a prompt whose head is
    cached computes only its tail (rows over blocks it did not write)."""
    with_prompt = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True, prompt_logprobs=1)
    plain = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True, logprobs=1)
    requests = [(list(range(40, 80)), with_prompt), (list(range(40, 80)), plain),
                (list(range(40, 72)) + [9, 8, 7, 6, 5], plain)]  # the last two hit the first's blocks
    eager = _engine(None)
    want = [eager.generate([p], params)[0] for p, params in requests]
    engine = _engine([8, 32, 64])
    got = [engine.generate([p], params)[0] for p, params in requests]
    assert engine.core.runner.graph_multi_token_steps == 3 and engine.stats().prefix_cache_hits > 0
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids
        pairs = zip(g.prompt_logprobs[1:], w.prompt_logprobs[1:]) if w.prompt_logprobs else zip(g.logprobs, w.logprobs)
        for a, b in pairs:
            assert a.token_id == b.token_id and abs(a.logprob - b.logprob) < 1e-4


def test_decode_mode_runs_prompt_chunks_and_verifications_eagerly():
    engine = _engine([8, 32, 64], cuda_graph_mode="decode", speculative_config=NGRAM)
    _run(engine)
    assert engine.core.runner.decode_graphs.replays > 0 and engine.stats().spec_draft_tokens > 0
    assert engine.core.runner.graph_multi_token_steps == 0
    with pytest.raises(ValueError, match="cuda_graph_mode"):
        EngineConfig(cuda_graph_mode="piecewise")


def test_only_steps_that_fit_a_bucket_replay():
    engine = _engine([2])
    graphs = engine.core.runner.decode_graphs
    params = SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True)
    for prompt in (PROMPTS[0], PROMPTS[1], PROMPTS[3]):  # 51 tokens: one prefill step
        engine.add_request(None, prompt, params)
    while engine.has_unfinished_requests():
        engine.step()  # a prefill step, then steps of three decodes: more than the largest size
    assert graphs.replays == 0
    engine.add_request(None, PROMPTS[0], params)
    while engine.has_unfinished_requests():
        engine.step()
    assert graphs.replays == 4  # one prefill step, then four single decodes


def test_the_scratch_block_is_past_the_pool():
    engine = _engine([1])
    runner, c = engine.core.runner, engine.core.config
    assert runner.scratch_block == c.num_kv_blocks == engine.core.pool.num_blocks
    assert all(cache.shape[0] == c.num_kv_blocks + 1 for cache in runner.kv_caches)
    with pytest.raises(ValueError, match="scratch_block"):
        _engine(None).core.runner.capture_decode_graphs([1], 256)


def test_bucket_rules():
    assert default_batch_sizes(128) == [1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 112, 128]
    assert default_batch_sizes(40) == [1, 2, 4, 8, 16, 32, 40]
    assert default_batch_sizes(6) == [1, 2, 4, 6] and default_batch_sizes(1) == [1]
    assert block_buckets(128) == [8, 16, 32, 64, 128] and block_buckets(100) == [8, 16, 32, 64, 100]
    assert block_buckets(3) == [3]
    graphs = _engine([1, 4]).core.runner.decode_graphs  # block size 16, max_model_len 256: blocks 8, 16
    assert graphs.bucket(1, 1) == (1, 8) and graphs.bucket(2, 128) == (4, 8) and graphs.bucket(3, 129) == (4, 16)
    assert graphs.bucket(5, 10) is None and graphs.bucket(1, 257) is None


def test_which_engines_capture():
    llama = LLMEngine(EngineConfig(model="dummy:tiny", load_format="dummy", device="cpu", dtype="float32",
                                   num_kv_blocks=16)).core.model
    cuda = torch.device("cuda")  # resolved without touching a GPU
    config = EngineConfig(max_num_seqs=40)
    assert resolve_cuda_graph_sizes(config, torch.device("cpu"), llama) is None
    assert resolve_cuda_graph_sizes(config, cuda, llama) == [1, 2, 4, 8, 16, 32, 40]
    assert resolve_cuda_graph_sizes(EngineConfig(max_num_seqs=40, cuda_graph_sizes=(64, 1, 8)), cuda, llama) == \
        [1, 8, 40]
    assert resolve_cuda_graph_sizes(EngineConfig(enforce_eager=True), cuda, llama) is None
    assert resolve_cuda_graph_sizes(config, cuda, torch.nn.Linear(1, 1)) is None  # no cuda_graph_safe: eager


def test_flags():
    parser = argparse.ArgumentParser()
    add_engine_args(parser)
    config = engine_config_from_args(parser.parse_args(["--enforce-eager", "--cuda-graph-sizes", "1", "2", "8",
                                                        "--cuda-graph-mode", "decode"]))
    assert config.enforce_eager and config.cuda_graph_sizes == (1, 2, 8) and config.cuda_graph_mode == "decode"
    default = engine_config_from_args(parser.parse_args([]))
    assert not default.enforce_eager and default.cuda_graph_mode == "full"
    for bad in ((0,), (), (2, -1)):
        with pytest.raises(ValueError, match="cuda_graph_sizes"):
            EngineConfig(cuda_graph_sizes=bad)


def test_blocks_past_the_context_are_not_read():
    graphs = _engine([2]).core.runner.decode_graphs  # buckets of 8 and 16 blocks
    with torch.inference_mode():
        short = graphs.run([5, 6], [3, 20], [[1], [2, 3]]).clone()
        # Tables longer than any bucket (blocks allocated ahead, e.g. for drafts) give the same rows.
        long = graphs.run([5, 6], [3, 20], [[1, *range(10, 30)], [2, 3, 40]]).clone()
    torch.testing.assert_close(short, long)
