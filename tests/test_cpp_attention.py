"""The C++ paged decode attention against a float64 reference, and the engine on
it and on the fused ops (each C++ path against its torch path).

The kernel is compiled on first use (g++ and ninja); the module is skipped only
where that toolchain is missing, never because a build failed.
"""

from __future__ import annotations

import pytest
import torch

from tokenmill.config import EngineConfig
from tokenmill.engine.resolve import resolve_decode_kernel
from tokenmill.kernels.cpu_kernels import load_cpu_kernels, missing_toolchain

pytestmark = pytest.mark.skipif(missing_toolchain() is not None, reason=f"no C++ toolchain: {missing_toolchain()}")


@pytest.fixture(scope="module")
def kernel():
    module = load_cpu_kernels()
    assert module is not None, "the C++ kernel failed to build (see the warning in the log)"
    return module.paged_decode_attention


def reference(q, k_cache, v_cache, tables, lens, block_size, scale):
    """Plain float64 attention, one sequence and one query head at a time.
    Caches: [num_blocks, Hkv, block_size, D] (one part of a layer's cache each)."""
    b, hq, d = q.shape
    g = hq // k_cache.shape[1]
    out = torch.empty(b, hq, d, dtype=torch.float64)
    for i in range(b):
        pos = torch.arange(int(lens[i]))
        blocks, offsets = tables[i][pos // block_size], pos % block_size
        for h in range(hq):
            k = k_cache[blocks, h // g, offsets].double()  # [L, D]
            v = v_cache[blocks, h // g, offsets].double()
            p = torch.softmax(k @ q[i, h].double() * scale, dim=0)
            out[i, h] = p @ v
    return out


def random_case(batch, hq, hkv, d, block_size, lens, dtype, seed=0):
    """Caches are the K and V views of one layer's [num_blocks, 2, Hkv, block_size, D]
    tensor (model/kv_cache_spec.py), so strided across blocks as in the engine."""
    gen = torch.Generator().manual_seed(seed)
    max_blocks = max(-(-n // block_size) for n in lens)
    num_blocks = batch * max_blocks + 3
    layer = torch.randn(num_blocks, 2, hkv, block_size, d, generator=gen).to(dtype)
    k_cache, v_cache = layer[:, 0], layer[:, 1]
    # Each sequence owns distinct, shuffled blocks; padding entries point at block 0.
    order = torch.randperm(num_blocks, generator=gen)
    tables = torch.zeros(batch, max_blocks, dtype=torch.long)
    used = 0
    for i, n in enumerate(lens):
        need = -(-n // block_size)
        tables[i, :need] = order[used:used + need]
        used += need
    q = torch.randn(batch, hq, d, generator=gen).to(dtype)
    return q, k_cache, v_cache, tables, torch.tensor(lens, dtype=torch.long)


# head_dim 64 and 128 take the AVX-512 (else AVX2) path where the CPU has it; 80 always the portable one.
@pytest.mark.parametrize("d", [64, 128, 80])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("hq,hkv", [(9, 3), (4, 4)])
def test_matches_float64_reference(kernel, d, dtype, tol, hq, hkv):
    block_size = 16
    lens = [1, 16, 17, 100, 37]  # one token, exactly one block, one past, several, a tail
    q, kc, vc, tables, ctx = random_case(len(lens), hq, hkv, d, block_size, lens, dtype)
    scale = d**-0.5
    out = kernel(q, kc, vc, tables, ctx, block_size, scale)
    assert out.dtype == dtype and out.shape == q.shape
    ref = reference(q, kc, vc, tables, ctx, block_size, scale)
    torch.testing.assert_close(out.double(), ref, atol=tol, rtol=tol)


# Block sizes that do not divide the kernel's 16-row groups, and query groups larger than
# the V pass takes at once (4 rows of head_dim 64, 2 of 128): 5 and 8 query heads per KV head.
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("block_size", [5, 32])
@pytest.mark.parametrize("hq,hkv", [(10, 2), (8, 1)])
def test_odd_block_sizes_and_large_query_groups(kernel, d, block_size, hq, hkv):
    lens = [1, 5, 33, 70]
    q, kc, vc, tables, ctx = random_case(len(lens), hq, hkv, d, block_size, lens, torch.float32, seed=1)
    out = kernel(q, kc, vc, tables, ctx, block_size, d**-0.5)
    ref = reference(q, kc, vc, tables, ctx, block_size, d**-0.5)
    torch.testing.assert_close(out.double(), ref, atol=2e-5, rtol=2e-5)


def chunk_rows(tables, runs):
    """Rows as the engine lays out a prefill chunk or a draft verification: (sequence,
    first context length, rows) per run -> that sequence's table repeated, lengths
    first, first + 1, ... (each row one token further)."""
    rows = [(tables[i], first + r) for i, first, n in runs for r in range(n)]
    return torch.stack([t for t, _ in rows]), torch.tensor([n for _, n in rows], dtype=torch.long)


# Runs of one sequence's consecutive rows share each K/V read (up to 4 rows at a time): a 1-row
# decode, a 7-row verification split 4 + 3, a 10-row chunk crossing a block edge (contexts 14..23),
# and another sequence's rows right after it (contexts 24..26), which must not join it: their
# lengths continue the chunk's but their block tables differ.
@pytest.mark.parametrize("d", [64, 128, 80])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_sequences_consecutive_rows_equal_each_row_alone(kernel, d, dtype):
    block_size = 16
    _, kc, vc, seq_tables, _ = random_case(4, 9, 3, d, block_size, [60, 60, 40, 40], dtype, seed=2)
    tables, lens = chunk_rows(seq_tables, [(0, 30, 1), (1, 9, 7), (2, 14, 10), (3, 24, 3)])
    q = torch.randn(len(lens), 9, d, generator=torch.Generator().manual_seed(3)).to(dtype)
    out = kernel(q, kc, vc, tables, lens, block_size, d**-0.5)
    alone = torch.cat([kernel(q[i:i + 1], kc, vc, tables[i:i + 1], lens[i:i + 1], block_size, d**-0.5)
                       for i in range(len(lens))])
    assert torch.equal(out, alone)  # bit for bit: each row's arithmetic is the same whatever its run
    tol = 2e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), reference(q, kc, vc, tables, lens, block_size, d**-0.5),
                               atol=tol, rtol=tol)


def test_a_row_in_a_run_never_uses_slots_past_its_own_context(kernel):
    # Rows with contexts 20..23 share K/V reads; slots 20..22 lie inside the longer rows'
    # contexts but past the first row's. NaN there may reach the longer rows (their own
    # context), never the first: its scores past slot 19 are dropped and its values stop there.
    block_size = 16
    q, kc, vc, tables, _ = random_case(1, 4, 2, 64, block_size, [32], torch.float32, seed=4)
    rows, lens = chunk_rows(tables, [(0, 20, 4)])
    q = q.expand(4, -1, -1).contiguous()
    clean = kernel(q[:1], kc, vc, rows[:1], lens[:1], block_size, 0.125)
    kc[tables[0, 1], :, 4:7] = float("nan")  # slots 20..22 of the sequence
    vc[tables[0, 1], :, 4:7] = float("nan")
    out = kernel(q, kc, vc, rows, lens, block_size, 0.125)
    assert torch.equal(out[:1], clean)
    assert torch.isnan(out[1:]).all()  # the longer rows do read those slots


def test_softmax_is_stable_for_large_scores(kernel):
    # Scores ~ +-1e3: a naive exp overflows; the result must stay finite and exact.
    q, kc, vc, tables, ctx = random_case(2, 4, 2, 64, 16, [40, 9], torch.float32)
    q = q * 100
    out = kernel(q, kc, vc, tables, ctx, 16, 0.125)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), reference(q, kc, vc, tables, ctx, 16, 0.125), atol=1e-4, rtol=1e-4)


def test_zero_rows_give_an_empty_output(kernel):
    _, kc, vc, tables, ctx = random_case(2, 4, 2, 64, 16, [5, 9], torch.float32)
    out = kernel(torch.empty(0, 4, 64), kc, vc, tables[:0], ctx[:0], 16, 0.125)
    assert out.shape == (0, 4, 64)


def test_rejects_mismatched_inputs(kernel):
    q, kc, vc, tables, ctx = random_case(2, 4, 2, 64, 16, [5, 9], torch.float32)
    with pytest.raises(RuntimeError, match="share a dtype"):
        kernel(q.to(torch.bfloat16), kc, vc, tables, ctx, 16, 0.125)
    with pytest.raises(RuntimeError, match="int64"):
        kernel(q, kc, vc, tables.int(), ctx, 16, 0.125)
    with pytest.raises(RuntimeError, match="one block table and length per sequence"):
        kernel(q, kc, vc, tables[:1], ctx, 16, 0.125)
    with pytest.raises(RuntimeError, match="context length out of range"):
        kernel(q, kc, vc, tables, torch.tensor([5, 0]), 16, 0.125)
    with pytest.raises(RuntimeError, match="context length out of range"):  # longer than its table
        kernel(q, kc, vc, tables, torch.tensor([5, tables.shape[1] * 16 + 1]), 16, 0.125)
    bad = tables.clone()
    bad[0, 0] = kc.shape[0]  # one past the last block
    with pytest.raises(RuntimeError, match="block id out of range"):
        kernel(q, kc, vc, bad, ctx, 16, 0.125)
    with pytest.raises(RuntimeError, match="blocks of block_size slots"):
        kernel(q, kc, vc, tables, ctx, 8, 0.125)
    with pytest.raises(RuntimeError, match="match in shape and strides"):
        kernel(q, kc, vc.contiguous(), tables, ctx, 16, 0.125)
    with pytest.raises(RuntimeError, match="run must be contiguous"):  # rows interleaved across heads
        kernel(q, kc.transpose(1, 2).contiguous().transpose(1, 2), vc.transpose(1, 2).contiguous().transpose(1, 2),
               tables, ctx, 16, 0.125)


def test_one_shared_part_reads_like_two_equal_ones(kernel):
    """A latent cache: one part per layer, passed as both K and V."""
    q, kc, _, tables, ctx = random_case(3, 4, 1, 64, 16, [30, 1, 47], torch.float32)
    latent = torch.randn(kc.shape[0], 1, 1, 16, 64)[:, 0]  # [num_blocks, 1, 16, 64], a one-part layer
    out = kernel(q, latent, latent, tables, ctx, 16, 0.125)
    torch.testing.assert_close(out.double(), reference(q, latent, latent, tables, ctx, 16, 0.125),
                               atol=2e-5, rtol=2e-5)


def test_backend_resolution():
    cpu = torch.device("cpu")
    assert resolve_decode_kernel("torch", cpu, torch.float32) == ("torch", None)
    name, fn = resolve_decode_kernel("auto", cpu, torch.bfloat16)
    assert name == "cpp" and callable(fn)
    assert resolve_decode_kernel("auto", cpu, torch.float16) == ("torch", None)
    with pytest.raises(ValueError, match="attention_backend: cpp runs on CPU in float32 or bfloat16"):
        resolve_decode_kernel("cpp", cpu, torch.float16)
    with pytest.raises(ValueError, match="attention_backend: must be one of"):
        EngineConfig(attention_backend="flash")


@pytest.mark.parametrize("field", ["attention_backend", "fused_ops"])
def test_engine_greedy_tokens_match_torch(field):
    """Same prompts, batched (prefills and decodes), float32: each C++ path (the
    attention kernel; the fused elementwise ops) picks the same tokens as its torch path."""
    from tokenmill.engine.engine import LLMEngine
    from tokenmill.sampling_params import SamplingParams

    prompts = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
               "The three primary colors are"] * 3
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    tokens = {}
    for backend in ("cpp", "torch"):
        engine = LLMEngine(EngineConfig(dtype="float32", num_kv_blocks=128, max_model_len=256, **{field: backend}))
        assert (engine.core.attention_backend if field == "attention_backend" else engine.core.fused_ops) == backend
        tokens[backend] = [r.token_ids for r in engine.generate(prompts, params)]
    assert tokens["cpp"] == tokens["torch"]
