"""The throughput/interactivity Pareto front (``tokenmill sim --pareto PATH``),
as MLPerf and SemiAnalysis InferenceMAX plot it: tokens/s per GPU against
tokens/s per user (1000 / TPOT p50), one point per replica layout and
``max_num_seqs``, and the points no other point beats on both axes.

Each layout (``search.layouts`` on ``--num-gpus``, else the deployment's own)
is simulated at ``max_num_seqs`` 1, 2, 4, ... 1024 per replica (attention DP:
per device, as search.py counts), up to the workload's request count, since
no more sequences than requests can run at once. Each point simulates at most
``WAVES`` x its ``max_num_seqs`` requests, as InferenceMAX runs 10 x
concurrency prompts per point: enough for a steady state, and a batch of one
stays cheap to simulate (the scheduler simulation takes one step per token).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tokenmill.sim.cost import Parallel
from tokenmill.sim.hardware import Hardware
from tokenmill.sim.jobs import run_all
from tokenmill.sim.predict import Deployment, Workload, check_deployment, predict

SEQ_SWEEP = tuple(2 ** i for i in range(11))
WAVES = 10


@dataclass(frozen=True)
class Point:
    parallel: Parallel
    max_num_seqs: int
    tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    ttft_ms_p50: float
    on_front: bool = False


def pareto_front(xy: Sequence[tuple[float, float]]) -> list[bool]:
    """Whether each (x, y) is on the front: no other point has >= on both axes
    and > on one (equal points are all on it). Quadratic: sweeps are small."""
    return [not any(a >= x and b >= y and (a > x or b > y) for a, b in xy) for x, y in xy]


def batch_sizes(parallel: Parallel, workload: Workload, sizes: Sequence[int] = SEQ_SWEEP) -> list[int]:
    """The ``max_num_seqs`` values swept for one replica layout (module docstring)."""
    per = parallel.devices if parallel.attention_dp else 1
    return [s * per for s in sizes if s * per <= workload.num_requests] or [sizes[0] * per]


def sweep(arch, hw: Hardware, base: Deployment, workload: Workload, parallels: Sequence[Parallel],
          sizes: Sequence[int] = SEQ_SWEEP, progress: Callable[[int], None] | None = None,
          jobs: int = 1) -> list[Point]:
    """Every point that runs, its ``on_front`` set; layouts whose weights do not fit are skipped.
    ``progress(n)`` is called as points finish (n of them each time); ``jobs``: processes (sim/jobs.py)."""
    calls = []
    for parallel in parallels:
        trial = replace(base, parallel=parallel)
        seqs = batch_sizes(parallel, workload, sizes)
        try:
            check_deployment(arch, hw, trial)
        except ValueError:  # weights do not fit this layout
            if progress:
                progress(len(seqs))
            continue
        calls += [(arch, hw, trial, workload, n) for n in seqs]
    points = run_all(_point, calls, jobs, on_done=(lambda i, p: progress(1)) if progress else None)
    front = pareto_front([(p.tokens_per_s_per_user, p.tokens_per_s_per_gpu) for p in points])
    return [replace(p, on_front=f) for p, f in zip(points, front)]


def _point(arch, hw: Hardware, trial: Deployment, workload: Workload, seqs: int) -> Point:
    d = replace(trial, max_num_seqs=seqs)  # predict.step_budget keeps the step budget >= seqs
    f = predict(arch, hw, d, replace(workload, num_requests=min(workload.num_requests, WAVES * seqs)))
    return Point(trial.parallel, seqs, f["tokens_per_s_per_gpu"], 1e3 / f["tpot_ms"]["p50"], f["ttft_ms"]["p50"])


def run_pareto(arch, hw: Hardware, base: Deployment, workload: Workload, path: str | Path, *, model: str,
               search_layouts: bool, jobs: int = 1) -> dict:
    """Sweep (with a progress bar; ``jobs`` processes), write the PNG at ``path`` and the points as JSON
    next to it, and return that JSON document."""
    from tqdm import tqdm

    from tokenmill.sim.search import layouts

    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"--pareto: expected a .png path (the points go next to it as .json), got {str(path)!r}")
    if workload.osl < 2:
        raise ValueError("--osl: tokens/s per user is 1000 / TPOT, which needs 2 or more output tokens")
    if search_layouts:
        parallels = layouts(arch, hw, base.num_gpus)
    else:
        check_deployment(arch, hw, base)  # the user's own layout: its error names the flag
        parallels = [base.parallel]
    total = sum(len(batch_sizes(p, workload)) for p in parallels)
    with tqdm(total=total, desc="Simulating Pareto points", unit="point", leave=False) as bar:
        points = sweep(arch, hw, base, workload, parallels, progress=bar.update, jobs=jobs)
    if not points:
        raise ValueError(f"--num-gpus: no layout of {base.num_gpus} x {hw.name} holds the model's weights")
    doc = {"model": model, "hardware": hw.name, "num_gpus": base.num_gpus, "precision": base.precision,
           "scenario": workload.scenario, "isl": workload.isl, "osl": workload.osl,
           "points": [_as_dict(p) for p in points]}
    plot_pareto(doc, path)
    doc["png"], doc["json"] = str(path), str(path.with_suffix(".json"))
    path.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def _as_dict(p: Point) -> dict:
    return {"tp": p.parallel.tp, "ep": p.parallel.ep, "attention_dp": p.parallel.attention_dp,
            "max_num_seqs": p.max_num_seqs, "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
            "tokens_per_s_per_user": p.tokens_per_s_per_user, "ttft_ms_p50": p.ttft_ms_p50, "on_front": p.on_front}


def layout_label(p: dict) -> str:
    return f"tp {p['tp']}" + (f", ep {p['ep']}" if p["ep"] > 1 else "") + (", attention dp" if p["attention_dp"]
                                                                           else "")


def plot_pareto(doc: dict, path: Path) -> Path:
    """Every point coloured by layout, the front as a line labelled with max_num_seqs; log axes."""
    from tokenmill.bench.plots import _figure, _save

    fig, (ax,) = _figure(1, width_per_panel=7.5, height=5.2)
    by_layout: dict[str, list[dict]] = {}
    for p in doc["points"]:
        by_layout.setdefault(layout_label(p), []).append(p)
    for label, ps in by_layout.items():
        ax.scatter([p["tokens_per_s_per_user"] for p in ps], [p["tokens_per_s_per_gpu"] for p in ps], s=30,
                   label=label, zorder=2)
    front = sorted((p for p in doc["points"] if p["on_front"]), key=lambda p: p["tokens_per_s_per_user"])
    ax.plot([p["tokens_per_s_per_user"] for p in front], [p["tokens_per_s_per_gpu"] for p in front],
            color="black", linewidth=1.2, zorder=1, label="Pareto front")
    for p in front:
        ax.annotate(f"{p['max_num_seqs']}", (p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]),
                    textcoords="offset points", xytext=(4, 4), fontsize="x-small")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tokens/s per user (1000 / TPOT p50)")
    ax.set_ylabel("tokens/s per GPU")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", title="layout (front labelled with max-num-seqs)", title_fontsize="small")
    ax.set_title(f"{doc['model']} on {doc['num_gpus']} x {doc['hardware']}, {doc['precision']}, "
                 f"ISL/OSL {doc['isl']}/{doc['osl']}, {doc['scenario']} (simulated)")
    return _save(fig, path)


def front_table(doc: dict) -> str:
    """The front's points, most tokens/s per GPU first, and the files written."""
    front = sorted((p for p in doc["points"] if p["on_front"]), key=lambda p: -p["tokens_per_s_per_gpu"])
    lines = [f"Pareto front: {len(front)} of {len(doc['points'])} points ({doc['model']} on {doc['num_gpus']} x "
             f"{doc['hardware']}, {doc['precision']}, {doc['scenario']}, ISL/OSL {doc['isl']}/{doc['osl']})",
             f"  {'layout':<24} {'max-num-seqs':>12} {'tok/s/user':>11} {'tok/s/GPU':>10} {'TTFT p50 ms':>12}"]
    lines += [f"  {layout_label(p):<24} {p['max_num_seqs']:>12} {p['tokens_per_s_per_user']:>11,.1f} "
              f"{p['tokens_per_s_per_gpu']:>10,.0f} {p['ttft_ms_p50']:>12,.1f}" for p in front]
    lines.append(f"wrote {doc['png']} and {doc['json']}")
    return "\n".join(lines)
