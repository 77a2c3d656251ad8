"""argparse flags (vLLM names) and their mapping onto EngineConfig / SamplingParams.

No heavy imports here: ``tokenmill --help`` must not load torch.
"""

from __future__ import annotations

import argparse

from tokenmill.config import (
    ATTENTION_BACKENDS,
    DTYPES,
    FUSED_OPS,
    INT4_ACTIVATIONS,
    LINEAR_BACKENDS,
    LOAD_FORMATS,
    EngineConfig,
)
from tokenmill.serve.tools import ToolConfig

DEFAULT_PORT = 8000
# Mirrors tokenmill.serve.api.DEFAULT_MAX_BODY_BYTES; repeated so --help need not import FastAPI.
DEFAULT_MAX_BODY_BYTES = 1 << 20
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model and engine")
    _add_model_args(g)
    _add_kernel_args(g)
    _add_scheduler_args(g)


def _add_model_args(g) -> None:
    """What to load, in which dtype and quantization, on which device."""
    g.add_argument("--model", default=None,
                   help="GGUF file, Hugging Face directory, or dummy:<preset|config.json>; "
                        "default: the embedded SmolLM2-135M-Instruct")
    g.add_argument("--tokenizer", default=None, help="tokenizer source when it differs from --model")
    g.add_argument("--load-format", choices=LOAD_FORMATS, default="auto",
                   help="how to read --model (auto guesses from the path)")
    g.add_argument("--served-model-name", default=None,
                   help="model name reported by the API (default: the model's file or directory name)")
    g.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (cuda when available)")
    g.add_argument("--dtype", choices=DTYPES, default="auto",
                   help="weights/activations dtype; auto: bfloat16 on CUDA, on CPUs with AVX512-BF16/AMX and on "
                        "other AVX-512 CPUs where the C++ kernels build, else float32")
    g.add_argument("--quantization", choices=["int8", "int4"], default=None,
                   help="weight-only quantization: int8 (per-channel) or int4 (groups of 32, LM head int8); "
                        "lowers batch-1 latency on CPU")
    g.add_argument("--int4-activations", choices=INT4_ACTIVATIONS, default="auto",
                   help="what int4 layers multiply their codes with on CPU: float (weight-only int4) or int8 "
                        "(activations quantized per group of 32 for integer dot products, as llama.cpp: faster "
                        "decode, a measurable quality cost; needs AVX512-VNNI or AVX2; docs/PERFORMANCE.md); auto: "
                        "int8 for self-int4's draft twin where the CPU allows (drafts are verified: the rounding costs "
                        "acceptance, not output), float otherwise")


def _add_kernel_args(g) -> None:
    """What computes a step: kernels, batch invariance, speculative decoding."""
    g.add_argument("--attention-backend", choices=ATTENTION_BACKENDS, default="auto",
                   help="attention: cpp (C++ kernel reading KV blocks in place, decodes and prefill chunks; "
                        "CPU, float32/bfloat16, "
                        "compiled on first use, needs g++ and ninja) or torch; auto: cpp where it applies and builds")
    g.add_argument("--fused-ops", choices=FUSED_OPS, default="auto",
                   help="residual add + RMSNorm, rotary embedding, SiLU-and-mul and the greedy argmax: cpp "
                        "(fused C++ kernels; CPU, float32/bfloat16, built with the attention kernel), compiled "
                        "(the torch ops fused by TorchInductor at start-up; Triton on CUDA) or "
                        "torch; auto: cpp on CPU, compiled on CUDA, torch where those cannot run")
    g.add_argument("--linear-backend", choices=LINEAR_BACKENDS, default="auto",
                   help="linear layers: mixed (tokenmill's C++ panel kernel for calls of up to 128 rows, "
                        "oneDNN above, the LM head too in float32; keeps two weight layouts; CPU, "
                        "float32/bfloat16), panels (the panel kernel "
                        "for every call; CPU, float32/bfloat16), onednn (weights prepacked once at load for oneDNN; "
                        "CPU) or torch (F.linear); auto: mixed in bfloat16 on CPUs with AMX or AVX512-BF16, panels "
                        "in bfloat16 on other AVX-512 CPUs, panels in float32 on CPUs with AVX2 and FMA but no "
                        "AVX-512 (faster than oneDNN at every row count there), mixed in float32 on AVX-512 CPUs "
                        "(mixed only when the second layout fits in a quarter of the free memory), onednn on other "
                        "CPUs in bfloat16, torch otherwise")
    g.add_argument("--deterministic", action="store_true",
                   help="batch-invariant mode: a request's tokens do not depend on the other requests in its "
                        "steps, chunking, prefix-cache hits or preemption (greedy and seeded sampling; CPU, "
                        "float32/bfloat16, C++ kernels, no --quantization; cost: docs/PERFORMANCE.md)")
    g.add_argument("--enforce-eager", action="store_true",
                   help="run every step eagerly, op by op from Python; otherwise, on CUDA, steps replay CUDA "
                        "graphs captured at start-up per step size and context span (Llama-family models without "
                        "MoE), and on CPU the decoder layers run in one C++ call per step (dense Llama-family "
                        "models; same results)")
    g.add_argument("--cuda-graph-sizes", type=int, nargs="+", default=None, metavar="N",
                   help="step sizes in rows (tokens computed) captured as CUDA graphs (a step pads to the next; "
                        "larger ones run eagerly); default 1 2 4 8, then every multiple of 16 up to --max-num-seqs, "
                        "and it")
    g.add_argument("--cuda-graph-mode", choices=("full", "decode"), default="full",
                   help="full: every step of up to the largest size's rows replays a graph (decodes, draft "
                        "verifications, short prompt chunks); decode: only steps of one token per request")
    g.add_argument("--speculative-config", default=None, metavar="JSON",
                   help='speculative decoding, vLLM\'s JSON: \'{"method": "ngram", "num_speculative_tokens": 4, '
                        '"prompt_lookup_max": 4}\' (drafts from the request\'s own tokens), \'{"method": '
                        '"self-int4", "num_speculative_tokens": 4}\' (the model\'s own weights in int4 draft), '
                        '\'{"method": "mtp", "num_speculative_tokens": 1}\' (DeepSeek\'s MTP layer drafts), or '
                        '\'{"method": "draft_model", "model": "DRAFT.gguf", "num_speculative_tokens": 3}\' (a '
                        'smaller model sharing the tokenizer drafts; "quantization": "int4" for its weights); '
                        'drafts are verified in the same steps, so greedy outputs are the same; sampled requests '
                        'keep a draft drawn from the draft model with probability min(1, p/q) '
                        '("acceptance_method": "rejection_sampler", default) or only where the model\'s own draw '
                        'equals its argmax draft ("exact_match": seeded outputs as without drafts); "adaptive": '
                        'true (default) verifies only the drafts that measured step times say pay; '
                        '"disable_by_batch_size": N')


def _add_scheduler_args(g) -> None:
    """Limits, KV cache, seeds and logging."""
    g.add_argument("--max-model-len", type=int, default=None,
                   help="longest prompt + output in tokens (default: model context capped by the KV cache)")
    g.add_argument("--max-num-seqs", type=int, default=128, help="most requests running in one step")
    g.add_argument("--max-num-batched-tokens", type=int, default=1024,
                   help="token budget of one engine step (prefill chunks + decodes)")
    g.add_argument("--block-size", type=int, default=16, help="tokens per KV cache block")
    g.add_argument("--num-kv-blocks", type=int, default=None,
                   help="KV cache blocks to allocate (default: derived from --kv-cache-memory-gib)")
    g.add_argument("--kv-cache-memory-gib", type=float, default=None,
                   help="memory for the KV cache (default: 1 GiB on CPU, 85%% of free memory on CUDA)")
    g.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                   help="reuse KV blocks across requests that share a prompt prefix")
    g.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction, default=True,
                   help="split long prompts into chunks that share steps with running decodes; "
                        "--no-enable-chunked-prefill admits whole prompts only and raises "
                        "--max-num-batched-tokens to the max model length where it is smaller")
    g.add_argument("--max-waiting-requests", type=int, default=None,
                   help="waiting-queue limit; the server answers 429 above it (default: unbounded)")
    g.add_argument("--seed", type=int, default=0,
                   help="seed for dummy weights and for requests that give no seed")
    g.add_argument("--num-threads", type=int, default=None, help="torch intra-op threads on CPU")
    g.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="logging verbosity")


def add_server_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("HTTP server")
    g.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: local only; 0.0.0.0 exposes the server)")
    g.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to listen on; 0 picks a free port")
    g.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer <key>' on /v1/* (default: no authentication)")
    g.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                   help="largest accepted request body; larger bodies get 413 (default 1 MiB)")
    g.add_argument("--max-tokens-limit", type=int, default=None,
                   help="cap on max_tokens per request; also bounds the default when a request gives none")
    g.add_argument("--stream-interval", type=int, default=1, metavar="TOKENS",
                   help="streamed answers send one SSE event per this many tokens (the first token at once, "
                        "the rest with the last event); above 1 the server and its clients spend less CPU per "
                        "token, which matters under heavy load on few cores (default 1: every token)")
    g.add_argument("--shutdown-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="on SIGTERM or Ctrl-C: stop accepting connections, let in-flight requests finish for up "
                        "to this long, then end the rest with an error and stop the engine (and the Ray instance "
                        "it started); default 30, 0 ends them at once")
    g.add_argument("--timeout-keep-alive", type=float, default=5.0, metavar="SECONDS",
                   help="close a client's HTTP connection after it has been idle this long (default 5, "
                        "uvicorn's); raise it when clients pool connections and do not retry, since a request "
                        "sent just as the server closes its idle connection fails with a connection error")
    g.add_argument("--step-log", default=None, metavar="FILE",
                   help="append every engine step to FILE as it runs, one JSON line each (its start in Unix "
                        "seconds, seconds, decodes and their KV lengths summed, prompt chunks); `tokenmill sim "
                        "--replay RESULTS --step-log FILE` prices a bench run's steps from it. A cluster's "
                        "workers each write FILE.<worker name> (FILE.worker-0, ...) on their own nodes "
                        "(default: no log)")
    t = parser.add_argument_group("chat output (tools, reasoning)")
    t.add_argument("--enable-auto-tool-choice", action="store_true",
                   help='serve tool_choice "auto": the model decides whether to call the request\'s tools and '
                        "its output is parsed with --tool-call-parser (\"required\" and named choices work without "
                        "it: the calls are forced by the structured-output engine)")
    t.add_argument("--tool-call-parser", choices=("hermes", "deepseek_v3"), default=None,
                   help="how tool calls are read from the model's output: hermes (<tool_call> JSON blocks: Qwen2.5, "
                        "Hermes, and models without their own format) or deepseek_v3 (DeepSeek-V3/R1 markers)")
    t.add_argument("--reasoning-parser", choices=("deepseek_r1",), default=None,
                   help="split chat answers into reasoning_content (before </think>) and content, streamed and "
                        "not; reasoning tokens are counted in usage.completion_tokens_details")


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("cluster (Ray): several engine workers behind one frontend")
    g.add_argument("--workers", type=int, default=1,
                   help="engine workers as Ray actors behind a router (default 1: one in-process engine, no Ray)")
    g.add_argument("--router", default="kv", choices=["kv", "round-robin", "random", "least-loaded"],
                   help="routing policy (kv: the worker already holding the prompt's prefix, weighed against load)")
    g.add_argument("--router-overlap-weight", type=float, default=4.0,
                   help="kv router: cost of one uncached prompt block, in blocks of decode load (default 4; "
                        "higher keeps prefixes on the worker caching them, lower spreads load)")
    g.add_argument("--router-temperature", type=float, default=0.0,
                   help="kv router: 0 picks the lowest cost; > 0 samples softmax(-cost / T) to spread ties")
    g.add_argument("--ray-address", default=None,
                   help="join a running Ray cluster ('auto' or host:port); default: start a local instance")
    g.add_argument("--worker-num-cpus", type=float, default=1.0,
                   help="CPUs per worker (Ray placement; also its torch threads unless --num-threads)")
    g.add_argument("--worker-num-gpus", type=float, default=0.0, help="GPUs per worker (Ray placement)")
    g.add_argument("--migration-limit", type=int, default=3,
                   help="times a request may move to a live worker when its worker dies (0: it fails instead)")
    d = parser.add_argument_group("disaggregated prefill/decode (Ray): prompts computed on prefill workers, "
                                  "their KV moved to decode workers")
    d.add_argument("--prefill-workers", type=int, default=0,
                   help="workers that only compute prompts (with --decode-workers; instead of --workers)")
    d.add_argument("--decode-workers", type=int, default=0,
                   help="workers that receive the prompts' KV blocks and decode (with --prefill-workers)")
    d.add_argument("--disagg-min-prefill-tokens", type=int, default=256,
                   help="prompts whose part not cached on their decode worker is shorter than this are computed "
                        "there, not sent to a prefill worker (default 256); one it caches whole stays there even at 0")
    d.add_argument("--disagg-max-prefill-queue", type=int, default=4,
                   help="when every prefill worker has this many prefills in flight, new prompts are computed on "
                        "their decode worker (default 4)")
    d.add_argument("--prefill-worker-nice", type=int, default=0,
                   help="nice value (0..19) prefill workers run at: where they share a host's cores with decode "
                        "workers and the server, decode steps then take a core first, so long prefills stretch "
                        "TPOT less. Ray starts workers at nice 15 (its worker_niceness), so values above 15 "
                        "act (19: the lowest priority); default 0: as Ray starts them")


def cluster_options_from_args(args: argparse.Namespace):
    from tokenmill.cluster.disagg import DisaggConfig
    from tokenmill.cluster.launch import ClusterOptions

    return ClusterOptions(workers=args.workers, router=args.router, router_overlap_weight=args.router_overlap_weight,
                          router_temperature=args.router_temperature, ray_address=args.ray_address,
                          worker_num_cpus=args.worker_num_cpus, worker_num_gpus=args.worker_num_gpus,
                          migration_limit=args.migration_limit, prefill_workers=args.prefill_workers,
                          decode_workers=args.decode_workers, prefill_worker_nice=args.prefill_worker_nice,
                          disagg=DisaggConfig(min_prefill_tokens=args.disagg_min_prefill_tokens,
                                              max_prefill_queue=args.disagg_max_prefill_queue))


def add_generate_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("prompts and sampling")
    g.add_argument("prompts", nargs="*", help="prompts to complete")
    g.add_argument("--prompts-file", default=None,
                   help="file of prompts: one per line, or JSONL with {\"prompt\": ...} or {\"messages\": [...]}")
    g.add_argument("--chat", action="store_true", help="apply the model's chat template to text prompts")
    g.add_argument("--max-tokens", type=int, default=64, help="tokens to generate per prompt")
    g.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass")
    g.add_argument("--top-k", type=int, default=-1, help="keep the k most likely tokens (-1: off)")
    g.add_argument("--stop", action="append", default=None, help="stop string (repeat for several)")
    g.add_argument("--ignore-eos", action="store_true", help="keep generating past end-of-sequence")


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    """Raises ValueError naming the field for a bad combination."""
    return EngineConfig(
        model=args.model, load_format=args.load_format, tokenizer=args.tokenizer,
        served_model_name=args.served_model_name, device=args.device, dtype=args.dtype,
        quantization=args.quantization, int4_activations=args.int4_activations,
        attention_backend=args.attention_backend, fused_ops=args.fused_ops,
        linear_backend=args.linear_backend,
        deterministic=args.deterministic, enforce_eager=args.enforce_eager,
        cuda_graph_sizes=tuple(args.cuda_graph_sizes) if args.cuda_graph_sizes else None,
        cuda_graph_mode=args.cuda_graph_mode,
        max_model_len=args.max_model_len, block_size=args.block_size,
        num_kv_blocks=args.num_kv_blocks, kv_cache_memory_gib=args.kv_cache_memory_gib,
        enable_prefix_caching=args.enable_prefix_caching, enable_chunked_prefill=args.enable_chunked_prefill,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, max_waiting_requests=args.max_waiting_requests,
        seed=args.seed, num_threads=args.num_threads, speculative_config=args.speculative_config,
    )


def check_server_args(args: argparse.Namespace) -> None:
    if not 0 <= args.port <= 65535:
        raise ValueError(f"port: must be in [0, 65535], got {args.port}")
    if args.max_body_bytes < 1:
        raise ValueError(f"max_body_bytes: must be positive, got {args.max_body_bytes}")
    if args.max_tokens_limit is not None and args.max_tokens_limit < 1:
        raise ValueError(f"max_tokens_limit: must be positive, got {args.max_tokens_limit}")
    if args.stream_interval < 1:
        raise ValueError(f"stream_interval: must be a positive number of tokens, got {args.stream_interval}")
    ToolConfig(args.enable_auto_tool_choice, args.tool_call_parser)  # ValueError naming the flag
    if not args.shutdown_timeout >= 0:
        raise ValueError(f"shutdown_timeout: must be >= 0 seconds, got {args.shutdown_timeout}")
    if not args.timeout_keep_alive > 0:
        raise ValueError(f"timeout_keep_alive: must be > 0 seconds, got {args.timeout_keep_alive}")
