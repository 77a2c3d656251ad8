"""CPU seconds each process used between two snapshots, grouped by what it is: run with `snap OUT.json` before
a run and `diff BEFORE.json AFTER.json` after it (docs/SIMULATOR.md "Steps over long contexts").
Reads /proc/<pid>/stat (utime + stime, clock ticks) and /proc/<pid>/cmdline; Linux only."""
import json
import os
import sys

TICK = os.sysconf("SC_CLK_TCK")


def snapshot() -> dict:
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[pid] = {"cpu_s": (int(fields[11]) + int(fields[12])) / TICK, "cmd": cmd[:200] or stat.split("(")[1].split(")")[0]}
    return out


def group(cmd: str) -> str:
    for key, name in (("tokenmill serve", "tokenmill serve (frontend, router)"), ("tokenmill bench", "tokenmill bench (LoadGen client)"),
                      ("EngineWorker", "Ray worker (EngineWorker)"), ("raylet", "Ray raylet"), ("gcs_server", "Ray GCS"),
                      ("ray", "Ray, other")):
        if key in cmd:
            return name
    return "other"


if __name__ == "__main__":
    if sys.argv[1] == "snap":
        json.dump(snapshot(), open(sys.argv[2], "w"))
    else:
        before, after = (json.load(open(p)) for p in sys.argv[2:4])
        totals: dict[str, float] = {}
        for pid, now in after.items():
            used = now["cpu_s"] - before.get(pid, {"cpu_s": 0.0})["cpu_s"]
            totals[group(now["cmd"])] = totals.get(group(now["cmd"]), 0.0) + used
        for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
            print(f"| {name} | {seconds:,.1f} |")
