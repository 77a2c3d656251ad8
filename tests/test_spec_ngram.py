"""Speculative decoding with the ngram (prompt-lookup) proposer: the lookup,
``--speculative-config`` parsing, and outputs token-identical to decoding
without drafts (batch 1 and batched; chat and raw prompts), with drafts
accepted. Prefix hits, chunked prefill, preemption and seeded sampling:
tests/test_spec_stress.py."""

from __future__ import annotations

import numpy as np
import pytest
from _spec_helpers import assert_same_alone_and_batched, chat, embedded_engines
from prometheus_client.core import CounterMetricFamily

from tokenmill.cli_args import add_engine_args, engine_config_from_args
from tokenmill.config import EngineConfig
from tokenmill.engine.client import EngineStats
from tokenmill.sampling_params import SamplingParams
from tokenmill.serve.metrics import spec_decode_metrics
from tokenmill.spec.config import parse_speculative_config
from tokenmill.spec.ngram import lookup

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "adaptive": False}
"""Not adaptive: the counts asserted below must not depend on this machine's step times
(tests/test_spec_adaptive.py runs the policy)."""
TEXT = ("The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs. "
        "How vexingly quick daft zebras jump! Sphinx of black quartz, judge my vow.")


def test_lookup_takes_the_latest_occurrence_of_the_longest_suffix():
    t = np.array([1, 2, 3, 9, 8, 2, 3, 7, 6, 1, 2, 3])
    assert lookup(t, 2, 1, 3) == [9, 8]  # [1, 2, 3] occurs at 0: its followers
    assert lookup(t, 2, 1, 2) == [7, 6]  # [2, 3]: the latest earlier occurrence is at 5
    assert lookup(np.array([5, 6, 7]), 4, 1, 3) == []  # nothing repeats
    assert lookup(np.array([4, 4, 4, 4]), 4, 1, 3) == [4]  # drafts stop at the sequence's end
    assert lookup(np.array([1, 2, 1]), 4, 2, 3) == []  # min_n 2: the single-token match does not count


@pytest.mark.parametrize("value, field", [
    ('{"method": "eagle", "num_speculative_tokens": 2}', "method"),
    ('{"method": "ngram", "num_speculative_tokens": 0}', "num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 5}', "prompt_lookup_min"),
    ('{"method": "ngram", "num_speculative_tokens": 2, "lookahead": 1}', "unknown field"),
    ('{"method": "ngram"}', "num_speculative_tokens"),
    ('{"method": "self-int4", "num_speculative_tokens": 2, "draft_head_vocab": 0}', "draft_head_vocab"),
    ('{"method": "self-int4", "num_speculative_tokens": 2, "draft_head_vocab": "all"}', "draft_head_vocab"),
    ("{method: ngram}", "not valid JSON"),
    ("[1, 2]", "JSON object"),
])
def test_bad_speculative_config_names_the_field(value, field):
    with pytest.raises(ValueError, match=f"speculative_config.*{field}"):
        parse_speculative_config(value)
    with pytest.raises(ValueError, match="speculative_config"):
        EngineConfig(speculative_config=value)


def test_cli_flag_reaches_the_engine_config():
    import argparse

    parser = argparse.ArgumentParser()
    add_engine_args(parser)
    args = parser.parse_args(["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'])
    config = engine_config_from_args(args)
    assert parse_speculative_config(config.speculative_config).num_speculative_tokens == 3


@pytest.fixture(scope="module")
def embedded():
    return embedded_engines(NGRAM)


def test_greedy_outputs_are_identical_and_drafts_are_accepted(embedded):
    plain, spec = embedded
    prompts = [chat(plain, "Repeat this text exactly:\n" + TEXT), chat(plain, "What is the capital of France?"),
               plain.tokenizer.encode(TEXT + " " + TEXT[:40])]
    params = SamplingParams(max_tokens=40, temperature=0.0)
    before = spec.stats()
    want = assert_same_alone_and_batched(plain, spec, prompts, params)
    after = spec.stats()
    accepted = after.spec_accepted_tokens - before.spec_accepted_tokens
    assert accepted > 20 and after.spec_draft_tokens > after.spec_accepted_tokens
    assert int(after.spec_accepted_per_position["0"]) >= int(after.spec_accepted_per_position.get("3", 0))
    assert after.generation_tokens - before.generation_tokens == 2 * sum(len(w) for w in want)


def test_max_tokens_and_stop_strings_hold_with_several_tokens_per_step(embedded):
    plain, spec = embedded
    prompt = chat(plain, "Repeat this text exactly:\n" + TEXT)
    for params in (SamplingParams(max_tokens=7, temperature=0.0), SamplingParams(max_tokens=60, temperature=0.0,
                                                                                stop=["lazy"])):
        got, want = spec.generate([prompt], params)[0], plain.generate([prompt], params)[0]
        assert (got.token_ids, got.text, got.finish_reason) == (want.token_ids, want.text, want.finish_reason)


def test_metrics_expose_drafts_and_acceptance_by_position():
    stats = EngineStats(0, 0, 0, 0, 0, 0, 0, 0, 0, spec_draft_tokens=10, spec_accepted_tokens=6,
                        spec_verifications=4, spec_accepted_per_position={"0": 4, "1": 2})
    families = {f.name: f for f in spec_decode_metrics(stats)}
    assert all(isinstance(f, CounterMetricFamily) for f in families.values())
    assert families["tokenmill:spec_decode_num_draft_tokens"].samples[0].value == 10
    assert families["tokenmill:spec_decode_num_accepted_tokens"].samples[0].value == 6
    per_pos = {s.labels["position"]: s.value for s in families["tokenmill:spec_decode_num_accepted_tokens_per_pos"]
               .samples}
    assert per_pos == {"0": 4, "1": 2}


def test_each_request_logs_its_drafts_at_debug_level(embedded, caplog):
    _, spec = embedded
    with caplog.at_level("DEBUG", logger="tokenmill.spec.drafting"):
        spec.generate([chat(spec, "Repeat this text exactly:\n" + TEXT)], SamplingParams(max_tokens=24,
                                                                                         temperature=0.0))
    lines = [r.getMessage() for r in caplog.records if "drafts verified" in r.getMessage()]
    assert len(lines) == 1 and "accepted" in lines[0]
