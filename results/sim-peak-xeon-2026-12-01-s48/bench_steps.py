"""The 2.4-QPS bench run of run.sh again, with the in-process engine's step log on (AsyncEngine.step_log, as
sim calibrate times its steps), each step priced on the this-machine profile as served_steps.py prices them:
whether the bench's steps (LoadGen and the bench client in the engine's process) cost more than the same shapes
served without them:
    PYTHONPATH=src python results/sim-peak-xeon-2026-12-01-s48/bench_steps.py OUT"""
import sys
from served_steps import price_table  # this script's folder: the same pricing and table
from tokenmill.cli import main
from tokenmill.engine import async_engine
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
print(price_table(engines[0].step_log))
