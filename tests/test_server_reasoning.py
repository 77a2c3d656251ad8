"""--reasoning-parser deepseek_r1 through the openai SDK: reasoning_content and
content, streamed and not, and reasoning tokens in usage.

The app runs in-process (the SDK's HTTP client is starlette's TestClient) over
the shared float32 engine: the embedded model does not think, so its output is
made to (``<think>...</think>`` then an answer) with a regex constraint.
"""

from __future__ import annotations

import re
import subprocess
import sys

import openai
import pytest
from _spec_helpers import _plain_engine
from starlette.testclient import TestClient

from tokenmill.engine.async_engine import AsyncEngine
from tokenmill.serve.api import build_app

THINKING = r"<think>\n[a-z]{2,8}( [a-z]{2,8}){2,5}\n</think>\n\n[A-Z][a-z]{2,8}( [a-z]{2,8}){1,4}\."
ASK = [{"role": "user", "content": "Is water wet? Think first."}]


@pytest.fixture(scope="module")
def client():
    engine = AsyncEngine(_plain_engine())
    try:
        with TestClient(build_app(engine, reasoning_parser="deepseek_r1")) as http:
            yield openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)
    finally:
        engine.shutdown()


def _ask(client, **kw):
    kw.setdefault("extra_body", {"structured_outputs": {"regex": THINKING}})
    return client.chat.completions.create(model=client.models.list().data[0].id, messages=ASK, temperature=0,
                                          max_tokens=64, **kw)


def test_reasoning_is_split_out_and_counted(client):
    resp = _ask(client)
    message, usage = resp.choices[0].message, resp.usage
    reasoning = message.model_extra["reasoning_content"]
    assert re.fullmatch(r"\n[a-z]{2,8}( [a-z]{2,8}){2,5}\n", reasoning), reasoning  # verbatim between the tags
    assert re.fullmatch(r"[A-Z][a-z]{2,8}( [a-z]{2,8}){1,4}\.", message.content), message.content
    thinking = usage.completion_tokens_details.reasoning_tokens
    assert 0 < thinking < usage.completion_tokens


def test_streamed_parts_reassemble_to_the_whole_answer(client):
    whole = _ask(client)
    reasoning, content, usage = "", "", None
    for chunk in _ask(client, stream=True, stream_options={"include_usage": True}):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            reasoning += (choice.delta.model_extra or {}).get("reasoning_content") or ""
            content += choice.delta.content or ""
    assert reasoning == whole.choices[0].message.model_extra["reasoning_content"]
    assert content == whole.choices[0].message.content
    assert usage.completion_tokens_details.reasoning_tokens == whole.usage.completion_tokens_details.reasoning_tokens


def test_output_without_end_tag_is_all_reasoning(client):
    resp = _ask(client, extra_body={"structured_outputs": {"regex": "<think>\n[a-z]{2,8}( [a-z]{2,8}){2,5}"}})
    message = resp.choices[0].message
    assert message.content is None and message.model_extra["reasoning_content"]
    assert resp.usage.completion_tokens_details.reasoning_tokens == resp.usage.completion_tokens


@pytest.mark.parametrize("flags, message", [
    (["--reasoning-parser", "qwen9"], "invalid choice"),
    (["--tool-call-parser", "xml"], "invalid choice"),
    (["--enable-auto-tool-choice"], "--enable-auto-tool-choice needs --tool-call-parser"),
])
def test_bad_parser_flags_exit_before_loading(flags, message):
    result = subprocess.run([sys.executable, "-m", "tokenmill.cli", "serve", "--port", "0", *flags],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr
