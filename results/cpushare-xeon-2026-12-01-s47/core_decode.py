"""N 1,024-token random prompts, 64 tokens each, through the in-process LLMEngine (no server, no frontend; one
thread, 800 KV blocks, 4 sequences at most): the decode-only steps' mean from the core's counters, three rounds
of new prompts. With `sorted`, the KV block pool hands a request's new blocks out in address order (a probe of
whether the scattered blocks of reused cache slow the attention's reads; docs/SIMULATOR.md "The steps' time on
a core"):
    PYTHONPATH=src python core_decode.py N [sorted]"""
import random, sys
from tokenmill.engine import block_pool
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
from tokenmill.sampling_params import SamplingParams
n = int(sys.argv[1])
if sys.argv[2:] == ["sorted"]:
    allocate = block_pool.BlockPool.allocate
    block_pool.BlockPool.allocate = lambda self, k: sorted(allocate(self, k))
eng = LLMEngine(EngineConfig(num_threads=1, num_kv_blocks=800, max_num_seqs=4))
params = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
for rep in range(3):
    prompts = [[random.Random(i + 1000 * rep + 7).randrange(1000, 40000) for _ in range(1024)] for i in range(n)]
    b = eng.core.stats()
    eng.generate(prompts, params)
    a = eng.core.stats()
    steps = a.engine_steps["decode"] - b.engine_steps.get("decode", 0)
    secs = a.engine_step_seconds["decode"] - b.engine_step_seconds.get("decode", 0.0)
    print(f"{n} requests{' (blocks sorted)' if sys.argv[2:] else ''}, rep {rep}: decode-only {steps} steps, mean {secs / steps * 1e3:.2f} ms")
