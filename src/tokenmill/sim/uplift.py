"""``tokenmill sim --uplift``: what each technique of a deployment is worth.

The seeds' question (MLPerf v6.0: how much of the gain is software) asked of
the simulator: the deployment the flags describe is the full stack (where
they name no technique, the one sim/auto.py assumes); the
baseline is the same GPUs with every technique it uses switched off; each
technique is then switched on alone, and the table gives tokens/s per GPU
(and the latencies) of each against the baseline. Techniques, as the flags
turn them on:

- expert parallel and attention DP (``--ep``, ``--attention-dp``): off, a
  replica is tensor parallel over the same devices;
- speculative decoding / MTP (``--mtp N``, ``--mtp-acceptance``): off, one
  token per decode step;
- disaggregated prefill/decode (``--disagg P:D``): off, the same GPUs as
  aggregated replicas;
- prefix caching (``--cached-tokens``): off, every prompt computed whole;
- GEMM + all-reduce fusion (``--fused-allreduce``): off, the tensor-parallel
  all-reduces run between layers;
- newer kernels, when ``--baseline-kernels`` names an older generation
  (sim/kernels.py): off, every step at that generation's scale. This is how
  the table prices a software uplift between MLPerf rounds on one config;
- a stream interval (``--stream-interval N`` with ``--host-stream-rate``,
  sim/host_path.py): off, every sequence responds every step;
- CUDA graphs, when ``--baseline-eager`` asks (sim/cuda_graphs.py): off, every
  step launches its kernels from the host.

A variant that does not run (e.g. the weights do not fit a tensor-parallel
replica) is reported with the reason instead of figures.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import Hardware
from tokenmill.sim.jobs import run_all
from tokenmill.sim.predict import Deployment, Workload, predict


@dataclass(frozen=True)
class Variant:
    name: str
    figures: dict | None
    error: str = ""


KERNELS = "kernels"
STREAM_INTERVAL = "stream interval"
CUDA_GRAPHS = "CUDA graphs"


def technique_label(technique: str, full: Deployment) -> str:
    if technique == KERNELS:
        return f"{full.kernels} kernels"
    return f"{technique} {full.stream_interval}" if technique == STREAM_INTERVAL else technique


def _switch(d: Deployment, w: Workload, technique: str, full: Deployment | None,
            full_w: Workload | None = None, baseline_kernels: str | None = None) -> tuple[Deployment, Workload]:
    """``(d, w)`` with one technique as the full stack has it (``full``), or off (``full`` None)."""
    if technique == KERNELS:
        return replace(d, kernels=full.kernels if full else baseline_kernels), w
    if technique == "expert parallel + attention DP":
        return replace(d, parallel=full.parallel if full else Parallel(tp=d.parallel.devices)), w
    if technique == "MTP":
        return replace(d, mtp_depth=full.mtp_depth if full else 0,
                       mtp_tokens_per_step=full.mtp_tokens_per_step if full else 1.0), w
    if technique == "disaggregation":
        return replace(d, disagg=full.disagg if full else None), w
    if technique == "prefix caching":
        return d, replace(w, cached_tokens=full_w.cached_tokens if full else 0)
    if technique == "GEMM + all-reduce fusion":
        return replace(d, fused_allreduce=bool(full and full.fused_allreduce)), w
    if technique == STREAM_INTERVAL:
        return replace(d, stream_interval=full.stream_interval if full else 1), w
    if technique == CUDA_GRAPHS:
        return replace(d, cuda_graphs=full is not None), w
    raise ValueError(f"uplift: unknown technique {technique!r}")


def techniques(d: Deployment, w: Workload, baseline_kernels: str | None = None,
               baseline_eager: bool = False) -> list[str]:
    """The techniques the full deployment uses, in table order (its kernels first, against an older
    ``baseline_kernels`` generation; CUDA graphs next, against an eager baseline)."""
    used = [KERNELS] if baseline_kernels else []
    if baseline_eager and d.cuda_graphs:
        used.append(CUDA_GRAPHS)
    if d.parallel.ep > 1 or d.parallel.attention_dp:
        used.append("expert parallel + attention DP")
    if d.mtp_depth:
        used.append("MTP")
    if d.disagg:
        used.append("disaggregation")
    if w.cached_tokens:
        used.append("prefix caching")
    if d.fused_allreduce:
        used.append("GEMM + all-reduce fusion")
    if d.host_stream_rate and d.stream_interval > 1:
        used.append(STREAM_INTERVAL)
    return used


def uplift(arch, hw: Hardware, full: Deployment, workload: Workload, progress=None,
           baseline_kernels: str | None = None, baseline_eager: bool = False, jobs: int = 1) -> list[Variant]:
    """Baseline, each technique alone, the full stack (when more than one technique);
    ``jobs``: processes (sim/jobs.py)."""
    used = techniques(full, workload, baseline_kernels, baseline_eager)
    if not used:
        raise ValueError("--uplift: the deployment uses none of the techniques it compares (--ep, --attention-dp, "
                         "--mtp, --disagg, --cached-tokens, --fused-allreduce, --baseline-kernels, "
                         "--baseline-eager, --stream-interval); turn some on")
    base = (full, workload)
    for t in used:
        base = _switch(*base, t, None, baseline_kernels=baseline_kernels)
    variants = [(f"baseline ({baseline_kernels} kernels)" if baseline_kernels else "baseline", base)]
    variants += [(f"+ {technique_label(t, full)}", _switch(*base, t, full, workload)) for t in used]
    if len(used) > 1:
        variants.append(("full stack", (full, workload)))
    return run_all(_variant, [(arch, hw, name, d, w) for name, (d, w) in variants], jobs,
                   on_done=(lambda i, v: progress(1)) if progress else None)


def _variant(arch, hw: Hardware, name: str, d: Deployment, w: Workload) -> Variant:
    try:
        return Variant(name, predict(arch, hw, d, w))
    except ValueError as e:
        return Variant(name, None, str(e))


def _meets_no_rate(f: dict) -> bool:
    """A peak search that found no QPS meeting the p99 limits (its figures are a failing run's)."""
    return f["qps"] == 0.0


def table(variants: list[Variant]) -> str:
    """Markdown: tokens/s per GPU and its ratio to the baseline, latencies, QPS. A variant whose peak
    search met the limits at no rate says so, and ratios against such a baseline are left out."""
    first = variants[0].figures
    base = first["tokens_per_s_per_gpu"] if first and not _meets_no_rate(first) else None
    lines = ["| variant | tokens/s per GPU | x baseline | TTFT p99 (ms) | TPOT p99 (ms) | QPS |",
             "|---|---|---|---|---|---|"]
    for v in variants:
        if v.figures is None:
            lines.append(f"| {v.name} | does not run: {v.error} | | | | |")
            continue
        f = v.figures
        if _meets_no_rate(f):
            tpot = f", TPOT p99 {f['tpot_ms']['p99']:,.1f} ms" if f["tpot_ms"] else ""
            lines.append(f"| {v.name} | no QPS meets the p99 limits (at the lowest tried: TTFT p99 "
                         f"{f['ttft_ms']['p99']:,.1f} ms{tpot}) | - | | | 0 |")
            continue
        ratio = f"{f['tokens_per_s_per_gpu'] / base:.2f}x" if base else "-"
        tpot = f"{f['tpot_ms']['p99']:,.1f}" if f["tpot_ms"] else "-"
        qps = f"{f['qps']:,.2f}" if f["qps"] is not None else "-"
        lines.append(f"| {v.name} | {f['tokens_per_s_per_gpu']:,.0f} | {ratio} | {f['ttft_ms']['p99']:,.1f} | "
                     f"{tpot} | {qps} |")
    return "\n".join(lines)
