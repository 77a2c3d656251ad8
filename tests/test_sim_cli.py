"""``tokenmill sim`` end to end: the JSON it prints, and the flags it refuses."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from dataclasses import replace

import pytest

from tokenmill.cli import main

SMALL = ["--isl", "128", "--osl", "64", "--num-requests", "60"]


def test_a_simulation_does_not_import_torch():
    """The simulator reads model shapes only: a DeepSeek-R1 run (MoE, MLA, MTP module) leaves torch
    unimported, which saves a second a run."""
    code = ("import sys; from tokenmill.cli import main; "
            "rc = main(['sim', '--model', 'deepseek-r1', '--hardware', 'gb300', '--num-gpus', '8', '--tp', '8', "
            "'--ep', '8', '--isl', '128', '--osl', '64', '--num-requests', '60', '--json']); "
            "print(rc, 'torch' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "0 False"
    assert json.loads(out.stdout)["tokens_per_s"] > 0


@pytest.mark.parametrize("scenario", ["offline", "server", "singlestream"])
def test_json_has_the_issue_fields(capsys, scenario):
    assert main(["sim", "--model", "llama3.1-8b", "--hardware", "h100", "--scenario", scenario, "--json",
                 *SMALL]) == 0
    f = json.loads(capsys.readouterr().out)
    for key in ("tokens_per_s_per_gpu", "tokens_per_s", "ttft_ms", "tpot_ms", "cost_per_million_tokens", "config"):
        assert key in f
    assert f["tokens_per_s"] > 0 and f["ttft_ms"]["p99"] >= f["ttft_ms"]["p50"] > 0
    assert f["config"]["precision"] == "fp8" and f["config"]["hardware"] == "h100"
    assert (f["qps"] is not None) == (scenario == "server")


def test_replicas_scale_the_total_not_the_per_gpu_figure(capsys):
    def run(num_gpus):
        main(["sim", "--model", "llama3.1-8b", "--hardware", "h200", "--num-gpus", str(num_gpus), "--json", *SMALL])
        return json.loads(capsys.readouterr().out)

    one, four = run(1), run(4)
    assert four["config"]["replicas"] == 4
    assert four["tokens_per_s"] == pytest.approx(4 * one["tokens_per_s"])
    assert four["tokens_per_s_per_gpu"] == pytest.approx(one["tokens_per_s_per_gpu"])


def test_speculative_decoding_raises_throughput(capsys):
    def run(*extra):
        main(["sim", "--model", "llama3.1-8b", "--hardware", "b200", "--json", *SMALL, *extra])
        return json.loads(capsys.readouterr().out)["tokens_per_s"]

    assert run("--mtp", "3", "--mtp-acceptance", "2.5") > run()


@pytest.mark.parametrize("args, message", [
    (["--hardware", "tpu9"], "--hardware"),
    (["--model", "llama9"], "--model"),
    (["--model", "llama3.1-405b", "--hardware", "h100", "--precision", "bf16"], "--tp/--ep"),
    (["--tp", "2", "--num-gpus", "3"], "--num-gpus"),
    (["--num-gpus", "0"], "--num-gpus: must be >= 1"),
])
def test_bad_deployments_name_the_flag(capsys, args, message):
    assert main(["sim", *SMALL, *args]) == 2
    assert message in capsys.readouterr().err


def test_help_names_every_simulated_model():
    from tokenmill.sim.cli_args import MODEL_NAMES
    from tokenmill.sim.models import SIM_MODELS

    assert set(MODEL_NAMES) == set(SIM_MODELS)


def test_help_names_every_dataset_distribution():
    from tokenmill.sim.cli_args import DATASET_NAMES
    from tokenmill.sim.mlperf_lengths import DATASET_DISTRIBUTIONS

    assert set(DATASET_NAMES) == set(DATASET_DISTRIBUTIONS)


def test_dataset_draws_prompts_and_keeps_the_published_output_mean(capsys):
    assert main(["sim", "--model", "llama3.1-8b", "--hardware", "h100", "--dataset", "llama3.1-8b",
                 "--num-requests", "60", "--json"]) == 0
    c = json.loads(capsys.readouterr().out)["config"]
    assert (c["dataset"], c["isl"], c["osl"]) == ("llama3.1-8b", 871, 129)
    assert main(["sim", "--dataset", "llama3.1-8b", "--isl", "100", "--num-requests", "60"]) == 2
    assert "--isl and --dataset" in capsys.readouterr().err


def test_calibration_fit_recovers_the_efficiency_that_made_the_steps():
    from dataclasses import replace

    from tokenmill.sim.calibrate import CONTEXT, fit_efficiency
    from tokenmill.sim.cost import Parallel, step_cost, step_time
    from tokenmill.sim.hardware import Efficiency, get_hardware
    from tokenmill.sim.models import get_model
    from tokenmill.sim.shapes import PrefillChunk, StepShape

    arch = get_model("smollm2-135m")
    truth = Efficiency(gemm=0.45, memory=0.8, attention=0.45, comm=1.0, step_overhead_s=0.012,
                       seq_overhead_s=2e-4, collective_latency_s=0.0)
    hw = replace(get_hardware("h100"), flops={"fp32": 1e11}, memory_bw=2e10, default_precision="fp32")
    shapes = {(b, 0): StepShape(decode_contexts=(CONTEXT,) * b) for b in (1, 8, 32)}
    shapes[(0, 256)] = StepShape(prefills=(PrefillChunk(256, 0),))
    shapes[(4, 128)] = StepShape(decode_contexts=(CONTEXT,) * 4, prefills=(PrefillChunk(128, 0),))
    points = [(key, step_time(step_cost(arch, s, Parallel(), "fp32", 4.0), replace(hw, efficiency=truth),
                              "fp32").total_s) for key, s in shapes.items()]
    fitted, error, overlap = fit_efficiency(arch, hw, "fp32", points)
    assert error < 1e-6 and overlap
    assert (fitted.gemm, fitted.memory) == (0.45, 0.8)
    assert (fitted.step_overhead_s, fitted.seq_overhead_s) == pytest.approx((0.012, 2e-4), rel=1e-6)


def test_the_kv_read_rate_is_fitted_on_the_long_context_decode_alone():
    from dataclasses import replace

    from tokenmill.sim.calibrate import CACHED_STEP, LONG_DECODE, fit_kv_read, point_price_s
    from tokenmill.sim.hardware import Efficiency, get_hardware
    from tokenmill.sim.models import get_model

    arch = get_model("smollm2-135m")
    base = replace(get_hardware("h100"), flops={"bf16": 1.6e11}, memory_bw=1.4e10, default_precision="bf16",
                   efficiency=Efficiency(gemm=0.5, memory=1.0, attention=0.5, comm=1.0, step_overhead_s=5e-3,
                                         seq_overhead_s=5e-4, collective_latency_s=0.0))

    def with_kv(kv_read):
        return replace(base, efficiency=replace(base.efficiency, kv_read=kv_read))

    # None reads the K/V at the memory rate; a slower read prices the long-context decode higher,
    # and a step over 64-token contexts barely.
    assert point_price_s(arch, base, "bf16", LONG_DECODE) == point_price_s(arch, with_kv(1.0), "bf16", LONG_DECODE)
    slow, fast = (point_price_s(arch, with_kv(k), "bf16", LONG_DECODE) for k in (0.5, 1.0))
    assert slow > 1.1 * fast
    short_slow, short_fast = (point_price_s(arch, with_kv(k), "bf16", CACHED_STEP) for k in (0.5, 1.0))
    assert short_slow < 1.01 * short_fast
    measured = point_price_s(arch, with_kv(0.37), "bf16", LONG_DECODE)
    fitted = fit_kv_read(arch, base, "bf16", measured)
    assert fitted.efficiency.kv_read == 0.37 and replace(fitted.efficiency, kv_read=None) == base.efficiency
    # Every other calibrated step is priced as the fit sees it: its decodes over 64-token contexts, its prompt
    # from its start; the step over a prefix hit continues from 64 cached tokens.
    from tokenmill.sim.calibrate import CONTEXT, point_shape
    assert point_shape((8, 0)).decode_contexts == (CONTEXT,) * 8 and not point_shape((8, 0)).prefills
    assert [(c.num_tokens, c.context) for c in point_shape((4, 128)).prefills] == [(128, 0)]
    assert [(c.num_tokens, c.context) for c in point_shape(CACHED_STEP).prefills] == [(192, 64)]
    assert point_price_s(arch, base, "bf16", (1, 0)) < point_price_s(arch, base, "bf16", (8, 0)) < slow
    with pytest.raises(ValueError, match="efficiency.kv_read"):
        Efficiency(kv_read=1.5)


def test_this_machine_without_a_profile_names_the_command(tmp_path, monkeypatch, capsys):
    import tokenmill.sim.calibrate as calibrate

    monkeypatch.setattr(calibrate, "PROFILE_DIR", tmp_path / "missing")
    assert main(["sim", "--hardware", "this-machine", *SMALL]) == 2
    assert "tokenmill sim calibrate" in capsys.readouterr().err


def test_a_profile_written_before_the_expert_stream_rate_streams_experts_as_the_rest(tmp_path, monkeypatch):
    import tokenmill.sim.calibrate as calibrate
    from tokenmill.sim.hardware import get_hardware

    old = get_hardware("h100").to_dict()
    del old["efficiency"]["expert_stream"]  # as profiles written before 2026-11-28 are
    monkeypatch.setattr(calibrate, "PROFILE_DIR", tmp_path)
    (tmp_path / "this-machine.json").write_text(json.dumps(old))
    assert calibrate.load_profile().efficiency.expert_stream is None


def test_calibrate_writes_a_profile_that_predicts(tmp_path, monkeypatch, capsys):
    import tokenmill.sim.calibrate as calibrate

    monkeypatch.setattr(calibrate, "PROFILE_DIR", tmp_path)
    monkeypatch.setattr(calibrate, "DECODE_BATCHES", (1, 3))
    fitted_on, fit = [], calibrate.fit_efficiency

    def recording_fit(arch, base, precision, points, **kwargs):
        fitted_on.extend(shape for shape, _ in points)
        return fit(arch, base, precision, points, **kwargs)

    monkeypatch.setattr(calibrate, "fit_efficiency", recording_fit)
    assert main(["sim", "calibrate", "--model", "dummy:tiny", "--device", "cpu", "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert "decode step, batch 3:" in out and "per sequence" in out
    assert "prefill of 128 tokens beside 4 decodes" in out
    # The step over a prefix hit is timed and priced beside its time, not fitted.
    assert "prefill of 192 tokens over 64 cached beside 4 decodes" in out and "not fitted; the profile prices" in out
    # The decode over long contexts fits the K/V read rate alone, after the rest.
    assert "decode step, batch 4 over 1024-token contexts" in out and "fits the K/V read rate alone" in out
    assert calibrate.MIXED_STEP in fitted_on and calibrate.CACHED_STEP not in fitted_on
    assert calibrate.LONG_DECODE not in fitted_on
    profile = json.loads((tmp_path / "this-machine.json").read_text())
    assert 0 < profile["efficiency"]["kv_read"] <= 1
    assert profile["default_precision"] == "fp32" and "dummy:tiny in fp32" in profile["sources"][0]
    assert profile["kv_cache_bytes"] > 0  # the engine's own default cache, not the machine's memory
    assert profile["machine"]["device"] == "cpu" and profile["machine"]["cpus"] >= 1  # sim/machine_id.py
    assert main(["sim", "--hardware", "this-machine", "--model", "dummy:tiny", "--json", *SMALL]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["config"]["hardware"] == "this-machine" and f["tokens_per_s"] > 0
    from tokenmill.config import EngineConfig
    from tokenmill.engine.engine import LLMEngine

    engine = LLMEngine(EngineConfig(model="dummy:tiny", load_format="dummy", device="cpu", dtype="float32"))
    assert f["config"]["kv_blocks_per_replica"] == engine.core.config.num_kv_blocks  # the sim's cache is the engine's


def test_calibrate_times_the_prefill_lengths_asked_for(tmp_path, monkeypatch, capsys):
    import tokenmill.sim.calibrate as calibrate

    monkeypatch.setattr(calibrate, "PROFILE_DIR", tmp_path)
    monkeypatch.setattr(calibrate, "DECODE_BATCHES", (1,))
    fitted_on, fit = [], calibrate.fit_efficiency

    def recording_fit(arch, base, precision, points, **kwargs):
        fitted_on.extend(shape for shape, _ in points)
        return fit(arch, base, precision, points, **kwargs)

    monkeypatch.setattr(calibrate, "fit_efficiency", recording_fit)
    argv = ["sim", "calibrate", "--model", "dummy:tiny", "--device", "cpu", "--dtype", "float32"]
    assert main([*argv, "--prefill-tokens", "32,1024"]) == 0
    out = capsys.readouterr().out
    assert "prefill of 32 tokens:" in out and "prefill of 1024 tokens:" in out and "prefill of 256 tokens:" not in out
    assert {(0, 32), (0, 1024)} <= set(fitted_on) and (0, 256) not in fitted_on
    # A length past the engine's step budget would be chunked, never timed whole: refused up front.
    assert main([*argv, "--prefill-tokens", "64,2048"]) == 2
    assert "--prefill-tokens: lengths from 1 to the engine's step budget 1024" in capsys.readouterr().err


def test_calibrate_check_prices_the_steps_timed_again_on_the_saved_profile(tmp_path, monkeypatch, capsys):
    import re

    import tokenmill.sim.calibrate as calibrate

    monkeypatch.setattr(calibrate, "PROFILE_DIR", tmp_path)
    monkeypatch.setattr(calibrate, "DECODE_BATCHES", (1,))
    argv = ["sim", "calibrate", "--model", "dummy:tiny", "--device", "cpu", "--prefill-tokens", "32"]
    assert main([*argv, "--check", "--dtype", "float32"]) == 2  # nothing to check yet
    assert "no this-machine profile" in capsys.readouterr().err
    assert main([*argv, "--dtype", "float32"]) == 0
    capsys.readouterr()
    written = (tmp_path / "this-machine.json").read_text()
    assert main([*argv, "--dtype", "float32", "--check"]) == 0
    out = capsys.readouterr().out
    assert "its steps timed again now" in out and "nothing written" in out
    # One line per calibrated step, each with its time now and the profile's price of it.
    for step in ("decode step, batch 1:", "prefill of 32 tokens:", "prefill of 128 tokens beside 4 decodes:",
                 "prefill of 192 tokens over 64 cached beside 4 decodes:", "batch 4 over 1024-token contexts:"):
        assert re.search(re.escape(step) + r" [\d.]+ ms, priced [\d.]+ ms \([\d.]+x\)", out), step
    # Timed again minutes after the fit, on the same engine, the steps are priced near their time.
    median = float(re.search(r"steps at ([\d.]+)x their time now \(median of 5", out).group(1))
    assert 0.5 < median < 2.0
    assert (tmp_path / "this-machine.json").read_text() == written  # a check writes nothing
    # The engine must compute as the profile was calibrated.
    assert main([*argv, "--dtype", "bfloat16", "--check"]) == 2
    assert "calibrated in fp32; give the --dtype it was calibrated with" in capsys.readouterr().err


def test_served_steps_are_timed_in_alternated_rounds():
    """Each shape is served once per round, the rounds one after another (the VM's
    drift spread over every shape, not fitted as a bend), and one median per shape comes back."""
    import tokenmill.sim.calibrate as calibrate
    from tokenmill.config import EngineConfig
    from tokenmill.engine.async_engine import AsyncEngine

    served = AsyncEngine(EngineConfig(model="dummy:tiny", load_format="dummy", device="cpu", dtype="float32"))
    calls = []
    real = served.generate

    def generate(prompt, params, *args, **kwargs):
        calls.append((len(prompt), params.max_tokens))
        return real(prompt, params, *args, **kwargs)

    served.generate = generate
    try:
        points = calibrate.measure_served_steps(served, (1, 3), repeats=4, rounds=2)
    finally:
        served.shutdown()
    assert [shape for shape, _ in points] == [(1, 0), (3, 0), (0, 64), (0, 256), calibrate.MIXED_STEP,
                                              calibrate.CACHED_STEP, calibrate.LONG_DECODE]
    assert all(seconds > 0 for _, seconds in points)
    # Per request 2 + 12 decode steps; the 3 prefills of each length, rounded up to 2 per round; as many
    # mixed steps, each a prompt sent once its round's decoding requests have their second token; as many
    # cached steps, each a prefix served alone first, then the decodes and a prompt that starts with it;
    # then the long-context decodes, as the decode batches are.
    decodes, tokens = calibrate.MIXED_STEP
    cached_decodes, cached_tokens = calibrate.CACHED_STEP
    beside = (calibrate.CONTEXT, 14 + calibrate.LATE_SLACK_TOKENS)  # decodes run on until the late prompt is answered
    one_round = [(calibrate.CONTEXT, 14)] * 4 + [(64, 1)] * 2 + [(256, 1)] * 2 + \
        ([beside] * decodes + [(tokens, 1)]) * 2 + \
        ([(calibrate.CACHED_CONTEXT, 1)] + [beside] * cached_decodes +
         [(calibrate.CACHED_CONTEXT + cached_tokens, 1)]) * 2 + \
        [(calibrate.LONG_CONTEXT, 14)] * calibrate.LONG_DECODE[0]
    assert calls == one_round * 2
    with pytest.raises(ValueError, match="long-context"):  # its batch among the plain decode batches
        calibrate.measure_served_steps(served, (1, calibrate.LONG_DECODE[0]))


def test_kv_cache_memory_bounds_the_blocks_and_the_batch(capsys):
    from tokenmill.sim.cost import Parallel, kv_bytes_per_token
    from tokenmill.sim.models import get_model

    def run(*extra):
        assert main(["sim", "--model", "llama3.1-8b", "--hardware", "h100", "--json", *SMALL, *extra]) == 0
        return json.loads(capsys.readouterr().out)

    per_block = kv_bytes_per_token(get_model("llama3.1-8b"), 1.0, Parallel()) * 16  # fp8 KV
    small = run("--kv-cache-memory-gib", "0.05")
    assert small["config"]["kv_blocks_per_replica"] == int(0.05 * 2**30 / per_block)
    assert run()["config"]["kv_blocks_per_replica"] > 100 * small["config"]["kv_blocks_per_replica"]
    assert small["mean_batch_size"] < run()["mean_batch_size"]
    assert main(["sim", *SMALL, "--kv-cache-memory-gib", "500"]) == 2
    assert "--kv-cache-memory-gib" in capsys.readouterr().err
    # TensorRT-LLM's sizing: a fraction of what the weights and the runtime's buffers leave
    from tokenmill.sim.cost import weight_bytes
    from tokenmill.sim.hardware import get_hardware
    from tokenmill.sim.predict import Deployment, runtime_buffer_bytes

    arch, layout = get_model("llama3.1-8b"), Parallel()
    free = get_hardware("h100").memory_bytes - weight_bytes(arch, "fp8", layout) - \
        runtime_buffer_bytes(arch, Deployment(1, layout, "fp8"), layout)
    trt = run("--kv-cache-free-fraction", "0.5")["config"]
    assert trt["kv_free_fraction"] == 0.5 and trt["kv_blocks_per_replica"] == int(0.5 * free / per_block)
    for bad in (["--kv-cache-free-fraction", "0"], ["--kv-cache-free-fraction", "0.9", "--kv-cache-memory-gib", "1"]):
        assert main(["sim", *SMALL, *bad]) == 2
        assert "--kv-cache-free-fraction" in capsys.readouterr().err


def test_calibration_fit_separates_the_eager_steps_of_a_graph_engine():
    from dataclasses import replace

    from tokenmill.sim.calibrate import CONTEXT, fit_efficiency
    from tokenmill.sim.cost import Parallel, step_cost, step_time
    from tokenmill.sim.hardware import Efficiency, get_hardware
    from tokenmill.sim.models import get_model
    from tokenmill.sim.shapes import PrefillChunk, StepShape

    arch = get_model("smollm2-135m")
    # A GPU engine: decode steps replayed as graphs (1.5 ms), prefill steps eager (25 ms).
    truth = Efficiency(gemm=0.5, memory=0.5, attention=0.5, comm=1.0, step_overhead_s=1.5e-3,
                       eager_step_overhead_s=25e-3, seq_overhead_s=2e-5, collective_latency_s=0.0)
    hw = replace(get_hardware("h200"), default_precision="bf16")
    shapes = {(b, 0): StepShape(decode_contexts=(CONTEXT,) * b) for b in (1, 8, 32, 128)}
    shapes.update({(0, n): StepShape(prefills=(PrefillChunk(n, 0),)) for n in (64, 256)})
    points = [(key, step_time(step_cost(arch, s, Parallel(), "bf16", 2.0), replace(hw, efficiency=truth),
                              "bf16").total_s) for key, s in shapes.items()]
    fitted, error, _ = fit_efficiency(arch, hw, "bf16", points, eager_steps=True)
    assert error < 0.01
    assert fitted.eager_step_overhead_s == pytest.approx(25e-3, rel=0.02)
    assert fitted.step_overhead_s == pytest.approx(1.5e-3, rel=0.05)
    # One overhead for every step cannot explain both kinds.
    _, error_one, _ = fit_efficiency(arch, hw, "bf16", points)
    assert error_one > 0.3

    # --cuda-graph-mode full: steps of up to 128 rows replay, so the 64-token prefill is a graph step
    # and only the 256-token one pays the eager cost.
    truth = replace(truth, graph_max_rows=128)
    points = [(key, step_time(step_cost(arch, s, Parallel(), "bf16", 2.0), replace(hw, efficiency=truth),
                              "bf16").total_s) for key, s in shapes.items()]
    short, long = (step_cost(arch, shapes[(0, n)], Parallel(), "bf16", 2.0) for n in (64, 256))
    assert truth.replays(short) and not truth.replays(long) and not Efficiency().replays(short)
    fitted, error, _ = fit_efficiency(arch, hw, "bf16", points, eager_steps=True, graph_max_rows=128)
    assert error < 0.01 and fitted.graph_max_rows == 128
    assert fitted.eager_step_overhead_s == pytest.approx(25e-3, rel=0.02)
    _, error_decode_rule, _ = fit_efficiency(arch, hw, "bf16", points, eager_steps=True)  # wrong rule: worse fit
    assert error_decode_rule > 0.3


def test_server_at_a_target_qps(capsys):
    assert main(["sim", "--model", "llama3.1-8b", "--hardware", "h100", "--scenario", "server", "--target-qps", "2",
                 "--json", *SMALL]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["qps"] == 2 and f["config"]["target_qps"] == 2 and f["ttft_ms"]["p99"] > 0
    assert main(["sim", "--scenario", "offline", "--target-qps", "2", *SMALL]) == 2
    assert "--target-qps" in capsys.readouterr().err


def test_search_tries_every_layout_and_keeps_the_best(capsys):
    from tokenmill.sim.cost import Parallel
    from tokenmill.sim.hardware import get_hardware
    from tokenmill.sim.models import get_model
    from tokenmill.sim.search import SEQ_CHOICES, layouts

    assert main(["sim", "--model", "llama3.1-8b", "--hardware", "h100", "--num-gpus", "8", "--search", "--json",
                 *SMALL]) == 0
    f = json.loads(capsys.readouterr().out)
    scores = [c["tokens_per_s_per_gpu"] for c in f["searched"]]
    assert scores == sorted(scores, reverse=True) and f["tokens_per_s_per_gpu"] == scores[0]
    best = f["searched"][0]
    assert (f["config"]["tp"], f["config"]["max_num_seqs"]) == (best["tp"], best["max_num_seqs"])
    # Dense: TP inside the NVLink domain; MoE: EP with TP or attention-DP beside plain TP.
    assert layouts(get_model("llama3.1-8b"), get_hardware("h100"), 8) == [Parallel(tp=t) for t in (1, 2, 4, 8)]
    moe = layouts(get_model("deepseek-r1"), get_hardware("gb300"), 72)
    assert Parallel(tp=1, ep=72, attention_dp=True) in moe and Parallel(tp=8, ep=8) in moe
    assert all(72 % p.devices == 0 for p in moe) and len(SEQ_CHOICES) > 3
    assert main(["sim", "--model", "llama3.1-405b", "--hardware", "h100", "--num-gpus", "1", "--search",
                 *SMALL]) == 2
    assert "--num-gpus" in capsys.readouterr().err


def test_server_runs_for_mlperfs_duration_unless_a_count_is_given(capsys):
    from argparse import Namespace

    from tokenmill.sim.cli import _duration

    assert _duration(Namespace(scenario="server", duration=None, num_requests=None)) == 600.0
    assert _duration(Namespace(scenario="interactive", duration=None, num_requests=50)) is None
    assert _duration(Namespace(scenario="offline", duration=None, num_requests=None)) is None
    assert main(["sim", "--model", "llama3.1-8b", "--hardware", "h100", "--scenario", "server", "--isl", "128",
                 "--osl", "64", "--duration", "20", "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["config"]["duration_s"] == 20 and f["requests_simulated"] == pytest.approx(f["qps"] * 20, rel=0.15)
    assert main(["sim", "--scenario", "server", "--duration", "20", "--num-requests", "50"]) == 2
    assert "--duration and --num-requests" in capsys.readouterr().err
    assert main(["sim", "--scenario", "offline", "--duration", "0"]) == 2
    assert "--duration" in capsys.readouterr().err


def test_min_query_count_lengthens_a_timed_run_and_names_its_errors(capsys):
    assert main(["sim", "--model", "llama3.1-8b", "--hardware", "h100", "--scenario", "offline", "--isl", "128",
                 "--osl", "64", "--num-requests", "50", "--duration", "1", "--min-query-count", "3000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["requests_simulated"] == 3000
    assert main(["sim", "--model", "llama3.1-8b", "--hardware", "h100", "--scenario", "server", "--isl", "128",
                 "--osl", "64", "--target-qps", "100", "--duration", "1", "--min-query-count", "2000"]) == 0
    assert "2,000 (20 s of arrivals)" in capsys.readouterr().out  # the count at 100 QPS, not the 1 s duration
    assert main(["sim", "--scenario", "offline", "--min-query-count", "3000"]) == 2  # no --duration: not timed
    assert "--min-query-count" in capsys.readouterr().err
    assert main(["sim", "--scenario", "server", "--min-query-count", "0"]) == 2
    assert "--min-query-count: must be >= 1" in capsys.readouterr().err


def test_validate_suite_filters_the_rows_and_out_keeps_the_table(capsys, tmp_path, monkeypatch):
    assert main(["sim", "validate", "--suite", "mlperf", "--model", "llama3.3-70b"]) == 2  # TensorRT-LLM rows only
    assert "--model/--suite" in capsys.readouterr().err
    from tokenmill.sim import published

    row = replace(next(r for r in published.RESULTS if r.model == "llama3.1-8b" and r.dataset is None),
                  isl=128, osl=128, num_requests=None)  # a small run
    monkeypatch.setattr(published, "RESULTS", (row, replace(row, model="mixtral-8x7b")))
    out = tmp_path / "table.md"
    assert main(["sim", "validate", "--suite", "tensorrt-llm", "--num-requests", "16", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1 of 1 rows" in printed or "0 of 1 rows" in printed
    assert out.read_text().strip() == printed.strip() and "mixtral-8x7b not in the simulator" in printed


def test_a_server_search_reports_each_run_at_the_deployments_qps(capsys, monkeypatch):
    from tokenmill.sim import scenario_run

    told = []

    @contextlib.contextmanager
    def recording(enabled):
        yield (lambda qps, ok: told.append((qps, ok))) if enabled else None

    monkeypatch.setattr(scenario_run, "peak_search_bar", recording)
    argv = ["sim", "--model", "llama3.1-8b", "--hardware", "h100", "--num-gpus", "8", "--scenario", "server", *SMALL,
            "--ttft-ms", "10"]  # below the Offline-rate cap: a search of several runs
    assert main([*argv, "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    # 8 replicas are simulated as a routed group of 4 carrying half the load: the runs are told at the 8's QPS.
    assert len(told) > 3 and max(q for q, ok in told if ok) == pytest.approx(f["qps"])
    assert min(q for q, ok in told if not ok) > f["qps"]
    told.clear()
    assert main([*argv, "--target-qps", "50"]) == 0
    assert told == []  # no search


def test_the_peak_search_shows_a_progress_bar(capsys):
    assert main(["sim", "--model", "llama3.1-8b", "--hardware", "h100", "--scenario", "server", *SMALL]) == 0
    assert "Searching the peak QPS" in capsys.readouterr().err


def test_a_peak_search_that_meets_no_rate_says_so(capsys):
    # v5.1 kernels, eager steps: a TP4 DeepSeek-R1 replica's step is past the Interactive TPOT limit at any rate.
    argv = ["sim", "--model", "deepseek-r1", "--hardware", "gb300", "--num-gpus", "4", "--tp", "4", "--scenario",
            "interactive", "--kernels", "v5.1", "--no-cuda-graphs", "--isl", "128", "--osl", "32",
            "--num-requests", "20"]
    assert main([*argv, "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["qps"] == 0.0 and f["tokens_per_s"] == 0.0 and f["cost_per_million_tokens"] is None
    assert f["tpot_ms"]["p99"] > 15  # the lowest rate tried, past the 15 ms limit
    assert main(argv) == 0
    assert "none meets the p99 limits" in capsys.readouterr().out
