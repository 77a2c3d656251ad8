"""Tool-call parsers for the chat endpoint, by `--tool-call-parser` name (one format per file)."""

from __future__ import annotations

from tokenmill.serve.tool_parsers.base import Delta, ToolCall, ToolParser
from tokenmill.serve.tool_parsers.deepseek_v3 import DeepSeekV3ToolParser
from tokenmill.serve.tool_parsers.hermes import HermesToolParser, tools_system_prompt

TOOL_PARSERS: dict[str, type[ToolParser]] = {"hermes": HermesToolParser, "deepseek_v3": DeepSeekV3ToolParser}


def make_tool_parser(name: str) -> ToolParser:
    """A fresh parser for one request (streaming parsers hold per-request state)."""
    cls = TOOL_PARSERS.get(name)
    if cls is None:
        raise ValueError(f"unknown --tool-call-parser {name!r}; choices: {', '.join(sorted(TOOL_PARSERS))}")
    return cls()


__all__ = ["TOOL_PARSERS", "Delta", "ToolCall", "ToolParser", "make_tool_parser", "tools_system_prompt"]
