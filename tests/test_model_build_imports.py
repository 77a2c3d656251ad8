"""Building a model and serving from it never imports torch._dynamo (about
1.7 s of a fresh process's start) nor sympy (torch's symbolic shapes, about
0.45 s): the meta-device build skips the modules' initialisers, computes rope
tables on CPU and allocates the real tensors without torch's reference
kernels (model/loaders/common.py, model/rope.py). Each case runs in a fresh
interpreter, where nothing else has imported them yet."""

import subprocess
import sys

import pytest

SCRIPT = r"""
import sys
import torch
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams

model = sys.argv[1]
engine = LLMEngine(EngineConfig(model=model or None, num_threads=1, num_kv_blocks=64, max_model_len=256))
greedy = engine.generate([[1, 2, 3, 4, 5]], SamplingParams(max_tokens=4, temperature=0))[0]
sampled = engine.generate([[6, 7, 8]], SamplingParams(max_tokens=4, temperature=0.8, top_p=0.9, seed=3))[0]
assert len(greedy.token_ids) == 4 and len(sampled.token_ids) == 4, (greedy, sampled)
print("imported:", sorted(m for m in ("torch._dynamo", "sympy") if m in sys.modules))
"""


@pytest.mark.parametrize("model", ["", "dummy:tiny", "dummy:deepseek-v3-tiny"], ids=["embedded", "tiny", "deepseek"])
def test_build_and_generate_without_importing_dynamo_or_sympy(model):
    out = subprocess.run([sys.executable, "-c", SCRIPT, model], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "imported: []" in out.stdout, out.stdout + out.stderr[-3000:]
