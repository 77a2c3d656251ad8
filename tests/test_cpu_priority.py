"""Lowering a worker's CPU priority (cluster/cpu_priority.py). A nice value
cannot be raised again without privileges, so each case runs in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tokenmill.cluster.cpu_priority import lower_process_priority
from tokenmill.cluster.launch import ClusterOptions

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="Linux keeps nice values per thread")

CHILD = """
import json, os, threading
from tokenmill.cluster.cpu_priority import lower_process_priority

def nice_of_all_threads():
    values = set()
    for t in os.listdir("/proc/self/task"):
        try:
            values.add(os.getpriority(os.PRIO_PROCESS, int(t)))
        except ProcessLookupError:  # a joined thread can linger in the listing a moment (seen under load)
            pass
    return values

stop = threading.Event()
before = threading.Thread(target=stop.wait)  # started before the call
before.start()
try:  # whatever fails, release the waiting thread: the process must exit and report, not hang
    base = os.getpriority(os.PRIO_PROCESS, 0)
    changed = lower_process_priority(base + 4)
    seen = []
    after = threading.Thread(target=lambda: seen.append(os.getpriority(os.PRIO_PROCESS, 0)))  # started after it
    after.start(); after.join()
    print(json.dumps({"base": base, "changed": changed, "values": sorted(nice_of_all_threads()), "later": seen[0]}))
finally:
    stop.set(); before.join()
"""


def test_every_thread_now_and_later_runs_at_the_new_value():
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if base + 4 > 19:
        pytest.skip("this process already runs at the lowest priority")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    got = json.loads(out)
    assert got["base"] == base
    assert got["changed"] >= 2  # the main thread and the one started before the call
    assert got["values"] == [base + 4]
    assert got["later"] == base + 4


def test_a_value_above_the_current_one_is_left_alone_and_bad_values_are_refused():
    assert lower_process_priority(0) == 0  # never raises a priority (that needs privileges)
    for bad in (-1, 20):
        with pytest.raises(ValueError, match="prefill_worker_nice"):
            lower_process_priority(bad)
        with pytest.raises(ValueError, match="prefill_worker_nice"):
            ClusterOptions(prefill_workers=1, decode_workers=1, prefill_worker_nice=bad)
