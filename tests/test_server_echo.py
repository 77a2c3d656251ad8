"""/v1/completions with echo: the prompt's text heads each choice, and with
logprobs its tokens' logprobs head the choice's (the first one null), as the
openai SDK and evaluation harnesses (max_tokens=0: score a prompt) read them."""

from __future__ import annotations

import math
from collections import defaultdict

import openai
import pytest

PROMPT = "The capital of France is"
PROMPT_IDS = [504, 3575, 282, 4649, 314]  # PROMPT, tokenized (no BOS)
OTHER = "Once upon a time"



def check_logprobs(lp, text: str, num_prompt_tokens: int, n_top: int) -> None:
    """Prompt tokens first (the first one's logprob and alternatives null), then
    the generated ones; offsets count characters of the echoed text."""
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(math.isfinite(x) and x <= 0.0 for x in lp.token_logprobs[1:])
    assert all(len(top) == n_top and max(top.values()) <= 0.0 for top in lp.top_logprobs[1:])
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    assert "".join(lp.tokens[:num_prompt_tokens]) == PROMPT
    assert "".join(lp.tokens) == text  # greedy to a length cut: no EOS token hides from the text


def test_echo_without_logprobs_heads_the_text_with_the_prompt(client, model):
    common = dict(model=model, max_tokens=4, temperature=0, extra_body={"ignore_eos": True})
    plain = client.completions.create(prompt=PROMPT, **common)
    echoed = client.completions.create(prompt=PROMPT, echo=True, **common)
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text
    assert echoed.choices[0].logprobs is None
    assert echoed.usage.prompt_tokens == len(PROMPT_IDS) and echoed.usage.completion_tokens == 4
    by_ids = client.completions.create(prompt=PROMPT_IDS, echo=True, **common)
    assert by_ids.choices[0].text == echoed.choices[0].text  # token ids are decoded for the echo


def test_echo_max_tokens_0_scores_the_prompt(client, model):
    resp = client.completions.create(model=model, prompt=PROMPT, max_tokens=0, echo=True, logprobs=2)
    choice = resp.choices[0]
    assert choice.text == PROMPT and choice.finish_reason == "length"
    check_logprobs(choice.logprobs, PROMPT, len(PROMPT_IDS), 2)
    assert len(choice.logprobs.tokens) == len(PROMPT_IDS)
    assert resp.usage.prompt_tokens == len(PROMPT_IDS) and resp.usage.completion_tokens == 0
    # Causal: the same prompt with one more token scores its first tokens the same.
    longer = client.completions.create(model=model, prompt=PROMPT + " Paris", max_tokens=0, echo=True, logprobs=2)
    lp = longer.choices[0].logprobs
    assert lp.tokens[:-1] == choice.logprobs.tokens and lp.tokens[-1] == " Paris"
    assert lp.token_logprobs[1:-1] == pytest.approx(choice.logprobs.token_logprobs[1:], abs=1e-4)


def test_echo_with_logprobs_and_generation_streamed_or_not(client, model):
    kwargs = dict(model=model, prompt=PROMPT, max_tokens=5, temperature=0, echo=True, logprobs=1,
                  extra_body={"ignore_eos": True})
    plain = client.completions.create(model=model, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=1,
                                      extra_body={"ignore_eos": True})
    resp = client.completions.create(**kwargs)
    choice = resp.choices[0]
    assert choice.text == PROMPT + plain.choices[0].text
    check_logprobs(choice.logprobs, choice.text, len(PROMPT_IDS), 1)
    assert choice.logprobs.tokens[len(PROMPT_IDS):] == plain.choices[0].logprobs.tokens
    assert resp.usage.completion_tokens == 5

    chunks = [c for c in client.completions.create(**kwargs, stream=True) if c.choices]
    assert chunks[0].choices[0].text == PROMPT  # the echo is the first chunk
    text = "".join(c.choices[0].text for c in chunks)
    tokens, token_logprobs, offsets = [], [], []
    for c in chunks:
        if c.choices[0].logprobs is not None:
            tokens += c.choices[0].logprobs.tokens
            token_logprobs += c.choices[0].logprobs.token_logprobs
            offsets += c.choices[0].logprobs.text_offset
    assert text == choice.text and tokens == choice.logprobs.tokens
    assert offsets == choice.logprobs.text_offset
    assert token_logprobs[0] is None
    assert token_logprobs[1:] == pytest.approx(choice.logprobs.token_logprobs[1:], abs=1e-5)
    assert [c.choices[0].finish_reason for c in chunks][-1] == "length"


@pytest.mark.parametrize("stream", [False, True])
def test_echo_on_a_batch_with_n2_heads_every_choice(client, model, stream):
    prompts = [PROMPT, OTHER]
    kwargs = dict(model=model, prompt=prompts, n=2, max_tokens=3, temperature=0, echo=True, logprobs=1,
                  extra_body={"ignore_eos": True})
    plain = [client.completions.create(model=model, prompt=p, max_tokens=3, temperature=0,
                                       extra_body={"ignore_eos": True}) for p in prompts]
    if stream:
        texts = defaultdict(str)
        nulls = defaultdict(int)
        for chunk in client.completions.create(**kwargs, stream=True):
            if chunk.choices:
                c = chunk.choices[0]
                texts[c.index] += c.text
                nulls[c.index] += sum(x is None for x in c.logprobs.token_logprobs)
        assert dict(nulls) == {0: 1, 1: 1, 2: 1, 3: 1}  # each choice shows its prompt's logprobs once
    else:
        resp = client.completions.create(**kwargs)
        texts = {c.index: c.text for c in resp.choices}
        for c in resp.choices:
            num_prompt = plain[c.index // 2].usage.prompt_tokens
            assert len(c.logprobs.tokens) == num_prompt + 3 and c.logprobs.token_logprobs[0] is None
            assert "".join(c.logprobs.tokens[:num_prompt]) == prompts[c.index // 2]
        # Sample 1 shows sample 0's prompt logprobs (computed once, by sample 0 alone).
        for first, second in zip(resp.choices[::2], resp.choices[1::2]):
            assert first.logprobs.token_logprobs == second.logprobs.token_logprobs
        assert resp.usage.prompt_tokens == sum(p.usage.prompt_tokens for p in plain)  # each prompt once
        assert resp.usage.completion_tokens == 4 * 3  # generated tokens only, echo not counted
    assert [texts[i] for i in range(4)] == [p + r.choices[0].text for p, r in zip(prompts, plain) for _ in range(2)]


@pytest.mark.parametrize("kwargs", [{}, {"logprobs": 1}])
def test_max_tokens_0_without_echo_is_400_naming_max_tokens(client, model, kwargs):
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=model, prompt=PROMPT, max_tokens=0, **kwargs)
    assert err.value.param == "max_tokens"
