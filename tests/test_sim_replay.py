"""`tokenmill sim --replay`: a measured bench run's queries simulated as they arrived (sim/replay.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tokenmill.bench.metrics import compute_metrics
from tokenmill.bench.results import BenchResult, QueryRecord, Verdict
from tokenmill.bench.settings import BenchSettings
from tokenmill.cli import main
from tokenmill.engine.step_log import STEPS_FILE, LoggedStep, StepLogFile, load_steps, save_steps
from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import get_hardware
from tokenmill.sim.models import get_model
from tokenmill.sim.predict import Deployment, Workload, predict
from tokenmill.sim.replay import load_trace
from tokenmill.sim.served_steps import MIN_BUCKET_STEPS, at_served_prices, logged_shape, price_steps
from tokenmill.sim.serving import SimRequest
from tokenmill.sim.shapes import PrefillChunk, StepShape
from tokenmill.sim.step_price import replica_step_seconds

PROMPTS = [40, 72, 40, 130, 72]  # samples 0, 1, 0, 2, 1: queries 2 and 4 repeat a sample
SAMPLES = [0, 1, 0, 2, 1]


def _run(tmp_path, records: list[QueryRecord], **counters):
    """``counters``: Metrics fields read from the server's counters (engine_steps, engine_busy_s)."""
    settings = BenchSettings(scenario="server", target_qps=2.0, ttft_ms=1000, tpot_ms=100)
    metrics = compute_metrics(records, settings)
    for name, value in counters.items():
        setattr(metrics, name, value)
    result = BenchResult(target={"label": "tokenmill", "kind": "openai", "model": "m"}, scenario="server",
                         mode="performance", settings=settings.describe(len(records)),
                         workload={"name": "synthetic"}, verdict=Verdict("VALID"),
                         metrics=metrics, queries=records, log_dir=str(tmp_path),
                         created="2026-11-27T00:00:00Z")
    return result.save(tmp_path)


def _records() -> list[QueryRecord]:
    """Five good queries issued at 10 + 0.5 i s (the server counted one token fewer on
    query 1 than the client did), and one failed query."""
    out = [QueryRecord(sample_index=s, issued_s=10 + 0.5 * i, first_token_s=10.2 + 0.5 * i,
                       finished_s=11 + 0.5 * i, output_tokens=17, usage_output_tokens=16 if i == 1 else 17,
                       prompt_tokens=p) for i, (s, p) in enumerate(zip(SAMPLES, PROMPTS))]
    out.append(QueryRecord(sample_index=3, issued_s=10.1, finished_s=10.3, error="HTTP 500: boom"))
    return out


def test_the_trace_holds_the_queries_as_they_arrived(tmp_path):
    path = _run(tmp_path, _records())
    trace = load_trace(path)
    assert [r.arrival_s for r in trace.requests] == pytest.approx([0, 0.5, 1.0, 1.5, 2.0])
    assert [r.prompt_tokens for r in trace.requests] == PROMPTS
    assert [r.output_tokens for r in trace.requests] == [17, 16, 17, 17, 17]  # the server's own count
    # Each sample's prompt is a prefix of its own: a repeat hits what the simulated cache still holds.
    assert [(r.prefix_group, r.prefix_tokens) for r in trace.requests] == list(zip(SAMPLES, PROMPTS))
    assert all(r.cached_tokens == 0 for r in trace.requests)
    assert (trace.skipped, trace.repeats) == (1, 2)
    assert trace.repeated_prompt_share == pytest.approx(112 / sum(PROMPTS))
    no_cache = load_trace(tmp_path, prefix_caching=False)  # the run folder works too
    assert all(r.cached_tokens == 0 and r.prefix_group == -1 for r in no_cache.requests)


def test_a_run_without_a_successful_query_is_refused(tmp_path):
    path = _run(tmp_path, [QueryRecord(sample_index=0, issued_s=0.0, finished_s=0.1, error="boom")])
    with pytest.raises(ValueError, match="--replay"):
        load_trace(path)


def test_replay_simulates_exactly_the_trace_requests(tmp_path):
    """predict with the trace's requests equals predict with the same requests given directly,
    and the prefix hits of repeated samples make their first token come sooner."""
    trace = load_trace(_run(tmp_path, _records()))
    arch, hw = get_model("smollm2-135m"), get_hardware("h100")
    deployment = Deployment(1, Parallel(), "bf16", max_num_seqs=8, max_num_batched_tokens=256)
    workload = Workload("server", 1, 1, requests=trace.requests)
    replayed = predict(arch, hw, deployment, workload)
    same = predict(arch, hw, deployment, Workload("server", 1, 1, requests=tuple(
        SimRequest(r.arrival_s, r.prompt_tokens, r.output_tokens, 0, s, p) for r, s, p in
        zip(trace.requests, SAMPLES, PROMPTS))))
    assert replayed == same
    assert replayed["tokens_per_s"] > 0 and replayed["qps"] is None
    # The idle cache still holds both repeated prompts: whole 16-token blocks, each leaving a token to compute.
    assert replayed["prefix_cache_hit_rate"] == pytest.approx((32 + 64) / sum(PROMPTS))
    cold = predict(arch, hw, deployment, Workload("server", 1, 1, requests=load_trace(
        tmp_path, prefix_caching=False).requests))
    assert cold["prefix_cache_hit_rate"] == 0 and replayed["ttft_ms"]["p50"] <= cold["ttft_ms"]["p50"]


def test_the_command_prints_measured_against_simulated(tmp_path, capsys):
    path = _run(tmp_path, _records())
    assert main(["sim", "--model", "smollm2-135m", "--hardware", "h100", "--precision", "bf16",
                 "--replay", str(path), "--max-num-seqs", "8", "--max-num-batched-tokens", "256"]) == 0
    out = capsys.readouterr().out
    assert "5 queries, 1 failed left out; 2 repeated samples" in out
    assert "| TTFT p99 |" in out and "| output tokens/s |" in out
    assert main(["sim", "--model", "smollm2-135m", "--hardware", "h100", "--precision", "bf16", "--json",
                 "--replay", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["queries"] == 5 and doc["measured"]["ttft_ms"]["p50"] == pytest.approx(200.0)
    assert doc["measured"]["tokens_per_s"] == pytest.approx(84 / 3.0)  # the server's 84 tokens over 10.0-13.0 s
    assert doc["simulated"]["config"]["num_requests"] == 5
    assert main(["sim", "--replay", str(path), "--search"]) == 2
    assert "--replay and --search" in capsys.readouterr().err


def test_the_servers_step_counters_are_set_against_the_simulated_steps(tmp_path, capsys):
    """Where the run read the server's step counters, the replay prints its steps, busy seconds and
    mean step beside the simulated ones; where it did not, no such rows."""
    args = ["sim", "--model", "smollm2-135m", "--hardware", "h100", "--precision", "bf16",
            "--max-num-seqs", "8", "--max-num-batched-tokens", "256"]
    assert main([*args, "--replay", str(_run(tmp_path, _records()))]) == 0
    assert "engine steps" not in capsys.readouterr().out
    path = _run(tmp_path, _records(), engine_steps=90, engine_busy_s=0.6)
    assert main([*args, "--json", "--replay", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    simulated = doc["simulated"]
    # Five queries 0.5 s apart, each done in milliseconds on an H100: alone in their steps, one
    # step per output token (a prefill that samples the first, then decodes), 84 in all, 5 with a prompt.
    assert simulated["engine_steps"] == 84 and 0 < simulated["engine_busy_s"] < 0.5
    assert simulated["engine_prefill_steps"] == 5
    assert 0 < simulated["engine_prefill_busy_s"] < simulated["engine_busy_s"]
    assert (doc["measured"]["engine_steps"], doc["measured"]["engine_busy_s"]) == (90, 0.6)
    assert main([*args, "--replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| engine steps | 90 | 84 | 0.93 |" in out and "| engine busy | 0.6 s |" in out
    assert "| mean step | 6.7 ms |" in out and "with a prompt" not in out  # no split read: totals only
    assert "on a core" not in out  # no CPU counter read: no such row
    path = _run(tmp_path, _records(), engine_steps=90, engine_busy_s=0.6, engine_prefill_steps=5,
                engine_prefill_busy_s=0.2)
    assert main([*args, "--replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| engine steps with a prompt | 5 | 5 | 1.00 |" in out and "| mean step with a prompt | 40.0 ms |" in out
    assert "| engine steps decode-only | 85 | 79 | 0.93 |" in out and "| mean step decode-only | 4.7 ms |" in out
    # The steps' time on a core, where the run read it: the simulated busy seconds set against it.
    path = _run(tmp_path, _records(), engine_steps=90, engine_busy_s=0.6, engine_busy_cpu_s=0.48)
    assert main([*args, "--json", "--replay", str(path)]) == 0
    busy = json.loads(capsys.readouterr().out)["simulated"]["engine_busy_s"]
    assert main([*args, "--replay", str(path)]) == 0
    row = f"| engine busy on a core (80% of it) | 0.5 s | {busy:,.1f} s | {busy / 0.48:.2f} |"
    assert row in capsys.readouterr().out


STEPS = [  # (start on the run clock, seconds, decodes, their KV lengths summed, prompt chunks)
    (0.0, 0.030, 0, 0, [[40, 0]]), (0.04, 0.004, 1, 40, []), (0.5, 0.030, 1, 41, [[72, 0]]),
    (0.6, 0.005, 2, 115, []), (0.61, 0.006, 3, 120, [[2, 40]])]


def _run_with_steps(tmp_path, **counters) -> str:
    path = _run(tmp_path, _records(), **counters)
    doc = json.loads(path.read_text())
    doc["engine_steps_file"] = STEPS_FILE
    path.write_text(json.dumps(doc))
    save_steps(tmp_path / STEPS_FILE, [LoggedStep(d, sum(n for n, _ in c), s, t + 100.0, ctx,
                                                  tuple(map(tuple, c))) for t, s, d, ctx, c in STEPS], 100.0)
    return str(path)


def test_the_step_file_round_trips_and_names_a_bad_line(tmp_path):
    path = _run_with_steps(tmp_path)
    steps = load_steps(tmp_path / STEPS_FILE)
    assert [(s.start, s.seconds, s.decodes, s.decode_context_sum, [list(c) for c in s.chunks])
            for s in steps] == [tuple(x) for x in STEPS]
    assert [s.chunk_tokens for s in steps] == [40, 0, 72, 0, 2]
    assert load_trace(path).steps == steps
    shape = logged_shape(steps[3])  # two decodes over 115 tokens: 58 and 57, the sum kept exact
    assert sorted(shape.decode_contexts) == [57, 58] and shape.prefills == ()
    assert logged_shape(steps[4]).prefills == (PrefillChunk(2, 40),)
    with open(tmp_path / STEPS_FILE, "a") as f:
        f.write('{"start_s": 1.0}\n')
    with pytest.raises(ValueError, match="line 6 is not a step record"):
        load_steps(tmp_path / STEPS_FILE)
    (tmp_path / STEPS_FILE).unlink()
    with pytest.raises(ValueError, match=f"names {STEPS_FILE}, which is not in"):
        load_trace(path)


def test_the_replay_prices_each_logged_step_at_its_shape(tmp_path, capsys):
    """Where the bench kept the engine's steps, the replay prices each at its own shape with the
    simulation's step price, in sum and by kind and decode bucket."""
    path = _run_with_steps(tmp_path)
    args = ["sim", "--model", "smollm2-135m", "--hardware", "h100", "--precision", "bf16",
            "--max-num-seqs", "8", "--max-num-batched-tokens", "256", "--replay", path]
    assert main([*args, "--json"]) == 0
    served = json.loads(capsys.readouterr().out)["served_steps"]
    price = replica_step_seconds(get_model("smollm2-135m"), get_hardware("h100"), Deployment(
        1, Parallel(), "bf16", max_num_seqs=8, max_num_batched_tokens=256))
    priced = [price(logged_shape(s)) for s in load_steps(tmp_path / STEPS_FILE)]
    assert served["steps"] == 5 and served["measured_s"] == pytest.approx(0.075)
    assert served["priced_s"] == pytest.approx(sum(priced))
    assert served["priced_over_measured"] == pytest.approx(sum(priced) / 0.075)
    groups = {(g["kind"], g["decodes_from"]): g for g in served["groups"]}
    assert sorted(groups) == [("decode-only", 1), ("decode-only", 2), ("with a prompt", 0),
                              ("with a prompt", 1), ("with a prompt", 2)]
    assert groups[("decode-only", 2)]["decodes_to"] == 3 and groups[("decode-only", 1)]["decodes_to"] == 1
    assert groups[("with a prompt", 2)]["priced_s"] == pytest.approx(priced[4])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"the engine's own 5 steps, each priced at its shape: measured 0.1 s, priced {sum(priced):,.1f} s" in out
    assert "| decode-only | 2-3 | 1 | 2.0 / 0 | 5.0 ms |" in out and "| with a prompt | 0 | 1 | 0.0 / 40 |" in out
    (tmp_path / "no-steps").mkdir()
    assert main([*args[:-2], "--replay", str(_run(tmp_path / "no-steps", _records()))]) == 0
    assert "each priced at its shape" not in capsys.readouterr().out  # no step log kept: no such table


def test_at_the_served_prices_each_step_takes_what_its_kind_took():
    """A step of a bucket the run ran at least MIN_BUCKET_STEPS steps of costs its price times that
    bucket's measured / priced seconds; a step of a bucket it ran fewer of, or none, the run's overall ratio."""
    decodes = [LoggedStep(2, 0, 0.005, 0.1 * i, 100) for i in range(MIN_BUCKET_STEPS)]  # 5 ms each
    prompt = LoggedStep(0, 40, 0.030, 9.0, 0, ((40, 0),))  # one step of its bucket: 30 ms
    flat = price_steps([*decodes, prompt], lambda shape: 0.010)  # every step priced 10 ms
    scaled = at_served_prices(lambda shape: 0.010, flat)
    overall = (MIN_BUCKET_STEPS * 0.005 + 0.030) / ((MIN_BUCKET_STEPS + 1) * 0.010)
    assert scaled(logged_shape(decodes[0])) == pytest.approx(0.005)  # decode-only, 2-3 decodes: took 5 ms
    assert scaled(logged_shape(prompt)) == pytest.approx(0.010 * overall)  # one step: the overall ratio
    assert scaled(StepShape(decode_contexts=(9,) * 40)) == pytest.approx(0.010 * overall)  # never ran
    with pytest.raises(ValueError, match="reprice"):
        predict(get_model("smollm2-135m"), get_hardware("h100"), Deployment(1, Parallel(), "bf16"),
                Workload("server", 64, 8, target_qps=1.0), reprice=lambda price: price)


def test_the_replay_runs_again_at_the_served_steps_prices(tmp_path, capsys):
    path = _run_with_steps(tmp_path)
    args = ["sim", "--model", "smollm2-135m", "--hardware", "h100", "--precision", "bf16", "--replay", path]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    repriced, simulated = doc["simulated_at_served_prices"], doc["simulated"]
    # The logged steps took longer than an H100 prices them: at their prices the same queries finish later.
    assert doc["served_steps"]["priced_over_measured"] < 1
    assert repriced["ttft_ms"]["p50"] > simulated["ttft_ms"]["p50"]
    assert repriced["tpot_ms"]["p50"] > simulated["tpot_ms"]["p50"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "| figure | measured | simulated | sim / measured | at the served steps' prices | / measured |" in out
    ttft = repriced["ttft_ms"]["p50"]
    assert f"| TTFT p50 | 200.0 ms | {simulated['ttft_ms']['p50']:,.1f} ms |" in out
    assert f" {ttft:,.1f} ms | {ttft / 200.0:.2f} |" in out
    # The server's step counters, where read, against the replay's steps at both prices.
    path = _run_with_steps(tmp_path, engine_steps=90, engine_busy_s=0.6)
    assert main([*args[:-1], path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    busy, repriced_busy = doc["simulated"]["engine_busy_s"], doc["simulated_at_served_prices"]["engine_busy_s"]
    assert main([*args[:-1], path]) == 0
    assert (f"| engine busy | 0.6 s | {busy:,.1f} s | {busy / 0.6:.2f} | {repriced_busy:,.1f} s | "
            f"{repriced_busy / 0.6:.2f} |") in capsys.readouterr().out


def test_a_servers_step_log_gives_the_steps_within_the_run(tmp_path, capsys):
    """`--step-log FILE` of `tokenmill serve`: the steps that started within the run (its queries issued from
    10 s to their last end at 13 s on a clock that starts at t0_unix), placed on the run's clock; the
    others, another client's before or after, left out."""
    path = _run(tmp_path, _records())
    doc = json.loads(path.read_text())
    doc["t0_unix"] = 5000.0
    path.write_text(json.dumps(doc))
    log = StepLogFile(tmp_path / "served.jsonl")
    for start in (5001.0, 5010.0, 5011.5, 5013.0, 5020.0):
        log.append(LoggedStep(2, 0, 0.01, start, 80))
    log.close()
    trace = load_trace(path, step_log=tmp_path / "served.jsonl")
    assert [s.start for s in trace.steps] == [10.0, 11.5, 13.0]
    other = StepLogFile(tmp_path / "served.jsonl.worker-1")  # a cluster: every worker's file, merged in time
    other.append(LoggedStep(1, 0, 0.01, 5012.0, 40))
    other.close()
    both = load_trace(path, step_log=[tmp_path / "served.jsonl", tmp_path / "served.jsonl.worker-1"])
    assert [s.start for s in both.steps] == [10.0, 11.5, 12.0, 13.0]
    args = ["sim", "--model", "smollm2-135m", "--hardware", "h100", "--precision", "bf16", "--replay", str(path)]
    assert main([*args, "--step-log", str(tmp_path / "served.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["served_steps"]["steps"] == 3
    assert main([*args, "--step-log", str(tmp_path / "none.jsonl")]) == 2
    assert "--step-log: no such file" in capsys.readouterr().err
    assert main(args[:-2] + ["--step-log", str(tmp_path / "served.jsonl")]) == 2
    assert "give the run with --replay" in capsys.readouterr().err
    doc["t0_unix"] = 9000.0  # a server log of another time: nothing within the run
    path.write_text(json.dumps(doc))
    assert main([*args, "--step-log", str(tmp_path / "served.jsonl")]) == 2
    assert "hold no step within the run" in capsys.readouterr().err
    del doc["t0_unix"]
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="no t0_unix"):
        load_trace(path, step_log=tmp_path / "served.jsonl")


def test_a_clusters_step_files_are_priced_per_worker(tmp_path, capsys):
    """Several step files (a cluster's workers', `serve --step-log FILE`: FILE.prefill-0, ...): each priced
    on its own, and set against its worker's steps' time on a core where the run read its counters
    (`tokenmill bench`'s metrics.engine_workers)."""
    path = _run(tmp_path, _records(), engine_workers={"prefill-0": {"role": "prefill", "busy_s": 0.5,
                                                                    "busy_cpu_s": 0.4}})
    doc = json.loads(path.read_text())
    doc["t0_unix"] = 5000.0
    path.write_text(json.dumps(doc))
    logged = {"prefill-0": [LoggedStep(0, 40, 0.25, 5010.0, 0, ((40, 0),)), LoggedStep(0, 72, 0.25, 5010.5, 0,
                                                                                      ((72, 0),))],
              "decode-0": [LoggedStep(2, 0, 0.02, 5011.0 + 0.1 * i, 90) for i in range(5)]}
    files = []
    for name, steps in logged.items():
        files.append(str(tmp_path / f"steps.jsonl.{name}"))
        log = StepLogFile(files[-1])
        for s in steps:
            log.append(s)
        log.close()
    trace = load_trace(path, step_log=files)
    assert {name: len(steps) for name, steps in trace.worker_steps.items()} == {"prefill-0": 2, "decode-0": 5}
    assert load_trace(path, step_log=files[:1]).worker_steps is None  # one file: one engine
    copy = tmp_path / "again" / "steps.jsonl.prefill-0"  # another folder's file of the same worker name
    copy.parent.mkdir()
    copy.write_text((tmp_path / "steps.jsonl.prefill-0").read_text())
    merged = load_trace(path, step_log=[files[0], str(copy)])
    assert len(merged.steps) == 4 and merged.worker_steps is None  # no step lost; one name: no split
    args = ["sim", "--model", "smollm2-135m", "--hardware", "h100", "--precision", "bf16", "--replay", str(path),
            "--step-log", *files]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    workers = out["served_steps_by_worker"]
    price = replica_step_seconds(get_model("smollm2-135m"), get_hardware("h100"),
                                 Deployment(1, Parallel(), "bf16"))
    prefill = workers["prefill-0"]
    assert prefill["steps"] == 2 and prefill["measured_s"] == pytest.approx(0.5) and prefill["role"] == "prefill"
    assert prefill["priced_s"] == pytest.approx(price(StepShape(np.zeros(0, dtype=np.int64), (PrefillChunk(40, 0),)))
                                                + price(StepShape(np.zeros(0, dtype=np.int64), (PrefillChunk(72, 0),))))
    assert prefill["on_core_share"] == pytest.approx(0.8)
    assert prefill["priced_over_on_core"] == pytest.approx(prefill["priced_s"] / 0.4)
    decode = workers["decode-0"]
    assert decode["steps"] == 5 and decode["role"] is None and decode["on_core_share"] is None
    assert prefill["priced_s"] + decode["priced_s"] == pytest.approx(out["served_steps"]["priced_s"])
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "| prefill-0 (prefill) | 2 | 0.5 s |" in text and "| 80% |" in text
    assert "| decode-0 | 5 | 0.1 s |" in text and "| n/a | n/a |" in text
