"""Tool calling on /v1/chat/completions: what ``tools`` + ``tool_choice`` mean here.

- ``none`` (or no tools): the tools stay out of the prompt and nothing is parsed.
- ``auto`` (the default with tools): the tools go into the prompt and the model
  decides; its output is parsed by the server's ``--tool-call-parser`` (which
  needs ``--enable-auto-tool-choice``, as in vLLM).
- ``required`` / a named function: the output is forced, with the structured
  output engine, to be one or more calls (one with ``parallel_tool_calls:
  false`` or a named function) in the Hermes ``<tool_call>`` format, each a JSON
  object whose ``arguments`` match that function's ``parameters`` schema: the
  calls always parse. (The DeepSeek format's markers are special tokens, which
  a text grammar cannot force: ``required`` and named choices take the Hermes
  format whatever parser is configured.)

Tools reach the model through its chat template when the template reads
``tools``; otherwise (SmolLM2's template) as a Hermes-style system prompt, with
earlier calls written back as ``<tool_call>`` blocks and tool results as
``<tool_response>`` user turns, the way Hermes/Qwen templates render them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from tokenmill.errors import RequestError
from tokenmill.serve.tool_parsers import make_tool_parser
from tokenmill.serve.tool_parsers.base import ToolParser
from tokenmill.serve.tool_parsers.hermes import CALL_END, CALL_START, HermesToolParser, tools_system_prompt
from tokenmill.structured.params import StructuredOutputsParams

FORCED_PARSER = "hermes"
"""The format ``required`` and named choices are forced into (read back with
HermesToolParser(drop_cut_tail=True): only a call cut by max_tokens can be invalid)."""


@dataclass(frozen=True)
class ToolConfig:
    """The server's flags: --enable-auto-tool-choice, --tool-call-parser."""

    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None

    def __post_init__(self) -> None:
        if self.enable_auto_tool_choice and self.tool_call_parser is None:
            raise ValueError("--enable-auto-tool-choice needs --tool-call-parser (hermes or deepseek_v3)")
        if self.tool_call_parser is not None:
            make_tool_parser(self.tool_call_parser)  # ValueError naming the flag for an unknown name


@dataclass
class ToolPlan:
    """What one request does with its tools."""

    tools: list[dict] | None
    """The tool definitions the prompt shows (None: none)."""
    parser: str | None
    """The parser its output goes through (None: plain content)."""
    constraint: StructuredOutputsParams | None
    """The grammar forcing the calls (required / named), or None."""

    def new_parser(self) -> ToolParser | None:
        if self.constraint is not None:  # forced calls: a last call cut by max_tokens is dropped, the others stand
            return HermesToolParser(drop_cut_tail=True)
        return make_tool_parser(self.parser) if self.parser else None


def plan_tools(req, config: ToolConfig) -> ToolPlan:
    """The request's tool plan; RequestError naming the field for a choice that
    cannot be served (auto without the flags, an unknown function name)."""
    tools = [t.model_dump(mode="json", exclude_none=True) for t in req.tools] if req.tools else None
    choice = req.tool_choice if req.tool_choice is not None else ("auto" if tools else "none")
    if tools is None:
        if choice != "none":
            raise RequestError("tool_choice", "tool_choice needs tools")
        return ToolPlan(None, None, None)
    if choice == "none":
        return ToolPlan(None, None, None)
    if choice == "auto":
        if not config.enable_auto_tool_choice:
            raise RequestError("tool_choice", '"auto" tool choice needs the server started with '
                               "--enable-auto-tool-choice and --tool-call-parser")
        return ToolPlan(tools, config.tool_call_parser, None)
    functions = [t["function"] for t in tools]
    if choice == "required":
        forced, parallel = functions, req.parallel_tool_calls is not False
    else:
        name = choice.function.name
        forced = [f for f in functions if f["name"] == name]
        if not forced:
            raise RequestError("tool_choice.function.name", f"no tool named {name!r} in tools")
        parallel = False
    return ToolPlan(tools, FORCED_PARSER, StructuredOutputsParams(grammar=forced_calls_grammar(forced, parallel)))


def forced_calls_grammar(functions: list[dict], parallel: bool) -> str:
    """A Lark grammar (llguidance) for Hermes tool calls to ``functions``: each
    ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, the
    arguments valid under the function's ``parameters``; one call, or one or more."""
    variants = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"],
                 "properties": {"name": {"const": f["name"]},
                                "arguments": f.get("parameters") or {"type": "object"}}}
                for f in functions]
    schema = variants[0] if len(variants) == 1 else {"anyOf": variants}
    start = 'start: call ("\\n" call)*' if parallel else "start: call"
    opening, closing = json.dumps(CALL_START + "\n"), json.dumps("\n" + CALL_END)  # Lark string literals
    return f"{start}\ncall: {opening} %json {json.dumps(schema)} {closing}\n"


def template_messages(messages: list[dict], tools: list[dict] | None, template_source: str | None) -> list[dict]:
    """The messages as the chat template should see them. A template that reads
    ``tools`` gets them as they are; for one that does not, the tools become a
    system prompt and tool turns are written in the Hermes way (module docstring)."""
    if template_source is not None and "tools" in template_source:
        return messages
    out = [_as_hermes_text(m) for m in messages]
    if tools:
        prompt = tools_system_prompt(tools)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{prompt}"}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def _as_hermes_text(message: dict) -> dict:
    if message.get("role") == "tool":
        return {"role": "user", "content": f"<tool_response>\n{message.get('content', '')}\n</tool_response>"}
    calls = message.get("tool_calls")
    if not calls:
        return message
    blocks = []
    for call in calls:
        body = json.dumps({"name": call["function"]["name"], "arguments": call["function"]["arguments"]},
                          ensure_ascii=False)
        blocks.append(f"{CALL_START}\n{body}\n{CALL_END}")
    text = "\n".join(([message["content"]] if message.get("content") else []) + blocks)
    return {k: v for k, v in message.items() if k != "tool_calls"} | {"content": text}
