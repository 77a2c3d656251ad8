"""The host's response path (sim/host_path.py): the queue, its effect on simulated first and last
tokens, the stream interval's rule, the flags, and the uplift technique."""

from __future__ import annotations

import json

import pytest

from tokenmill.cli import main
from tokenmill.sim.host_path import HostPath, HostQueue
from tokenmill.sim.serving import SimConfig, SimRequest, simulate

STEP = 0.01
CFG = dict(max_num_seqs=64, max_num_batched_tokens=4096, num_kv_blocks=10_000)


def test_the_queue_serves_responses_in_order_at_its_rate():
    q = HostQueue(HostPath(rate=1000.0))
    assert q.deliver(1.0, 10) == pytest.approx(1.010)  # idle: 10 responses take 10 ms
    assert q.deliver(1.005, 10) == pytest.approx(1.020)  # behind the first batch
    assert q.deliver(2.0, 0) == 2.0  # nothing to send: seen when ready
    assert q.deliver(2.0, 5) == pytest.approx(2.005)  # the backlog drained meanwhile


@pytest.mark.parametrize("rate, interval, flag", [
    (0.0, 1, "--host-stream-rate"), (float("inf"), 1, "--host-stream-rate"), (100.0, 0, "--stream-interval")])
def test_bad_paths_are_refused_naming_the_flag(rate, interval, flag):
    with pytest.raises(ValueError, match=flag):
        HostPath(rate, interval)


def _run(requests, path):
    return simulate(requests, lambda s: STEP, SimConfig(**CFG, host_path=path))


def test_a_fast_host_adds_its_service_time_and_the_engine_schedule_is_unchanged():
    reqs = [SimRequest(0.0, 10, 20) for _ in range(8)]
    bare = _run(reqs, None)
    fast = _run(reqs, HostPath(rate=1e6))
    # Eight responses per step at 1e6/s: 8 us after each step end, no backlog.
    assert fast.ttft_s == pytest.approx(bare.ttft_s + 8e-6)
    assert fast.finish_s == pytest.approx(bare.finish_s + 8e-6)
    assert fast.steps == bare.steps and fast.output_tokens.tolist() == bare.output_tokens.tolist()


def test_a_slow_host_backs_up_and_delays_the_first_tokens_of_late_requests():
    decodes = [SimRequest(0.0, 10, 400) for _ in range(20)]
    late = SimRequest(1.005, 10, 5)
    # 20 responses per 10 ms step = 2,000/s against a host of 1,500/s: by t = 1 s about a third of a
    # second of backlog has built, and the late request's first token waits behind it.
    bare, slow = _run([*decodes, late], None), _run([*decodes, late], HostPath(rate=1500.0))
    assert bare.ttft_s[-1] < 2 * STEP
    assert slow.ttft_s[-1] > 0.3
    # A stream interval of 10 cuts the decodes' responses to a tenth (200/s) and the backlog with it.
    spaced = _run([*decodes, late], HostPath(rate=1500.0, stream_interval=10))
    assert spaced.ttft_s[-1] < 0.05
    # TPOT is (last - first) / (n - 1): a steady backlog shifts both ends alike, a growing one stretches it.
    assert slow.tpot_s[0] > bare.tpot_s[0]


def test_an_interval_responds_on_first_every_nth_and_last_tokens():
    # One request, 25 tokens, interval 10: responses at tokens 1 (first), 10, 20 and 25 (last), on a
    # host of one response per second, so each response's second shows in the delivery times.
    res = _run([SimRequest(0.0, 10, 25)], HostPath(rate=1.0, stream_interval=10))
    assert res.ttft_s[0] == pytest.approx(STEP + 1.0)  # the first step ends at 0.01: seen at 1.01
    # Tokens 10 and 20 queue behind it (handled by 2.01 and 3.01), the last token behind them: four
    # responses in all, where streaming every token would have been 25.
    assert res.finish_s[0] == pytest.approx(STEP + 4.0)


SMALL = ["--model", "llama3.1-8b", "--hardware", "h100", "--num-gpus", "1", "--tp", "1", "--isl", "128",
         "--osl", "256", "--scenario", "server", "--target-qps", "20", "--num-requests", "200", "--json"]


def test_the_flags_slow_first_tokens_and_the_config_says_so(capsys):
    assert main(["sim", *SMALL]) == 0
    plain = json.loads(capsys.readouterr().out)
    rate = plain["tokens_per_s"] * 0.9  # below the replica's token rate: the backlog grows
    assert main(["sim", *SMALL, "--host-stream-rate", str(rate)]) == 0
    slow = json.loads(capsys.readouterr().out)
    assert main(["sim", *SMALL, "--host-stream-rate", str(rate), "--stream-interval", "8"]) == 0
    spaced = json.loads(capsys.readouterr().out)
    assert plain["config"]["host_stream_rate"] is None and plain["config"]["stream_interval"] is None
    assert slow["config"]["host_stream_rate"] == pytest.approx(rate) and slow["config"]["stream_interval"] == 1
    assert slow["ttft_ms"]["p99"] > 5 * plain["ttft_ms"]["p99"]
    assert spaced["ttft_ms"]["p99"] < 2 * plain["ttft_ms"]["p99"]


@pytest.mark.parametrize("args, message", [
    (["--stream-interval", "4"], "only matters with --host-stream-rate"),
    (["--host-stream-rate", "0"], "--host-stream-rate"),
    (["--host-stream-rate", "1000", "--stream-interval", "0"], "--stream-interval"),
])
def test_bad_host_flags_name_the_flag(capsys, args, message):
    assert main(["sim", "--isl", "128", "--osl", "64", "--num-requests", "20", *args]) == 2
    assert message in capsys.readouterr().err


def test_the_uplift_prices_the_stream_interval_as_a_technique():
    from tokenmill.sim.cost import Parallel
    from tokenmill.sim.hardware import get_hardware
    from tokenmill.sim.models import get_model
    from tokenmill.sim.predict import Deployment, Workload
    from tokenmill.sim.uplift import uplift

    d = Deployment(1, Parallel(tp=1), "fp8", host_stream_rate=2000.0, stream_interval=10)
    w = Workload("server", 128, 256, num_requests=200, preset="llama3.1-8b")
    variants = uplift(get_model("llama3.1-8b"), get_hardware("h100"), d, w)
    assert [v.name for v in variants] == ["baseline", "+ stream interval 10"]
    base, spaced = (v.figures for v in variants)
    assert base["config"]["stream_interval"] == 1 and spaced["config"]["stream_interval"] == 10
    assert spaced["tokens_per_s_per_gpu"] > base["tokens_per_s_per_gpu"]


def test_each_row_takes_the_median_rate_of_other_runs_on_its_host_kind_never_its_own():
    import statistics

    from tokenmill.sim.host_rates import IMPLIED_RATES, held_out_rate, host_kind
    from tokenmill.sim.published import RESULTS

    rows = [r for r in RESULTS if r.host_stream_rate is not None]
    assert {(r.model, r.scenario) for r in rows} == {("deepseek-r1", "server")}
    v51_b200 = next(r for r in rows if "v5.1" in r.source and r.hardware == "b200")
    own = IMPLIED_RATES[("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT")]
    others = [v for (rnd, org, system), v in IMPLIED_RATES.items()
              if rnd == "v5.1" and "B200" in system and org != "NVIDIA"]
    assert len(others) == 4 and v51_b200.host_stream_rate == pytest.approx(statistics.median(others))
    assert v51_b200.host_stream_rate != pytest.approx(own)
    # The v6.0 GB200 rack row: the other two v6.0 GB200 runs (CoreWeave, Google), not NVIDIA's own.
    gb200 = next(r for r in rows if "v6.0" in r.source and r.hardware == "gb200")
    assert gb200.host_stream_rate == pytest.approx(statistics.median(
        [IMPLIED_RATES[k] for k in IMPLIED_RATES if k[0] == "v6.0" and k[1] != "NVIDIA"]))
    assert host_kind("gb300") == host_kind("gb200") == "grace" and host_kind("b200") == "x86"
    assert held_out_rate("v6.0", "Nebius", "nebius_b200_n1", "b200") is None  # no v6.0 x86 run streamed every token


def test_the_rates_are_read_from_runs_that_streamed_every_token():
    from tokenmill.sim.host_rates import IMPLIED_RATES
    from tokenmill.sim.served_latency import DEEPSEEK_RUNS, DEEPSEEK_RUNS_V51

    streamed = {(r.round, r.org, r.system) for r in DEEPSEEK_RUNS + DEEPSEEK_RUNS_V51 if r.stream_interval == 1}
    assert set(IMPLIED_RATES) == streamed
    # Each implies a host a little faster than the tokens it streamed (the backlog grows at or below them).
    runs = {(r.round, r.org, r.system): r for r in DEEPSEEK_RUNS + DEEPSEEK_RUNS_V51}
    for key, rate in IMPLIED_RATES.items():
        run = runs[key]
        assert 1.0 < rate / (run.tokens_per_s / run.instances) < 1.4


def test_the_deepseek_r1_server_rows_stream_as_their_configs_say():
    import re

    from tokenmill.sim.published import RESULTS

    rows = sorted((re.search(r"v\d\.\d", r.source).group(), r.hardware, r.num_gpus, r.stream_interval)
                  for r in RESULTS if (r.model, r.scenario) == ("deepseek-r1", "server"))
    assert rows == [("v5.1", "b200", 8, 1), ("v5.1", "gb300", 72, 1), ("v6.0", "b200", 8, 20),
                    ("v6.0", "b300", 8, 20), ("v6.0", "b300", 8, 20), ("v6.0", "gb200", 72, 1),
                    ("v6.0", "gb300", 8, 100), ("v6.0", "gb300", 72, 100), ("v6.0", "gb300", 72, 100),
                    ("v6.0", "gb300", 288, 100)]


def test_the_table_names_the_host(capsys):
    args = [a for a in SMALL if a != "--json"]
    assert main(["sim", *args, "--host-stream-rate", "50000", "--stream-interval", "4"]) == 0
    assert "host 50,000 responses/s, stream interval 4" in capsys.readouterr().out
