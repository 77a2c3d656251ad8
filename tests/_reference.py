"""Session fixtures for model-level tests: the HF reference (the embedded GGUF
loaded by transformers in fp32) and a tokenmill engine on the same file, plus
a helper computing logits through the paged path. conftest.py imports the
fixtures, so every module shares one instance of each. ``paged_logits`` lives
in benchmarks/paged_forward.py (benchmarks/int4_quality.py uses it too)."""

from __future__ import annotations

import pytest
import torch

from benchmarks.paged_forward import paged_logits  # noqa: F401  (the tests' name for it)


@pytest.fixture(scope="session")
def hf_reference():
    transformers = pytest.importorskip("transformers")
    from tokenmill.model.embedded import embedded_gguf_path

    path = embedded_gguf_path()
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    return model, tok


@pytest.fixture(scope="session")
def fp32_engine():
    from tokenmill.config import EngineConfig
    from tokenmill.engine.engine import LLMEngine

    return LLMEngine(EngineConfig(dtype="float32", device="cpu", max_num_seqs=64,
                                  max_num_batched_tokens=1024, kv_cache_memory_gib=0.5))
