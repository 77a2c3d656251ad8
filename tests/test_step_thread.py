"""The engine is built on the thread that steps it (engine/step_thread.py)."""

from __future__ import annotations

import threading

import pytest

from tokenmill.config import EngineConfig
from tokenmill.engine import async_engine
from tokenmill.engine.async_engine import AsyncEngine
from tokenmill.engine.step_thread import start_step_thread


def test_build_and_loop_run_on_one_new_thread_and_build_finishes_first():
    seen: list[tuple[str, int]] = []
    looped = threading.Event()

    def build():
        seen.append(("build", threading.get_ident()))

    def loop():
        seen.append(("loop", threading.get_ident()))
        looped.set()

    thread = start_step_thread(build, loop, "t")
    assert seen[0][0] == "build"  # done before start_step_thread returned
    assert looped.wait(5)
    assert seen[1][0] == "loop" and seen[0][1] == seen[1][1] == thread.ident != threading.get_ident()


def test_a_failed_build_raises_in_the_caller_and_never_loops():
    looped = []
    with pytest.raises(ValueError, match="no model"):
        start_step_thread(lambda: (_ for _ in ()).throw(ValueError("no model")), lambda: looped.append(1), "t")
    assert looped == []


def test_async_engine_from_a_config_builds_on_its_loop_thread(monkeypatch):
    built_on = {}

    class Recording(async_engine.LLMEngine):
        def __init__(self, config):
            built_on["thread"] = threading.current_thread().name
            super().__init__(config)

    monkeypatch.setattr(async_engine, "LLMEngine", Recording)
    client = AsyncEngine(EngineConfig(model="dummy:tiny", load_format="dummy", num_kv_blocks=16))
    try:
        assert built_on["thread"] == "tokenmill-engine" == client._thread.name
        assert client.max_model_len == client.engine.max_model_len
    finally:
        client.shutdown()
    with pytest.raises(ValueError, match="max_model_len"):
        AsyncEngine(EngineConfig(model="dummy:tiny", load_format="dummy", num_kv_blocks=2, max_model_len=4096))
