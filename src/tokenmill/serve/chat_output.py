"""One chat choice's output -> the assistant message's parts: reasoning
(``--reasoning-parser``), content, and tool calls (the request's tool plan).

The reasoning parser sees the raw text first; the tool parser sees only what
the reasoning parser calls content, so a call written while thinking is not a
call. Streamed and whole outputs give the same parts (each parser promises that
for itself, and the chain keeps it). One object per choice: parsers hold state.
"""

from __future__ import annotations

from tokenmill.serve.reasoning import ReasoningTokenCounter, make_reasoning_parser
from tokenmill.serve.tool_parsers.base import ToolParser


class ChatOutput:
    def __init__(self, reasoning_parser: str | None, tool_parser: ToolParser | None):
        self.reasoning = make_reasoning_parser(reasoning_parser) if reasoning_parser else None
        self.counter: ReasoningTokenCounter | None = self.reasoning.token_counter() if self.reasoning else None
        self.tools = tool_parser

    @property
    def active(self) -> bool:
        return self.reasoning is not None or self.tools is not None

    @property
    def reasoning_tokens(self) -> int | None:
        """Generated tokens that were reasoning (usage.completion_tokens_details), or None."""
        return self.counter.count if self.counter is not None else None

    def count_tokens(self, token_texts: list[str]) -> None:
        if self.counter is not None:
            for text in token_texts:
                self.counter.add(text)

    # ---- a whole output ----------------------------------------------------------

    def message(self, text: str) -> dict:
        """{"content", and "reasoning_content" / "tool_calls" where they apply}."""
        reasoning, content = self.reasoning.split(text) if self.reasoning else (None, text)
        message = {"content": content}
        if self.reasoning is not None:
            message["reasoning_content"] = reasoning
        if self.tools is not None:
            content, calls = self.tools.extract(content or "")
            message["content"] = content
            if calls:
                message["tool_calls"] = [call.to_openai() for call in calls]
        return message

    # ---- a stream ----------------------------------------------------------------

    def feed(self, text: str) -> dict:
        """The next piece of output -> the delta to send now (may be empty)."""
        reasoning, content = self.reasoning.feed(text) if self.reasoning else ("", text)
        return self._delta(reasoning, self.tools.feed(content) if self.tools and content else [content])

    def finish(self) -> dict:
        """End of output: what the parsers held back (tool calls come here)."""
        reasoning, content = self.reasoning.finish() if self.reasoning else ("", "")
        pieces = self.tools.feed(content) if self.tools and content else [content]
        if self.tools is not None:
            pieces += self.tools.finish()
        return self._delta(reasoning, pieces)

    @property
    def has_tool_calls(self) -> bool:
        return self.tools is not None and self.tools.has_calls

    @staticmethod
    def _delta(reasoning: str, pieces: list) -> dict:
        delta = {}
        if reasoning:
            delta["reasoning_content"] = reasoning
        content = "".join(p for p in pieces if isinstance(p, str))
        if content:
            delta["content"] = content
        calls = [p for p in pieces if isinstance(p, dict)]
        if calls:
            delta["tool_calls"] = calls
        return delta
