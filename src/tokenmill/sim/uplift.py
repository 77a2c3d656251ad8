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
- prefix caching (``--cached-tokens``, ``--shared-prefix``): off, every prompt computed whole;
- GEMM + all-reduce fusion (``--fused-allreduce``): off, the tensor-parallel
  all-reduces run between layers;
- newer kernels, when ``--baseline-kernels`` names an older generation
  (sim/kernels.py): off, every step at that generation's scale. This is how
  the table prices a software uplift between MLPerf rounds on one config;
- a stream interval (``--stream-interval N`` with ``--host-stream-rate``,
  sim/host_path.py): off, every sequence responds every step;
- CUDA graphs, when ``--baseline-eager`` asks (sim/cuda_graphs.py): off, every
  step launches its kernels from the host;
- chunked prefill, when ``--baseline-whole-prompts`` asks: off, a prompt waits
  until it fits one step whole (the live ``tokenmill bench --uplift`` baseline's
  scheduler);
- on a calibrated profile (``tokenmill sim calibrate``), our engine's kernels,
  when ``--baseline-kernels NAME`` names a profile calibrated on the baseline
  engine's (e.g. torch attention, ops and linears, eager steps): off, every
  variant but the kernels' own and the full stack is priced by that profile.

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


@dataclass(frozen=True)
class Baseline:
    """What the baseline switches off besides the techniques the deployment's flags turn on."""

    kernels: str | None = None
    """An older kernel generation (sim/kernels.py) on the GPU profiles; on a calibrated profile the
    name of the profile calibrated on the baseline engine's kernels (``hardware``)."""
    eager: bool = False
    """Every step launched from the host: CUDA graphs become a technique."""
    whole_prompts: bool = False
    """No chunked prefill: it becomes a technique (where the deployment chunks). Its steps' budget is
    raised to the model's context length where smaller, as our engine and vLLM raise it to
    max_model_len (by default the context length, where the KV cache holds it), so every prompt runs."""
    hardware: Hardware | None = None
    """The calibrated profile ``kernels`` names; None on the GPU profiles."""


KERNELS = "kernels"
STREAM_INTERVAL = "stream interval"
CUDA_GRAPHS = "CUDA graphs"
CHUNKED_PREFILL = "chunked prefill"


def technique_label(technique: str, full: Deployment, hw: Hardware, baseline: Baseline) -> str:
    if technique == KERNELS:
        return f"{hw.name if baseline.hardware else full.kernels} kernels"
    return f"{technique} {full.stream_interval}" if technique == STREAM_INTERVAL else technique


def _switch(d: Deployment, w: Workload, technique: str, full: Deployment | None,
            full_w: Workload | None = None, baseline: Baseline = Baseline(),
            context_len: int = 0) -> tuple[Deployment, Workload]:
    """``(d, w)`` with one technique as the full stack has it (``full``), or off (``full`` None).
    A calibrated baseline's kernels are its profile, not the deployment's: ``d`` stays as it is.
    ``context_len``: the model's, the budget of steps without chunked prefill (``Baseline.whole_prompts``)."""
    if technique == KERNELS:
        return (d, w) if baseline.hardware else (replace(d, kernels=full.kernels if full else baseline.kernels), w)
    if technique == CHUNKED_PREFILL:
        if full:
            return replace(d, chunked_prefill=True, max_num_batched_tokens=full.max_num_batched_tokens), w
        return replace(d, chunked_prefill=False, max_num_batched_tokens=max(d.max_num_batched_tokens, context_len)), w
    if technique == "expert parallel + attention DP":
        return replace(d, parallel=full.parallel if full else Parallel(tp=d.parallel.devices)), w
    if technique == "MTP":
        return replace(d, mtp_depth=full.mtp_depth if full else 0,
                       mtp_tokens_per_step=full.mtp_tokens_per_step if full else 1.0), w
    if technique == "disaggregation":
        return replace(d, disagg=full.disagg if full else None), w
    if technique == "prefix caching":
        return d, replace(w, cached_tokens=full_w.cached_tokens if full else 0,
                          shared_prefix=full_w.shared_prefix if full else None)
    if technique == "GEMM + all-reduce fusion":
        return replace(d, fused_allreduce=bool(full and full.fused_allreduce)), w
    if technique == STREAM_INTERVAL:
        return replace(d, stream_interval=full.stream_interval if full else 1), w
    if technique == CUDA_GRAPHS:
        return replace(d, cuda_graphs=full is not None), w
    raise ValueError(f"uplift: unknown technique {technique!r}")


def techniques(d: Deployment, w: Workload, baseline: Baseline = Baseline()) -> list[str]:
    """The techniques the full deployment uses, in table order (its kernels first, against the
    baseline's; CUDA graphs next, against an eager baseline; chunked prefill against whole prompts)."""
    used = [KERNELS] if baseline.kernels else []
    if baseline.eager and d.cuda_graphs:
        used.append(CUDA_GRAPHS)
    if baseline.whole_prompts and d.chunked_prefill:
        used.append(CHUNKED_PREFILL)
    if d.parallel.ep > 1 or d.parallel.attention_dp:
        used.append("expert parallel + attention DP")
    if d.mtp_depth:
        used.append("MTP")
    if d.disagg:
        used.append("disaggregation")
    if w.cached_tokens or w.shared_prefix:
        used.append("prefix caching")
    if d.fused_allreduce:
        used.append("GEMM + all-reduce fusion")
    if d.host_stream_rate and d.stream_interval > 1:
        used.append(STREAM_INTERVAL)
    return used


def baseline_of(arch, full: Deployment, workload: Workload, baseline: Baseline = Baseline(),
                used: list[str] | None = None) -> tuple[Deployment, Workload]:
    """The uplift's baseline: ``(full, workload)`` with every technique it uses (``used``, default
    ``techniques``) switched off (a calibrated baseline's kernels are its profile, not in the pair)."""
    base = (full, workload)
    for t in techniques(full, workload, baseline) if used is None else used:
        base = _switch(*base, t, None, baseline=baseline, context_len=arch.max_position_embeddings)
    return base


def uplift(arch, hw: Hardware, full: Deployment, workload: Workload, progress=None,
           baseline: Baseline = Baseline(), jobs: int = 1) -> list[Variant]:
    """Baseline, each technique alone, the full stack (when more than one technique);
    ``jobs``: processes (sim/jobs.py)."""
    used = techniques(full, workload, baseline)
    if not used:
        raise ValueError("--uplift: the deployment uses none of the techniques it compares (--ep, --attention-dp, "
                         "--mtp, --disagg, --cached-tokens, --shared-prefix, --fused-allreduce, --baseline-kernels, "
                         "--baseline-eager, --baseline-whole-prompts, --stream-interval); turn some on")
    base = baseline_of(arch, full, workload, baseline, used)
    base_hw = baseline.hardware or hw  # priced by the baseline engine's profile unless its kernels are on
    variants = [(f"baseline ({baseline.kernels} kernels)" if baseline.kernels else "baseline", base_hw, base)]
    variants += [(f"+ {technique_label(t, full, hw, baseline)}", hw if t == KERNELS else base_hw,
                  _switch(*base, t, full, workload, baseline)) for t in used]
    if len(used) > 1:
        variants.append(("full stack", hw, (full, workload)))
    return run_all(_variant, [(arch, on, name, d, w) for name, on, (d, w) in variants], jobs,
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
    hits = any(v.figures and v.figures.get("prefix_cache_hit_rate") for v in variants)  # a column where any hit
    lines = ["| variant | tokens/s per GPU | x baseline | TTFT p99 (ms) | TPOT p99 (ms) | QPS |"
             + (" prefix hits |" if hits else ""), "|---|---|---|---|---|---|" + ("---|" if hits else "")]
    for v in variants:
        blank = " |" if hits else ""
        if v.figures is None:
            lines.append(f"| {v.name} | does not run: {v.error} | | | | |{blank}")
            continue
        f = v.figures
        if _meets_no_rate(f):
            tpot = f", TPOT p99 {f['tpot_ms']['p99']:,.1f} ms" if f["tpot_ms"] else ""
            lines.append(f"| {v.name} | no QPS meets the p99 limits (at the lowest tried: TTFT p99 "
                         f"{f['ttft_ms']['p99']:,.1f} ms{tpot}) | - | | | 0 |{blank}")
            continue
        ratio = f"{f['tokens_per_s_per_gpu'] / base:.2f}x" if base else "-"
        tpot = f"{f['tpot_ms']['p99']:,.1f}" if f["tpot_ms"] else "-"
        qps = f"{f['qps']:,.2f}" if f["qps"] is not None else "-"
        hit = f" {f['prefix_cache_hit_rate']:.1%} |" if hits else ""
        lines.append(f"| {v.name} | {f['tokens_per_s_per_gpu']:,.0f} | {ratio} | {f['ttft_ms']['p99']:,.1f} | "
                     f"{tpot} | {qps} |{hit}")
    return "\n".join(lines)
