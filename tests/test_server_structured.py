"""Structured outputs and tool calls with the official openai SDK against a live
``tokenmill serve`` (started with --enable-auto-tool-choice --tool-call-parser hermes).

Every constrained answer must parse and match its schema, streamed or not;
bad schemas and tool definitions are 400s naming the field; a constrained
request beside unconstrained ones changes none of their tokens.
"""

from __future__ import annotations

import asyncio
import json
import re

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0}}}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
                   "properties": {"city": {"type": "string", "maxLength": 20},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Current time in a timezone",
    "parameters": {"type": "object", "required": ["tz"], "properties": {"tz": {"type": "string", "maxLength": 16}}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]



def _json_schema(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}


def _streamed_text(stream) -> tuple[str, str | None]:
    text, finish = "", None
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return text, finish


def test_json_schema_holds_streamed_and_not(client, model):
    kw = dict(model=model, messages=[{"role": "user", "content": "Invent a person."}], max_tokens=48,
              temperature=0, response_format=_json_schema(PERSON))
    whole = client.chat.completions.create(**kw)
    jsonschema.validate(json.loads(whole.choices[0].message.content), PERSON)
    assert whole.choices[0].finish_reason == "stop"
    assert _streamed_text(client.chat.completions.create(stream=True, **kw)) == (whole.choices[0].message.content,
                                                                                 "stop")


def test_sdk_parse_helper_with_a_pydantic_model(client, model):
    class City(BaseModel):  # bounded: a small model may otherwise write one string or number forever
        name: str = Field(max_length=20)
        country: str = Field(max_length=20)
        population: int = Field(ge=0, le=100_000_000)

    done = client.chat.completions.parse(model=model, messages=[{"role": "user", "content": "Describe Paris."}],
                                         response_format=City, max_tokens=100, temperature=0)
    assert isinstance(done.choices[0].message.parsed, City)


def test_json_object_n2_seeded(client, model):
    resp = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Any JSON data."}],
                                          max_tokens=128, temperature=1.0, seed=3, n=2,
                                          response_format={"type": "json_object"})
    assert len(resp.choices) == 2
    for choice in resp.choices:  # free-form JSON at temperature 1 may outrun max_tokens: then a prefix
        assert choice.message.content.startswith("{")
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.message.content), dict)


@pytest.mark.parametrize("extra, check", [
    ({"structured_outputs": {"regex": r"\d{3}-\d{4}"}}, lambda t: re.fullmatch(r"\d{3}-\d{4}", t)),
    ({"structured_outputs": {"choice": ["yes", "no"]}}, lambda t: t in ("yes", "no")),
    ({"guided_choice": ["red", "green"]}, lambda t: t in ("red", "green")),
    ({"guided_regex": "[A-Z][a-z]{2,8}"}, lambda t: re.fullmatch("[A-Z][a-z]{2,8}", t)),
    ({"structured_outputs": {"grammar": 'root ::= "A" | "B" "!"'}}, lambda t: t in ("A", "B!")),
    ({"guided_json": PERSON}, lambda t: jsonschema.validate(json.loads(t), PERSON) is None),
])
def test_vllm_extra_fields_on_both_endpoints(client, model, extra, check):
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Answer."}],
                                          max_tokens=40, temperature=0, extra_body=extra)
    assert check(chat.choices[0].message.content), chat.choices[0].message.content
    completion = client.completions.create(model=model, prompt="Answer:", max_tokens=40, temperature=0,
                                           extra_body=extra)
    assert check(completion.choices[0].text), completion.choices[0].text


@pytest.mark.parametrize("body, param", [
    ({"response_format": _json_schema({"type": "frobnicate"})}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "xml"}}, "response_format.type"),
    ({"structured_outputs": {"regex": "[0-9"}}, "structured_outputs.regex"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
    ({"structured_outputs": {"yaml": "a"}}, "structured_outputs.yaml"),
    ({"guided_grammar": "start: missing_rule"}, "guided_grammar"),
    ({"guided_choice": []}, "guided_choice"),
    ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
])
def test_bad_constraints_are_400_naming_the_field(client, model, body, param):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=model, messages=ASK, max_tokens=4, extra_body=body)
    assert err.value.status_code == 400
    assert err.value.body["param"] == param, err.value.body


def test_constrained_request_changes_no_other_tokens(server, model, greedy):
    prompts = ["The capital of France is", "Once upon a time, in a small village,"]
    refs = [greedy(p, 16).text for p in prompts]

    async def run():
        async with openai.AsyncOpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=300) as c:
            plain = [c.completions.create(model=model, prompt=p, max_tokens=16, temperature=0) for p in prompts * 2]
            constrained = [c.chat.completions.create(model=model, messages=[{"role": "user", "content": "A person."}],
                                                     max_tokens=40, temperature=t, seed=1,
                                                     response_format=_json_schema(PERSON)) for t in (0.0, 1.0)]
            return await asyncio.gather(*plain, *constrained)

    results = asyncio.run(run())
    assert [r.choices[0].text for r in results[:4]] == refs * 2
    for r in results[4:]:
        jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)


# ---- tools ---------------------------------------------------------------------------------

def _check_calls(message, tools: list[dict]) -> list:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert message.tool_calls
    for call in message.tool_calls:
        assert call.type == "function" and re.fullmatch(r"call_[0-9a-f]{24}", call.id)
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])
    return message.tool_calls


def test_required_tool_choice_forces_valid_calls(client, model):
    resp = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER_TOOL, TIME_TOOL],
                                          tool_choice="required", max_tokens=120, temperature=0)
    calls = _check_calls(resp.choices[0].message, [WEATHER_TOOL, TIME_TOOL])
    assert resp.choices[0].finish_reason == "tool_calls"
    assert resp.choices[0].message.content is None
    assert len(calls) >= 1


def test_named_tool_choice_and_no_parallel_calls(client, model):
    for choice, parallel in ({"type": "function", "function": {"name": "get_time"}}, None), ("required", False):
        resp = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER_TOOL, TIME_TOOL],
                                              tool_choice=choice, max_tokens=120, temperature=0,
                                              **({} if parallel is None else {"parallel_tool_calls": parallel}))
        calls = _check_calls(resp.choices[0].message, [WEATHER_TOOL, TIME_TOOL])
        assert len(calls) == 1
        if parallel is None:
            assert calls[0].function.name == "get_time"


def test_streamed_tool_calls_reassemble_to_the_whole_answer(client, model):
    kw = dict(model=model, messages=ASK, tools=[WEATHER_TOOL], tool_choice="required", max_tokens=120,
              temperature=0)
    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls
    calls, finish = {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for delta in choice.delta.tool_calls or []:
                entry = calls.setdefault(delta.index, {"name": None, "arguments": ""})
                if delta.function.name:
                    assert entry["name"] is None  # the name comes once
                    entry["name"] = delta.function.name
                entry["arguments"] += delta.function.arguments or ""
    assert finish == "tool_calls"
    assert [(c["name"], c["arguments"]) for _, c in sorted(calls.items())] == \
        [(c.function.name, c.function.arguments) for c in whole]


def test_auto_tool_choice_and_a_tool_round_trip(client, model):
    first = client.chat.completions.create(model=model, messages=ASK, tools=[WEATHER_TOOL], max_tokens=64,
                                           temperature=0)
    message = first.choices[0].message
    assert message.content is not None or message.tool_calls  # the model chose; either parses
    call = {"id": "call_0123456789abcdef01234567", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": call["id"], "content": '{"temperature": 21}'}]
    answer = client.chat.completions.create(model=model, messages=history, tools=[WEATHER_TOOL], tool_choice="none",
                                            max_tokens=24, temperature=0)
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls


@pytest.mark.parametrize("body, param", [
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "frobnicate"}}}],
      "tool_choice": "required"}, "tools"),
    ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER_TOOL], "tool_choice": "required", "response_format": {"type": "json_object"}},
     "tool_choice"),
    ({"messages": ASK + [{"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": "get_weather", "arguments": "{not json"}}]}]}, "messages[1].tool_calls[0].function.arguments"),
])
def test_bad_tool_requests_are_400_naming_the_field(client, model, body, param):
    body = {"messages": ASK, **body}
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=model, max_tokens=4, **body)
    assert err.value.body["param"] == param, err.value.body
