"""N concurrent 1,024-token random prompts, 64 tokens each, against a `tokenmill serve` (three rounds, new prompts
each); the server's decode-only and prefill steps over each round, from its /metrics counters. Compares a served
decode step of 4 sequences over ~1,024-1,088 tokens with `sim calibrate`'s LONG_DECODE (4 over 1,024), and with
N > 4 the same steps with requests waiting (docs/SIMULATOR.md "The steps' time on a core"). The prompts depend
only on the request's index and round, so a streamed run after a plain one finds its prompts cached (fewer
prefill steps); its decode steps are the same shape:
    tokenmill serve --port 8810 --num-threads 1 --num-kv-blocks 800 --max-num-seqs 4 &
    python served_decode.py http://127.0.0.1:8810 N stream|plain"""
import asyncio, random, sys, httpx, re
URL = sys.argv[1]; N = int(sys.argv[2]); STREAM = sys.argv[3] == 'stream'
def counters():
    t = httpx.get(URL + "/metrics").text
    out = {}
    for line in t.splitlines():
        m = re.match(r'tokenmill:engine_(steps|step_seconds|step_cpu_seconds)_total\{kind="(\w+)"\} (\S+)', line)
        if m: out[(m[1], m[2])] = float(m[3])
    return out
async def one(c, i, extra):
    rnd = random.Random(i + extra)
    prompt = [rnd.randrange(1000, 40000) for _ in range(1024)]
    body = {"model": "SmolLM2-135M-Instruct", "prompt": prompt, "max_tokens": 64, "temperature": 0, "ignore_eos": True}
    if STREAM:
        body["stream"] = True
        async with c.stream("POST", URL + "/v1/completions", json=body, timeout=600) as r:
            r.raise_for_status()
            async for _ in r.aiter_lines():
                pass
    else:
        r = await c.post(URL + "/v1/completions", json=body, timeout=600)
        r.raise_for_status()
async def main():
    async with httpx.AsyncClient() as c:
        for rep in range(3):
            b = counters()
            await asyncio.gather(*(one(c, i, 100 * rep) for i in range(N)))
            a = counters()
            d = {k: a[k] - b.get(k, 0) for k in a}
            print(f"rep {rep}: decode-only {d[('steps','decode')]:.0f} steps, mean {d[('step_seconds','decode')]/d[('steps','decode')]*1e3:.2f} ms "
                  f"(on a core {d[('step_cpu_seconds','decode')]/d[('step_seconds','decode')]:.0%}); prefill {d[('steps','prefill')]:.0f} steps "
                  f"mean {d[('step_seconds','prefill')]/d[('steps','prefill')]*1e3:.1f} ms")
asyncio.run(main())
