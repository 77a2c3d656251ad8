"""Session fixtures for model-level tests: the HF reference (the embedded GGUF
loaded by transformers in fp32) and a tokenmill engine on the same file, plus
a helper computing logits through the paged path. conftest.py imports the
fixtures, so every module shares one instance of each."""

from __future__ import annotations

import pytest
import torch


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


def paged_logits(model, token_ids, chunk, dtype=torch.float32):
    """Logits [len(token_ids), vocab] for every prompt position, computed through
    the paged KV cache in chunks of ``chunk`` tokens (so cached-context attention
    is exercised). ``dtype`` is the KV cache dtype (the model's activations)."""
    from tokenmill.engine.block_pool import BlockPool
    from tokenmill.engine.kv_cache_manager import KVCacheManager
    from tokenmill.engine.request import Request
    from tokenmill.engine.runner import ModelRunner
    from tokenmill.engine.scheduler import Scheduler
    from tokenmill.sampling_params import SamplingParams

    block_size = 4
    num_blocks = -(-len(token_ids) // block_size) + 1
    kv = KVCacheManager(BlockPool(num_blocks, block_size))
    sched = Scheduler(kv, 4, chunk)
    runner = ModelRunner(model, num_blocks, block_size, torch.device("cpu"), dtype)
    req = Request("r", token_ids, SamplingParams(max_tokens=1))
    sched.add(req)
    rows = []
    while req.num_computed_tokens < len(token_ids):
        out = sched.schedule()
        inputs = runner.prepare(out, kv)
        with torch.inference_mode():
            hidden = model(inputs.input_ids, inputs.positions, inputs.meta, runner.kv_caches)
            rows.append(model.compute_logits(hidden))
        sched.update(out, {"r": [0]} if out.scheduled[0].samples else {})
    return torch.cat(rows)
