"""The host response rates the published DeepSeek-R1 Server runs imply (sim/host_path.py).

The MLPerf v5.1 DeepSeek-R1 Server runs streamed every token (their configs leave NVIDIA's
harness default, ``stream_interval`` 1) at 840-1,480 sequences per 8-GPU instance, and stopped at
their TTFT (p99 1.2-1.9 s against the 2 s limit) with TPOT to spare; the engine alone, simulated
at their rates, gives 0.26-0.52 of that TTFT. A host that handles R responses a second puts a
backlog in front of every first token once the instance's token rate nears R, so each run's
published TTFT p99 implies its R: benchmarks/host_rate_fit.py bisects R until the simulated
TTFT p99 is the published one (results/sim-validate/host-rates.md). ``IMPLIED_RATES`` are those
figures; a run the engine alone already explains implies no limit and is left out.

A row of the validation table takes the median R of the other runs of its round on the same host
CPU kind (Grace on GB200 / GB300 trays, x86 on B200 nodes), never its own run's
(``held_out_rate``): the rate is read in other submitters' logs, and the row checks it.
"""

from __future__ import annotations

import statistics

_GB300 = "GB300-NVL72_GB300-288GB_aarch64"
_GB200 = "GB200-NVL72_GB200-186GB_aarch64"
IMPLIED_RATES: dict[tuple[str, str, str], float] = {
    ("v5.1", "NVIDIA", f"{_GB300}x72_TRT"): 25_294,
    ("v5.1", "CoreWeave", "GB300-NVL8-CoreWeave_TRT"): 24_518,
    ("v5.1", "NVIDIA", f"{_GB200}x72_TRT"): 20_016,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT"): 19_754,
    ("v5.1", "Dell", "XE9680L_B200_SXM_180GBx8_TRT"): 15_305,
    ("v5.1", "Dell", "XE9685L_B200_SXM_180GBx8_TRT"): 15_185,
    ("v5.1", "GigaComputing", "G894-SD1_B200-SXM-180GBx8_TRT"): 17_176,
    ("v5.1", "Google", "B200-SXM-180GBx8_TRT"): 15_911,
    ("v6.0", "NVIDIA", f"{_GB200}x72_TRT"): 46_681,
    ("v6.0", "CoreWeave", f"{_GB200}x64_TRT"): 46_243,
    ("v6.0", "Google", f"{_GB200}x72_TRT"): 20_033,
}
"""(round, org, system) -> responses/s per 8-GPU instance, as benchmarks/host_rate_fit.py read them
(2026-11-30, results/sim-validate/host-rates.md): 1.06-1.10x each v5.1 run's tokens/s per instance,
1.15-1.25x the v6.0 GB200 runs' (which also streamed every token; v6.0's GB300 and B200 configs set
``stream_interval`` 20-200). Google's runs imply the slowest hosts of their kind in both rounds."""


def host_kind(hardware: str) -> str:
    """The host CPU of a GPU profile's systems: Grace on the GB200 / GB300 trays, x86 elsewhere."""
    return "grace" if hardware.startswith("gb") else "x86"


def held_out_rate(round_name: str, org: str, system: str, hardware: str) -> float | None:
    """The median implied rate of the other runs of ``round_name`` on ``hardware``'s host kind; None
    where there is none."""
    from tokenmill.sim.served_latency import DEEPSEEK_RUNS, DEEPSEEK_RUNS_V51

    kind = {(r.round, r.org, r.system): host_kind(r.hardware) for r in DEEPSEEK_RUNS + DEEPSEEK_RUNS_V51}
    rates = [rate for key, rate in IMPLIED_RATES.items()
             if key[0] == round_name and kind[key] == host_kind(hardware) and key != (round_name, org, system)]
    return statistics.median(rates) if rates else None


def host_seq_seconds(round_name: str, org: str, system: str, hardware: str) -> float | None:
    """Host seconds per running sequence per step of a published Llama Server or Interactive run
    (predict.py ``Deployment.host_seq_s``): 1 / ``held_out_rate``, the round's own where it has one,
    else v5.1's (no v6.0 run on an x86 host streamed every token, so none implies a rate); None where
    neither round has a rate on that host kind.

    Why the DeepSeek-R1 runs' response rate bounds a Llama step: the published Llama-3.1-8B Server and
    Interactive runs on Blackwell take 61.6-62.2 us per sequence in flight per step (mean TPOT over the
    sequences decoding, sim/served_latency.py ``in_flight``: Lambda's B200 17.0 ms at 276, NVIDIA's v5.1
    B200 28.5 ms at 458, GigaComputing's B300 19.3 ms at 311), 1.2-1.5x the cost model's step there,
    against 63-66 us per response that the v5.1 x86 DeepSeek-R1 runs' TTFT implies (15,185-17,176
    responses/s but NVIDIA's 19,754). Lambda's run streams every 20th token and takes the same time per
    sequence as NVIDIA's, which streams every token: host work per sequence and step, whatever the stream
    interval. Where the GPU's step is longer (every Hopper and Llama-2-70B run), it hides that work."""
    return next((1.0 / rate for r in (round_name, "v5.1")
                 if (rate := held_out_rate(r, org, system, hardware)) is not None), None)
