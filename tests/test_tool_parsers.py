"""Tool-call parsers (serve/tool_parsers/): hermes and deepseek_v3, whole and streamed."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenmill.serve.tool_parsers import TOOL_PARSERS, make_tool_parser, tools_system_prompt
from tokenmill.serve.tool_parsers.deepseek_v3 import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP


def hermes_call(name: str, arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n</tool_call>"


def ds_call(name: str, arguments: str) -> str:
    """One call as DeepSeek-V3's chat template renders it."""
    return f"{CALL_BEGIN}function{SEP}{name}\n```json\n{arguments}\n```{CALL_END}"


def ds_section(*calls: str) -> str:
    return CALLS_BEGIN + "\n".join(calls) + CALLS_END


def summary(content, calls) -> tuple:
    return content, [(call.name, call.arguments) for call in calls]


WEATHER = hermes_call("get_weather", {"city": "Paris", "unit": "c"})
HERMES_CASES = [
    # (output, content, [(name, arguments)])
    ("Just text.", "Just text.", []),
    ("", None, []),
    (" \n", None, []),
    (WEATHER, None, [("get_weather", '{"city":"Paris","unit":"c"}')]),
    ("\n\n" + WEATHER, None, [("get_weather", '{"city":"Paris","unit":"c"}')]),
    ("Let me check.\n" + WEATHER, "Let me check.\n", [("get_weather", '{"city":"Paris","unit":"c"}')]),
    (WEATHER + "\n" + hermes_call("time", {}) + "\n", None,
     [("get_weather", '{"city":"Paris","unit":"c"}'), ("time", "{}")]),
    (hermes_call("f", '{"a": [1, 2]}'), None, [("f", '{"a":[1,2]}')]),  # arguments as a JSON string
    ('<tool_call>\n{"name": "now"}\n</tool_call>', None, [("now", "{}")]),
    (hermes_call("天気", {"city": "東京 🗼"}), None, [("天気", '{"city":"東京 🗼"}')]),
    ('<tool_call>\n{"name": "f", "arguments": {"x": 1}}', None, [("f", '{"x":1}')]),  # cut after the JSON
    ('<tool_call>\n{"name": "f", "argum', '<tool_call>\n{"name": "f", "argum', []),  # cut inside it
    ("<tool_call>\nnot json\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", []),
    ('Hi <tool_call>{"arguments": {}}</tool_call>', 'Hi <tool_call>{"arguments": {}}</tool_call>', []),
    ('<tool_call>{"name": "f", "arguments": "oops"}</tool_call>',
     '<tool_call>{"name": "f", "arguments": "oops"}</tool_call>', []),
    ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
     '<tool_call>{"name": "f", "arguments": [1]}</tool_call>', []),
    (WEATHER + "<tool_call>{bad}</tool_call>", WEATHER + "<tool_call>{bad}</tool_call>", []),  # all or nothing
    ("a <toolbox> b", "a <toolbox> b", []),
]

DS_CASES = [
    ("Plain answer.", "Plain answer.", []),
    (ds_section(ds_call("get_weather", '{"city": "Paris"}')), None, [("get_weather", '{"city":"Paris"}')]),
    ("Checking." + ds_section(ds_call("a", '{"x": 1}'), ds_call("b", "{}")), "Checking.",
     [("a", '{"x":1}'), ("b", "{}")]),
    (ds_section(ds_call("天気", '{"city": "東京"}')) + "<｜end▁of▁sentence｜>", None, [("天気", '{"city":"東京"}')]),
    (CALLS_BEGIN + ds_call("f", '{"x": 1}')[:-len(CALL_END) - 2], None, [("f", '{"x":1}')]),  # cut in the fence
]
# A malformed section (or one with no block) makes the whole output the content.
DS_CASES += [(text, text, []) for text in [
    CALLS_BEGIN + f"{CALL_BEGIN}function{SEP}f\n```json\n{{\"x\"",  # cut inside the JSON
    ds_section(ds_call("f", "{oops}")),
    ds_section(ds_call("", "{}")),
    ds_section(f"{CALL_BEGIN}f\n```json\n{{}}\n```{CALL_END}"),  # no <｜tool▁sep｜>
    CALLS_BEGIN + CALLS_END,
    "Hi " + ds_section(ds_call("ok", "{}"), ds_call("bad", "[1]")),  # all or nothing
]]


@pytest.mark.parametrize("text,content,calls", HERMES_CASES)
def test_hermes_extract(text, content, calls):
    assert summary(*make_tool_parser("hermes").extract(text)) == (content, calls)


@pytest.mark.parametrize("text,content,calls", DS_CASES)
def test_deepseek_v3_extract(text, content, calls):
    assert summary(*make_tool_parser("deepseek_v3").extract(text)) == (content, calls)


def stream(name: str, cuts: list[str]) -> tuple:
    """Streams `cuts`, checks the delta shapes, and returns (content or None, [(name, arguments)], has_calls)."""
    parser = make_tool_parser(name)
    deltas = [d for cut in cuts for d in parser.feed(cut)] + parser.finish()
    content = "".join(d for d in deltas if isinstance(d, str))
    assert all(d for d in deltas if isinstance(d, str)), "no empty content deltas"
    calls: dict[int, list] = {}
    for d in (d for d in deltas if isinstance(d, dict)):
        if "id" in d:  # the header: exactly once per call, in index order
            assert d["index"] == len(calls) and d["type"] == "function" and d["function"]["arguments"] == ""
            assert re.fullmatch(r"call_[0-9a-f]{24}", d["id"])
            calls[d["index"]] = [d["function"]["name"], ""]
        else:
            assert set(d) == {"index", "function"} and set(d["function"]) == {"arguments"}
            calls[d["index"]][1] += d["function"]["arguments"]
    return content or None, [tuple(c) for c in calls.values()], parser.has_calls


def cuts_at(text: str, points: tuple[int, ...]) -> list[str]:
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def expected(name: str, text: str) -> tuple:
    content, calls = summary(*make_tool_parser(name).extract(text))
    return content, calls, bool(calls)


SHORT = {  # short enough for every 3-cut split
    "hermes": ["Hi.\n" + hermes_call("f", {"a": "é"}), "\n" + hermes_call("g", {}) + " " + hermes_call("h", {}),
               "a <tool", "a <toolbox> b <tool_call>{x}</tool_call>", " \n<tool_call>\n{\"name\": \"f\"",
               hermes_call("f", {}) + "<tool_call>{", "  "],
    "deepseek_v3": ["ok" + ds_section(ds_call("f", "{}")), "\n" + ds_section(ds_call("f", "{}")) + " x",
                    "<｜tool▁calls", "a " + CALLS_BEGIN + ds_call("f", "[")],
}
ALL = [(name, text) for name, texts in SHORT.items() for text in texts]
ALL += [("hermes", text) for text, _, _ in HERMES_CASES] + [("deepseek_v3", text) for text, _, _ in DS_CASES]


@pytest.mark.parametrize("name,text", [(name, text) for name, texts in SHORT.items() for text in texts])
def test_stream_equals_extract_every_split_in_two_or_three(name, text):
    want = expected(name, text)
    for n in (1, 2):
        for points in itertools.combinations_with_replacement(range(len(text) + 1), n):
            assert stream(name, cuts_at(text, points)) == want, (text, points)


@pytest.mark.parametrize("name,text", ALL)
def test_stream_equals_extract_every_split_in_two_and_per_character(name, text):
    want = expected(name, text)
    assert stream(name, list(text)) == want
    for point in range(len(text) + 1):
        assert stream(name, cuts_at(text, (point,))) == want, (text, point)


HERMES_FRAGMENTS = st.sampled_from(["<tool_call>", "</tool_call>", "<tool", "<", "_call>", '{"name": "f"',
                                    ', "arguments": {"k": "é"}', "}", "\n", " ", "a", "🗼"])
DS_FRAGMENTS = st.sampled_from([CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP, "function", "f", "\n",
                                "```json", "```", "{}", '{"k": 1}', "<｜tool▁", "a", " "])


@given(st.sampled_from(["hermes", "deepseek_v3"]), st.data())
def test_stream_equals_extract_random(name, data):
    fragments = HERMES_FRAGMENTS if name == "hermes" else DS_FRAGMENTS
    text = "".join(data.draw(st.lists(fragments, max_size=14)))
    points = tuple(sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6))))
    assert stream(name, cuts_at(text, points)) == expected(name, text)


def test_marker_prefix_held_back_then_released():
    parser = make_tool_parser("hermes")
    assert parser.feed("a <tool") == ["a "]
    assert parser.feed("box>") == ["<toolbox>"]
    assert parser.feed("<tool_call>\n{\"name\": \"f\"") == []
    assert parser.feed("}\n</tool_call>") == []
    deltas = parser.finish()
    assert [d["function"] for d in deltas] == [{"name": "f", "arguments": ""}, {"arguments": "{}"}]
    assert parser.has_calls


def test_leading_whitespace_before_a_call_is_no_content():
    parser = make_tool_parser("hermes")
    assert parser.feed("\n\n") == []
    assert parser.feed("<tool_call>{\"name\": \"f\"}</tool_call>") == []
    assert [d for d in parser.finish() if isinstance(d, str)] == []


def test_no_calls_flushes_held_text():
    parser = make_tool_parser("deepseek_v3")
    assert parser.feed("end <｜tool") == ["end "]
    assert parser.finish() == ["<｜tool"]
    assert not parser.has_calls


def test_call_ids_unique_and_openai_shape():
    _, calls = make_tool_parser("hermes").extract(WEATHER + WEATHER)
    assert calls[0].id != calls[1].id
    assert calls[0].to_openai() == {"id": calls[0].id, "type": "function",
                                    "function": {"name": "get_weather", "arguments": '{"city":"Paris","unit":"c"}'}}


def test_tools_system_prompt_offers_tools_and_its_format_parses():
    tool = {"type": "function", "function": {"name": "get_weather", "description": "Météo",
                                             "parameters": {"type": "object", "properties": {}}}}
    prompt = tools_system_prompt([tool])
    tools_text = prompt.split("<tools>\n")[1].split("\n</tools>")[0]
    assert [json.loads(line) for line in tools_text.splitlines()] == [tool]
    assert "<tool_call>" in prompt.split("\n</tools>")[1] and "Météo" in prompt
    with pytest.raises(ValueError):
        tools_system_prompt([])


def test_registry_and_unknown_name():
    for name, cls in TOOL_PARSERS.items():
        assert type(make_tool_parser(name)) is cls
    assert make_tool_parser("hermes") is not make_tool_parser("hermes")
    with pytest.raises(ValueError, match="--tool-call-parser.*deepseek_v3.*hermes"):
        make_tool_parser("mistral")


def test_forced_calls_keep_the_complete_ones_when_max_tokens_cuts_the_last():
    from tokenmill.serve.tool_parsers.hermes import HermesToolParser

    whole = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>\n'
    cut = whole + '<tool_call>\n{"name": "f", "argu'
    assert HermesToolParser().extract(cut)[1] == []  # free output: all or nothing
    content, calls = HermesToolParser(drop_cut_tail=True).extract(cut)
    assert content is None and [(c.name, c.arguments) for c in calls] == [("f", '{"a":1}')]
    broken = '<tool_call>\n{"name": "f", "arguments": 3}\n</tool_call>\n<tool_call>\n{"name": "f'
    assert HermesToolParser(drop_cut_tail=True).extract(broken)[1] == []  # only a cut last block is dropped
    streamed = HermesToolParser(drop_cut_tail=True)
    deltas = [d for ch in cut for d in streamed.feed(ch)] + streamed.finish()
    assert streamed.has_calls and [d["function"]["arguments"] for d in deltas if "id" not in d] == ['{"a":1}']
