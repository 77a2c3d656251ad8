"""Logits for every position of a token sequence through the engine's paged
path (scheduler, KV cache manager, runner, model), in prompt chunks of a chosen
size: the tests' reference helper, and benchmarks/int4_quality.py's way to
run every linear call with few rows (chunk 4: the int4 kernels' path)."""

from __future__ import annotations

import torch


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
