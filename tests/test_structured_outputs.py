"""Structured outputs in the engine: JSON schema, JSON object, regex, choice and
grammar constraints hold, constrained requests change no other request's
tokens, bad constraints are refused naming the field, matchers are forgotten,
and speculative drafts are verified against the grammar."""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest
import torch
from _spec_helpers import _plain_engine, chat, embedded_engines

from tokenmill.engine.structured_outputs import unpack_bits
from tokenmill.errors import RequestError
from tokenmill.sampling_params import SamplingParams
from tokenmill.structured.params import StructuredOutputsParams as Constraint

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
          "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer", "minimum": 0},
                         "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]},
                                  "maxItems": 3}}}
PHONE = r"\(\d{3}\) \d{3}-\d{4}"
YES_NO = ("yes", "no", "maybe")
LARK = 'start: "The answer is " NUMBER "."\nNUMBER: /[1-9][0-9]{0,2}/'


@pytest.fixture(scope="module")
def engine():
    return _plain_engine()


def _run(engine, prompt, constraint, **kw):
    kw.setdefault("max_tokens", 64)
    kw.setdefault("temperature", 0.0)
    return engine.generate([chat(engine, prompt)], SamplingParams(structured=constraint, **kw))[0]


@pytest.mark.parametrize("sampling", [dict(temperature=0.0), dict(temperature=1.0, seed=7)])
def test_each_kind_of_constraint_holds(engine, sampling):
    person = _run(engine, "Invent a person.", Constraint(json=PERSON), **sampling)
    jsonschema.validate(json.loads(person.text), PERSON)
    assert person.finish_reason == "stop"
    obj = _run(engine, "Give me any data.", Constraint(json_object=True), **sampling)
    assert isinstance(json.loads(obj.text), dict)
    phone = _run(engine, "A phone number?", Constraint(regex=PHONE), **sampling)
    assert re.fullmatch(PHONE, phone.text), phone.text
    choice = _run(engine, "Is the sky green?", Constraint(choice=YES_NO), **sampling)
    assert choice.text in YES_NO
    lark = _run(engine, "How many legs has a spider?", Constraint(grammar=LARK), **sampling)
    assert re.fullmatch(r"The answer is [1-9][0-9]{0,2}\.", lark.text), lark.text
    gbnf = _run(engine, "Pick a colour.", Constraint(grammar='root ::= "red" | "green" | "blue"'), **sampling)
    assert gbnf.text in ("red", "green", "blue")
    assert not engine.core.structured.matchers  # every finished request's matcher is gone


def test_constrained_rows_change_no_other_rows_tokens(engine):
    prompts = [chat(engine, q) for q in ("Why is the sky blue?", "Invent a person.", "Name three fruits.")]
    plain = [SamplingParams(max_tokens=24, temperature=0.0), None, SamplingParams(max_tokens=24, seed=3)]
    alone = {i: engine.generate([prompts[i]], plain[i])[0].token_ids for i in (0, 2)}
    constrained = SamplingParams(max_tokens=48, temperature=0.0, structured=Constraint(json=PERSON))
    together = engine.generate(prompts, [plain[0], constrained, plain[2]])
    assert together[0].token_ids == alone[0]
    assert together[2].token_ids == alone[2]
    jsonschema.validate(json.loads(together[1].text), PERSON)


def test_truncated_and_ignore_eos_requests_end_without_error(engine):
    cut = _run(engine, "Invent a person.", Constraint(json=PERSON), max_tokens=5)
    assert cut.finish_reason == "length" and len(cut.token_ids) == 5
    # ignore_eos: the grammar ends, the request goes on unconstrained to max_tokens.
    past = _run(engine, "Is the sky green?", Constraint(choice=YES_NO), max_tokens=12, ignore_eos=True)
    assert past.finish_reason == "length" and len(past.token_ids) == 12
    assert any(past.text.startswith(c) for c in YES_NO)
    assert not engine.core.structured.matchers


@pytest.mark.parametrize("values, field", [
    (dict(regex="[0-9"), "structured_outputs.regex"),
    (dict(json='{"type": "frobnicate"}'), "structured_outputs.json"),
    (dict(json="{not json"), "structured_outputs.json"),
    (dict(json="[1, 2]"), "structured_outputs.json"),
    (dict(grammar="start: undefined_rule"), "structured_outputs.grammar"),
])
def test_a_bad_constraint_is_refused_naming_the_field(engine, values, field):
    before = engine.stats().kv_blocks_used
    with pytest.raises(RequestError) as err:
        engine.add_request(None, "hello", SamplingParams(structured=Constraint(**values)))
    assert err.value.param == field
    assert not engine.has_unfinished_requests() and not engine.core.structured.matchers
    assert engine.stats().kv_blocks_used == before


@pytest.mark.parametrize("values, field", [
    ({}, "structured_outputs"), (dict(regex="a", choice=["b"]), "structured_outputs"),
    (dict(choice=[]), "structured_outputs.choice"), (dict(choice=["a", 3]), "structured_outputs.choice"),
    (dict(regex=""), "structured_outputs.regex"),
])
def test_constraint_fields_are_checked_on_construction(values, field):
    with pytest.raises(RequestError) as err:
        Constraint(**values)
    assert err.value.param == field


def test_abort_forgets_the_matcher(engine):
    rid = engine.add_request(None, chat(engine, "Invent a person."),
                             SamplingParams(max_tokens=64, structured=Constraint(json=PERSON)))
    engine.step()
    assert rid in engine.core.structured.matchers
    engine.abort(rid)
    assert rid not in engine.core.structured.matchers and not engine.has_unfinished_requests()


def test_resumed_request_replays_its_output_through_the_grammar(engine):
    params = SamplingParams(max_tokens=64, temperature=0.0, structured=Constraint(json=PERSON))
    prompt = chat(engine, "Invent a person.")
    whole = engine.generate([prompt], params)[0]
    engine.add_request("resumed", prompt, params, resume_output_ids=whole.token_ids[:6])
    tail = []
    while engine.has_unfinished_requests():
        tail += [t for out in engine.step() for t in out.new_token_ids]
    assert whole.token_ids[:6] + tail == whole.token_ids
    with pytest.raises(RequestError, match="breaks"):  # an earlier output the grammar refuses
        engine.add_request("bad", prompt, params, resume_output_ids=engine.tokenizer.encode("hello"))
    assert not engine.core.structured.matchers


def test_unpack_bits_maps_bit_i_of_word_w_to_token_32w_plus_i():
    rng = np.random.default_rng(0)
    bits = torch.from_numpy(rng.integers(-(1 << 31), 1 << 31, size=(3, 4), dtype=np.int64).astype(np.int32))
    allowed = unpack_bits(bits, 130)  # two padding columns past 32 * 4
    for r in range(3):
        for t in range(128):
            assert bool(allowed[r, t]) == bool((int(bits[r, t // 32]) >> (t % 32)) & 1)
    assert not allowed[:, 128:].any()


def test_drafts_are_verified_against_the_grammar():
    """ngram drafts copy the prompt, which the grammar partly refuses: the
    constrained output is token-identical with and without drafts."""
    plain, spec = embedded_engines({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3,
                                    "adaptive": False})
    text = 'Repeat this JSON exactly: {"name": "Ada Lovelace", "age": 36, "tags": ["a", "b"]}'
    prompts = [chat(plain, text), chat(plain, "Invent a person.")]
    params = SamplingParams(max_tokens=48, temperature=0.0, structured=Constraint(json=PERSON))
    want = [r.token_ids for r in plain.generate(prompts, params)]
    before = spec.stats().spec_draft_tokens
    assert [r.token_ids for r in spec.generate(prompts, params)] == want
    assert spec.stats().spec_draft_tokens > before  # drafts were verified
    assert not spec.core.structured.matchers and spec.stats().kv_blocks_used == 0
