"""End-to-end: ``n`` > 1 and batched prompts, streamed and not, with the openai SDK.

Choice index = prompt_index * n + sample_index; each choice is its own engine
request; a seeded request repeats its choices; a prompt's samples share one
prefill through the prefix cache; any refused prompt fails the whole request
before it starts and leaves nothing running.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict

import openai
import pytest

from tokenmill.sampling_params import SamplingParams
from tokenmill.serve.fanout import sample_params

CHAT = [{"role": "user", "content": "Tell me something about the sea."}]
PROMPTS = ["The capital of France is", "def fibonacci(n):"]
LONG_TEXT = "hello " * 700  # > 512 tokens: longer than the server's context
DISCONNECTS = 'tokenmill:aborted_requests_total{reason="client_disconnect"}'



def _seeded_chat(client, model, n: int, **kwargs):
    return client.chat.completions.create(model=model, messages=CHAT, n=n, seed=1, temperature=1.0, max_tokens=6,
                                          logprobs=True, extra_body={"ignore_eos": True}, **kwargs)


def _labelled(server, name: str) -> float:
    import httpx

    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def _wait_idle(server, idle_blocks: float, timeout_s: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        values = server.metrics()
        done = values["tokenmill:num_requests_running"] == 0 and values["tokenmill:num_requests_waiting"] == 0
        if (done and values["tokenmill:kv_blocks_used"] == idle_blocks) or time.monotonic() > deadline:
            return values
        time.sleep(0.05)


def test_sample_seeds_step_by_one_and_wrap():
    params = SamplingParams(max_tokens=4, seed=(1 << 64) - 2)
    assert [sample_params(params, k).seed for k in range(4)] == [(1 << 64) - 2, (1 << 64) - 1, -(1 << 63),
                                                                  -(1 << 63) + 1]
    assert sample_params(SamplingParams(max_tokens=4), 3).seed is None  # unseeded: the engine's generator
    # Prompt logprobs: sample 0 computes them; the others (which reuse its prefill) do not, unless scoring.
    scored = SamplingParams(max_tokens=4, prompt_logprobs=1)
    assert sample_params(scored, 0).prompt_logprobs == 1 and sample_params(scored, 1).prompt_logprobs is None
    only_scoring = SamplingParams(max_tokens=0, prompt_logprobs=1)
    assert sample_params(only_scoring, 1).prompt_logprobs == 1


def test_chat_n3_seeded_choices_usage_and_repeat(client, model):
    resp = _seeded_chat(client, model, 3)
    assert [c.index for c in resp.choices] == [0, 1, 2]
    counts = [len(c.logprobs.content) for c in resp.choices]
    assert counts == [6, 6, 6] and all(c.finish_reason == "length" for c in resp.choices)
    assert resp.usage.completion_tokens == sum(counts)
    single = _seeded_chat(client, model, 1)
    assert resp.usage.prompt_tokens == single.usage.prompt_tokens  # the prompt counts once, not n times
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    texts = [c.message.content for c in resp.choices]
    assert len(set(texts)) > 1, texts  # seed + k per sample: they differ
    assert single.choices[0].message.content == texts[0]  # sample 0 keeps the request's own seed
    again = _seeded_chat(client, model, 3)
    assert [c.message.content for c in again.choices] == texts


def test_chat_n2_stream_reassembles_to_the_same_choices(client, model):
    expected = [c.message.content for c in _seeded_chat(client, model, 2).choices]
    chunks = list(_seeded_chat(client, model, 2, stream=True, stream_options={"include_usage": True}))
    texts, roles, finishes = defaultdict(str), defaultdict(int), defaultdict(list)
    for chunk in chunks[:-1]:
        assert len(chunk.choices) == 1 and chunk.usage is None
        choice = chunk.choices[0]
        roles[choice.index] += choice.delta.role == "assistant"
        texts[choice.index] += choice.delta.content or ""
        if choice.finish_reason:
            finishes[choice.index].append(choice.finish_reason)
    assert [texts[i] for i in range(2)] == expected and set(texts) == {0, 1}
    assert dict(roles) == {0: 1, 1: 1}  # the role opens each choice's stream once
    assert dict(finishes) == {0: ["length"], 1: ["length"]}
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage.completion_tokens == 12


def _completion_texts(client, model, prompt, n: int = 1, **kwargs) -> list[str]:
    resp = client.completions.create(model=model, prompt=prompt, n=n, max_tokens=6, temperature=0, **kwargs)
    assert [c.index for c in resp.choices] == list(range(len(resp.choices)))
    return [c.text for c in resp.choices]


def test_completion_batch_n2_is_prompt_major_and_greedy(client, model):
    alone = [_completion_texts(client, model, p)[0] for p in PROMPTS]
    assert _completion_texts(client, model, PROMPTS, n=2) == [alone[0], alone[0], alone[1], alone[1]]
    resp = client.completions.create(model=model, prompt=PROMPTS, n=2, max_tokens=6, temperature=0,
                                     extra_body={"ignore_eos": True})
    assert resp.usage.completion_tokens == 4 * 6
    singles = [client.completions.create(model=model, prompt=p, max_tokens=1).usage.prompt_tokens for p in PROMPTS]
    assert resp.usage.prompt_tokens == sum(singles)  # each prompt once, not n times


def test_completion_batch_stream_matches_non_stream(client, model):
    expected = _completion_texts(client, model, PROMPTS, n=2)
    texts = defaultdict(str)
    stream = client.completions.create(model=model, prompt=PROMPTS, n=2, max_tokens=6, temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    for chunk in chunks[:-1]:
        texts[chunk.choices[0].index] += chunk.choices[0].text
    assert [texts[i] for i in range(4)] == expected
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


def test_completion_batch_of_token_id_lists(client, model):
    prompts = [[504, 3575, 282, 4649, 314], [1470, 28560, 30, 80, 731]]
    alone = [_completion_texts(client, model, p)[0] for p in prompts]
    assert _completion_texts(client, model, prompts) == alone


@pytest.mark.parametrize("n", [0, 129])
@pytest.mark.parametrize("route", ["chat", "completions"])
def test_n_out_of_range_is_400_naming_n(client, model, route, n):
    with pytest.raises(openai.BadRequestError) as err:
        if route == "chat":
            client.chat.completions.create(model=model, messages=CHAT, n=n, max_tokens=2)
        else:
            client.completions.create(model=model, prompt="x", n=n, max_tokens=2)
    assert err.value.param == "n"


def test_empty_prompt_list_is_400_naming_prompt(client, model):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=model, prompt=[], max_tokens=2)
    assert err.value.param == "prompt"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("bad,fragment", [([10 ** 9], "vocabulary"), (LONG_TEXT, "512")])
def test_one_bad_prompt_fails_the_batch_and_aborts_the_rest(server, client, model, bad, fragment, stream):
    idle = _wait_idle(server, server.metrics()["tokenmill:kv_blocks_used"])
    before = _labelled(server, DISCONNECTS)
    good = [504, 3575, 282] if isinstance(bad, list) else "Count slowly: one, two,"
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=model, prompt=[good, bad], n=2, max_tokens=200, stream=stream,
                                  extra_body={"ignore_eos": True})
    assert err.value.param == "prompt[1]" and fragment in err.value.message
    after = _wait_idle(server, idle["tokenmill:kv_blocks_used"])
    assert after["tokenmill:kv_blocks_used"] == idle["tokenmill:kv_blocks_used"]
    # The good prompt's sample 0 went in with the bad one and was aborted, not run to its 200 tokens.
    assert _labelled(server, DISCONNECTS) >= before + 1
    assert _completion_texts(client, model, PROMPTS[0]) == _completion_texts(client, model, PROMPTS[0])


def test_disconnect_mid_stream_aborts_every_choice(server, client, model):
    idle = _wait_idle(server, server.metrics()["tokenmill:kv_blocks_used"])
    stream = client.completions.create(model=model, prompt=PROMPTS, n=2, max_tokens=300, temperature=1.0,
                                       stream=True, extra_body={"ignore_eos": True})
    seen = {next(stream).choices[0].index for _ in range(12)}
    assert len(seen) > 1  # the choices interleave
    busy = server.metrics()
    stream.close()
    assert busy["tokenmill:num_requests_running"] == 4
    after = _wait_idle(server, idle["tokenmill:kv_blocks_used"])
    assert after["tokenmill:num_requests_running"] == 0
    assert after["tokenmill:kv_blocks_used"] == idle["tokenmill:kv_blocks_used"]
    produced = after["tokenmill:generation_tokens_total"] - idle["tokenmill:generation_tokens_total"]
    assert produced < 4 * 300


def test_samples_after_the_first_hit_the_prefix_cache(server, client, model):
    block_size = int(re.search(r"blocks x (\d+) tokens", server.banner).group(1))
    full_blocks = 3
    # Token ids no other test sends, so sample 0 finds nothing cached and computes the prompt.
    prompt = [(i * 7919) % 30000 + 1000 for i in range(full_blocks * block_size + 5)]
    before = server.metrics()["tokenmill:prefix_cache_hits_total"]
    resp = client.completions.create(model=model, prompt=prompt, n=4, max_tokens=2, temperature=1.0)
    assert len(resp.choices) == 4 and resp.usage.prompt_tokens == len(prompt)
    hits = server.metrics()["tokenmill:prefix_cache_hits_total"] - before
    assert hits >= 3 * full_blocks * block_size, hits  # samples 1..3 each found every full block
