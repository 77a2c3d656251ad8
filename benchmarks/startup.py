"""How long the embedded model takes to come up: the GGUF's metadata parsed (ours and the ``gguf``
package's reader), an in-process ``LLMEngine`` built, and ``tokenmill serve`` from launch to a healthy
/health. Each figure is the median of ``--rounds`` fresh processes (nothing is warm in the process
measured; the file sits in the page cache after the first round).

    python -m benchmarks.startup --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import httpx

IN_PROCESS = r"""
import json, sys, time
start = time.perf_counter()
from tokenmill.model.embedded import embedded_gguf_path
from tokenmill.model.gguf_file import gguf_file
path = embedded_gguf_path()
t = time.perf_counter(); gguf_file(path); ours = time.perf_counter() - t
import gguf
t = time.perf_counter(); gguf.GGUFReader(str(path)); package = time.perf_counter() - t
from tokenmill.config import EngineConfig
from tokenmill.engine.engine import LLMEngine
t = time.perf_counter(); LLMEngine(EngineConfig(num_threads=int(sys.argv[1]))); engine = time.perf_counter() - t
print(json.dumps({"gguf_metadata_ours_s": ours, "gguf_metadata_package_s": package, "engine_build_s": engine}))
"""


def in_process(threads: int) -> dict:
    """One fresh process: the parse both ways, then an engine (on the file this process parsed already)."""
    out = subprocess.run([sys.executable, "-c", IN_PROCESS, str(threads)], capture_output=True, text=True,
                         check=True, env=dict(os.environ, TQDM_DISABLE="1"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def serve_to_health(threads: int, timeout_s: float = 300) -> float:
    """Seconds from launching ``tokenmill serve`` to its first 200 on /health."""
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "tokenmill.cli", "serve", "--port", "0", "--num-threads",
                             str(threads)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        for line in proc.stdout:
            match = re.search(r"listening on (http://\S+)", line)
            if match:
                url = match.group(1)
                break
        if url is None:
            raise RuntimeError(f"tokenmill serve exited with {proc.wait()} before listening")
        while time.monotonic() - start < timeout_s:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    return time.monotonic() - start
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"tokenmill serve was not healthy after {timeout_s} s")
    finally:
        proc.terminate()
        proc.wait()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--num-threads", type=int, default=2)
    args = ap.parse_args(argv)
    runs = [in_process(args.num_threads) for _ in range(args.rounds)]
    serve = [serve_to_health(args.num_threads) for _ in range(args.rounds)]
    print(f"median of {args.rounds} fresh processes, {args.num_threads} threads")
    print("| step | seconds |")
    print("|---|---|")
    for key, label in (("gguf_metadata_package_s", "GGUF metadata, gguf.GGUFReader"),
                       ("gguf_metadata_ours_s", "GGUF metadata, model/gguf_file.py"),
                       ("engine_build_s", "LLMEngine built (the file parsed already)")):
        print(f"| {label} | {statistics.median(r[key] for r in runs):.3f} |")
    print(f"| tokenmill serve, launch to /health 200 | {statistics.median(serve):.2f} |")


if __name__ == "__main__":
    main()
