"""tokenmill: an LLM serving stack (engine, OpenAI server, MLPerf-style benchmarks)."""

from tokenmill.config import EngineConfig
from tokenmill.outputs import RequestOutput
from tokenmill.sampling_params import SamplingParams

__all__ = ["EngineConfig", "LLMEngine", "AsyncEngine", "SamplingParams", "RequestOutput"]
__version__ = "0.1.0"


def __getattr__(name):
    # The engines import torch; keep `import tokenmill` light for the CLI's --help.
    if name == "LLMEngine":
        from tokenmill.engine.engine import LLMEngine
        return LLMEngine
    if name == "AsyncEngine":
        from tokenmill.engine.async_engine import AsyncEngine
        return AsyncEngine
    raise AttributeError(name)
