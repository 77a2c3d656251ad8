"""What every tool-call parser shares: the ToolCall record and the streaming machinery.

A format is a section-start marker plus `parse_section`. Rules common to all formats
(`extract` is the definition; `feed`/`finish` yield the same content text and the same
calls for every way of cutting the output into deltas):

- Content is the text before the first section marker, verbatim; None when it is empty
  or whitespace only.
- The calls come from the section (marker to end of output). If any block in it fails to
  parse, or it holds no block, there are no calls and the whole output is content
  (vLLM's rule: a malformed call is shown to the user rather than half-executed).

Streaming granularity: content streams as it arrives, holding back only an end that may
be a cut section marker (and leading whitespace, which becomes nothing if a call
follows). The section is held until `finish()`, which emits each call as two deltas: a
header (index, id, type, name, arguments "") and one with the whole arguments string.
Holding is what makes the stream agree with `extract` under the all-or-nothing rule (a
later malformed block turns earlier calls back into content); the cost is small because
a model stops right after its calls, so they arrive with the last tokens anyway.
"""

from __future__ import annotations

import abc
import json
import uuid
from dataclasses import dataclass, field
from typing import Union

from tokenmill.serve.markers import partial_marker_len

# One streamed item: content text, or one OpenAI `delta.tool_calls[]` entry.
Delta = Union[str, dict]


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object, compact (no spaces), non-ASCII kept as is
    id: str = field(default_factory=new_call_id)

    def to_openai(self) -> dict:
        """The `message.tool_calls[]` entry of a non-streamed response."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    def stream_deltas(self, index: int) -> list[dict]:
        """The streamed `delta.tool_calls[]` entries: header (name once), then arguments."""
        return [{"index": index, "id": self.id, "type": "function", "function": {"name": self.name, "arguments": ""}},
                {"index": index, "function": {"arguments": self.arguments}}]


def arguments_json(value: object) -> str | None:
    """Arguments as a compact JSON object string, from a dict or from a string holding
    one; None when they are not a JSON object."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _content_or_none(text: str) -> str | None:
    return text if text.strip() else None


class ToolParser(abc.ABC):
    """Extracts tool calls from a whole output, or from a stream. Fresh object per request."""

    section_start: str  # the marker that opens the tool-call section

    def __init__(self) -> None:
        self._held = ""  # content not yet emitted: leading whitespace, or a possible cut marker
        self._section: str | None = None  # text from the section marker on, once seen
        self._content_sent = False  # a non-whitespace content character has been emitted
        self._calls: list[ToolCall] = []

    @abc.abstractmethod
    def parse_section(self, section: str) -> list[ToolCall]:
        """Calls in `section` (which starts with `section_start`); [] if any block is malformed."""

    def extract(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """Whole output -> (content, calls)."""
        start = text.find(self.section_start)
        if start >= 0:
            calls = self.parse_section(text[start:])
            if calls:
                return _content_or_none(text[:start]), calls
        return _content_or_none(text), []

    @property
    def has_calls(self) -> bool:
        """Whether the stream produced calls (finish_reason "tool_calls"); known after finish()."""
        return bool(self._calls)

    def feed(self, delta_text: str) -> list[Delta]:
        """Next piece of output -> content text to stream now (tool calls wait for finish)."""
        if self._section is not None:
            self._section += delta_text
            return []
        text = self._held + delta_text
        start = text.find(self.section_start)
        if start >= 0:
            text, self._section = text[:start], text[start:]
            cut = len(text)
        else:
            cut = len(text) - partial_marker_len(text, self.section_start)
        if not self._content_sent and not text[:cut].strip():
            cut = 0  # whitespace-only content so far: nothing, if a call follows
        self._held = text[cut:]
        self._content_sent = self._content_sent or cut > 0
        return [text[:cut]] if cut else []

    def finish(self) -> list[Delta]:
        """End of output: the held content, or the calls (or the section as content)."""
        held, self._held = self._held, ""
        if self._section is None:
            return [held] if held and (self._content_sent or held.strip()) else []
        self._calls = self.parse_section(self._section)
        if not self._calls:
            return [held + self._section]
        return [delta for index, call in enumerate(self._calls) for delta in call.stream_deltas(index)]
