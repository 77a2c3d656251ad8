"""DeepSeek-V3 / R1 tool calls, as DeepSeek-V3's chat template writes them:

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
    ```json
    {ARGS}
    ```<｜tool▁call▁end｜>
    <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME2 ... <｜tool▁call▁end｜><｜tool▁calls▁end｜>

(full-width ｜ and ▁ in the markers). The section starts at `<｜tool▁calls▁begin｜>` and ends
at `<｜tool▁calls▁end｜>` or the end of the output; text outside the blocks inside it, and
anything after its end, is dropped. A block runs from `<｜tool▁call▁begin｜>` to
`<｜tool▁call▁end｜>`, or to the next block or the section's end when unterminated (cut by
max_tokens: still a call if its JSON parses). The word before `<｜tool▁sep｜>` is the call
type ("function" is the only one written) and is not checked. A block is malformed, and the
whole output becomes content (see base.py), without `<｜tool▁sep｜>`, with an empty name, or
when its body (the ```json fence removed) is not a JSON object.
"""

from __future__ import annotations

from tokenmill.serve.tool_parsers.base import ToolCall, ToolParser, arguments_json

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


def _parse_block(block: str) -> ToolCall | None:
    _type, sep, rest = block.partition(SEP)
    name, _, body = rest.partition("\n")
    # JSON never starts or ends with a backtick, so stripping them removes the fence (also
    # a partial closing fence left by a cut generation) and nothing else.
    body = body.strip().removeprefix("```json").strip("`")
    arguments = arguments_json(body)
    name = name.strip()
    if not sep or not name or arguments is None:
        return None
    return ToolCall(name, arguments)


class DeepSeekV3ToolParser(ToolParser):
    section_start = CALLS_BEGIN

    def parse_section(self, section: str) -> list[ToolCall]:
        section = section[len(CALLS_BEGIN):].partition(CALLS_END)[0]
        calls = []
        for piece in section.split(CALL_BEGIN)[1:]:  # the first piece precedes any block
            call = _parse_block(piece.partition(CALL_END)[0])
            if call is None:
                return []
            calls.append(call)
        return calls
