"""``tokenmill sim --uplift`` from the command line: the baseline's flags (``--baseline-kernels``,
``--baseline-eager``, ``--baseline-whole-prompts``) checked and resolved, and the table run and
printed (sim/uplift.py computes it)."""

from __future__ import annotations

import argparse
import json

from tokenmill.sim.hardware import HARDWARE


def kernels_flag(args: argparse.Namespace) -> str:
    """--kernels, refused off the GPU profiles (the generations are TensorRT-LLM's); --baseline-kernels
    a generation there, a calibrated profile's name on a calibrated profile. The baseline flags
    without --uplift are refused."""
    from tokenmill.sim.kernels import CURRENT, KERNEL_GENERATIONS, step_scale

    for flag in ("baseline_kernels", "baseline_whole_prompts"):
        if getattr(args, flag) and not args.uplift:
            raise ValueError(f"--{flag.replace('_', '-')}: only with --uplift (it sets the uplift table's baseline)")
    if args.hardware not in HARDWARE:  # a calibrated profile
        if args.kernels != CURRENT:
            raise ValueError(f"--kernels {args.kernels}: a TensorRT-LLM kernel generation on NVIDIA GPUs; "
                             f"{args.hardware} is our own engine's kernels, as calibrated")
        if args.baseline_kernels in KERNEL_GENERATIONS or args.baseline_kernels == args.hardware:
            raise ValueError(f"--baseline-kernels {args.baseline_kernels}: on {args.hardware} (calibrated), the name "
                             "of another profile `tokenmill sim calibrate --profile NAME` wrote with the baseline "
                             "engine's kernels")
        return args.kernels
    if args.baseline_kernels not in (None, *KERNEL_GENERATIONS):
        raise ValueError(f"--baseline-kernels {args.baseline_kernels}: one of {', '.join(KERNEL_GENERATIONS)} on "
                         f"{args.hardware} (a profile's name only on a calibrated --hardware)")
    if args.baseline_kernels and step_scale(args.baseline_kernels) <= step_scale(args.kernels):
        raise ValueError(f"--baseline-kernels {args.baseline_kernels}: not older than --kernels {args.kernels}; "
                         "the baseline takes the older generation")
    return args.kernels


def run_uplift(arch, hw, deployment, workload, args: argparse.Namespace, choose: bool) -> int:
    """The uplift table of the flags' deployment, or of the full stack (sim/auto.py) where they name no
    technique, on the layout chosen where they give none and one device does not hold the weights."""
    import sys

    from tqdm import tqdm

    from tokenmill.sim.auto import choose_layout, full_stack, with_fusion
    from tokenmill.sim.calibrate import load_profile
    from tokenmill.sim.uplift import Baseline, table, techniques, uplift

    calibrated = args.baseline_kernels if args.hardware not in HARDWARE else None
    if args.baseline_whole_prompts and not deployment.chunked_prefill:
        raise ValueError("--baseline-whole-prompts and --no-enable-chunked-prefill: pick one (the first adds chunked "
                         "prefill to the table, the second switches it off everywhere)")
    baseline = Baseline(args.baseline_kernels, args.baseline_eager, args.baseline_whole_prompts,
                        load_profile(calibrated, "--baseline-kernels") if calibrated else None)
    deployment, baseline, assumed = full_stack(arch, hw, deployment, workload, baseline)
    if choose:
        deployment = choose_layout(arch, hw, deployment, workload, jobs=args.jobs)[0]
    if assumed:
        deployment = with_fusion(deployment, assumed)
    if assumed or choose:
        p = deployment.parallel
        layout = (f"{deployment.num_gpus} x {hw.name}, replicas of tp {p.tp}, ep {p.ep}"
                  f"{', attention dp' if p.attention_dp else ''}"
                  f"{f', pp {deployment.pipeline_parallel}' if deployment.pipeline_parallel > 1 else ''}"
                  f", max-num-seqs {deployment.max_num_seqs}"
                  f"{' (layout chosen)' if choose else ''}")
        print(f"full stack: {layout}" + (f"; assumed, as no technique flag was given: {'; '.join(assumed)}"
                                         if assumed else ""), file=sys.stderr if args.json else sys.stdout)

    n = len(techniques(deployment, workload, baseline))
    with tqdm(total=n + 1 + (n > 1), desc="Simulating variants", unit="variant", leave=False) as bar:
        variants = uplift(arch, hw, deployment, workload, progress=bar.update, baseline=baseline, jobs=args.jobs)
    if args.json:
        print(json.dumps([{"variant": v.name, "figures": v.figures, "error": v.error or None} for v in variants],
                         indent=2))
    else:
        print(table(variants))
    return 0
