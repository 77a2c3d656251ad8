"""Decode-only steps of 4 x 128-token prompts (128 tokens each; contexts of 128-256 tokens, as the own-engine
Server workload's) on the in-process LLMEngine of THREADS torch threads, alone and beside another process that
busies one core for DUTY of the time, in slices of SLICE_MS (a stand-in for what a server's frontend and a
client do on the same cores). Four alternated pairs of rounds in one process; the decode-only steps' mean and
the stepping thread's share of it on a core, from the engine's own counters (docs/SIMULATOR.md, "A figure's
spread over draws"):
    PYTHONPATH=src python results/contention-xeon-2026-12-01-s48/contend.py THREADS DUTY SLICE_MS"""
import multiprocessing as mp, random, sys, time
def noise(duty, slice_ms, stop):
    while not stop.is_set():
        t = time.perf_counter()
        while time.perf_counter() - t < slice_ms / 1e3:
            pass
        time.sleep(slice_ms / 1e3 * (1 - duty) / duty)
if __name__ == "__main__":
    threads, duty, slice_ms = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    from tokenmill.config import EngineConfig
    from tokenmill.engine.engine import LLMEngine
    from tokenmill.sampling_params import SamplingParams
    eng = LLMEngine(EngineConfig(num_threads=threads, num_kv_blocks=800, max_num_seqs=4))
    params = SamplingParams(max_tokens=128, temperature=0.0, ignore_eos=True)
    for rep in range(8):
        on = rep % 2 == 1
        stop = mp.Event()
        p = mp.Process(target=noise, args=(duty, slice_ms, stop)) if on else None
        if p: p.start(); time.sleep(0.2)
        prompts = [[random.Random(i + 1000 * rep).randrange(1000, 40000) for _ in range(128)] for i in range(4)]
        b = eng.core.stats(); eng.generate(prompts, params); a = eng.core.stats()
        if p: stop.set(); p.join()
        n = a.engine_steps["decode"] - b.engine_steps.get("decode", 0)
        sec = a.engine_step_seconds["decode"] - b.engine_step_seconds.get("decode", 0.0)
        cpu = a.engine_step_cpu_seconds["decode"] - b.engine_step_cpu_seconds.get("decode", 0.0)
        print(f"threads {threads} {'noise ' + str(duty) if on else 'alone    '}: {n} decode steps, mean {sec/n*1e3:.2f} ms, on a core {cpu/sec:.0%}", flush=True)
