"""Resolve the 'auto' settings of an EngineConfig against this machine and model."""

from __future__ import annotations

import logging

import torch

from tokenmill.engine.decode_graphs import default_batch_sizes

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: CUDA was requested but torch sees no CUDA device")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device: unsupported device {name!r}; use cpu or cuda[:N]")
    return device


def _cpu_flags() -> str:
    try:
        return open("/proc/cpuinfo").read()
    except OSError:
        return ""


def cpu_has_fast_bf16() -> bool:
    """AVX512-BF16 or AMX: bf16 matmuls run natively. Without them torch's bf16
    matmul on CPU is far slower than fp32 (measured ~100x on AVX2-only EPYC)."""
    flags = _cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_has_avx2_panels() -> bool:
    """AVX2 and FMA (AVX-512 CPUs have both): the C++ panel kernel's vector
    paths, measured faster than torch's F.linear on float32 decode steps on an
    AVX2 EPYC and on an AVX-512 Xeon (kernels/mixed_linear.py)."""
    flags = _cpu_flags()
    return "avx2" in flags and "fma" in flags


def cpu_has_float32_panels() -> bool:
    """AVX2 and FMA without AVX-512: the panel kernel's 8-lane float32 path,
    measured faster than oneDNN on the prepacked weight at every row count from
    1 to 1024 on an AVX2 EPYC (Zen 3), so that it runs every linear call there
    (docs/PERFORMANCE.md, "Float32 linears on panels past 128 rows")."""
    return cpu_has_avx2_panels() and "avx512f" not in _cpu_flags()


def cpu_has_bf16_panels() -> bool:
    """AVX-512 without native bf16 arithmetic: the panel kernel widens bf16
    weights on the fly (csrc/invariant_linear.cpp): a decode step measured
    1.5x faster than float32 at batch 1 and within 6% at batch 256, while
    oneDNN's emulated bf16 GEMM is 2.5-4x slower per call (kernels/invariant_linear.py)."""
    return "avx512f" in _cpu_flags() and not cpu_has_fast_bf16()


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """auto: bfloat16 on CUDA, on CPUs with native bf16 matmuls, and on AVX-512
    CPUs without them when the C++ panel kernel builds (it runs their bf16
    linears: ``resolve_linear_backend``); float32 otherwise."""
    if name != "auto":
        return _DTYPES[name]
    if device.type == "cuda" or cpu_has_fast_bf16():
        return torch.bfloat16
    if cpu_has_bf16_panels():
        from tokenmill.kernels.cpu_kernels import load_cpu_kernels

        if load_cpu_kernels() is not None:
            return torch.bfloat16
    return torch.float32


def resolve_decode_kernel(backend: str, device: torch.device, dtype: torch.dtype):
    """(backend actually used, the C++ paged attention or None).

    auto: the C++ kernel on CPU for float32/bfloat16 when it builds, else torch.
    cpp: the kernel or a ValueError saying why not. torch: always plain torch."""
    module = _cpu_kernels("attention_backend", backend, device, dtype)
    return ("cpp", module.paged_decode_attention) if module is not None else ("torch", None)


def resolve_latent_kernel(attention_backend: str):
    """The C++ latent attention (DeepSeek MLA) when the resolved attention backend is cpp, else None."""
    if attention_backend != "cpp":
        return None
    from tokenmill.kernels.cpu_kernels import load_cpu_kernels

    return load_cpu_kernels().paged_mla_attention


def resolve_fused_ops(backend: str, device: torch.device, dtype: torch.dtype, arch=None):
    """(backend actually used, the decoder layer's elementwise ops). cpp: the
    same rules as resolve_decode_kernel (kernels/fused_ops.py); compiled:
    TorchInductor's kernels (kernels/compiled_ops.py), compiled now at the
    shapes of ``arch``; auto: cpp on CPU, compiled on CUDA, each falling back to
    the torch ops where it cannot run (a warning says why for compiled)."""
    from tokenmill.kernels.fused_ops import TORCH_FUSED_OPS, cpp_fused_ops

    if backend == "compiled" or (backend == "auto" and device.type == "cuda"):
        from tokenmill.kernels.compiled_ops import compiled_fused_ops
        try:
            return "compiled", compiled_fused_ops(device, dtype, arch)
        except Exception as e:  # the compiler's own errors: no Triton, no C compiler, ...
            if backend == "compiled":
                raise ValueError(f"fused_ops: compiled ops could not be built here: {e}") from e
            log.warning("fused ops: torch (compiling the fused ops failed: %s)", e)
            return "torch", TORCH_FUSED_OPS
    module = _cpu_kernels("fused_ops", backend, device, dtype)
    return ("cpp", cpp_fused_ops(module)) if module is not None else ("torch", TORCH_FUSED_OPS)


def resolve_linear_backend(config, device: torch.device, dtype: torch.dtype) -> str:
    """What runs the linear layers: "invariant" (--deterministic), the
    quantization ("int8", "int4"), else "mixed", "panels", "onednn" or "torch"
    per ``config.linear_backend``. auto, on CPU in float32 or bfloat16:
    mixed in bfloat16 on CPUs with AMX or AVX512-BF16; panels in bfloat16 on
    AVX-512 CPUs without them (oneDNN's bf16 there is emulated, 2.5-4x slower);
    panels in float32 on CPUs with AVX2 and FMA but no AVX-512 (faster than
    oneDNN at every row count there); mixed in float32 on AVX-512 CPUs; onednn
    in bfloat16 elsewhere; torch otherwise (and wherever the C++ kernels do
    not build). Each rule is a measurement: kernels/mixed_linear.py,
    kernels/invariant_linear.py and ``cpu_has_float32_panels``. A ValueError
    naming ``linear_backend`` where onednn, mixed or panels was asked for and
    cannot run. (The core falls
    back from an automatic mixed to onednn when the second weight copy does
    not fit in memory.)"""
    from tokenmill.kernels.packed_linear import onednn_available

    backend = config.linear_backend
    replaced_by = "invariant" if config.deterministic else config.quantization
    if replaced_by is not None:
        if backend in ("onednn", "mixed", "panels"):
            why = "--deterministic" if config.deterministic else f"quantization {config.quantization!r}"
            raise ValueError(f"linear_backend: {backend} packs full-precision weights; {why} brings its own kernels")
        return replaced_by
    cpu_dtype = device.type == "cpu" and dtype in (torch.float32, torch.bfloat16)
    fits = cpu_dtype and onednn_available(dtype)
    if backend == "onednn" and not fits:
        raise ValueError(f"linear_backend: onednn runs on CPU in float32 or bfloat16 with a torch built "
                         f"with oneDNN (bfloat16: on a CPU with AVX-512 or AVX-NE-CONVERT), "
                         f"not {device.type} {str(dtype).removeprefix('torch.')}")
    if backend == "mixed":
        if not fits:
            raise ValueError(f"linear_backend: mixed runs on CPU in float32 or bfloat16 with a torch built with "
                             f"oneDNN, not {device.type} {str(dtype).removeprefix('torch.')}")
        _cpu_kernels("linear_backend", "cpp", device, dtype)  # raises when the C++ kernels cannot build
    if backend == "panels":
        if not cpu_dtype:
            raise ValueError(f"linear_backend: panels runs on CPU in float32 or bfloat16, "
                             f"not {device.type} {str(dtype).removeprefix('torch.')}")
        _cpu_kernels("linear_backend", "cpp", device, dtype)  # raises when the C++ kernels cannot build
    if backend == "auto":
        kernels = cpu_dtype and _cpu_kernels("linear_backend", "auto", device, dtype) is not None
        if kernels and (cpu_has_bf16_panels() if dtype == torch.bfloat16 else cpu_has_float32_panels()):
            return "panels"
        if not fits:
            return "torch"
        if dtype == torch.bfloat16:
            return "mixed" if cpu_has_fast_bf16() and kernels else "onednn"
        return "mixed" if cpu_has_avx2_panels() and kernels else "torch"
    return backend


def _cpu_kernels(field: str, backend: str, device: torch.device, dtype: torch.dtype):
    """The compiled CPU module when ``field``'s backend should use it, else None;
    a ValueError naming ``field`` when cpp was asked for and cannot run."""
    if backend == "torch":
        return None
    if not (device.type == "cpu" and dtype in (torch.float32, torch.bfloat16)):
        if backend == "cpp":
            raise ValueError(f"{field}: cpp runs on CPU in float32 or bfloat16, "
                             f"not {device.type} {str(dtype).removeprefix('torch.')}")
        return None
    from tokenmill.kernels.cpu_kernels import load_cpu_kernels, missing_toolchain

    module = load_cpu_kernels()
    if module is None and backend == "cpp":
        raise ValueError(f"{field}: the C++ kernels could not be built "
                         f"({missing_toolchain() or 'compiler error, see the log'})")
    return module


def resolve_deterministic(config, device: torch.device, dtype: torch.dtype):
    """The compiled CPU module that --deterministic runs on, or a ValueError
    naming ``deterministic`` when this configuration cannot be batch-invariant."""
    def refuse(why: str):
        raise ValueError(f"deterministic: {why}")

    if device.type != "cpu":
        refuse(f"batch-invariant kernels exist for CPU only, not {device.type}")
    if dtype not in (torch.float32, torch.bfloat16):
        refuse(f"runs in float32 or bfloat16, not {str(dtype).removeprefix('torch.')}")
    if config.quantization is not None:
        refuse(f"not available with quantization {config.quantization!r} (its matmuls are not batch-invariant)")
    for field in ("attention_backend", "fused_ops"):
        if getattr(config, field) == "torch":
            refuse(f"needs the C++ kernels, but {field} is 'torch' (torch's ops depend on the batch shape)")
    from tokenmill.kernels.cpu_kernels import load_cpu_kernels, missing_toolchain

    module = load_cpu_kernels()
    if module is None:
        refuse(f"needs the C++ kernels, which could not be built ({missing_toolchain() or 'see the log'})")
    return module


def kv_cache_bytes(requested_gib: float | None, device: torch.device) -> int:
    if requested_gib is not None:
        return int(requested_gib * (1 << 30))
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * 0.85)
    return 1 << 30


def resolve_cuda_graph_sizes(config, device: torch.device, model) -> list[int] | None:
    """Decode batch sizes to capture as CUDA graphs (engine/decode_graphs.py),
    or None when steps run eagerly: on CPU, with enforce_eager, or for a model
    whose forward waits on the host (``cuda_graph_safe`` False or absent:
    MoE routing reads expert counts back)."""
    if device.type != "cuda" or config.enforce_eager:
        return None
    if not getattr(model, "cuda_graph_safe", False):
        log.info("CUDA graphs: off for %s (its forward waits on the host); steps run eagerly", type(model).__name__)
        return None
    sizes = config.cuda_graph_sizes or default_batch_sizes(config.max_num_seqs)
    return sorted({min(n, config.max_num_seqs) for n in sizes})


def resolve_native_decoder(config, device: torch.device, fused_ops: str, attention_backend: str, model):
    """The decoder layers in one C++ call per step (kernels/native_decoder.py),
    or None where steps run the Python layer loop: not on CPU, with
    enforce_eager, on the torch attention or fused ops, or for a model or linear
    kind the C++ loop does not cover."""
    if device.type != "cpu" or config.enforce_eager or fused_ops != "cpp" or attention_backend != "cpp":
        return None
    from tokenmill.kernels.cpu_kernels import load_cpu_kernels
    from tokenmill.kernels.native_decoder import native_decoder

    return native_decoder(model, load_cpu_kernels())
