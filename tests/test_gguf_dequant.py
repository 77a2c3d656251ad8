"""model/gguf_dequant.py gives the gguf package's weights bit for bit: on
every Q4_1 and Q8_0 tensor of the embedded model, and on blocks holding every
code and extreme scales; a byte count that is not whole blocks is refused."""

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

from tokenmill.model.embedded import embedded_gguf_path
from tokenmill.model.gguf_dequant import dequantize_blocks, has_fast_path
from tokenmill.model.gguf_file import gguf_file


def reference(raw: np.ndarray, qtype: int) -> np.ndarray:
    return np.asarray(quants.dequantize(raw, GGMLQuantizationType(qtype)), dtype=np.float32).reshape(-1)


def test_embedded_model_tensors_match_the_package_bit_for_bit():
    seen = set()
    for t in gguf_file(embedded_gguf_path()).tensors:
        if not has_fast_path(t.tensor_type):
            continue
        seen.add(int(t.tensor_type))
        ours = dequantize_blocks(np.asarray(t.data), t.tensor_type).numpy()
        want = reference(np.asarray(t.data), t.tensor_type)
        assert np.array_equal(ours.view(np.int32), want.view(np.int32)), t.name
    assert seen == {3, 8}  # the file holds both: Q4_1 (3) and Q8_0 (8)


@pytest.mark.parametrize("qtype", [3, 8], ids=["Q4_1", "Q8_0"])
def test_every_code_and_extreme_scales_match(qtype):
    rng = np.random.default_rng(0)
    size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)][1]
    blocks = rng.integers(0, 256, size=(512, size), dtype=np.uint8)
    blocks[:256, 2 if qtype == 8 else 4:] = np.arange(256, dtype=np.uint8).reshape(256, 1)  # every byte of codes
    scales = np.array([0.0, -0.0, 1.0, -2.5, 6.1e-5, 65504.0, -65504.0, 5.96e-8], dtype=np.float16)
    header = 4 if qtype == 3 else 2
    halves = rng.choice(scales, size=(512, header // 2)).astype(np.float16)
    blocks[:, :header] = halves.view(np.uint8).reshape(512, header)
    ours = dequantize_blocks(blocks, qtype).numpy()
    want = reference(blocks, qtype)
    assert np.array_equal(ours.view(np.int32), want.view(np.int32))


def test_partial_blocks_are_refused():
    with pytest.raises(ValueError, match="whole 20-byte blocks"):
        dequantize_blocks(np.zeros(30, dtype=np.uint8), 3)
    assert dequantize_blocks(np.zeros(34, dtype=np.uint8), 8).equal(torch.zeros(32))
