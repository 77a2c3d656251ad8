"""The Server runs at each target QPS against `tokenmill sim --draws 20` at the same rate, and the measured peak
(the highest VALID rate) against the simulator's peak search over 10 draws:
    python results/sim-peak-xeon-2026-12-01-s48/summary.py results/sim-peak-xeon-2026-12-01-s48/out"""
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
print("| target QPS | verdict | output tok/s: measured / sim median | TTFT p99 (ms): measured / sim median (5th-95th) "
      "| TPOT p99 (ms): measured / sim median (5th-95th) | TPOT p50 (ms): measured / sim median |")
print("|---|---|---|---|---|---|")
valid = []
for run in sorted(out.glob("server-qps*.txt")):
    q = run.stem.removeprefix("server-qps")
    r = json.load(open(next((out / f"server-qps{q}").rglob("results.json"))))
    m, v = r["metrics"], r["verdict"]
    if v["result"] == "VALID":
        valid.append(float(q))
    d = json.load(open(out / f"sim-qps{q}.json"))["draws"]
    def cell(measured, key, digits=1):
        s = d[key]
        return (f"{measured:,.{digits}f} / {s['median']:,.{digits}f} ({s['p5']:,.{digits}f}-{s['p95']:,.{digits}f}; "
                f"{s['median'] / measured:.2f})")
    reasons = "; ".join((v.get("reasons") or [])[:2])
    print(f"| {q} | {v['result']}{' (' + reasons + ')' if reasons else ''} | {m['tokens_per_s']:.1f} / "
          f"{d['tokens_per_s']['median']:.1f} | {cell(m['ttft_ms']['p99'], 'ttft_ms.p99')} | "
          f"{cell(m['tpot_ms']['p99'], 'tpot_ms.p99', 2)} | {m['tpot_ms']['p50']:.2f} / {d['tpot_ms.p50']['median']:.2f} |")
peak = json.load(open(out / "sim-peak.json"))
s = peak["draws"]["qps"]
print(f"\nmeasured: the highest VALID target QPS {max(valid) if valid else None} of those run")
print(f"simulated peak QPS over {peak['draws']['n']} draws: median {s['median']:.2f} (5th-95th {s['p5']:.2f}-{s['p95']:.2f}; "
      f"range {s['min']:.2f}-{s['max']:.2f}); first draw {peak['qps']:.2f}, {peak['tokens_per_s']:.0f} tokens/s")
