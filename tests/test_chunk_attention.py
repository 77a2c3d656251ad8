"""benchmarks/chunk_attention.py: the variants of a chunk's masked attention agree, and each is timed
(the GPU figures it is for come from a lent GPU; here the CPU's backends)."""

import torch

from benchmarks.chunk_attention import inputs, lower_right_attention, matmul_attention, run
from tokenmill.kernels.attention import _grouped_attention


def test_the_matmul_and_lower_right_variants_compute_the_engines_masked_attention():
    torch.manual_seed(0)
    for n, context in ((1, 5), (8, 136), (40, 40)):
        q, k, v, mask = inputs(n, context, torch.device("cpu"), torch.float32)
        expected = _grouped_attention(q, k, v, mask, 0.125)
        torch.testing.assert_close(matmul_attention(q, k, v, mask, 0.125), expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lower_right_attention(q, k, v, None, 0.125), expected, rtol=1e-5, atol=1e-5)
    # The chunk's last row sees every cached token and itself; its first row none of the later ones.
    q, k, v, mask = inputs(4, 10, torch.device("cpu"), torch.float32)
    assert mask[-1].all() and mask[0].tolist() == [True] * 7 + [False] * 3


def test_every_variant_is_timed_or_reported_as_unable():
    rows = run(torch.device("cpu"), torch.float32, [(4, 20), (7, 30)], repeats=2)
    names = [name for name, _, _ in rows]
    assert names[0] == "sdpa" and {"matmul", "lower_right", "causal", "sdpa:math"} <= set(names)
    timed = {name: (cold, warm) for name, cold, warm in rows}
    assert all(v > 0 for v in timed["sdpa"] + timed["matmul"] + timed["causal"])
