"""What ``tokenmill sim`` picks where the flags leave a choice open.

**The layout.** With none of ``--tp``, ``--ep``, ``--attention-dp``, ``--pp`` given, a replica
is one device when one device holds the weights (vLLM's default, ``--tp 1``). When it cannot,
the simulator chooses one rather than refuse, as the issue's ``config`` ("the deployment it
chose") asks of ``tokenmill sim --model deepseek-r1 --hardware gb300 --num-gpus 72``: on
``--num-gpus`` (default: the fewest of 2, 4, 8, ... GPUs on which a layout holds the weights)
every layout ``--search`` tries is simulated at the flags' ``--max-num-seqs`` (per device under
attention DP, as the search counts it), and the one with the most tokens/s per GPU is kept
(server/interactive: at its peak QPS meeting the limits, the search's Offline bound skipping
the hopeless). ``--search`` also tries the batch limits.

**The full stack of ``--uplift``.** When the flags turn on no technique (sim/uplift.py
``techniques``), the table compares those the simulator can price without a figure only the
user knows:

- MTP, 3 drafts at 2.82 tokens a step (TensorRT-LLM's published DeepSeek-R1 acceptance on
  1K/2K requests), where the model has an MTP module (DeepSeek-V3/R1);
- CUDA graphs against eager steps, where the profile prices eager steps (the GPU profiles);
- the v6.0 kernels against v5.1's for DeepSeek-V3/R1 on Blackwell, where that step scale was
  read (sim/kernels.py);
- expert parallel + attention DP when the chosen layout (above) uses them;
- GEMM + all-reduce fusion when the layout is tensor parallel.

Disaggregation, prefix caching and a stream interval need a split, a hit rate or a host's
response rate: flags only.
"""

from __future__ import annotations

from dataclasses import replace

from tokenmill.model.deepseek_arch import DeepseekArch
from tokenmill.sim.cuda_graphs import without_cuda_graphs
from tokenmill.sim.kernels import CURRENT
from tokenmill.sim.mtp_module import has_mtp_module
from tokenmill.sim.predict import Deployment, Workload, check_deployment
from tokenmill.sim.published import MTP3_TOKENS_PER_STEP
from tokenmill.sim.search import (
    REPLICA_SIZES,
    candidate_deployment,
    pipeline_layouts,
    progress_steps,
    search,
    searched_figures,
)
from tokenmill.sim.uplift import Baseline, techniques

STACK_MTP_DEPTH = 3
STACK_BASELINE_KERNELS = "v5.1"


def layout_given(args) -> bool:
    """Whether the flags pin a replica layout (``--tp``/``--ep``/``--pp`` default to None)."""
    return bool(args.attention_dp) or any(getattr(args, f) is not None for f in ("tp", "ep", "pp"))


def needs_layout_choice(arch, hw, d: Deployment, args) -> bool:
    """No layout in the flags (nor a mode that sets its own: --search, --replay, --disagg) and one
    device does not hold the weights. Other errors of ``d`` are raised. (--pareto then sweeps the
    layouts of the GPU count, as it does on --num-gpus.)"""
    if layout_given(args) or args.search or args.replay or d.disagg:
        return False
    try:
        check_deployment(arch, hw, d)
    except ValueError as e:
        if str(e).startswith("--tp/--ep:"):  # predict.kv_blocks: the weights do not fit
            return True
        raise
    return False


def fewest_gpus(arch, hw, base: Deployment) -> int:
    """The fewest of ``REPLICA_SIZES`` GPUs on which a layout the search tries holds the
    weights; ValueError naming the flags when none does."""
    for n in REPLICA_SIZES[1:]:
        for parallel, pp in pipeline_layouts(arch, hw, n):
            try:
                check_deployment(arch, hw, replace(base, num_gpus=n, parallel=parallel, pipeline_parallel=pp))
                return n
            except ValueError:
                continue
    raise ValueError(f"--tp/--ep/--pp: no layout --search tries on up to {REPLICA_SIZES[-1]} x {hw.name} holds "
                     f"the weights in {base.precision}; a lower --precision, or --tp/--pp by hand")


def choose_layout(arch, hw, base: Deployment, workload: Workload, jobs: int = 1) -> tuple[Deployment, dict]:
    """The best layout on ``base.num_gpus`` at ``base.max_num_seqs``, and its figures with
    the layouts tried under "searched" and ``layout_chosen`` set (module docstring; ``jobs``
    processes, sim/jobs.py)."""
    from tqdm import tqdm

    pruned: list = []
    with tqdm(total=progress_steps(arch, hw, base.num_gpus, workload, num_seq_choices=1), desc="Choosing a layout",
              unit="step", leave=False) as bar:
        found = search(arch, hw, base, workload, progress=bar.update, pruned=pruned,
                       seq_choices=(base.max_num_seqs,), jobs=jobs)
    if not found:
        raise ValueError(f"--num-gpus: no layout of {base.num_gpus} x {hw.name} that --search tries holds the "
                         "model's weights")
    return candidate_deployment(base, found[0]), {**searched_figures(found, pruned), "layout_chosen": True}


def full_stack(arch, hw, d: Deployment, workload: Workload,
               baseline: Baseline) -> tuple[Deployment, Baseline, list[str]]:
    """``d`` and ``baseline`` with the stack's techniques on where the flags name none (module
    docstring), and what was assumed, in words (empty: flags kept)."""
    if techniques(d, workload, baseline):
        return d, baseline, []
    assumed = []
    if has_mtp_module(arch) and d.pipeline_parallel == 1:
        d = replace(d, mtp_depth=STACK_MTP_DEPTH, mtp_tokens_per_step=MTP3_TOKENS_PER_STEP)
        assumed.append(f"MTP {STACK_MTP_DEPTH} drafts at {MTP3_TOKENS_PER_STEP} tokens a step")
    if d.cuda_graphs and _prices_eager_steps(arch, hw, d):
        baseline = replace(baseline, eager=True)
        assumed.append("CUDA graphs (baseline: eager steps)")
    if isinstance(arch, DeepseekArch) and hw.default_precision == "fp4" and d.kernels == CURRENT:
        baseline = replace(baseline, kernels=STACK_BASELINE_KERNELS)
        assumed.append(f"{CURRENT} kernels (baseline: {STACK_BASELINE_KERNELS}'s)")
    return d, baseline, assumed


def with_fusion(d: Deployment, assumed: list[str]) -> Deployment:
    """A tensor-parallel full stack fuses its all-reduces (appended to ``assumed``)."""
    if d.parallel.tp > 1 and not d.fused_allreduce:
        assumed.append("GEMM + all-reduce fusion")
        return replace(d, fused_allreduce=True)
    return d


def _prices_eager_steps(arch, hw, d: Deployment) -> bool:
    try:
        without_cuda_graphs(hw, arch.num_layers, d.eager_layer_s)
    except ValueError:  # a CPU profile, or a GPU calibrated with graphs off
        return False
    return True
