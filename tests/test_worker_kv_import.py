"""A decode worker handed KV blocks that do not fit its request (a transfer defect, not the client's
doing) computes the prompt itself: the request answers as one engine would, and the worker counts a
recompute. EngineWorker is plain Python (Ray wraps it at placement), so this runs it in-process."""

from __future__ import annotations

import asyncio
import time

import msgspec

from tokenmill.cluster.worker import EngineWorker
from tokenmill.config import EngineConfig
from tokenmill.engine.core import EngineCore
from tokenmill.engine.core_messages import EngineCoreRequest, ResumeState, decode_outputs
from tokenmill.engine.engine import LLMEngine
from tokenmill.kernels.cpu_kernels import load_cpu_kernels
from tokenmill.sampling_params import SamplingParams

CONFIG = EngineConfig(model="dummy:tiny", load_format="dummy", dtype="float32", device="cpu", num_kv_blocks=64,
                      max_model_len=256, max_num_batched_tokens=64, deterministic=load_cpu_kernels() is not None,
                      num_threads=1)
PROMPT = list(range(40, 40 + 3 * CONFIG.block_size + 5))
PARAMS = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)


def drain(worker: EngineWorker, request_id: str, timeout_s: float = 60) -> tuple[list[int], str | None, str | None]:
    """The worker's outputs for ``request_id`` until it finishes -> (tokens, finish reason, error)."""
    async def go():
        tokens, deadline = [], time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for data in await worker.poll(0.5):
                for out in decode_outputs(data).outputs:
                    if out.request_id == request_id:
                        tokens += out.new_token_ids
                        if out.finish_reason is not None:
                            return tokens, out.finish_reason, out.error
        raise TimeoutError(f"{request_id}: no finish in {timeout_s} s")
    return asyncio.run(go())


def test_a_payload_that_does_not_fit_is_recomputed_not_failed():
    want = LLMEngine(CONFIG).generate([PROMPT], [PARAMS])[0].token_ids
    prefill = EngineCore(CONFIG)
    prefill.add_request(EngineCoreRequest("r", PROMPT, PARAMS, prefill_only=True))
    first = []
    while prefill.has_unfinished_requests():
        first += [t for out in prefill.step().outputs for t in out.new_token_ids]
    good = prefill.export_kv("r", 0)
    prefill.release_kv("r")
    bad = type(good)(**{**good.__dict__, "data": good.data[..., :8]})  # right blocks, wrong rows: found mid-import
    worker = EngineWorker("decode-0", msgspec.json.encode(CONFIG), "decode")
    try:
        worker._put("import", (EngineCoreRequest("r", PROMPT, PARAMS, resume=ResumeState(first)), bad))
        rest, reason, error = drain(worker, "r")
        assert (first + rest, reason, error) == (want, "length", None)
        stats = worker.core.stats()
        assert stats.kv_imports_recomputed == 1 and stats.kv_blocks_imported == 0
        assert stats.prompt_tokens == len(PROMPT)  # the prompt computed here
        assert worker.core.pool.num_used_blocks == 0
    finally:
        worker.stop()
