"""DeepSeek-R1 reasoning parser (serve/reasoning.py): split, streaming, reasoning tokens."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenmill.serve.reasoning import REASONING_PARSERS, DeepSeekR1ReasoningParser, make_reasoning_parser

SPLIT_CASES = [
    # (output, reasoning, content)
    ("Let me think.</think>\n\nThe answer is 4.", "Let me think.", "The answer is 4."),
    ("<think>\nhmm</think>\n\n4", "\nhmm", "4"),
    ("  \n<think>hmm</think>4", "hmm", "4"),
    ("still thinking, cut by max_tokens", "still thinking, cut by max_tokens", None),
    ("<think>cut", "cut", None),
    ("thought</think>", "thought", None),
    ("thought</think>  \n ", "thought", None),
    ("</think>just the answer", None, "just the answer"),
    ("<think></think>\n\nanswer", None, "answer"),
    ("", None, None),
    ("   ", "   ", None),
    ("a <think> in the middle</think>b", "a <think> in the middle", "b"),
    ("x</think> a </think> b", "x", "a </think> b"),
    ("x</think>\n\n  indented\n", "x", "indented\n"),
    ("<thinking>x</think>y", "<thinking>x", "y"),
    ("思考 🤔</think>\n答案 é", "思考 🤔", "答案 é"),
    ("<thi", "<thi", None),
    ("a</thi", "a</thi", None),
]

TEXTS = [case[0] for case in SPLIT_CASES] + ["<think>a</think>b", " <think>\n</think> x</think>"]


def stream(cuts: list[str]) -> tuple[str, str]:
    parser = DeepSeekR1ReasoningParser()
    pieces = [parser.feed(cut) for cut in cuts] + [parser.finish()]
    return "".join(p[0] for p in pieces), "".join(p[1] for p in pieces)


def cuts_at(text: str, points: tuple[int, ...]) -> list[str]:
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:])]


def expected(text: str) -> tuple[str, str]:
    reasoning, content = DeepSeekR1ReasoningParser().split(text)
    return reasoning or "", content or ""


@pytest.mark.parametrize("text,reasoning,content", SPLIT_CASES)
def test_split(text, reasoning, content):
    assert DeepSeekR1ReasoningParser().split(text) == (reasoning, content)


@pytest.mark.parametrize("text", TEXTS)
def test_stream_equals_split_every_two_and_three_cuts(text):
    want = expected(text)
    for n in (1, 2):
        for points in itertools.combinations_with_replacement(range(len(text) + 1), n):
            assert stream(cuts_at(text, points)) == want, (text, points)


@pytest.mark.parametrize("text", TEXTS)
def test_stream_one_character_at_a_time(text):
    assert stream(list(text)) == expected(text)


FRAGMENTS = st.sampled_from(["<think>", "</think>", "<", "</", "<th", "</thi", "nk>", "think", ">", "\n", " ",
                             "a", "é", "🤔"])


@given(st.lists(FRAGMENTS, max_size=12), st.lists(st.integers(0, 200), max_size=6))
def test_stream_equals_split_random(fragments, raw_points):
    text = "".join(fragments)
    points = tuple(sorted(p % (len(text) + 1) for p in raw_points))
    assert stream(cuts_at(text, points)) == expected(text)


def test_cut_tag_held_back_then_released():
    parser = DeepSeekR1ReasoningParser()
    assert parser.feed("Hmm </thi") == ("Hmm ", "")
    assert parser.feed("s is not a tag") == ("</this is not a tag", "")
    assert parser.feed(" </th") == (" ", "")
    assert parser.feed("ink>\n") == ("", "")  # the tag completes; whitespace before the answer waits
    assert parser.feed("\nYes") == ("", "Yes")
    assert parser.finish() == ("", "")


def test_opening_tag_prefix_held_then_released():
    parser = DeepSeekR1ReasoningParser()
    assert parser.feed(" <th") == ("", "")
    assert parser.feed("ought") == (" <thought", "")


def test_finish_flushes_an_unfinished_end_tag_as_reasoning():
    parser = DeepSeekR1ReasoningParser()
    assert parser.feed("abc</think") == ("abc", "")
    assert parser.finish() == ("</think", "")


def test_reasoning_token_counter_per_token():
    counter = DeepSeekR1ReasoningParser().token_counter()
    tokens = ["<think>", "\n", "Let", " me", "</", "think", ">", "\n\n", "Four", "."]
    flags = [counter.add(t) for t in tokens]
    # the token that completes `</think>` is the last reasoning token
    assert flags == [True] * 7 + [False] * 3
    assert counter.count == 7 and counter.ended


def test_reasoning_tokens_without_end_tag_are_all_reasoning():
    parser = DeepSeekR1ReasoningParser()
    assert parser.count_reasoning_tokens(["a", "</th", "in", "k"]) == 4
    assert parser.count_reasoning_tokens(["</think>", "answer"]) == 1
    assert parser.count_reasoning_tokens([]) == 0


@given(st.lists(FRAGMENTS, max_size=12))
def test_reasoning_tokens_end_with_the_token_that_completes_the_tag(tokens):
    count = DeepSeekR1ReasoningParser().count_reasoning_tokens(tokens)
    if "</think>" not in "".join(tokens):
        assert count == len(tokens)
    else:
        assert "</think>" in "".join(tokens[:count])
        assert "</think>" not in "".join(tokens[:count - 1])


def test_registry_and_unknown_name():
    assert isinstance(make_reasoning_parser("deepseek_r1"), REASONING_PARSERS["deepseek_r1"])
    with pytest.raises(ValueError, match="--reasoning-parser.*deepseek_r1"):
        make_reasoning_parser("qwen3")
