"""Hermes / Qwen2.5 / NousResearch tool calls, and the system prompt that asks for them.

Output format: optional text, then one or more blocks
    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
A block runs from `<tool_call>` to `</tool_call>`, or to the next `<tool_call>` or the end
of the output when unterminated (a generation cut by max_tokens: still a call if its JSON
parses). Text between and after blocks is dropped (whitespace in practice; vLLM does the
same). A block is malformed, and the whole output becomes content (see base.py), when it
is not a JSON object with a non-empty string `name`, or when `arguments` is neither a
JSON object nor a string holding one. A missing `arguments` means no arguments: "{}".
"""

from __future__ import annotations

import json

from tokenmill.serve.tool_parsers.base import ToolCall, ToolParser, arguments_json

CALL_START = "<tool_call>"
CALL_END = "</tool_call>"


def _parse_block(block: str) -> ToolCall | None:
    try:
        obj = json.loads(block)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    arguments = arguments_json(obj.get("arguments", {}))
    return ToolCall(obj["name"], arguments) if arguments is not None else None


class HermesToolParser(ToolParser):
    section_start = CALL_START

    def __init__(self, drop_cut_tail: bool = False) -> None:
        """drop_cut_tail: an unterminated last block that does not parse is dropped
        instead of turning the output into content. For outputs a grammar forced
        into this format (tool_choice required / named): every block is valid up
        to where max_tokens cut it, so the complete calls stand."""
        super().__init__()
        self.drop_cut_tail = drop_cut_tail

    def parse_section(self, section: str) -> list[ToolCall]:
        calls = []
        # section starts with CALL_START, so the first piece is "" and is skipped
        pieces = section.split(CALL_START)[1:]
        for i, piece in enumerate(pieces):
            block, end, _ = piece.partition(CALL_END)
            call = _parse_block(block)
            if call is None:
                if self.drop_cut_tail and calls and i == len(pieces) - 1 and not end:
                    break
                return []
            calls.append(call)
        return calls


_PROMPT_HEAD = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>"""

_PROMPT_TAIL = """</tools>

For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>"""


def tools_system_prompt(tools: list[dict]) -> str:
    """System-prompt text offering `tools` (OpenAI request `tools` entries) in the Hermes /
    Qwen2.5 wording, one JSON object per line, for a chat template that ignores `tools`."""
    if not tools:
        raise ValueError("tools_system_prompt needs at least one tool")
    if not all(isinstance(tool, dict) for tool in tools):
        raise ValueError("each tool must be a JSON object")
    lines = [json.dumps(tool, ensure_ascii=False) for tool in tools]
    return "\n".join([_PROMPT_HEAD, *lines, _PROMPT_TAIL])
