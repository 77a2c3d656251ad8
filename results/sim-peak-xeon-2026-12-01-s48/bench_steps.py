"""The 2.4-QPS bench run of run.sh again, with the in-process engine's step log on (AsyncEngine.step_log, as
sim calibrate times its steps), each step priced on the this-machine profile as served_steps.py prices them:
whether the bench's steps (LoadGen and the bench client in the engine's process) cost more than the same shapes
served without them:
    PYTHONPATH=src python results/sim-peak-xeon-2026-12-01-s48/bench_steps.py OUT"""
import statistics, sys
from tokenmill.cli import main
from tokenmill.engine import async_engine
from tokenmill.sim.calibrate import load_profile
from tokenmill.sim.cost import Parallel, step_cost, step_time
from tokenmill.sim.models import get_model
from tokenmill.sim.shapes import PrefillChunk, StepShape
engines = []
init = async_engine.AsyncEngine.__init__
def logged_init(self, *a, **k):
    init(self, *a, **k)
    self.step_log = []
    engines.append(self)
async_engine.AsyncEngine.__init__ = logged_init
main(["bench", "--scenario", "server", "--target-qps", "2.4", "--workload", "synthetic", "--input-len", "128",
      "--output-len", "128", "--length-dist", "fixed", "--min-duration", "60", "--min-query-count", "460",
      "--no-progress", "--no-plots", "--output-dir", sys.argv[1]])
log = engines[0].step_log
arch, profile = get_model("smollm2-135m"), load_profile()
def price(d, p):
    shape = StepShape(decode_contexts=(192,) * d, prefills=(PrefillChunk(p, 0),) if p else ())
    return step_time(step_cost(arch, shape, Parallel(), "bf16", 2.0), profile, "bf16").total_s
groups = {}
for d, p, s, _ in log:
    key = ("decode-only" if not p else "with a prompt", min(d // 16 * 16, 96))
    groups.setdefault(key, []).append((s, price(d, p), d, p))
print(f"{len(log)} steps; measured busy {sum(s for _, _, s, _ in log):.1f} s, priced {sum(price(d, p) for d, p, _, _ in log):.1f} s")
print("| kind | decodes | steps | mean decodes / prompt tokens | measured median ms | priced median ms | priced / measured (sums) |")
print("|---|---|---|---|---|---|---|")
for (kind, lo), v in sorted(groups.items()):
    print(f"| {kind} | {lo}-{lo + 15 if lo < 96 else ''} | {len(v)} | {statistics.mean(x[2] for x in v):.1f} / "
          f"{statistics.mean(x[3] for x in v):.0f} | {statistics.median(x[0] for x in v) * 1e3:.1f} | "
          f"{statistics.median(x[1] for x in v) * 1e3:.1f} | {sum(x[1] for x in v) / sum(x[0] for x in v):.2f} |")
