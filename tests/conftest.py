"""Shared fixtures: real ``tokenmill serve`` subprocesses and an in-process reference engine.

Everything here is session-scoped and lazy: a test module that uses none of
these fixtures starts no server and loads no model.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

# Model-level fixtures live in _reference.py; importing them here makes them
# conftest fixtures, so every module shares one session instance of each.
from _reference import fp32_engine, hf_reference  # noqa: F401  (fixtures)
from hypothesis import HealthCheck, settings

# Property-based tests: a small example count by default (the suite stays fast);
# `pytest --hypothesis-profile=long tests/test_fuzz_server.py tests/test_sampler_fuzz.py`
# runs them long (see docs/TESTING.md). The server fuzz runs a tenth of these.
settings.register_profile("default", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("long", max_examples=5000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile("default")

FUZZ_STATUSES = pytest.StashKey[Counter]()
"""HTTP status -> count of the server fuzz's requests (printed in the summary)."""


def pytest_terminal_summary(terminalreporter, config):
    counts = config.stash.get(FUZZ_STATUSES, None)
    if counts:
        histogram = ", ".join(f"{status}: {n}" for status, n in sorted(counts.items()))
        terminalreporter.write_line(f"server fuzz: {sum(counts.values())} requests by status ({histogram})")


def _restore_torch_threads():
    import torch

    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


# An engine built with ``num_threads`` sets torch's thread count for the whole process
# (engine/core.py), and the in-process engines of test_cluster.py, test_disagg.py and others ask
# for one thread. Each test, and each module (whose fixtures may build such an engine before its
# first test starts), leaves the count as it found it: before this, every test after such a
# module ran torch on one of the two cores (the suite took 18.5 minutes, against 17.0 after).
_torch_threads_restored = pytest.fixture(autouse=True, name="_torch_threads_restored")(_restore_torch_threads)
_torch_threads_restored_per_module = pytest.fixture(autouse=True, scope="module",
                                                    name="_torch_threads_restored_per_module")(_restore_torch_threads)


SERVER_START_TIMEOUT_S = 180
API_KEY = "test-secret-key"

# One torch thread everywhere: on a small shared CPU, several processes each
# spinning two OpenMP threads run ~8x slower than one thread each. The same
# thread count also keeps the servers' float32 reductions identical to the reference.
NUM_THREADS = 1
# float32, not --dtype auto: on a CPU with native bf16, auto picks bfloat16, whose
# logits are coarse enough to tie exactly (e.g. ':' and ' of' after "The three
# primary colors are the primary colors"), and which side of a tie wins depends on
# the batch shape. These tests assert exact greedy text across batch compositions;
# bf16 quality is measured in test_quantization.py.
DTYPE = "float32"
# Idle connections stay open this long on every test server: the SDK clients here run with
# max_retries=0, so a request sent on a pooled connection just as the server closed it (uvicorn's
# default closes after 5 s idle) would fail a test with no fault in the code under test.
TEST_KEEP_ALIVE_S = 600
# Main server: small context so "prompt too long" is cheap, room for 32 streams;
# tool_choice "auto" on (it changes only requests that send tools).
MAIN_SERVER_ARGS = ("--max-model-len", "512", "--num-kv-blocks", "256", "--num-threads", str(NUM_THREADS),
                    "--dtype", DTYPE, "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
# Guarded server: API key, one running + one waiting request at most, capped max_tokens.
GUARDED_SERVER_ARGS = ("--max-model-len", "512", "--num-kv-blocks", "64", "--num-threads", str(NUM_THREADS),
                       "--dtype", DTYPE,
                       "--api-key", API_KEY, "--max-num-seqs", "1", "--max-waiting-requests", "1",
                       "--max-tokens-limit", "64")


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    url: str
    log_path: Path
    banner: str
    step_log: Path | None = None
    """The file the server appends its engine's steps to (``--step-log``), where it was given one."""

    @property
    def v1(self) -> str:
        return f"{self.url}/v1"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> dict[str, float]:
        """Unlabelled samples of /metrics, by name."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#") and "{" not in line:
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values


def start_server(args: tuple[str, ...], log_path: Path) -> ServerProcess:
    """Start ``tokenmill serve --port 0`` and wait for its banner and /health."""
    with open(log_path, "w") as log_file:  # a file, not a pipe: a full pipe would block the server
        proc = subprocess.Popen([sys.executable, "-m", "tokenmill.cli", "serve", "--port", "0",
                                 "--timeout-keep-alive", str(TEST_KEEP_ALIVE_S), *args],
                                stdout=log_file, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    url = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log_path.read_text()}")
        if url is None:
            match = re.search(r"listening on (http://\S+)", log_path.read_text(errors="replace"))
            url = match.group(1) if match else None
        if url is not None and _healthy(url):
            return ServerProcess(proc, url, log_path, log_path.read_text(errors="replace"))
        time.sleep(0.2)
    stop_server(proc)
    raise RuntimeError(f"server did not come up in {SERVER_START_TIMEOUT_S}s:\n{log_path.read_text()}")


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("server")
    srv = start_server((*MAIN_SERVER_ARGS, "--step-log", str(folder / "steps.jsonl")), folder / "serve.log")
    srv.step_log = folder / "steps.jsonl"
    yield srv
    stop_server(srv.proc)


@pytest.fixture(scope="session")
def client(server):
    """The official openai SDK on the main server (modules with another server define their own)."""
    import openai

    return openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def model(client):
    return client.models.list().data[0].id


@pytest.fixture(scope="session")
def guarded_auth() -> dict[str, str]:
    """Headers that pass the guarded server's --api-key."""
    return {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="session")
def guarded_server(tmp_path_factory):
    srv = start_server(GUARDED_SERVER_ARGS, tmp_path_factory.mktemp("guarded") / "serve.log")
    yield srv
    stop_server(srv.proc)


@contextmanager
def torch_threads(n: int):
    """torch's thread count is process-wide: set it only while the reference runs."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def reference_engine():
    """The engine in-process, for the expected greedy outputs."""
    from tokenmill.config import EngineConfig
    from tokenmill.engine.engine import LLMEngine

    with torch_threads(NUM_THREADS):
        return LLMEngine(EngineConfig(num_kv_blocks=256, max_model_len=512, num_threads=NUM_THREADS, dtype=DTYPE))


@pytest.fixture(scope="session")
def greedy(reference_engine):
    """greedy(prompt_or_messages, max_tokens) -> GenerationResult of the engine itself.

    Messages are chat-templated exactly as the server does. Results are
    cached: several tests compare against the same references.
    """
    from tokenmill.sampling_params import SamplingParams

    cache = {}

    def run(prompt, max_tokens: int):
        if isinstance(prompt, list):
            tokenizer = reference_engine.tokenizer
            text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True)
            prompt = tuple(tokenizer.encode(text, add_special_tokens=False))  # the template has its BOS
        key = (prompt, max_tokens)
        if key not in cache:
            params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
            engine_prompt = list(prompt) if isinstance(prompt, tuple) else prompt
            with torch_threads(NUM_THREADS):
                cache[key] = reference_engine.generate([engine_prompt], params)[0]
        return cache[key]

    return run
