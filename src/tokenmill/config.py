"""Engine configuration: frozen dataclasses, one docstring per field.

No I/O here. Resolving "auto" values against the machine and the model
(device, dtype, max_model_len, number of KV blocks) happens in the engine's
construction, which returns a resolved copy via ``dataclasses.replace``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenmill.spec.config import parse_speculative_config

LOAD_FORMATS = ("auto", "gguf", "hf", "dummy")
DTYPES = ("auto", "float32", "bfloat16", "float16")
QUANTIZATIONS = (None, "int8", "int4")
INT4_ACTIVATIONS = ("auto", "float", "int8")
ATTENTION_BACKENDS = ("auto", "cpp", "torch")
FUSED_OPS = ("auto", "cpp", "compiled", "torch")
LINEAR_BACKENDS = ("auto", "mixed", "panels", "onednn", "torch")


@dataclass(frozen=True)
class EngineConfig:
    model: str | None = None
    """GGUF file, Hugging Face directory, or a dummy spec (``dummy:llama3-8b``,
    ``dummy:/path/config.json``). None: the embedded SmolLM2-135M-Instruct."""
    load_format: str = "auto"
    """One of auto | gguf | hf | dummy; auto guesses from ``model``."""
    tokenizer: str | None = None
    """Tokenizer source when it differs from ``model`` (GGUF file or HF dir)."""
    served_model_name: str | None = None
    """Name reported by the API; defaults to the model's file or directory name."""
    device: str = "auto"
    """cpu | cuda | cuda:N | auto (cuda when available)."""
    dtype: str = "auto"
    """Activation/weight dtype: auto | float32 | bfloat16 | float16. auto picks
    bfloat16 on CUDA, on CPUs with native bf16 matmul (AVX512-BF16 / AMX) and
    on other AVX-512 CPUs when the C++ kernels build (their panel kernel runs
    bf16 linears there, faster than float32); float32 otherwise."""
    quantization: str | None = None
    """None, 'int8' (weight-only int8 linears, per-channel scales) or 'int4'
    (decoder linears int4 in groups of 32, GGUF Q4_1's layout; LM head int8).
    See kernels/quantize.py."""
    int4_activations: str = "auto"
    """What int4 layers (``quantization`` int4, self-int4 drafts, int4 draft
    models) multiply their 4-bit codes with on CPU: auto | float | int8. float:
    weight-only int4 (activations as they are). int8: each call's activations
    quantized to int8 per group of 32 for int4 x int8 dot products in integer
    arithmetic (as llama.cpp does for its Q4 formats): faster decode, a
    measurable quality cost; needs the C++ kernels built with AVX512-VNNI or
    AVX2. Both measured in docs/PERFORMANCE.md ("int4 kernel"). auto: int8 for
    self-int4's draft twin where the kernels have that path (drafts are verified, so
    the rounding costs acceptance, never output), float for everything else
    (kernels/int4_linear.py ``resolve_int4_activations``)."""
    attention_backend: str = "auto"
    """Attention: auto | cpp | torch. cpp is a C++ kernel reading KV blocks in
    place, every token of a step (decode or prefill) one query row over its
    context (CPU, float32/bfloat16; compiled on first use, see
    kernels/cpu_kernels.py); torch runs SDPA for prefill chunks and gathers
    blocks into batched matmuls for decodes.
    auto: cpp where it applies and builds, torch otherwise."""
    fused_ops: str = "auto"
    """The decoder layer's elementwise ops (residual add + RMSNorm, rotary
    embedding, SiLU-and-mul) and the greedy argmax: auto | cpp | compiled |
    torch. cpp runs each as one fused C++ kernel (CPU, float32/bfloat16; built
    with the attention kernel); compiled runs the torch ops fused by
    TorchInductor (Triton on CUDA; compiled at start-up,
    kernels/compiled_ops.py); torch runs plain torch ops. auto: cpp
    on CPU, compiled on CUDA, torch where those cannot run."""
    linear_backend: str = "auto"
    """The decoder's linear layers and the LM head: auto | mixed | panels |
    onednn | torch. onednn prepacks each weight once at load into oneDNN's
    blocked layout and runs oneDNN's linear on it (CPU; kernels/packed_linear.py;
    measured 1.36x faster batch-1 decode than torch in bfloat16, no faster in
    float32); mixed also keeps a panel layout and runs calls of up to 128 rows
    on tokenmill's C++ kernel (CPU; kernels/mixed_linear.py; batch-1 decode step
    1.2-1.25x faster than onednn in bfloat16); panels runs every call on that
    kernel, one weight layout (CPU; kernels/invariant_linear.py); torch calls
    ``F.linear`` on the plain weight. auto: mixed in bfloat16 on CPUs with AMX
    or AVX512-BF16 (onednn when its second layout does not fit in memory),
    panels in bfloat16 on other AVX-512 CPUs, panels in float32 on CPUs with
    AVX2 and FMA but no AVX-512, mixed in float32 on AVX-512 CPUs, onednn on
    other CPUs in bfloat16, torch otherwise
    (engine/resolve.py). Layers replaced by ``quantization`` or
    ``deterministic`` keep their own kernels."""
    deterministic: bool = False
    """Batch-invariant mode: a request's tokens do not depend on the other
    requests in its steps, on how its prompt was chunked, on prefix-cache hits
    or on preemption (greedy and seeded sampling, float32 and bfloat16). CPU
    only; needs the C++ kernels, uses the batch-invariant linear kernel
    (kernels/invariant_linear.py) and samples row by row. Not with
    ``quantization``. Costs: docs/PERFORMANCE.md."""
    enforce_eager: bool = False
    """Run every step eagerly, op by op from Python. Otherwise, on CUDA, steps
    replay CUDA graphs captured at start-up, one per (rows, context span) bucket
    (engine/decode_graphs.py; which steps: ``cuda_graph_mode``), for models
    whose forward never waits on the host (Llama family without MoE); on CPU,
    the decoder layers of dense Llama-family models run in one C++ call per
    step (kernels/native_decoder.py; bitwise the Python loop's results, batch-1
    decode 1.3-1.7x faster: docs/PERFORMANCE.md). torch.compile measured slower
    than the C++ kernels on CPU and is not used there."""
    cuda_graph_sizes: tuple[int, ...] | None = None
    """Step sizes in rows (tokens computed) captured as CUDA graphs (a step pads
    to the next one; larger steps run eagerly); None: 1, 2, 4, 8, then every
    multiple of 16 up to max_num_seqs, and max_num_seqs."""
    cuda_graph_mode: str = "full"
    """Which steps replay CUDA graphs: ``full``, every step of up to the largest
    size's rows (decodes, draft verifications, short prompt chunks: a run of n
    tokens is n rows at consecutive positions); ``decode``, only steps of one
    token per request (prompt chunks and verifications eager)."""
    max_model_len: int | None = None
    """Longest prompt + output in tokens; None: the model's context length capped
    by the KV cache capacity."""
    block_size: int = 16
    """Tokens per KV cache block."""
    num_kv_blocks: int | None = None
    """KV blocks to allocate; None: derived from ``kv_cache_memory_gib``."""
    kv_cache_memory_gib: float | None = None
    """Memory for the KV cache; None: 1 GiB on CPU, 85% of free memory on CUDA."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks across requests sharing a prompt prefix."""
    enable_chunked_prefill: bool = True
    """Split a prompt longer than what is left of a step's budget over several steps, beside the
    running decodes. False: a prompt is admitted only whole, and the budget is raised to
    ``max_model_len`` where it is smaller, so that every prompt fits one step (vLLM's rule)."""
    max_num_seqs: int = 128
    """Most requests running in one step."""
    max_num_batched_tokens: int = 1024
    """Token budget of one step (prefill chunks + decodes)."""
    max_waiting_requests: int | None = None
    """Queue limit for admission (None: unbounded); the server answers 429 above it."""
    seed: int = 0
    """Seed for dummy weights and for requests that give no seed of their own."""
    num_threads: int | None = None
    """torch intra-op threads on CPU; None leaves torch's default."""
    speculative_config: dict | str | None = None
    """Speculative decoding, vLLM's JSON (spec/config.py), e.g. ``{"method": "ngram",
    "num_speculative_tokens": 4}``; None: off. Outputs are the same either way."""

    def __post_init__(self) -> None:
        if self.load_format not in LOAD_FORMATS:
            raise ValueError(f"load_format: must be one of {LOAD_FORMATS}, got {self.load_format!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: must be one of {DTYPES}, got {self.dtype!r}")
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization: must be one of {QUANTIZATIONS}, got {self.quantization!r}")
        if self.int4_activations not in INT4_ACTIVATIONS:
            raise ValueError(f"int4_activations: must be one of {INT4_ACTIVATIONS}, got {self.int4_activations!r}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(f"attention_backend: must be one of {ATTENTION_BACKENDS}, "
                             f"got {self.attention_backend!r}")
        if self.fused_ops not in FUSED_OPS:
            raise ValueError(f"fused_ops: must be one of {FUSED_OPS}, got {self.fused_ops!r}")
        if self.linear_backend not in LINEAR_BACKENDS:
            raise ValueError(f"linear_backend: must be one of {LINEAR_BACKENDS}, got {self.linear_backend!r}")
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")
        for name in ("max_model_len", "num_kv_blocks", "max_waiting_requests", "num_threads"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name}: must be a positive integer, got {value!r}")
        if self.cuda_graph_sizes is not None and (
                not self.cuda_graph_sizes or any(not isinstance(n, int) or n < 1 for n in self.cuda_graph_sizes)):
            raise ValueError(f"cuda_graph_sizes: positive batch sizes expected, got {self.cuda_graph_sizes!r}")
        if self.cuda_graph_mode not in ("full", "decode"):
            raise ValueError(f"cuda_graph_mode: 'full' or 'decode', got {self.cuda_graph_mode!r}")
        if self.kv_cache_memory_gib is not None and self.kv_cache_memory_gib <= 0:
            raise ValueError(f"kv_cache_memory_gib: must be > 0, got {self.kv_cache_memory_gib}")
        parse_speculative_config(self.speculative_config)  # ValueError naming the field
