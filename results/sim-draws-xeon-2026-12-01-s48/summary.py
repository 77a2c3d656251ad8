"""Five measured Server runs (LoadGen seeds 0-4) against `tokenmill sim --draws 40` of the same workload:
    python results/sim-draws-xeon-2026-12-01-s48/summary.py results/sim-draws-xeon-2026-12-01-s48/out"""
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = []
for seed in range(5):
    m = json.load(open(next((out / f"server-seed{seed}").rglob("results.json"))))["metrics"]
    rows.append((seed, m["requests_per_s"], m["tokens_per_s"], m["ttft_ms"]["p50"], m["ttft_ms"]["p99"],
                 m["tpot_ms"]["p50"], m["tpot_ms"]["p99"], m["prefix_cache_hit_rate"]))
print("| LoadGen seed | requests/s | output tok/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | prefix hits |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]:.3f} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.1f} | {r[5]:.2f} | {r[6]:.2f} | {r[7]:.1%} |")
med = [statistics.median(r[i] for r in rows) for i in range(1, 8)]
print(f"| median | {med[0]:.3f} | {med[1]:.1f} | {med[2]:.1f} | {med[3]:.1f} | {med[4]:.2f} | {med[5]:.2f} | {med[6]:.1%} |")
f = json.load(open(out / "sim-draws40.json"))
d = f["draws"]
print(f"\nsimulated, {d['n']} draws: median (5th-95th; range); the draws' median / the measured runs' median")
for key, i, name in (("tokens_per_s", 1, "output tok/s"), ("ttft_ms.p50", 2, "TTFT p50"), ("ttft_ms.p99", 3, "TTFT p99"),
                     ("tpot_ms.p50", 4, "TPOT p50"), ("tpot_ms.p99", 5, "TPOT p99")):
    s = d[key]
    inside = sum(s["p5"] <= r[i + 1] <= s["p95"] for r in rows)
    print(f"  {name:13} {s['median']:8.1f} ({s['p5']:.1f}-{s['p95']:.1f}; {s['min']:.1f}-{s['max']:.1f})  "
          f"{s['median'] / med[i]:.2f}; {inside} of 5 measured inside the 5th-95th")
print(f"  one draw (seed 0): TTFT p99 {f['ttft_ms']['p99']:.1f} ms, {f['ttft_ms']['p99'] / med[3]:.2f} of the measured median, "
      f"{f['ttft_ms']['p99'] / rows[0][4]:.2f} of LoadGen seed 0's")
