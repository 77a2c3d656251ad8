"""FP8 GEMMs timed per shape on a GPU, against the simulator's price of each, flat and tiled.

The dense Llama rows of the validation table run FP8 GEMMs on Hopper (TensorRT-LLM, per-tensor
scales). The simulator prices a step's GEMM work at one fitted fraction of the FP8 peak
(hardware.py ``LOW_PRECISION_GEMM``), or under ``--tile-rule`` at a tiled fraction over the
useful share of each GEMM's tiles and waves (sim/gemm_tiles.py). Which of the two a GPU follows
shows only in GEMMs timed one shape at a time; this times them.

On a GPU (``--measure``): every layer GEMM of ``--models`` (models.py ``layer_gemms``, each
tensor-parallel size's per-device share) and the LM head, at each of ``--rows``, as
``torch._scaled_mm`` (FP8 e4m3 operands, per-tensor scales, bf16 output: cuBLASLt's FP8 GEMM),
replayed in a CUDA graph; written as JSON:

    python -m benchmarks.gpu_gemm_shapes --measure --json gemms.json

Anywhere (``--compare``): each measured GEMM against the cost model's forward time for it on
``--hardware`` (cost.step_time: the FLOPs at the FP8 fraction, the bytes at the memory fraction,
the sqrt rule), with the tile rule off and on; prints the table, and per model and TP the
ratio for a layer (its four GEMMs' times summed) at each row count; ``--plot`` draws a layer's
TFLOP/s against its rows:

    python -m benchmarks.gpu_gemm_shapes --compare gemms.json --hardware h200 --plot gemms.png
"""

from __future__ import annotations

import argparse
import json
import statistics

from tokenmill.sim.cost import StepCost, step_time
from tokenmill.sim.hardware import get_hardware, with_tile_rule
from tokenmill.sim.models import get_model, model_shape

DEFAULT_MODELS = "llama3.1-8b:1,llama2-70b:1,llama2-70b:2,llama3.1-405b:8"
"""model:TP pairs: the tensor-parallel sizes of the Hopper FP8 rows in sim/published.py."""
DEFAULT_ROWS = "1,16,64,128,192,256,384,512,1024,2048,4096,8192"
GEMM_NAMES = ("qkv", "o", "gate_up", "down")


def shapes_of(models: str) -> list[dict]:
    """One dict per (model, tp, GEMM): name, n, k (the device's share), calls per step."""
    out = []
    for pair in models.split(","):
        name, tp = pair.split(":")
        tp = int(tp)
        shape = model_shape(get_model(name))
        if not shape.layer_gemms:
            raise ValueError(f"--models: {name} lists no dense layer GEMMs")
        for gemm, (n, k, column) in zip(GEMM_NAMES, shape.layer_gemms):
            out.append(dict(model=name, tp=tp, gemm=gemm, n=n // tp if column else n, k=k if column else k // tp,
                            calls=shape.num_layers))
        out.append(dict(model=name, tp=tp, gemm="lm_head", n=shape.vocab // tp, k=shape.hidden, calls=1))
    return out


def measure(models: str, rows: list[int], repeats: int) -> list[dict]:
    """Seconds per call of each shape at each row count, on the current CUDA device (replayed in a
    CUDA graph after warm-up: gpu_roofline.timed)."""
    import torch

    from benchmarks.gpu_roofline import timed

    one = torch.tensor(1.0, device="cuda")
    results, seen = [], {}
    for s in shapes_of(models):
        # Weights (n, k) row-major, passed transposed: _scaled_mm takes its second operand column-major.
        w = (torch.randn(s["n"], s["k"], device="cuda") * 0.1).to(torch.float8_e4m3fn)
        for m in rows:
            key = (m, s["n"], s["k"])
            if key not in seen:
                x = (torch.randn(m, s["k"], device="cuda") * 0.1).to(torch.float8_e4m3fn)
                seen[key] = timed(lambda x=x, w=w: torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one,
                                                                    out_dtype=torch.bfloat16), repeats)
            results.append({**s, "rows": m, "seconds": seen[key]})
    return results


def modelled_seconds(m: int, n: int, k: int, hardware, precision: str = "fp8") -> float:
    """The cost model's forward time for one m x n x k GEMM (FP8 operands, bf16 output) on ``hardware``."""
    cost = StepCost(gemm_flops=2.0 * m * n * k, attention_flops=0.0, weight_bytes=float(n * k), kv_read_bytes=0.0,
                    kv_write_bytes=0.0, activation_bytes=float(m * k + 2 * m * n), allreduce_bytes=0.0,
                    alltoall_bytes=0.0, num_collectives=0, devices=1,
                    gemm_shape_args=(((n, k, True),), 1, (0, 0), m, 0, 1, 1))
    return step_time(cost, hardware, precision).forward_s


def compare(records: list[dict], hardware_name: str, plot: str | None = None) -> None:
    flat = get_hardware(hardware_name)
    tiled = with_tile_rule(flat)
    print("| model | TP | GEMM | rows | n x k | measured us | TFLOP/s | flat / measured | tiled / measured |")
    print("|---|---|---|---|---|---|---|---|---|")
    layers: dict[tuple, list[float]] = {}
    for r in records:
        m, n, k, t = r["rows"], r["n"], r["k"], r["seconds"]
        f, g = modelled_seconds(m, n, k, flat), modelled_seconds(m, n, k, tiled)
        print(f"| {r['model']} | {r['tp']} | {r['gemm']} | {m} | {n} x {k} | {t * 1e6:,.1f} | "
              f"{2 * m * n * k / t / 1e12:,.0f} | {f / t:.2f} | {g / t:.2f} |")
        if r["gemm"] != "lm_head":
            sums = layers.setdefault((r["model"], r["tp"], m), [0.0, 0.0, 0.0])
            sums[0] += t
            sums[1] += f
            sums[2] += g
    print("\nA layer's four GEMMs summed, modelled / measured (flat, tiled):")
    print("| model | TP | " + " | ".join(str(m) for m in sorted({key[2] for key in layers})) + " |")
    print("|---|---|" + "---|" * len({key[2] for key in layers}))
    for model, tp in dict.fromkeys((key[0], key[1]) for key in layers):
        cells = [f"{v[1] / v[0]:.2f} / {v[2] / v[0]:.2f}" for (mo, t, _), v in sorted(layers.items())
                 if (mo, t) == (model, tp)]
        print(f"| {model} | {tp} | " + " | ".join(cells) + " |")
    for label, index in (("flat", 1), ("tiled", 2)):
        ratios = [v[index] / v[0] for (_, _, m), v in layers.items() if m >= 64]
        print(f"{label}: layers of 64+ rows, modelled / measured median {statistics.median(ratios):.2f}, "
              f"range {min(ratios):.2f}-{max(ratios):.2f}")
    if plot:
        plot_layers(layers, plot, hardware_name)


def plot_layers(layers: dict[tuple, list[float]], path: str, hardware_name: str) -> None:
    """One panel per model and TP: a layer's TFLOP/s against its rows, measured and as the model prices it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = list(dict.fromkeys((key[0], key[1]) for key in layers))
    fig, axes = plt.subplots(1, len(pairs), figsize=(4 * len(pairs), 3.6), sharey=True, squeeze=False)
    for ax, (model, tp) in zip(axes[0], pairs):
        shape = {g["gemm"]: g for g in shapes_of(f"{model}:{tp}")}
        layer_flops = sum(2 * shape[g]["n"] * shape[g]["k"] for g in GEMM_NAMES)  # per row
        points = sorted((m, v) for (mo, t, m), v in layers.items() if (mo, t) == (model, tp))
        rows = [m for m, _ in points]
        for index, label, style in ((0, "measured (cuBLASLt FP8)", "o-"), (1, "model, flat fraction", "s--"),
                                    (2, "model, tile rule", "^:")):
            ax.plot(rows, [layer_flops * m / v[index] / 1e12 for m, v in points], style, label=label, markersize=4)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{model}, TP{tp}")
        ax.set_xlabel("rows per GEMM")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("TFLOP/s of a layer's four GEMMs")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"FP8 GEMMs per shape on {hardware_name}: measured and modelled")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", action="store_true", help="time the GEMMs on this machine's GPU")
    ap.add_argument("--json", help="with --measure: where to write the timings")
    ap.add_argument("--compare", metavar="JSON", help="price the GEMMs of a --measure run's JSON")
    ap.add_argument("--hardware", default="h200")
    ap.add_argument("--models", default=DEFAULT_MODELS, help="model:TP pairs (default: %(default)s)")
    ap.add_argument("--rows", default=DEFAULT_ROWS)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--plot", metavar="PNG", help="with --compare: a layer's TFLOP/s against its rows, per model")
    args = ap.parse_args(argv)
    if args.measure:
        import torch

        records = measure(args.models, [int(r) for r in args.rows.split(",")], args.repeats)
        payload = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "records": records}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(payload, f, indent=1)
        print(f"{len(records)} GEMMs timed on {payload['device']}")
        compare(records, args.hardware)
    elif args.compare:
        with open(args.compare) as f:
            compare(json.load(f)["records"], args.hardware, args.plot)
    else:
        ap.error("--measure or --compare")


if __name__ == "__main__":
    main()
