"""A/B of one C++ kernel: a git revision's version against the working tree's,
both compiled and loaded into one process, their calls alternated.

    python -m benchmarks.kernel_ab attention --base HEAD~1
    python -m benchmarks.kernel_ab linear --base HEAD~1 --rows 1,16,128,1024

Why: this machine is a shared VM whose speed drifts by tens of percent within
minutes (docs/PERFORMANCE.md), so two runs of a benchmark minutes apart cannot
tell a 10% kernel change from the weather. Here both builds of the kernel file
(csrc/paged_decode_attention.cpp or csrc/invariant_linear.cpp, with the ops.h
and vec.h of the same revision) run on the same tensors, call by call in turn,
and each prints the median of its timings; drift hits both alike. Outputs are
compared too: ``same`` is bitwise equality, else the largest difference.

``attention``: one layer's decode attention, SmolLM2's heads (9 query, 3 KV,
head_dim 64), shuffled blocks of 16, contexts uniform in each case's range, in
bf16 and float32. ``linear``: the panel kernel on the embedded model's layers
(qkv, o, gate_up, down, LM head) at --rows, in --dtype.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from tokenmill.kernels.cpu_kernels import _CSRC, _FLAGS

KERNEL_FILES = {"attention": "paged_decode_attention.cpp", "linear": "invariant_linear.cpp"}
_BINDINGS = {
    "attention": 'm.def("run", &tokenmill::paged_decode_attention);',
    "linear": 'm.def("pack", &tokenmill::pack_invariant_weight); m.def("run", &tokenmill::invariant_linear);',
}
SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536), "lm_head": (49152, 576)}
"""SmolLM2-135M's linear layers, out x in (N x K), as the engine fuses them."""


def _revision_file(revision: str, name: str) -> str:
    path = (_CSRC / name).relative_to(Path(subprocess.check_output(["git", "rev-parse", "--show-toplevel"],
                                                                   text=True).strip()))
    return subprocess.check_output(["git", "show", f"{revision}:{path}"], text=True)


def build(kernel: str, revision: str | None, workdir: Path):
    """Compile the kernel file of ``revision`` (None: the working tree) with the
    engine's flags; returns the loaded module (``run``, and ``pack`` for linear)."""
    from torch.utils.cpp_extension import load

    names = (KERNEL_FILES[kernel], "ops.h", "vec.h")
    texts = {n: (_CSRC / n).read_text() if revision is None else _revision_file(revision, n) for n in names}
    tag = hashlib.sha256("".join(texts.values()).encode()).hexdigest()[:12]
    src = workdir / tag
    src.mkdir(parents=True, exist_ok=True)
    for n, text in texts.items():
        (src / n).write_text(text)
    (src / "bind.cpp").write_text('#include "ops.h"\n#include <torch/extension.h>\n'
                                  f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ {_BINDINGS[kernel]} }}\n")
    return load(name=f"tokenmill_ab_{kernel}_{tag}", sources=[str(src / KERNEL_FILES[kernel]), str(src / "bind.cpp")],
                extra_cflags=_FLAGS, extra_include_paths=[str(src)], build_directory=str(src), verbose=False)


def alternate(calls: dict, rounds: int) -> dict[str, float]:
    """Median ms per call of each labelled function, called in turn ``rounds`` times."""
    times = {label: [] for label in calls}
    for fn in calls.values():
        fn()  # warm
    for _ in range(rounds):
        for label, fn in calls.items():
            start = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - start)
    return {label: statistics.median(t) * 1e3 for label, t in times.items()}


def compare(outputs: dict) -> str:
    base, new = (o.float() for o in outputs.values())
    return "same" if torch.equal(base, new) else f"max diff {(base - new).abs().max().item():.1e}"


def attention_cases(mods: dict, rounds: int, cases: str) -> None:
    gen = torch.Generator().manual_seed(0)
    hq, hkv, d, bs = 9, 3, 64, 16
    for case in cases.split(","):
        batch, lo, hi = (int(v) for v in case.split(":"))
        for dtype in (torch.bfloat16, torch.float32):
            lens = torch.randint(lo, hi, (batch,), generator=gen)
            nb = -(-hi // bs)
            layer = torch.randn(batch * nb + 8, 2, hkv, bs, d, generator=gen).to(dtype)  # model/kv_cache_spec.py
            tables = torch.randperm(batch * nb + 8, generator=gen)[:batch * nb].view(batch, nb).contiguous()
            q = torch.randn(batch, hq, d, generator=gen).to(dtype)
            args = (q, layer[:, 0], layer[:, 1], tables, lens, bs, d**-0.5)
            ms = alternate({label: (lambda m=m: m.run(*args)) for label, m in mods.items()}, rounds)
            check = compare({label: m.run(*args) for label, m in mods.items()})
            report(f"batch {batch}, context {lo}-{hi}, {str(dtype).removeprefix('torch.')}", ms, check)


def linear_cases(mods: dict, rounds: int, rows_list: list[int], dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    for name, (n, k) in SHAPES.items():
        weight = torch.randn(n, k, generator=gen).to(dtype)
        packed = {label: m.pack(weight) for label, m in mods.items()}
        for rows in rows_list:
            x = torch.randn(rows, k, generator=gen).to(dtype)
            ms = alternate({label: (lambda m=m, p=packed[label]: m.run(x, p, n, None)) for label, m in mods.items()},
                           rounds)
            check = compare({label: m.run(x, packed[label], n, None) for label, m in mods.items()})
            report(f"{name} {n}x{k}, {rows} rows", ms, check)


def report(case: str, ms: dict[str, float], check: str) -> None:
    (base, b), (new, w) = ms.items()
    print(f"{case:<40} {base} {b:8.3f} ms   {new} {w:8.3f} ms   {b / w:5.2f}x   {check}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel", choices=sorted(KERNEL_FILES))
    ap.add_argument("--base", default="HEAD", help="git revision of the baseline (default HEAD)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=25, help="alternated calls per build and case")
    ap.add_argument("--cases", default="1:150:300,128:128:256,256:128:256,32:512:1024",
                    help="attention: batch:min_len:max_len triples")
    ap.add_argument("--rows", default="1,16,64,128,256,1024", help="linear: row counts")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="linear: dtype")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"building {KERNEL_FILES[args.kernel]} at {args.base} and in the working tree ...", flush=True)
        mods = {args.base: build(args.kernel, args.base, Path(tmp)), "tree": build(args.kernel, None, Path(tmp))}
        print(f"{args.threads} threads, median of {args.rounds} alternated calls; ratio = base / tree "
              f"(above 1x: the working tree is faster)")
        if args.kernel == "attention":
            attention_cases(mods, args.rounds, args.cases)
        else:
            linear_cases(mods, args.rounds, [int(r) for r in args.rows.split(",")], getattr(torch, args.dtype))


if __name__ == "__main__":
    main()
