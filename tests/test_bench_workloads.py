"""Benchmark workloads: synthetic, shared-prefix, multi-turn, JSONL and ShareGPT
files, and the ``--workload`` flags. Uses the embedded model's tokenizer only
(no weights), so the whole module runs in seconds."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys

import pytest

from tokenmill.bench.workloads.args import add_workload_args, build_workload
from tokenmill.bench.workloads.lengths import LOGNORMAL_CAP, LengthDist
from tokenmill.bench.workloads.synthetic import SyntheticSpec
from tokenmill.bench.workloads.text import WordSource


@pytest.fixture(scope="module")
def tok():
    from tokenmill.model.embedded import embedded_gguf_path
    from tokenmill.model.tokenizer import load_tokenizer

    return load_tokenizer(embedded_gguf_path())


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_workload_args(parser)
    return parser.parse_args(list(argv))


def build(tok, *argv: str, max_model_len: int | None = None):
    return build_workload(parse(*argv), tok, max_model_len=max_model_len)


def chat_ids(tok, messages) -> tuple[int, ...]:
    """The ids the server's chat route computes for these messages."""
    return tuple(tok.encode(tok.apply_chat_template(list(messages), add_generation_prompt=True),
                            add_special_tokens=False))


def common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def prompts(workload) -> list[tuple]:
    return [(s.prompt, s.prompt_token_ids, s.max_tokens, s.messages, s.group) for s in workload.samples]


# --- synthetic -----------------------------------------------------------------------------


def test_default_workload_is_synthetic_sized_for_the_embedded_model(tok):
    w = build(tok)
    spec = SyntheticSpec()
    assert w.name == "synthetic"
    assert len(w.samples) == spec.num_samples == 256
    assert w.params == {"workload": "synthetic", "num_samples": 256, "input_len": 128, "output_len": 128,
                        "length_dist": "uniform", "range_ratio": 0.5, "seed": 0}
    assert "\n" not in w.description and "seed 0" in w.description
    assert [s.index for s in w.samples] == list(range(256))
    for s in w.samples:
        assert 64 <= len(s.prompt_token_ids) <= 192 and 64 <= s.max_tokens <= 192
        assert s.messages is None and s.group is None
        assert list(s.prompt_token_ids) == tok.encode(s.prompt)  # what /v1/completions would see
        assert not set(s.prompt_token_ids) & tok.all_special_ids


def test_synthetic_is_deterministic_by_seed_and_differs_across_seeds(tok):
    a = build(tok, "--num-samples", "20", "--workload-seed", "7")
    b = build(tok, "--num-samples", "20", "--workload-seed", "7")
    c = build(tok, "--num-samples", "20", "--workload-seed", "8")
    assert prompts(a) == prompts(b)
    assert all(x.prompt != y.prompt for x, y in zip(a.samples, c.samples))
    assert [s.max_tokens for s in a.samples] != [s.max_tokens for s in c.samples]


def test_synthetic_output_lengths_do_not_change_the_prompts(tok):
    a = build(tok, "--num-samples", "10", "--output-len", "16")
    b = build(tok, "--num-samples", "10", "--output-len", "300", "--length-dist", "uniform")
    assert [s.prompt for s in a.samples] == [s.prompt for s in b.samples]
    assert {s.max_tokens for s in a.samples} != {s.max_tokens for s in b.samples}


def test_fixed_lengths_are_exact(tok):
    w = build(tok, "--num-samples", "50", "--input-len", "37", "--output-len", "11", "--length-dist", "fixed")
    assert {len(s.prompt_token_ids) for s in w.samples} == {37}
    assert {s.max_tokens for s in w.samples} == {11}
    assert all(list(s.prompt_token_ids) == tok.encode(s.prompt) for s in w.samples)
    assert len({s.prompt for s in w.samples}) == 50


def test_uniform_lengths_stay_in_bounds_and_spread(tok):
    w = build(tok, "--num-samples", "300", "--input-len", "100", "--output-len", "40", "--range-ratio", "0.25")
    ins = [len(s.prompt_token_ids) for s in w.samples]
    outs = [s.max_tokens for s in w.samples]
    assert 75 <= min(ins) < 85 and 115 < max(ins) <= 125
    assert 30 <= min(outs) < 33 and 47 < max(outs) <= 50
    assert abs(statistics.fmean(ins) - 100) < 5
    assert all(list(s.prompt_token_ids) == tok.encode(s.prompt) for s in w.samples)


def test_word_text_hits_every_small_length_exactly(tok):
    words = WordSource.from_tokenizer(tok)
    rng = random.Random(0)
    for n in range(1, 60):
        text, ids = words.text(rng, n)
        assert len(ids) == n and ids == tok.encode(text, add_special_tokens=False) and text.strip()


@pytest.mark.parametrize("kind", ["normal", "lognormal"])
def test_normal_and_lognormal_keep_the_mean_and_their_bounds(kind):
    dist = LengthDist("input_len", 100, kind, 0.5)
    rng = random.Random(1)
    draws = [dist.draw(rng) for _ in range(5000)]
    assert abs(statistics.fmean(draws) - 100) < 4
    assert abs(statistics.stdev(draws) - 50) < 8  # r is the coefficient of variation for both
    if kind == "normal":
        assert 1 <= min(draws) and max(draws) <= 199
        assert abs(statistics.median(draws) - 100) < 5
    else:
        assert 1 <= min(draws) and max(draws) <= LOGNORMAL_CAP * 100
        assert statistics.median(draws) < 95  # right-skewed: median below the mean


def test_length_dist_clamps_to_at_least_one():
    rng = random.Random(0)
    assert min(LengthDist("output_len", 2, "normal", 3.0).draw(rng) for _ in range(500)) == 1
    assert {LengthDist("output_len", 1, "uniform", 1.0).draw(rng) for _ in range(100)} <= {1, 2}
    assert {LengthDist("output_len", 9, "lognormal", 0.0).draw(rng) for _ in range(10)} == {9}


# --- shared prefix -------------------------------------------------------------------------


def test_shared_prefix_groups_share_their_system_prompt_tokens(tok):
    w = build(tok, "--workload", "shared-prefix", "--num-prefixes", "3", "--questions-per-prefix", "4",
              "--prefix-len", "100", "--input-len", "12", "--output-len", "9")
    assert w.name == "shared-prefix" and len(w.samples) == 12
    assert w.params["prefix_len"] == 100 and w.params["num_prefixes"] == 3
    # Round-robin: neighbours never share a prefix; each prefix recurs every 3 samples.
    assert [s.group for s in w.samples[:6]] == ["prefix-0", "prefix-1", "prefix-2"] * 2
    groups: dict[str, list] = {}
    for s in w.samples:
        assert s.max_tokens == 9
        assert [m["role"] for m in s.messages] == ["system", "user"]
        assert len(tok.encode(s.messages[0]["content"], add_special_tokens=False)) == 100
        assert len(tok.encode(s.messages[1]["content"], add_special_tokens=False)) == 12
        assert s.prompt_token_ids == chat_ids(tok, s.messages)
        groups.setdefault(s.group, []).append(s.prompt_token_ids)
    assert len(groups) == 3 and all(len(g) == 4 for g in groups.values())
    for ids in groups.values():
        assert min(common_prefix(ids[0], other) for other in ids[1:]) >= 100
    firsts = [g[0] for g in groups.values()]
    assert common_prefix(firsts[0], firsts[1]) < 20  # distinct system prompts: only the template header


def test_shared_prefix_is_deterministic_by_seed(tok):
    argv = ("--workload", "shared-prefix", "--num-prefixes", "2", "--questions-per-prefix", "2", "--prefix-len", "20")
    assert prompts(build(tok, *argv)) == prompts(build(tok, *argv))
    assert prompts(build(tok, *argv)) != prompts(build(tok, *argv, "--workload-seed", "1"))


# --- multi-turn ----------------------------------------------------------------------------


def test_multi_turn_prompts_extend_the_previous_turn_token_for_token(tok):
    w = build(tok, "--workload", "multi-turn", "--num-conversations", "3", "--turns", "4", "--input-len", "10",
              "--output-len", "15")
    assert w.name == "multi-turn" and len(w.samples) == 12
    # Turn-major order: every conversation's first turn, then every second turn, ...
    assert [s.group for s in w.samples[:6]] == ["conversation-0", "conversation-1", "conversation-2"] * 2
    by_conversation: dict[str, list] = {}
    for s in w.samples:
        assert s.prompt_token_ids == chat_ids(tok, s.messages) and s.max_tokens == 15
        by_conversation.setdefault(s.group, []).append(s)
    for turns in by_conversation.values():
        assert [len(t.messages) for t in turns] == [1, 3, 5, 7]
        for earlier, later in zip(turns, turns[1:]):
            assert later.messages[:len(earlier.messages)] == earlier.messages
            assert later.messages[-2]["role"] == "assistant" and later.messages[-1]["role"] == "user"
            assert len(tok.encode(later.messages[-2]["content"], add_special_tokens=False)) == 15
            assert later.prompt.startswith(earlier.prompt)
            assert later.prompt_token_ids[:len(earlier.prompt_token_ids)] == earlier.prompt_token_ids
            assert len(later.prompt_token_ids) > len(earlier.prompt_token_ids) + 25


# --- jsonl ---------------------------------------------------------------------------------


def write_lines(path, lines: list) -> str:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return str(path)


def test_jsonl_reads_chat_and_completion_requests(tok, tmp_path):
    chat = [{"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Name a "}, {"type": "text", "text": "color."}]}]
    path = write_lines(tmp_path / "reqs.jsonl", [
        {"model": "x", "messages": chat, "max_completion_tokens": 7, "max_tokens": 99, "temperature": 0.7},
        "",
        {"prompt": "The capital of France is"},
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5},
    ])
    w = build(tok, "--workload", "jsonl", "--dataset", path, "--output-len", "33")
    assert w.name == "jsonl:reqs.jsonl" and [s.index for s in w.samples] == [0, 1, 2]
    first, second, third = w.samples
    assert first.messages == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a color."})
    assert first.max_tokens == 7  # max_completion_tokens wins over max_tokens
    assert first.prompt_token_ids == chat_ids(tok, first.messages)
    assert second.messages is None and second.max_tokens == 33  # default from --output-len
    assert list(second.prompt_token_ids) == tok.encode("The capital of France is")
    assert third.max_tokens == 5
    assert w.params["dataset"] == path and w.params["default_max_tokens"] == 33
    assert len(build(tok, "--workload", "jsonl", "--dataset", path, "--num-samples", "2").samples) == 2


@pytest.mark.parametrize("line, problem", [
    ('{"messages": [{"role": "user", "content": "hi"}]', "invalid JSON"),
    ('["not", "an", "object"]', "expected a JSON object"),
    ('{"model": "x"}', 'exactly one of "messages"'),
    ('{"prompt": "a", "messages": []}', 'exactly one of "messages"'),
    ('{"messages": []}', "messages: must be a non-empty list"),
    ('{"messages": [{"role": "wizard", "content": "hi"}]}', "messages[0].role"),
    ('{"messages": [{"role": "user", "content": 5}]}', "messages[0].content"),
    ('{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', "messages[0].content[0]"),
    ('{"prompt": "hi", "max_tokens": 0}', "max_tokens: must be an integer >= 1"),
    ('{"prompt": "hi", "max_completion_tokens": "5"}', "max_completion_tokens"),
    ('{"prompt": ""}', "prompt: must be a non-empty string"),
])
def test_jsonl_bad_lines_name_file_and_line(tok, tmp_path, line, problem):
    path = write_lines(tmp_path / "bad.jsonl", [{"prompt": "fine"}, "", line])
    with pytest.raises(ValueError) as err:
        build(tok, "--workload", "jsonl", "--dataset", path)
    assert f"{path}:3" in str(err.value) and problem in str(err.value)


def test_jsonl_request_over_max_model_len_names_its_line(tok, tmp_path):
    path = write_lines(tmp_path / "long.jsonl", [{"prompt": "short", "max_tokens": 4},
                                                 {"prompt": " ".join(["word"] * 60), "max_tokens": 4}])
    assert len(build(tok, "--workload", "jsonl", "--dataset", path, max_model_len=100).samples) == 2
    with pytest.raises(ValueError, match=re.escape(f"{path}:2: 60 prompt + 4 output tokens exceed max_model_len 50")):
        build(tok, "--workload", "jsonl", "--dataset", path, max_model_len=50)


# --- sharegpt ------------------------------------------------------------------------------


def sharegpt_conversations() -> list[dict]:
    return [
        {"id": "a", "conversations": [{"from": "system", "value": "You are terse."},
                                      {"from": "human", "value": "What is two plus two?"},
                                      {"from": "gpt", "value": "Four, of course."},
                                      {"from": "human", "value": "And three?"}]},
        {"id": "b", "conversations": [{"role": "user", "content": "Say hello."},
                                      {"role": "assistant", "content": "Hello there, friend. " * 10}]},
        {"id": "only-human", "conversations": [{"from": "human", "value": "Anyone?"}]},
        {"id": "blank-reply", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "  "}]},
        {"id": "gpt-first", "conversations": [{"from": "gpt", "value": "Welcome!"},
                                              {"from": "human", "value": "Thanks. Tell me a joke."},
                                              {"from": "chatgpt", "value": "Why did the chicken cross?"}]},
        {"id": "empty", "conversations": []},
    ]


def test_sharegpt_takes_the_first_exchange_of_usable_conversations(tok, tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(sharegpt_conversations()), encoding="utf-8")
    w = build(tok, "--workload", "sharegpt", "--dataset", str(path), "--max-output-len", "20")
    assert w.name == "sharegpt:sg.json" and len(w.samples) == 3
    assert w.params["conversations"] == 6 and w.params["with_exchange"] == 3 and w.params["max_output_len"] == 20
    by_reference = {s.reference: s for s in w.samples}
    terse = by_reference["Four, of course."]
    assert terse.messages == ({"role": "system", "content": "You are terse."},
                              {"role": "user", "content": "What is two plus two?"})
    assert terse.max_tokens == len(tok.encode("Four, of course.", add_special_tokens=False))
    assert terse.prompt_token_ids == chat_ids(tok, terse.messages)
    assert by_reference["Hello there, friend. " * 10].max_tokens == 20  # clamped to --max-output-len
    joke = by_reference["Why did the chicken cross?"]
    assert joke.messages == ({"role": "user", "content": "Thanks. Tell me a joke."},)


def test_sharegpt_jsonl_form_and_max_model_len_skips(tok, tmp_path):
    path = write_lines(tmp_path / "sg.jsonl", sharegpt_conversations())
    everything = build(tok, "--workload", "sharegpt", "--dataset", path)
    longest = max(len(s.prompt_token_ids) + s.max_tokens for s in everything.samples)
    w = build(tok, "--workload", "sharegpt", "--dataset", path, max_model_len=longest - 1)
    assert len(w.samples) == len(everything.samples) - 1 and w.params["skipped_too_long"] == 1
    assert all(len(s.prompt_token_ids) + s.max_tokens < longest for s in w.samples)


def test_sharegpt_subsample_is_seeded(tok, tmp_path):
    rows = [{"conversations": [{"from": "human", "value": f"Question number {i}?"},
                               {"from": "gpt", "value": f"Answer number {i}."}]} for i in range(30)]
    path = write_lines(tmp_path / "many.jsonl", rows)

    def refs(*extra):
        w = build(tok, "--workload", "sharegpt", "--dataset", path, "--num-samples", "5", *extra)
        return [s.reference for s in w.samples]

    assert len(refs()) == 5 and refs() == refs()
    assert refs() != refs("--workload-seed", "3")
    assert len(build(tok, "--workload", "sharegpt", "--dataset", path, "--num-samples", "100").samples) == 30


@pytest.mark.parametrize("record, problem", [
    ({"conversation": []}, '"conversations" list'),
    ({"conversations": [{"from": "alien", "value": "hi"}]}, "unknown speaker 'alien'"),
    ({"conversations": [{"from": "human", "value": ["hi"]}]}, "must be a string"),
    ({"conversations": ["hi"]}, "conversations[0]: expected an object"),
])
def test_sharegpt_malformed_records_are_named(tok, tmp_path, record, problem):
    path = write_lines(tmp_path / "bad.jsonl", [sharegpt_conversations()[0], record])
    with pytest.raises(ValueError) as err:
        build(tok, "--workload", "sharegpt", "--dataset", path)
    assert f"{path}:2" in str(err.value) and problem in str(err.value)
    listed = tmp_path / "bad.json"
    listed.write_text(json.dumps([sharegpt_conversations()[0], record]), encoding="utf-8")
    with pytest.raises(ValueError, match="entry 1"):
        build(tok, "--workload", "sharegpt", "--dataset", str(listed))


def test_sharegpt_without_usable_conversations(tok, tmp_path):
    path = write_lines(tmp_path / "none.jsonl", sharegpt_conversations()[2:4])
    with pytest.raises(ValueError, match="--dataset: .*no usable conversation among 2"):
        build(tok, "--workload", "sharegpt", "--dataset", path)


# --- flags ---------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, flag, problem", [
    (("--num-samples", "0"), "--num-samples", "must be an integer >= 1"),
    (("--input-len", "-3"), "--input-len", "must be an integer >= 1"),
    (("--output-len", "0"), "--output-len", "must be an integer >= 1"),
    (("--range-ratio", "1.5"), "--range-ratio", "ratio in [0, 1]"),
    (("--range-ratio", "-0.1", "--length-dist", "normal"), "--range-ratio", ">= 0"),
    (("--prefix-len", "64"), "--prefix-len", "does not apply to --workload synthetic"),
    (("--workload", "shared-prefix", "--num-samples", "9"), "--num-samples", "does not apply"),
    (("--workload", "shared-prefix", "--num-prefixes", "0"), "--num-prefixes", ">= 1"),
    (("--workload", "shared-prefix", "--input-len", "0"), "--input-len", ">= 1"),
    (("--workload", "multi-turn", "--turns", "0"), "--turns", ">= 1"),
    (("--workload", "multi-turn", "--input-len", "0"), "--input-len", ">= 1"),
    (("--workload", "multi-turn", "--length-dist", "fixed"), "--length-dist", "does not apply"),
    (("--workload", "jsonl"), "--dataset", "pass --dataset PATH"),
    (("--workload", "sharegpt"), "--dataset", "pass --dataset PATH"),
    (("--workload", "jsonl", "--dataset", "/nonexistent/requests.jsonl"), "--dataset", "no such file"),
    (("--workload", "jsonl", "--dataset", "x.jsonl", "--workload-seed", "1"), "--workload-seed", "does not apply"),
    (("--workload", "sharegpt", "--dataset", "x.json", "--max-output-len", "0"), "--max-output-len", ">= 1"),
    (("--workload", "sharegpt", "--dataset", "x.json", "--input-len", "5"), "--input-len", "does not apply"),
])
def test_bad_flags_raise_naming_the_flag(tok, argv, flag, problem):
    with pytest.raises(ValueError) as err:
        build(tok, *argv)
    assert str(err.value).startswith(f"{flag}: ") and problem in str(err.value)


@pytest.mark.parametrize("argv, flag", [
    (("--input-len", "400", "--length-dist", "fixed", "--num-samples", "8"), "--input-len"),
    (("--workload", "shared-prefix", "--prefix-len", "450"), "--prefix-len"),
    (("--workload", "multi-turn", "--turns", "8"), "--turns"),
])
def test_samples_longer_than_max_model_len_name_the_flag(tok, argv, flag):
    with pytest.raises(ValueError, match=rf"^{flag}: sample \d+ needs \d+ prompt \+ \d+ output tokens, more than "
                                         r"max_model_len 512"):
        build(tok, *argv, max_model_len=512)
    assert build(tok, *argv, max_model_len=None).samples  # fine without a limit


def test_a_model_without_tokenizer_is_refused(tok):
    with pytest.raises(ValueError, match="^--workload: synthetic needs a tokenizer"):
        build_workload(parse(), None)


def test_parser_rejects_unknown_choices():
    with pytest.raises(SystemExit):
        parse("--workload", "nonsense")
    with pytest.raises(SystemExit):
        parse("--length-dist", "zipf")


def test_workload_args_import_stays_light():
    code = ("import sys, tokenmill.bench.workloads.args; "
            "heavy = [m for m in ('torch', 'tokenizers', 'jinja2', 'gguf') if m in sys.modules]; "
            "assert not heavy, heavy")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
