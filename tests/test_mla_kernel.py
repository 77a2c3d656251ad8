"""The C++ latent attention (``paged_mla_attention``, csrc/mla_decode_attention.cpp)
against the torch reference (kernels/mla_attention.py).

Caches are the first part of a two-part layer [num_blocks, 2, 1, block_size, D],
so strided across blocks (the kernel must not assume a one-part layer's packing).
The kernel is compiled on first use (g++ and ninja); the module is skipped only
where that toolchain is missing, never because a build failed.
"""

from __future__ import annotations

import pytest
import torch

from tokenmill.kernels.cpu_kernels import load_cpu_kernels, missing_toolchain
from tokenmill.kernels.mla_attention import mla_attention_reference

pytestmark = pytest.mark.skipif(missing_toolchain() is not None, reason=f"no C++ toolchain: {missing_toolchain()}")

TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


@pytest.fixture(scope="module")
def kernel():
    module = load_cpu_kernels()
    assert module is not None, "the C++ kernels failed to build (see the warning in the log)"
    return module.paged_mla_attention


def random_case(seqs, heads, d, block_size, dtype, seed=0):
    """seqs: (context length, query rows) per sequence; a sequence with n rows is a
    prefill chunk of its last n tokens (row i's context ends at its own position),
    n = 1 a decode. Each sequence owns distinct shuffled blocks; its rows repeat its
    block table. Returns q [T, H, D], cache [num_blocks, 1, block_size, D] (strided),
    block_tables [T, max_blocks], context_lens [T]."""
    gen = torch.Generator().manual_seed(seed)
    max_blocks = max(-(-n // block_size) for n, _ in seqs)
    num_blocks = len(seqs) * max_blocks + 3
    layer = torch.randn(num_blocks, 2, 1, block_size, d, generator=gen).to(dtype)
    cache = layer[:, 0]
    order = torch.randperm(num_blocks, generator=gen)
    tables, lens, used = [], [], 0
    for n, rows in seqs:
        need = -(-n // block_size)
        table = torch.zeros(max_blocks, dtype=torch.long)  # padding entries point at block 0
        table[:need] = order[used:used + need]
        used += need
        for pos in range(n - rows, n):
            tables.append(table)
            lens.append(pos + 1)
    q = torch.randn(len(lens), heads, d, generator=gen).to(dtype)
    return q, cache, torch.stack(tables), torch.tensor(lens, dtype=torch.long)


# Context lengths: one token, one block, one past, several blocks with a tail; a
# decode and a 5-row prefill chunk that starts mid-block.
SEQS = [(1, 1), (16, 1), (17, 1), (100, 1), (45, 5), (70, 1)]


# (heads, D, v_dim, block_size): DeepSeek-V3's latent and a half-width one take the
# AVX-512 path where the CPU has it (D and v_dim multiples of 16; 6 heads pad to 8);
# the last three the portable path (D, or v_dim, not a multiple of 16).
@pytest.mark.parametrize("heads,d,v_dim,block_size", [
    (16, 576, 512, 16), (6, 288, 256, 8), (5, 64, 64, 3), (4, 72, 40, 16), (3, 64, 40, 5), (7, 100, 100, 16),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_reference(kernel, heads, d, v_dim, block_size, dtype):
    q, cache, tables, lens = random_case(SEQS, heads, d, block_size, dtype)
    scale = 192**-0.5
    out = kernel(q, cache, tables, lens, block_size, scale, v_dim)
    assert out.dtype == dtype and out.shape == (q.shape[0], heads, v_dim)
    ref = mla_attention_reference(q, cache, tables, lens, block_size, scale, v_dim)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("heads,rows", [(128, 1), (16, 1), (16, 3), (20, 2)])
def test_head_tiles_match_for_any_thread_count(kernel, threads, heads, rows):
    """Few rows split the heads into items by thread count (uneven tiles for 20 heads);
    every split gives the reference's result."""
    seqs = [(300, 1)] * rows
    q, cache, tables, lens = random_case(seqs, heads, 576, 16, torch.float32, seed=threads)
    previous = torch.get_num_threads()  # process-wide: restore it for the other tests
    torch.set_num_threads(threads)
    try:
        out = kernel(q, cache, tables, lens, 16, 0.07, 512)
    finally:
        torch.set_num_threads(previous)
    ref = mla_attention_reference(q, cache, tables, lens, 16, 0.07, 512)
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=2e-5)


def test_one_part_layer(kernel):
    """The engine's latent layout: [num_blocks, 1, 1, block_size, D], passed as layer[:, 0]."""
    q, _, tables, lens = random_case([(40, 1), (33, 4)], 8, 576, 16, torch.bfloat16)
    cache = torch.randn(tables.max() + 1, 1, 1, 16, 576).to(torch.bfloat16)[:, 0]
    out = kernel(q, cache, tables, lens, 16, 0.07, 512)
    ref = mla_attention_reference(q, cache, tables, lens, 16, 0.07, 512)
    torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("d,v_dim", [(576, 512), (72, 40)])
def test_softmax_is_stable_for_large_scores(kernel, d, v_dim):
    # Scores ~ +-1e3, with the max rising from one span to the next: a naive exp
    # overflows; the result must stay finite and match.
    q, cache, tables, lens = random_case([(90, 2), (40, 1)], 8, d, 16, torch.float32)
    q = q * 100
    out = kernel(q, cache, tables, lens, 16, 0.125, v_dim)
    assert torch.isfinite(out).all()
    ref = mla_attention_reference(q, cache, tables, lens, 16, 0.125, v_dim)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)


def test_rejects_bad_arguments(kernel):
    q, cache, tables, lens = random_case([(20, 1), (9, 1)], 4, 64, 16, torch.float32)
    ok = (q, cache, tables, lens, 16, 0.125, 48)
    assert kernel(*ok).shape == (2, 4, 48)

    def call(**changes):
        args = dict(zip(("q", "cache", "tables", "lens", "block_size", "scale", "v_dim"), ok)) | changes
        return kernel(*args.values())

    bad = tables.clone()
    bad[0, 1] = cache.shape[0]  # one past the last block, in the part the row reads
    with pytest.raises(RuntimeError, match="block id out of range"):
        call(tables=bad)
    bad[0, 1] = -1
    with pytest.raises(RuntimeError, match="block id out of range"):
        call(tables=bad)
    for v_dim in (0, 65):
        with pytest.raises(RuntimeError, match=r"v_dim must be in \[1, D\]"):
            call(v_dim=v_dim)
    with pytest.raises(RuntimeError, match="share a dtype"):
        call(q=q.to(torch.bfloat16))
    with pytest.raises(RuntimeError, match="int64"):
        call(tables=tables.int())
    with pytest.raises(RuntimeError, match="one block table and length per query row"):
        call(tables=tables[:1])
    with pytest.raises(RuntimeError, match="context length out of range"):
        call(lens=torch.tensor([5, 0]))
    with pytest.raises(RuntimeError, match="context length out of range"):  # longer than its table
        call(lens=torch.tensor([5, tables.shape[1] * 16 + 1]))
    with pytest.raises(RuntimeError, match="blocks of block_size slots"):
        call(block_size=8)
    with pytest.raises(RuntimeError, match="one latent head of q's width D"):
        call(cache=torch.randn(cache.shape[0], 2, 16, 64))
    with pytest.raises(RuntimeError, match="one latent head of q's width D"):
        call(q=q[..., :32].contiguous())
    with pytest.raises(RuntimeError, match="run must be contiguous"):  # rows interleaved across blocks
        call(cache=cache.transpose(0, 2).contiguous().transpose(0, 2))


def test_no_rows(kernel):
    q, cache, tables, lens = random_case([(20, 1)], 4, 64, 16, torch.float32)
    out = kernel(q[:0], cache, tables[:0], lens[:0], 16, 0.125, 48)
    assert out.shape == (0, 4, 48)


def test_reference_rejects_bad_shapes():
    q, cache, tables, lens = random_case([(20, 1)], 4, 64, 16, torch.float32)
    with pytest.raises(ValueError, match="v_dim"):
        mla_attention_reference(q, cache, tables, lens, 16, 0.125, 65)
    with pytest.raises(ValueError, match="cache"):
        mla_attention_reference(q, cache, tables, lens, 8, 0.125, 64)
