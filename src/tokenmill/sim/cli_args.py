"""The flags of ``tokenmill sim`` (sim/cli.py runs them): what to simulate, the workload and
scheduler, calibration and validation. Kept free of torch so ``tokenmill --help`` stays fast."""

from __future__ import annotations

import argparse

from tokenmill.bench.cli_args import int_list
from tokenmill.config import ATTENTION_BACKENDS, FUSED_OPS, LINEAR_BACKENDS
from tokenmill.sim.calibrate import PREFILL_TOKENS
from tokenmill.sim.hardware import HARDWARE
from tokenmill.sim.kernels import CURRENT as CURRENT_KERNELS
from tokenmill.sim.kernels import KERNEL_GENERATIONS

SCENARIOS = ("offline", "server", "interactive", "singlestream")
MODEL_NAMES = ("llama3.1-8b", "llama3.3-70b", "llama3.1-405b", "llama2-70b", "deepseek-r1", "smollm2-135m",
               "gpt-oss-120b")
"""sim/models.py's SIM_MODELS, named here so `tokenmill --help` need not import torch (a test keeps them equal)."""
DEFAULT_NUM_REQUESTS = 2000
ROUTER_NAMES = ("kv", "least-loaded", "round-robin", "random")
"""sim/routed.py's ROUTER_POLICIES (a test keeps them equal)."""
KV_CACHE_DTYPES = ("auto", "bf16", "fp8")
"""--kv-cache-dtype's choices (sim/predict.py ``Deployment.kv_cache_dtype``)."""
DATASET_NAMES = ("deepseek-r1", "llama3.1-405b", "llama3.1-8b", "llama2-70b")
"""sim/mlperf_lengths.py's DATASET_DISTRIBUTIONS (a test keeps them equal)."""


def add_sim_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=("predict", "calibrate", "validate"), default="predict",
                        help="predict (default): simulate the deployment below; calibrate: measure this machine "
                             "(microbenchmarks and the engine's step times, on --device) and write the "
                             "this-machine profile, which records the CPU it priced (predict warns when it loads "
                             "one calibrated on another kind of CPU); validate: simulate every published result "
                             "the simulator can express (sim/published.py) and print simulated vs published "
                             "(--num-requests per replica and batch size; --model: only that model's rows; "
                             "--suite; --jobs; --out; --json; --latency: the published Server runs' TPOT "
                             "and TTFT at their own rates instead)")
    deployment = parser.add_argument_group("what to simulate")
    _add_deployment_args(deployment)
    _add_step_pricing_args(deployment)
    _add_uplift_args(deployment)
    _add_disagg_args(deployment)
    workload = parser.add_argument_group("workload and scheduler")
    _add_workload_args(workload)
    _add_replay_args(workload)
    _add_draw_args(workload)
    _add_scheduling_args(workload)
    _add_calibrate_args(parser.add_argument_group("calibrate"))
    parser.add_argument("--jobs", type=int, default=1,
                        help="simulations run at once, one process each (default 1): a Server/Interactive peak-QPS "
                             "search's runs (run ahead on both outcomes of the run in flight), --search's and the "
                             "layout choice's candidates, --uplift's variants, --pareto's points, validate's rows "
                             "and runs; the answers are the same for any N")
    v = parser.add_argument_group("validate")
    v.add_argument("--out", default=None, metavar="PATH",
                   help="also write the Markdown table of the rows finished so far to PATH after every row "
                        "(a long run interrupted keeps what it did)")
    v.add_argument("--suite", choices=("mlperf", "tensorrt-llm"), default=None,
                   help="only the MLPerf rows (on their datasets' lengths) or only TensorRT-LLM's (fixed ISL/OSL)")
    v.add_argument("--latency", action="store_true",
                   help="check latencies instead of throughput: simulate one instance of each published MLPerf "
                        "Server run with a log (sim/served_latency.py: DeepSeek-R1, Llama-3.1-8B, Llama-2-70B; "
                        "--model picks one) at its own rate and query count, and "
                        "print TPOT p50, TTFT p99 and the sequences in flight, published vs simulated, and the "
                        "cost model's step with the published run's own sequences in flight against its mean TPOT")


def _add_deployment_args(g) -> None:
    g.add_argument("--model", default=None,
                   help=f"{', '.join(MODEL_NAMES)}, a dummy:<preset>, or a Hugging Face config.json (file or folder); "
                        "default llama3.1-8b. calibrate: the model the engine runs (a GGUF file, HF folder or "
                        "dummy:<preset>; default the embedded one)")
    g.add_argument("--hardware", default="h100",
                   help=f"one of {', '.join(HARDWARE)}, or this-machine (after `tokenmill sim calibrate`)")
    g.add_argument("--num-gpus", type=int, default=None,
                   help="devices in the deployment (default: one replica; where the layout is chosen, the fewest "
                        "GPUs on which one holds the weights)")
    g.add_argument("--tp", type=int, default=None,
                   help="tensor-parallel size of a replica (default 1; with none of --tp/--ep/--pp/--attention-dp, "
                        "when one device does not hold the weights, the layout is chosen: the best of those "
                        "--search tries, at --max-num-seqs)")
    g.add_argument("--ep", type=int, default=None, help="expert-parallel size of a replica (MoE models; default 1)")
    g.add_argument("--pp", "--pipeline-parallel-size", dest="pp", type=int, default=None,
                   help="pipeline stages of a replica, each of --tp/--ep devices, with as many micro-batches in "
                        "flight, each under --max-num-seqs (default 1; docs/SIMULATOR.md; not with --uplift, "
                        "--pareto, --disagg or --mtp; --search tries 2 stages for dense models)")
    g.add_argument("--attention-dp", action="store_true", help="data-parallel attention inside a replica")
    g.add_argument("--search", action="store_true",
                   help="search the replica layout (TP, EP, attention DP; 2 pipeline stages for dense models) and "
                        "--max-num-seqs for the most tokens/s per GPU on --num-gpus (server/interactive: at the peak "
                        "QPS meeting the limits, skipping candidates whose Offline figure cannot reach the best); "
                        "replaces --tp/--ep/--pp/--attention-dp/--max-num-seqs")
    g.add_argument("--pareto", default=None, metavar="PATH",
                   help="plot tokens/s per GPU against tokens/s per user (1000 / TPOT p50) over --max-num-seqs "
                        "1..1024 and the layouts --search tries on --num-gpus but its pipelines (else the --tp/--ep "
                        "layout), with "
                        "the Pareto front; writes PATH (.png) and the points as .json next to it")
    g.add_argument("--precision", default=None, choices=("fp32", "bf16", "fp8", "fp4"),
                   help="weights and GEMMs (default: the hardware's, as published runs use: fp8 Hopper, fp4 Blackwell)")
    g.add_argument("--mtp", type=int, default=0, metavar="N",
                   help="draft tokens verified per decode step; a model with an MTP module (DeepSeek-V3/R1) also "
                        "runs it once per draft in every step, other models draft for free")
    g.add_argument("--mtp-acceptance", type=float, default=None, metavar="TOKENS",
                   help="mean tokens accepted per decode step with --mtp (default 1 + 0.7 N)")


def _add_step_pricing_args(g) -> None:
    """How a step is priced (kernels, fusion, CUDA graphs) and how much KV cache a device holds."""
    g.add_argument("--fused-allreduce", action="store_true",
                   help="tensor-parallel all-reduces fused into the GEMMs they follow, overlapping them (as the "
                        "published MLPerf Llama-3.1-405B runs: TensorRT-LLM's GEMM + all-reduce fusion); default: "
                        "they run between layers, as in our engine")
    g.add_argument("--kernels", default=CURRENT_KERNELS, choices=tuple(KERNEL_GENERATIONS),
                   help="TensorRT-LLM's kernel generation, by MLPerf round, on the GPU profiles: v6.0 (default; the "
                        "cost model as fitted, early 2026) or v5.1 (August 2025: every step 1.52x as long, read in "
                        "the published v5.1 DeepSeek-R1 Server logs against the v6.0 ones; docs/SIMULATOR.md)")
    g.add_argument("--tile-rule", action="store_true",
                   help="price the dense (Llama-family) layers' GEMMs by their tiles and waves on the GPU's SMs "
                        "(padded rows, idle SMs in a last wave; split-K where tiles are few) at fractions refitted "
                        "for it: steps of a few hundred rows and a small model's narrow GEMMs run slower, steps "
                        "under one tile faster; off by default, as it brings the small Server steps closer but "
                        "not the table's mean error (docs/SIMULATOR-LOG.md \"GEMM tiles on the SMs\")")
    g.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_false",
                   help="every step launches its kernels from the host instead of replaying a CUDA graph (vLLM's "
                        "--enforce-eager): each step's launches (--eager-layer-ms per layer) overlap its device "
                        "work, so small batches slow down most; default: graphs, as published runs and our engine")
    g.add_argument("--eager-layer-ms", type=float, default=None, metavar="MS",
                   help="with --no-cuda-graphs or --baseline-eager: host milliseconds to launch one layer's kernels "
                        "(default: the profile's, 0.25 on the GPU profiles, from published eager vs graph pairs; our "
                        "engine measured ~1.0 on an H200; a calibrated GPU profile prices its eager steps as measured)")
    g.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES,
                   help="the KV cache's values (vLLM's flag): auto (default) FP8 with FP8 or FP4 weights, else the "
                        "weights' dtype; bf16 or fp8 whatever the weights (an FP8 cache computes attention in FP8)")
    g.add_argument("--kv-cache-memory-gib", type=float, default=None, metavar="GIB",
                   help="KV cache per device (default: this-machine's engine default, 1 GiB on a CPU, as "
                        "`tokenmill serve`; on the GPU profiles what 90%% of memory leaves after the weights)")
    g.add_argument("--kv-cache-free-fraction", type=float, default=None, metavar="F",
                   help="size the KV cache as TensorRT-LLM does (its kv_cache_free_gpu_mem_fraction): F of the "
                        "memory the weights and the runtime's buffers leave free, where the default takes 90%% "
                        "of the whole device for weights + cache (vLLM's gpu_memory_utilization), or on "
                        "this-machine the engine's own cache")


def _add_uplift_args(g) -> None:
    """What each technique is worth: the uplift table and its baseline."""
    g.add_argument("--uplift", action="store_true",
                   help="what each technique is worth: the deployment above (the full stack) against the same "
                        "GPUs with every technique it uses switched off (--ep/--attention-dp, --mtp, --disagg, "
                        "--cached-tokens/--shared-prefix, --fused-allreduce; the kernels with --baseline-kernels, "
                        "CUDA graphs with --baseline-eager, chunked prefill with --baseline-whole-prompts), and "
                        "each switched on alone; a table of tokens/s per GPU and "
                        "latencies. With none of them given, the full stack is assumed: MTP 3 for a model with an "
                        "MTP module, CUDA graphs against eager steps on the GPU profiles, v6.0 kernels against "
                        "v5.1 for DeepSeek-R1 on Blackwell, GEMM + all-reduce fusion under tensor parallel")
    g.add_argument("--baseline-kernels", default=None, metavar="ROUND|NAME",
                   help="with --uplift: the baseline runs this older kernel generation (v5.1), and the newer "
                        "kernels (--kernels) join the table as a technique: the software uplift between MLPerf "
                        "rounds; on a calibrated --hardware, NAME is a profile `tokenmill sim calibrate --profile "
                        "NAME` wrote with the baseline engine's kernel flags (e.g. --attention-backend torch "
                        "--fused-ops torch --linear-backend torch --enforce-eager), which prices every variant "
                        "but the kernels' own and the full stack")
    g.add_argument("--baseline-eager", action="store_true",
                   help="with --uplift: the baseline launches every kernel from the host (--no-cuda-graphs), and "
                        "CUDA graphs join the table as a technique")
    g.add_argument("--baseline-whole-prompts", action="store_true",
                   help="with --uplift: the baseline admits a prompt only when it fits one step whole "
                        "(--no-enable-chunked-prefill), and chunked prefill joins the table as a technique, as in "
                        "`tokenmill bench --uplift`")


def _add_disagg_args(g) -> None:
    """The disaggregated pools and the decode replicas' own layout."""
    g.add_argument("--disagg", default=None, metavar="P:D",
                   help="disaggregated prefill/decode: P prefill and D decode replicas of the --tp/--ep layout "
                        "(the decode ones of --decode-* where given; KV moved between them over NVLink inside one "
                        "scale-up domain, else the network); --num-gpus defaults to what the pools take. With "
                        "--search: auto, to try prefill:decode splits of every layout beside aggregated replicas")
    g.add_argument("--no-disagg", dest="disagg", action="store_const", const=None,
                   help="aggregated replicas, each prefilling and decoding its own requests: the default; after "
                        "--disagg it switches the pools off (and --search then tries no splits)")
    g.add_argument("--decode-tp", type=int, default=None, metavar="N",
                   help="with --disagg P:D: tensor-parallel size of each decode replica (default --tp; published "
                        "runs often prefill on small replicas and decode on larger ones)")
    g.add_argument("--decode-ep", type=int, default=None, metavar="N",
                   help="with --disagg P:D: expert-parallel size of each decode replica (default --ep)")
    g.add_argument("--decode-attention-dp", action=argparse.BooleanOptionalAction, default=None,
                   help="with --disagg P:D: data-parallel attention in each decode replica (default --attention-dp)")
    g.add_argument("--decode-max-num-seqs", type=int, default=None, metavar="N",
                   help="with --disagg P:D: batch limit of each decode replica (default --max-num-seqs)")
    g.add_argument("--disagg-min-prefill-tokens", type=int, default=None, metavar="N",
                   help="with --disagg P:D (or --search --disagg auto: every split it tries): our cluster's "
                        "rule, as `tokenmill serve --disagg-min-prefill-tokens`: a prompt whose part its decode "
                        "replica does not cache is shorter than N, or nothing, is computed there (default: every "
                        "prompt to the prefill pool, as published disaggregated runs; give 256 for tokenmill "
                        "serve's default)")
    g.add_argument("--disagg-max-prefill-queue", type=int, default=None, metavar="N",
                   help="with --disagg-min-prefill-tokens: when the prefill replicas have N prefills each in "
                        "flight, new prompts are computed on their decode replica (default 4, as tokenmill serve)")


def _add_scheduling_args(g) -> None:
    """How replicas admit and route requests: our engine's rules by default, TensorRT-LLM's on request."""
    g.add_argument("--no-enable-chunked-prefill", dest="chunked_prefill", action="store_false",
                   help="whole prompts only: a prompt waits until it fits one step's budget whole (TensorRT-LLM's "
                        "enable_chunked_context: False, as the published DeepSeek-R1 MLPerf configs set); default: "
                        "chunked, as our engine")
    g.add_argument("--adp-balance", default=None, metavar="WAIT:TIMEOUT",
                   help="with --attention-dp: TensorRT-LLM's attention-DP prompt balancing: waiting prompts go when "
                        "every rank has one, after WAIT more steps, or after TIMEOUT steps at most "
                        "(attention_dp_config batching_wait_iters:timeout_iters; the published DeepSeek-R1 MLPerf "
                        "v6.0 Server configs set 3:9); default off, as our engine")
    g.add_argument("--overlap-scheduler", action="store_true",
                   help="TensorRT-LLM's overlap scheduler: a step's batch is formed while the step before it runs, "
                        "so a busy replica admits a new request one step later (on in the published runs: NVIDIA's "
                        "MLPerf harness leaves TensorRT-LLM's default); default off, as our engine")
    g.add_argument("--host-stream-rate", type=float, default=None, metavar="RESPONSES_PER_S",
                   help="streamed responses per second each replica's host handles (detokenize, build and send "
                        "them); first and last tokens are seen when the host has handled their step's responses, "
                        "so a host slower than the replica's token rate bounds Server (sim/host_path.py); "
                        "default: not modelled, a token is seen when its step ends")
    g.add_argument("--stream-interval", type=int, default=1, metavar="N",
                   help="with --host-stream-rate: a sequence responds every N decoding steps, besides its first "
                        "and last token (as `tokenmill serve --stream-interval`, TensorRT-LLM's and vLLM's "
                        "stream_interval; most MLPerf v6.0 DeepSeek-R1 Server configs set 20-200, v5.1's left 1) "
                        "(default: %(default)s)")
    g.add_argument("--host-seq-us", type=float, default=None, metavar="US",
                   help="host microseconds per sequence of a step, overlapping the GPU's work: a step lasts at "
                        "least US x its sequences (the published Llama Server runs on x86 hosts: ~63, "
                        "docs/SIMULATOR.md 'The host's time per sequence'); default: not modelled")
    g.add_argument("--router", default="kv", choices=ROUTER_NAMES,
                   help="how Server and Interactive arrivals pick a replica, as `tokenmill serve --router`: kv "
                        "(least KV blocks held or prompt blocks pending), least-loaded (fewest requests in flight: "
                        "also NVIDIA's MLPerf harness default for Server), round-robin or random (default: "
                        "%(default)s; disaggregated pools route by kv)")


def _add_workload_args(w) -> None:
    w.add_argument("--scenario", choices=SCENARIOS, default="offline")
    w.add_argument("--isl", type=int, default=None, help="prompt tokens per request (default 1024)")
    w.add_argument("--osl", type=int, default=None,
                   help="output tokens per request (default 1024; with --dataset: the mean a published run generated)")
    w.add_argument("--dataset", default=None, choices=DATASET_NAMES,
                   help="draw each prompt's length from this MLPerf dataset's distribution (sim/mlperf_lengths.py) "
                        "and outputs of --osl tokens on average, shaped like its reference answers (replaces --isl)")
    w.add_argument("--num-requests", type=int, default=None,
                   help="offline: requests per replica (per micro-batch with --pp), all issued at once (default "
                        "2000); server/interactive: a fixed count "
                        "instead of --duration (the QPS then capped at their Offline rate); validate: per replica "
                        "and batch size, for rows without a published count (default 2000)")
    w.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="size the run by time, as MLPerf's LoadGen does: server/interactive issue Poisson arrivals "
                        "for this long (at least 100 queries; default 600, MLPerf's min_duration) and count "
                        "tokens/s as LoadGen's 'Completed tokens per second'; offline issues 1.1 x its rate x "
                        "SECONDS requests (default: --num-requests)")
    w.add_argument("--min-query-count", type=int, default=None, metavar="N",
                   help="with a timed run (--duration; server/interactive by default): issue at least N samples "
                        "(offline) or queries (server/interactive), LoadGen's min_query_count, the whole "
                        "deployment's; published MLPerf runs set 100,000+ (sim validate runs each log's own count)")
    w.add_argument("--cached-tokens", type=int, default=0, help="prompt tokens each request finds in the prefix cache")
    w.add_argument("--shared-prefix", default=None, metavar="N:TOKENS",
                   help="the prompts start with N shared prefixes (system prompts) of TOKENS tokens, in turn, as "
                        "`tokenmill bench --workload shared-prefix`: a prompt hits its prefix once a replica has "
                        "computed it, so hits follow the schedule, and the kv router sends a prefix back where it "
                        "is cached (least recently used prefixes evicted first)")
    w.add_argument("--num-samples", type=int, default=None, metavar="N",
                   help="server/interactive: each query draws one of N samples, as LoadGen draws from its sample "
                        "set (`tokenmill bench --num-samples`; the synthetic workload's default 256), and a sample "
                        "drawn before hits what the replica that serves it still caches of its prompt (least "
                        "recently used blocks evicted first; default: every query a new prompt)")
    w.add_argument("--preset", default=None, help="latency limits of a bench preset (default: the model's, else "
                                                  "llama3.1-8b's)")
    w.add_argument("--ttft-ms", type=float, default=None, help="p99 TTFT limit (overrides the preset)")
    w.add_argument("--tpot-ms", type=float, default=None, help="p99 TPOT limit (overrides the preset)")
    w.add_argument("--target-qps", type=float, default=None,
                   help="server/interactive: simulate this offered QPS (the whole deployment's) instead of "
                        "searching the peak that meets the p99 limits")
    w.add_argument("--max-num-seqs", type=int, default=256)
    w.add_argument("--max-num-batched-tokens", type=int, default=8192,
                   help="rows one engine computes per step (prefill chunks + decodes); under --attention-dp, each "
                        "dp rank's (as vLLM's and TensorRT-LLM's max_num_tokens)")
    w.add_argument("--price-per-gpu-hour", type=float, default=None, help="USD (default: the hardware profile's)")
    w.add_argument("--json", action="store_true", help="print one JSON object")
    w.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error", "trace"))


def _add_replay_args(w) -> None:
    w.add_argument("--replay", default=None, metavar="RESULTS",
                   help="simulate the queries of a measured `tokenmill bench` run (its results.json or run folder): "
                        "each arrives when LoadGen issued it, with its prompt and output tokens; prints measured vs "
                        "simulated: tokens/s, TTFT, TPOT, and the prefix-cache hit rate and the engine's steps and "
                        "busy seconds where the run read the server's counters (replaces --scenario, --isl, --osl, "
                        "--num-requests, --target-qps)")
    w.add_argument("--step-log", default=None, nargs="+", metavar="FILE",
                   help="with --replay of a run against `tokenmill serve --step-log FILE`: the server's steps "
                        "(a cluster's: every worker's file, FILE.worker-0 ...), those within the run priced at "
                        "their shapes and the run replayed again at their prices (a bench run of the in-process "
                        "engine keeps its own, engine_steps.jsonl; these take their place)")
    w.add_argument("--no-enable-prefix-caching", action="store_true",
                   help="with --replay: the server ran without prefix caching (default: a query whose sample was "
                        "issued before in the run hits what the simulated cache still holds of its prompt)")


def _add_draw_args(w) -> None:
    w.add_argument("--seed", type=int, default=0,
                   help="the draw's seed: Server/Interactive arrival times, lengths drawn from --dataset, the "
                        "samples queries draw with --num-samples (default %(default)s)")
    w.add_argument("--draws", type=int, default=1, metavar="N",
                   help="simulate N draws of the workload (seeds --seed, --seed+1, ...; --jobs runs them at once) "
                        "and print each figure's median, 5th-95th percentile and range over them beside the first "
                        "draw's figures: a p99 over a few hundred queries moves with the arrival draw (default 1)")


def _add_calibrate_args(c) -> None:
    c.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (cuda when available)")
    c.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                   help="the engine's dtype (auto: the engine's default on --device)")
    c.add_argument("--num-threads", type=int, default=None, help="CPU threads (default: torch's)")
    c.add_argument("--profile", default="this-machine", metavar="NAME",
                   help="the profile's name: written to ~/.cache/tokenmill/sim/NAME.json, read by --hardware NAME "
                        "(default this-machine); e.g. the engine with the kernel flags below, as the baseline of "
                        "--uplift --baseline-kernels NAME")
    c.add_argument("--check", action="store_true",
                   help="time the calibration's steps again and print the saved profile's (--profile) price of "
                        "each against its time now, and their median ratio; writes nothing. Give the flags the "
                        "profile was calibrated with (this machine's speed drifts: check a profile before a "
                        "comparison that relies on it)")
    c.add_argument("--prefill-tokens", type=int_list, default=PREFILL_TOKENS, metavar="N,N,...",
                   help="lengths of the prompts whose prefill steps are timed alone (default "
                        f"{','.join(map(str, PREFILL_TOKENS))}; each at most the engine's step budget, 1024, "
                        "so that each is one step)")
    c.add_argument("--attention-backend", choices=ATTENTION_BACKENDS, default="auto",
                   help="the engine's attention, as `tokenmill serve`'s flag (default auto: the engine's choice)")
    c.add_argument("--fused-ops", choices=FUSED_OPS, default="auto", help="the engine's fused ops, as serve's flag")
    c.add_argument("--linear-backend", choices=LINEAR_BACKENDS, default="auto",
                   help="the engine's linear layers, as serve's flag")
    c.add_argument("--enforce-eager", action="store_true",
                   help="the engine's steps op by op from Python (no CUDA graphs; on CPU no native decoder step)")
