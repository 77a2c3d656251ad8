"""Published figures to validate `tokenmill sim` against: MLPerf Inference dataset lengths and
latency limits, and measured throughput of LLM deployments on H100/H200/H200 NVL/B200/B300/GB200/GB300.

Every number was read in the source named by its row (repository + path + commit, or URL);
none is recalled or estimated. Throughput is generated (output) tokens/s per GPU: MLPerf's
"Tokens per second" (Offline) and "Completed tokens per second" (Server, Interactive) count
output tokens, and the TensorRT-LLM tables report output throughput. Where a source gives the
system total, the row stores total / num_gpus and its note records the total.

How rows were chosen:
- MLPerf: valid closed-division results of the models the simulator knows (plus Llama-2-70B),
  taking NVIDIA's own systems where it submitted and otherwise one partner system per
  hardware kind, 8-GPU nodes preferred. Only the -99 accuracy target of Llama-2-70B is kept
  (NVIDIA's -99.9 runs use the same engine and report the same numbers).
- TensorRT-LLM perf-overview: ISL/OSL 1K/1K plus the long-input and long-output pairs (8K and,
  since 2026-11-30, 32K), for every GPU the table covers (its RTX 6000 tables and its Qwen3, Llama-4
  and gpt-oss-20b models are left out). The current page reports per GPU; an older page (the only
  one with Llama-3.1-8B and -405B) reports totals.
- TensorRT-LLM's DeepSeek-R1 guide: its max-throughput runs on 8 GPUs. Its batch-1 MTP runs
  are left out (speculative decoding on a real dataset).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tokenmill.sim.host_rates import held_out_rate, host_seq_seconds
from tokenmill.sim.published_harness import MLPERF_MAX_NUM_TOKENS, runs_overlap_scheduler
from tokenmill.sim.published_kv import MLPERF_KV_FREE_FRACTION, TRTLLM_BENCH_DEFAULT
from tokenmill.sim.published_queries import MLPERF_QUERIES


@dataclass(frozen=True)
class PublishedResult:
    model: str
    hardware: str
    num_gpus: int
    precision: str
    scenario: str
    isl: int | None
    osl: int | None
    dataset: str | None
    tokens_per_s_per_gpu: float
    parallel: str | None
    source: str
    note: str = ""
    num_requests: int | None = None
    """Requests (Offline: samples; Server: queries) in the measured run, where the source states
    it: TensorRT-LLM's tables, every MLPerf log. A finite run's throughput includes its ramp-up and
    drain, and a Server run's latency tails grow with its length: the simulation runs as many."""
    max_num_seqs: int | None = None
    """The concurrency the source ran (trtllm-bench ``--concurrency``), where it states one: the
    check simulates that batch (as much of it as the KV cache holds) instead of searching."""
    max_num_batched_tokens: int | None = None
    """The source's per-rank step budget (``--max_num_tokens``; an MLPerf config's, sim/published_harness.py
    ``MLPERF_MAX_NUM_TOKENS``), where it states one the simulation takes."""
    fused_allreduce: bool = False
    """The run fused its tensor-parallel all-reduces into the GEMMs: its config sets
    TRTLLM_GEMM_ALLREDUCE_FUSION_ENABLED or TensorRT-LLM's gemm_allreduce_plugin (read in the
    config for the MLPerf Llama-3.1-405B rows; the others are tensor-parallel-free or do not set it)."""
    adp_balance: tuple[int, int] | None = None
    """The config's attention-DP prompt balancing (``adp_balancing_batching_wait_iters``,
    ``adp_balancing_timeout_iters``; sim/adp_balance.py), set on the DeepSeek-R1 Server rows: it
    shapes their TTFT. Their Offline configs set it too (10/500, 10/50 or 2/6), not simulated: with
    every prompt waiting from the start it only paces refills."""
    chunked_prefill: bool = True
    """False where the config sets ``enable_chunked_context: False`` (every DeepSeek-R1 config; set on
    the Server rows, as ``adp_balance``) or leaves TensorRT-LLM's default (off) in place."""
    overlap_scheduler: bool = False
    """TensorRT-LLM's overlap scheduler was on (sim/serving.py): NVIDIA's MLPerf harness leaves its
    default, on (closed/NVIDIA/code/llmlib/config.py ``disable_overlap_scheduler: False``, v5.1 and
    v6.0), in every run on TensorRT-LLM's PyTorch backend; the v4.1 and v5.1 Llama runs ran the C++
    executor, which has none (sim/published_harness.py); trtllm-bench's Offline tables run without
    arrivals to delay."""
    router: str = "kv"
    """How the run sent Server and Interactive queries to its instances (sim/routed.py policies):
    ``NVIDIA_HARNESS_ROUTER`` for MLPerf rows, ``kv`` where a config names a prompt-length rule."""
    mtp: tuple[int, float] | None = None
    """(draft tokens, mean tokens per decode step) of a run with MTP speculative decoding: its
    config's ``num_nextn_predict_layers`` and a published acceptance (``MTP3_TOKENS_PER_STEP``)."""
    kv_free_fraction: float = TRTLLM_BENCH_DEFAULT
    """TensorRT-LLM's ``kv_cache_free_gpu_mem_fraction`` as the run set it (sim/published_kv.py)."""
    kv_cache_dtype: str = "auto"
    """The run's KV cache (``Deployment.kv_cache_dtype``) where its recipe sets one apart from its weights'."""
    kernels: str = "v6.0"
    """The kernel generation its steps are priced at (sim/kernels.py): "v5.1" for DeepSeek-R1's MLPerf
    v5.1 rows, the generation the scale was read for; the dense v5.1 rows keep the current one."""
    stream_interval: int = 1
    """The config's ``stream_interval`` (the DeepSeek-R1 Server rows': v6.0 GB300 100, B200 20, GB200
    and every v5.1 config unset, so NVIDIA's harness default 1)."""
    host_stream_rate: float | None = None
    """Responses/s of each instance's host (sim/host_path.py), for the DeepSeek-R1 Server rows where
    other runs of the same round on the same host CPU give it (sim/host_rates.py); None: not modelled."""
    host_seq_s: float | None = None
    """Host seconds per sequence of a step (predict.py ``Deployment.host_seq_s``), for the Llama Server and
    Interactive rows: sim/host_rates.py ``host_seq_seconds``; None: not modelled."""


MTP3_TOKENS_PER_STEP = 2.82
"""DeepSeek-R1's mean tokens per decode step with 3 autoregressive MTP drafts under strict
acceptance: NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog1_Pushing_Latency_Boundaries_
Optimizing_DeepSeek-R1_Performance_on_NVIDIA_B200_GPUs.md @01c4ece9, table "Autoregressive MTP
Layers" (1K/2K requests at batch 1 on 8 B200: MTP 1 1.92, 2 2.58, 3 2.82, 4 2.99). Relaxed
acceptance reaches 3.06-3.10 there; the MLPerf configs do not switch it on. Not measured on the
MLPerf dataset."""

NVIDIA_HARNESS_ROUTER = "least-loaded"
"""NVIDIA's MLPerf harness, which the TensorRT-LLM submissions run, sends each Server query to the
instance with the fewest in flight unless a config says otherwise: llmlib ``load_balancing``
(closed/NVIDIA/code/llmlib/config.py sets it for Server, factory.py picks the core with the fewest
pending samples) and harness_llm ``loadBalancing`` (llm_server.cc, the least busy queue), read in
the v5.1 and v6.0 code; v4.1's code was not read and is taken to do the same. Our router's
``least-loaded`` policy is that rule (then KV blocks in use, on a tie)."""

_V60 = ("MLPerf Inference v6.0 closed, mlcommons/inference_results_v6.0 (read from its copy "
        "github.com/gbeezybez/inference_results_v6.0 @232fbf9)")
_V51 = "MLPerf Inference v5.1 closed, github.com/mlcommons/inference_results_v5.1 @965182b"
_V41 = "MLPerf Inference v4.1 closed, github.com/mlcommons/inference_results_v4.1 @198fc46"
_ISSUE17 = "issue 17 (MLPerf Inference v6.0 / v5.1 results, GB300 NVL72), per GPU"
_ADP8 = "TP8 EP8 attention-DP per 8-GPU instance"
_GB300 = "GB300-NVL72_GB300-288GB_aarch64x72_TRT"
_GB300_X288 = "GB300-NVL72_GB300-288GB_aarch64x288_TRT"
_GB200 = "GB200-NVL72_GB200-186GB_aarch64x72_TRT"
_DELL_NVL = "XE7740_H200_NVL_141GBx8_TRT"
_B300 = "B300-SXM-270GBx8_TRT"
_GIGA_B300 = "G894-SD3-AAX7_B300-SXM-270GBx8_TRT"


def _mlperf(rnd: str, org: str, system: str, bench: str, scenario: str, model: str, hw: str, n: int,
            prec: str, total: float, parallel: str | None = None, note: str = "",
            fused: bool = False, adp: tuple[int, int] | None = None, whole_prompts: bool = False,
            mtp: tuple[int, float] | None = None, router: str = NVIDIA_HARNESS_ROUTER,
            stream: int = 1) -> PublishedResult:
    path = f"closed/{org}/results/{system}/{bench}/{scenario}/performance/run_1/mlperf_log_summary.txt"
    dataset = "llama2-70b" if bench.startswith("llama2-70b") else model
    round_name = re.search(r"v\d\.\d", rnd).group()
    queries = MLPERF_QUERIES[(round_name, org, system, bench, scenario)]
    kv = MLPERF_KV_FREE_FRACTION.get((round_name, org, system, bench, scenario), TRTLLM_BENCH_DEFAULT)
    tokens = MLPERF_MAX_NUM_TOKENS.get((round_name, org, system, bench, scenario))
    text = f"{total:,} tok/s total / {n} GPUs; {queries:,} {'samples' if scenario == 'Offline' else 'queries'}"
    text += f"; {note}" if note else ""
    return PublishedResult(model, hw, n, prec, scenario.lower(), None, None, dataset, total / n, parallel,
                           f"{rnd}: {path}", text, queries, fused_allreduce=fused, adp_balance=adp,
                           chunked_prefill=not whole_prompts, mtp=mtp, router=router,
                           overlap_scheduler=runs_overlap_scheduler(round_name, model), max_num_batched_tokens=tokens,
                           kv_free_fraction=kv, kernels="v5.1" if (round_name, model) == ("v5.1", "deepseek-r1")
                           else "v6.0", stream_interval=stream,
                           host_stream_rate=held_out_rate(round_name, org, system, hw)
                           if (model, scenario) == ("deepseek-r1", "Server") else None,
                           host_seq_s=host_seq_seconds(round_name, org, system, hw)
                           if model.startswith("llama") and scenario != "Offline" else None)


_TRT_NEW = ("NVIDIA/TensorRT-LLM docs/source/developer-guide/perf-overview.md @03e27c7d "
            "(nvidia.github.io/TensorRT-LLM/developer-guide/perf-overview.html): trtllm-bench throughput, "
            "output tok/s per GPU")
_TRT_OLD = ("NVIDIA/TensorRT-LLM docs/source/performance/perf-overview.md @00f37686 (v1.0-era page): "
            "trtllm-bench throughput, 'Total Output Throughput (tokens/sec)'")
_TRT_DSR1 = ("NVIDIA/TensorRT-LLM docs/source/blogs/Best_perf_practice_on_DeepSeek-R1_in_TensorRT-LLM.md "
             "@01c4ece9, 'Per GPU Output Throughput'")


_TRT_REQUESTS_NEW = {(1024, 1024): 3000, (8192, 1024): 1500, (1024, 8192): 1500, (32768, 1024): 1000,
                     (1024, 32768): 1000}
"""``$num_requests`` per ISL/OSL pair, the new page's "Preparing a Dataset" table (the same file)."""
_TRT_REQUESTS_OLD = {(128, 2048): 3000, (2048, 128): 3000, (1000, 1000): 3000, (20000, 2000): 1000}
"""The same table of the older page (its 1000/1000 entry also serves the new page's 1000/1000
column, which its own table does not list)."""


def _trt(model: str, hw: str, n: int, prec: str, isl: int, osl: int, per_gpu: float, parallel: str,
         note: str = "") -> PublishedResult:
    requests = _TRT_REQUESTS_NEW.get((isl, osl)) or _TRT_REQUESTS_OLD.get((isl, osl))
    return PublishedResult(model, hw, n, prec, "throughput", isl, osl, None, per_gpu, parallel, _TRT_NEW, note,
                           requests)


def _trt_gpt_oss(hw: str, n: int, isl: int, osl: int, per_gpu: float, parallel: str) -> PublishedResult:
    """gpt-oss-120b as the page's recipe runs it: the checkpoint's bf16 outside the MXFP4 experts (their GEMMs:
    cost.py ``expert_compute_precision``), KV cache ``dtype: fp8``, "Hopper: use auto" (bf16)."""
    hopper = hw in ("h100", "h200")
    row = _trt("gpt-oss-120b", hw, n, "bf16", isl, osl, per_gpu, parallel,
               f"the page labels it {'FP8' if hopper else 'FP4'}; MoE backend {'TRITON' if hopper else 'CUTLASS'}")
    return replace(row, kv_cache_dtype="bf16" if hopper else "fp8")


def _trt_total(model: str, hw: str, n: int, prec: str, isl: int, osl: int, total: float,
               parallel: str) -> PublishedResult:
    return PublishedResult(model, hw, n, prec, "throughput", isl, osl, None, total / n, parallel, _TRT_OLD,
                           f"{total:,} tok/s total / {n} GPUs", _TRT_REQUESTS_OLD[(isl, osl)])


RESULTS: tuple[PublishedResult, ...] = (
    # MLPerf v6.0, GB300 NVL72
    _mlperf(_V60, "NVIDIA", _GB300, "deepseek-r1", "Offline", "deepseek-r1", "gb300", 72, "fp4", 647076, _ADP8),
    _mlperf(_V60, "NVIDIA", _GB300, "deepseek-r1", "Server", "deepseek-r1", "gb300", 72, "fp4", 400436.77, _ADP8,
            adp=(3, 9), whole_prompts=True, stream=100),
    # Four racks: the x72 configs with 36 instances (closed/NVIDIA/configs/GB300-NVL72_GB300-288GB_aarch64x288);
    # the Server run's p99 TPOT 60.6 ms and TTFT 743 ms sit well under the 80 ms and 2 s limits at 11.9 QPS an instance
    _mlperf(_V60, "NVIDIA", _GB300_X288, "deepseek-r1", "Offline", "deepseek-r1", "gb300", 288, "fp4", 2494310, _ADP8,
            "log prints 2.49431e+06"),
    _mlperf(_V60, "NVIDIA", _GB300_X288, "deepseek-r1", "Server", "deepseek-r1", "gb300", 288, "fp4", 1555108.58,
            _ADP8, "target_qps 430 over 36 instances; harness metrics off", adp=(3, 9), whole_prompts=True,
            stream=100),
    _mlperf(_V60, "NVIDIA", _GB300, "deepseek-r1", "Interactive", "deepseek-r1", "gb300", 72, "fp4", 250633.67,
            "4 x DEP2 prefill (batch 128, 12288 tokens) + 4 x DEP16 decode (batch 128)",
            "disaggregated under Dynamo's KV router: closed/NVIDIA/configs/GB300-NVL72_GB300-288GB_aarch64x72/"
            "Interactive/deepseek-r1.py and its workers' disagg_prefill (x2) / disagg_decode (x16) yml: batch and "
            "token budget per attention-DP rank, MTP 3 in both pools, prompts unchunked (enable_chunked_prefill "
            "left at its default, off), target_qps 68",
            whole_prompts=True, mtp=(3, MTP3_TOKENS_PER_STEP)),
    _mlperf(_V60, "CoreWeave", "GB300-NVL72_GB300-288GB_aarch64x8_TRT", "deepseek-r1", "Offline", "deepseek-r1",
            "gb300", 8, "fp4", 78564, "TP8 EP8 attention-DP",
            f"{_ISSUE17} gives 9,821 for DeepSeek-R1 Offline: this 8-GPU result, not the 72-GPU one"),
    _mlperf(_V60, "Nebius", "GB300-NVL72_GB300-288GB_aarch64x8_TRT", "deepseek-r1", "Server", "deepseek-r1",
            "gb300", 8, "fp4", 64509.99, "TP8 EP8 attention-DP",
            f"{_ISSUE17} gives 8,064 for DeepSeek-R1 Server: this 8-GPU result, not the 72-GPU one",
            adp=(3, 9), whole_prompts=True, stream=100),
    _mlperf(_V60, "Nebius", _GB300, "deepseek-r1", "Offline", "deepseek-r1", "gb300", 72, "fp4", 673936, _ADP8,
            "batch 1536 per GPU as NVIDIA's"),
    _mlperf(_V60, "Nebius", _GB300, "deepseek-r1", "Server", "deepseek-r1", "gb300", 72, "fp4", 575579.74, _ADP8,
            "the per-instance config of NVIDIA's row (batch 640 per GPU, attention-DP balancing) with "
            "traffic_distribution_policy 'isl_load_balancing' across the 9 instances, where NVIDIA's config "
            "leaves the harness's Server default ('load_balancing'): 1.44x NVIDIA's figure; routed by our kv "
            "policy, whose pending-prompt term is that rule",
            adp=(3, 9), whole_prompts=True, router="kv", stream=100),
    _mlperf(_V60, "NVIDIA", _GB300, "llama3.1-405b", "Offline", "llama3.1-405b", "gb300", 72, "fp4", 19511.7,
            note=f"{_ISSUE17}: 271", fused=True),
    _mlperf(_V60, "NVIDIA", _GB300, "llama3.1-405b", "Server", "llama3.1-405b", "gb300", 72, "fp4", 18627.63,
            "26 x TP2 prefill (batch 64, 4096 tokens) + 5 x TP4 decode (batch 256)",
            f"{_ISSUE17}: 259; disaggregated: the log's min_query_count 33,252 and target_qps 29.5 are the "
            "'dynamo_cluster' config of closed/NVIDIA/configs/GB300-NVL72_GB300-288GB_aarch64x72/Server/"
            "llama3_1-405b.py (26 prefill workers of the x2 disagg_prefill yaml: TP2, max_batch_size 64, "
            "max_num_tokens 4096; 5 decode workers of the x4 disagg_decode yaml: TP4, max_batch_size 256; "
            "KV router); TTFT p99 4.58 s, TPOT p50 / p99 59.0 / 60.2 ms", fused=True),
    _mlperf(_V60, "NVIDIA", _GB300, "gpt-oss-120b", "Offline", "gpt-oss-120b", "gb300", 72, "fp4", 1042980,
            note="log prints 1.04298e+06"),
    _mlperf(_V60, "NVIDIA", _GB300, "gpt-oss-120b", "Server", "gpt-oss-120b", "gb300", 72, "fp4", 1072251.73),
    _mlperf(_V60, "NVIDIA", _GB300, "llama2-70b-99", "Offline", "llama2-70b", "gb300", 72, "fp4", 1126850,
            note="log prints 1.12685e+06"),
    # MLPerf v6.0, GB200 NVL72
    _mlperf(_V60, "NVIDIA", _GB200, "deepseek-r1", "Offline", "deepseek-r1", "gb200", 72, "fp4", 486141, _ADP8),
    _mlperf(_V60, "NVIDIA", _GB200, "deepseek-r1", "Server", "deepseek-r1", "gb200", 72, "fp4", 336106.48, _ADP8,
            adp=(3, 9), whole_prompts=True),  # stream_interval unset: 1
    _mlperf(_V60, "NVIDIA", _GB200, "llama3.1-405b", "Offline", "llama3.1-405b", "gb200", 72, "fp4", 15461.5,
            fused=True),
    _mlperf(_V60, "NVIDIA", _GB200, "gpt-oss-120b", "Offline", "gpt-oss-120b", "gb200", 72, "fp4", 879542),
    _mlperf(_V60, "NVIDIA", _GB200, "llama2-70b-99", "Offline", "llama2-70b", "gb200", 72, "fp4", 888054),
    # MLPerf v6.0, 8x B200 / 8x H200 nodes
    _mlperf(_V60, "Nebius", "nebius_b200_n1", "deepseek-r1", "Offline", "deepseek-r1", "b200", 8, "fp4", 58581.6,
            "TP8 EP8 attention-DP"),
    _mlperf(_V60, "Nebius", "nebius_b200_n1", "deepseek-r1", "Server", "deepseek-r1", "b200", 8, "fp4", 51692.89,
            "TP8 EP8 attention-DP", adp=(3, 9), whole_prompts=True, stream=20),
    _mlperf(_V60, "Nebius", "nebius_b200_n1", "gpt-oss-120b", "Offline", "gpt-oss-120b", "b200", 8, "fp4",
            85921.2, "TP1 x8"),
    _mlperf(_V60, "Nebius", "nebius_b200_n1", "gpt-oss-120b", "Server", "gpt-oss-120b", "b200", 8, "fp4",
            87444.22, "TP1 x8"),
    _mlperf(_V60, "Google", "B200-SXM-180GBx8_TRT", "llama3.1-405b", "Offline", "llama3.1-405b", "b200", 8, "fp4",
            1350.24, "TP2 PP2", fused=True),
    _mlperf(_V60, "Lambda_SIT", "B200-SXM-180GBx8_TRT", "llama3.1-8b", "Offline", "llama3.1-8b", "b200", 8, "fp4",
            160403),
    _mlperf(_V60, "Lambda_SIT", "B200-SXM-180GBx8_TRT", "llama3.1-8b", "Server", "llama3.1-8b", "b200", 8, "fp4",
            130007.69),
    _mlperf(_V60, "Supermicro", "SYS-822GS-NBRT_B200-SXM-180GB_TRT", "llama2-70b-99", "Offline", "llama2-70b",
            "b200", 8, "fp4", 101595),
    _mlperf(_V60, "RedHat", "8xH200-LLM-D-Openshift", "gpt-oss-120b", "Offline", "gpt-oss-120b", "h200", 8,
            "mxfp4", 28680, note="vLLM 0.14.1 under llm-d, not TensorRT-LLM"),
    _mlperf(_V60, "RedHat", "8xH200-LLM-D-Openshift", "gpt-oss-120b", "Server", "gpt-oss-120b", "h200", 8,
            "mxfp4", 24103.19, note="vLLM under llm-d, not TensorRT-LLM"),
    # NVIDIA's 8 x B300 node (1,100 W Blackwell Ultra: the b300 profile); configs closed/NVIDIA/configs/
    # B300-SXM-270GBx8 (DeepSeek-R1), x1 (Llama-2-70B: TP1), x2 (Llama-3.1-405B: TP2, all-reduce fused by
    # TRTLLM_GEMM_ALLREDUCE_FUSION_ENABLED); no Llama-3.1-8B config is published: its layout is searched
    _mlperf(_V60, "NVIDIA", _B300, "deepseek-r1", "Offline", "deepseek-r1", "b300", 8, "fp4", 70325.7,
            "TP8 EP8 attention-DP"),
    _mlperf(_V60, "NVIDIA", _B300, "deepseek-r1", "Server", "deepseek-r1", "b300", 8, "fp4", 42721.39,
            "TP8 EP8 attention-DP", adp=(3, 9), whole_prompts=True, stream=20),
    _mlperf(_V60, "NVIDIA", _B300, "llama2-70b-99", "Offline", "llama2-70b", "b300", 8, "fp4", 112954, "TP1 x8"),
    _mlperf(_V60, "NVIDIA", _B300, "llama2-70b-99", "Server", "llama2-70b", "b300", 8, "fp4", 107317.80, "TP1 x8"),
    _mlperf(_V60, "NVIDIA", _B300, "llama3.1-405b", "Offline", "llama3.1-405b", "b300", 8, "fp4", 1951.6, "TP2",
            fused=True),
    _mlperf(_V60, "NVIDIA", _B300, "llama3.1-405b", "Server", "llama3.1-405b", "b300", 8, "fp4", 1460.25, "TP2",
            fused=True),
    _mlperf(_V60, "NVIDIA", _B300, "llama3.1-8b", "Offline", "llama3.1-8b", "b300", 8, "fp4", 165432),
    _mlperf(_V60, "NVIDIA", _B300, "llama3.1-8b", "Server", "llama3.1-8b", "b300", 8, "fp4", 141565.45),
    _mlperf(_V60, "Nebius", "nebius_b300_n1", "deepseek-r1", "Server", "deepseek-r1", "b300", 8, "fp4", 60413.44,
            "TP8 EP8 attention-DP", "NVIDIA's B300 config but its rate (closed/Nebius/configs/nebius_b300_n1/Server/"
            "deepseek-r1.py); at its limits (TPOT p99 79.7 of 80 ms), where NVIDIA's B300 run (11.53 QPS, TPOT p99 "
            "61.7 ms, TTFT p99 0.81 s) left both with slack",
            adp=(3, 9), whole_prompts=True, stream=20),
    # GigaComputing's B300 node, the Interactive runs NVIDIA's node did not submit (configs closed/GigaComputing/
    # configs/G894-SD3-AAX7_B300-SXM-270GBx8/Interactive/: TP1, Llama-2-70B batch 768 and 768 tokens, Llama-3.1-8B
    # batch 6,000 and 12,000 tokens)
    _mlperf(_V60, "GigaComputing", _GIGA_B300, "llama2-70b-99", "Interactive", "llama2-70b", "b300", 8, "fp4",
            65464.82, "TP1 x8"),
    _mlperf(_V60, "GigaComputing", _GIGA_B300, "llama3.1-8b", "Interactive", "llama3.1-8b", "b300", 8, "fp4",
            128632.63, "TP1 x8"),
    # Dell's H200 NVL cards (PCIe, 600 W: the h200-nvl profile), TP1 x8 in every config
    _mlperf(_V60, "Dell", _DELL_NVL, "llama3.1-8b", "Offline", "llama3.1-8b", "h200-nvl", 8, "fp8", 53193.6, "TP1 x8"),
    _mlperf(_V60, "Dell", _DELL_NVL, "llama3.1-8b", "Server", "llama3.1-8b", "h200-nvl", 8, "fp8", 45075.81, "TP1 x8"),
    _mlperf(_V60, "Dell", _DELL_NVL, "llama2-70b-99", "Offline", "llama2-70b", "h200-nvl", 8, "fp8", 32004, "TP1 x8"),
    _mlperf(_V60, "Dell", _DELL_NVL, "llama2-70b-99", "Server", "llama2-70b", "h200-nvl", 8, "fp8", 29084.87,
            "TP1 x8"),
    _mlperf(_V60, "Dell", _DELL_NVL, "llama2-70b-99", "Interactive", "llama2-70b", "h200-nvl", 8, "fp8", 16343.77,
            "TP1 x8"),
    # MLPerf v5.1 (same GB300 rack as v6.0, older software)
    _mlperf(_V51, "NVIDIA", _GB300, "deepseek-r1", "Offline", "deepseek-r1", "gb300", 72, "fp4", 420659, _ADP8,
            f"{_ISSUE17}: 5,842"),
    _mlperf(_V51, "NVIDIA", _GB300, "deepseek-r1", "Server", "deepseek-r1", "gb300", 72, "fp4", 209327.68, _ADP8,
            f"{_ISSUE17}: 2,907", adp=(2, 6), whole_prompts=True),
    _mlperf(_V51, "NVIDIA", _GB300, "llama3.1-405b", "Offline", "llama3.1-405b", "gb300", 72, "fp4", 16104.1,
            "TP2", f"{_ISSUE17}: 224"),
    _mlperf(_V51, "NVIDIA", _GB300, "llama3.1-405b", "Server", "llama3.1-405b", "gb300", 72, "fp4", 12248.42,
            "TP2", f"{_ISSUE17}: 170", fused=True),
    # MLPerf v5.1, GB200 NVL72
    _mlperf(_V51, "NVIDIA", _GB200, "llama3.1-405b", "Offline", "llama3.1-405b", "gb200", 72, "fp4", 14774.3,
            "TP2 PP2", "18 TP2 PP2 executors (closed/NVIDIA/configs/GB200-NVL72_GB200-186GB_aarch64x72/Offline/"
            "llama3_1-405b.py: batch 2048, max_num_tokens 1536, gemm_allreduce_plugin)", fused=True),
    _mlperf(_V51, "NVIDIA", _GB200, "llama3.1-405b", "Server", "llama3.1-405b", "gb200", 72, "fp4", 11614.28,
            "TP4", "18 TP4 executors (closed/NVIDIA/configs/GB200-NVL72_GB200-186GB_aarch64x72/Server/"
            "llama3_1-405b.py: batch 256, max_num_tokens 2048, gemm_allreduce_plugin)", fused=True),
    # MLPerf v5.1, NVIDIA DGX B200 (8 GPUs)
    _mlperf(_V51, "NVIDIA", "B200-SXM-180GBx8_TRT", "deepseek-r1", "Offline", "deepseek-r1", "b200", 8, "fp4",
            33379, "TP8 EP8 attention-DP"),
    _mlperf(_V51, "NVIDIA", "B200-SXM-180GBx8_TRT", "deepseek-r1", "Server", "deepseek-r1", "b200", 8, "fp4",
            18592.24, "TP8 EP8 attention-DP", adp=(3, 9), whole_prompts=True),
    _mlperf(_V51, "NVIDIA", "B200-SXM-180GBx8_TRT", "llama2-70b-99", "Offline", "llama2-70b", "b200", 8, "fp4",
            101527, "TP1 x8"),
    _mlperf(_V51, "NVIDIA", "B200-SXM-180GBx8_TRT", "llama2-70b-99", "Server", "llama2-70b", "b200", 8, "fp4",
            99123.04, "TP1 x8"),
    _mlperf(_V51, "NVIDIA", "B200-SXM-180GBx8_TRT", "llama2-70b-99", "Interactive", "llama2-70b", "b200", 8,
            "fp4", 59545.45, "TP1 x8"),
    _mlperf(_V51, "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-405b", "Offline", "llama3.1-405b", "b200", 8, "fp4",
            1624.11, "TP2 PP2", fused=True),
    _mlperf(_V51, "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-405b", "Server", "llama3.1-405b", "b200", 8, "fp4",
            1240.42, "TP4", fused=True),
    _mlperf(_V51, "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-8b", "Offline", "llama3.1-8b", "b200", 8, "fp4",
            136752, "TP1 x8"),
    _mlperf(_V51, "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-8b", "Server", "llama3.1-8b", "b200", 8, "fp4",
            128540.95, "TP1 x8"),
    # MLPerf v5.1, Hopper
    _mlperf(_V51, "Nebius", "H200-SXM-141GBx8_TRT", "llama2-70b-99", "Offline", "llama2-70b", "h200", 8, "fp8",
            34812.1),
    _mlperf(_V51, "Nebius", "H200-SXM-141GBx8_TRT", "llama2-70b-99", "Server", "llama2-70b", "h200", 8, "fp8",
            34029.38),
    _mlperf(_V51, "Nebius", "H200-SXM-141GBx8_TRT", "llama3.1-405b", "Offline", "llama3.1-405b", "h200", 8, "fp8",
            552.749, "TP4 PP2", "closed/Nebius/configs/H200-SXM-141GBx8/Offline/llama3_1-405b.py: TP4 PP2, "
            "max_num_tokens 1536", fused=True),
    _mlperf(_V51, "Nebius", "H200-SXM-141GBx8_TRT", "llama3.1-405b", "Server", "llama3.1-405b", "h200", 8, "fp8",
            295.36, fused=True),
    _mlperf(_V51, "HPE", "HPE_Cray_XD670_H200_SXM_141GBx8_TRT", "llama3.1-8b", "Offline", "llama3.1-8b", "h200", 8,
            "fp8", 66036.8),
    _mlperf(_V51, "HPE", "HPE_Cray_XD670_H200_SXM_141GBx8_TRT", "llama3.1-8b", "Server", "llama3.1-8b", "h200", 8,
            "fp8", 64914.57),
    _mlperf(_V51, "Cisco", "HGX-H100_H100-SXM-80GBx16_TRT", "llama2-70b-99", "Offline", "llama2-70b", "h100", 16,
            "fp8", 62351.6, note="two 8-GPU nodes"),
    _mlperf(_V51, "Cisco", "HGX-H100_H100-SXM-80GBx16_TRT", "llama3_1-405b", "Offline", "llama3.1-405b", "h100",
            16, "fp8", 783.131, note="two 8-GPU nodes"),
    # MLPerf v4.1, NVIDIA DGX H100 / H200 (precision and TP from closed/NVIDIA/configs/llama2-70b/*/__init__.py)
    _mlperf(_V41, "NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "llama2-70b-99", "Offline", "llama2-70b", "h100", 8,
            "fp8", 24524.9, "TP2 x4"),
    _mlperf(_V41, "NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "llama2-70b-99", "Server", "llama2-70b", "h100", 8,
            "fp8", 21605.79, "TP2 x4"),
    _mlperf(_V41, "NVIDIA", "H200-SXM-141GBx8_TRT", "llama2-70b-99", "Offline", "llama2-70b", "h200", 8, "fp8",
            31302.7, "TP1 x8"),
    _mlperf(_V41, "NVIDIA", "H200-SXM-141GBx8_TRT", "llama2-70b-99", "Server", "llama2-70b", "h200", 8, "fp8",
            29228.22, "TP1 x8"),
    # TensorRT-LLM perf-overview, current page (per GPU). DEPn = attention-DP with EPn on n GPUs.
    _trt("deepseek-r1", "b200", 4, "fp4", 1024, 1024, 6430, "DEP4", "DeepSeek-R1-0528"),
    _trt("deepseek-r1", "b200", 4, "fp4", 1024, 8192, 3862, "DEP4", "DeepSeek-R1-0528"),
    _trt("deepseek-r1", "b200", 4, "fp4", 8192, 1024, 1168, "DEP4", "DeepSeek-R1-0528"),
    _trt("deepseek-r1", "gb200", 4, "fp4", 1024, 1024, 6924, "DEP4", "DeepSeek-R1-0528"),
    _trt("deepseek-r1", "gb200", 4, "fp4", 8192, 1024, 1192, "DEP4", "DeepSeek-R1-0528"),
    _trt("deepseek-r1", "h200", 8, "fp8", 1024, 1024, 1620, "DEP8", "DeepSeek-R1-0528"),
    _trt("deepseek-r1", "h200", 8, "fp8", 1024, 8192, 1218, "DEP8", "DeepSeek-R1-0528"),
    _trt("deepseek-r1", "gb200", 4, "fp4", 1024, 8192, 4379, "DEP4", "DeepSeek-R1-0528"),
    _trt("deepseek-r1", "b200", 4, "fp4", 1024, 32768, 1451, "DEP4", "DeepSeek-R1-0528"),
    _trt("deepseek-r1", "gb200", 4, "fp4", 1024, 32768, 1465, "DEP4", "DeepSeek-R1-0528"),
    _trt("deepseek-r1", "h200", 8, "fp8", 1024, 32768, 438, "DEP8", "DeepSeek-R1-0528"),
    _trt_gpt_oss("b200", 2, 1024, 1024, 25870, "DEP2"),
    _trt_gpt_oss("b200", 2, 8192, 1024, 6111, "DEP2"),
    _trt_gpt_oss("gb200", 1, 1024, 1024, 26609, "TP1"),
    _trt_gpt_oss("h200", 1, 1024, 1024, 6798, "TP1"),
    _trt_gpt_oss("h200", 1, 8192, 1024, 1828, "TP1"),
    _trt_gpt_oss("h100", 4, 1024, 1024, 4715, "DEP4"),
    _trt_gpt_oss("h100", 4, 8192, 1024, 1169, "DEP4"),
    _trt_gpt_oss("b200", 2, 1024, 8192, 17289, "DEP2"),
    _trt_gpt_oss("gb200", 1, 1024, 8192, 14800, "TP1"),
    _trt_gpt_oss("h200", 1, 1024, 8192, 3543, "TP1"),
    _trt_gpt_oss("b200", 2, 1024, 32768, 6279, "DEP2"),
    _trt_gpt_oss("gb200", 1, 1024, 32768, 5556, "TP1"),
    _trt_gpt_oss("h100", 4, 1024, 32768, 1177, "DEP4"),
    _trt_gpt_oss("b200", 2, 32768, 1024, 1392, "DEP2"),
    _trt_gpt_oss("gb200", 1, 32768, 1024, 1645, "TP1"),
    _trt_gpt_oss("h200", 1, 32768, 1024, 519, "TP1"),
    _trt_gpt_oss("h100", 4, 32768, 1024, 333, "DEP4"),
    _trt("llama3.3-70b", "b200", 1, "fp4", 1024, 1024, 6842, "TP1"),
    _trt("llama3.3-70b", "b200", 1, "fp4", 1024, 8192, 3242, "TP1"),
    _trt("llama3.3-70b", "b200", 1, "fp4", 8192, 1024, 1362, "TP1"),
    _trt("llama3.3-70b", "gb200", 1, "fp4", 1024, 1024, 7751, "TP1"),
    _trt("llama3.3-70b", "h200", 2, "fp8", 1024, 1024, 2582, "TP2"),
    _trt("llama3.3-70b", "h200", 2, "fp8", 8192, 1024, 537, "TP2"),
    _trt("llama3.3-70b", "h100", 2, "fp8", 1000, 1000, 2209, "TP2", "no 1024/1024 H100 entry"),
    _trt("llama3.3-70b", "h100", 2, "fp8", 8192, 1024, 398, "TP2"),
    _trt("llama3.3-70b", "gb200", 1, "fp4", 1024, 8192, 3805, "TP1"),
    _trt("llama3.3-70b", "h200", 2, "fp8", 1024, 8192, 2009, "TP2"),
    _trt("llama3.3-70b", "b200", 1, "fp4", 32768, 1024, 274, "TP1"),
    _trt("llama3.3-70b", "gb200", 1, "fp4", 32768, 1024, 302, "TP1"),
    _trt("llama3.3-70b", "h200", 2, "fp8", 32768, 1024, 120, "TP2"),
    # TensorRT-LLM perf-overview, older page (totals)
    _trt_total("llama3.1-8b", "h100", 1, "fp8", 1000, 1000, 15220, "TP1"),
    _trt_total("llama3.1-8b", "h100", 1, "fp8", 128, 2048, 22714, "TP1"),
    _trt_total("llama3.1-8b", "h100", 1, "fp8", 2048, 128, 3450, "TP1"),
    _trt_total("llama3.1-8b", "h100", 1, "fp8", 20000, 2000, 1351, "TP1"),
    _trt_total("llama3.1-8b", "h200", 1, "fp8", 1000, 1000, 17744, "TP1"),
    _trt_total("llama3.1-8b", "h200", 1, "fp8", 2048, 128, 3538, "TP1"),
    _trt_total("llama3.1-8b", "h200", 1, "fp8", 20000, 2000, 1804, "TP1"),
    _trt_total("llama3.1-405b", "h100", 8, "fp8", 1000, 1000, 2919, "TP8"),
    _trt_total("llama3.1-405b", "h100", 8, "fp8", 2048, 128, 453, "TP8"),
    _trt_total("llama3.1-405b", "h200", 8, "fp8", 1000, 1000, 3330, "TP8"),
    _trt_total("llama3.1-405b", "b200", 4, "fp4", 1000, 1000, 5209, "TP4"),
    _trt_total("llama3.1-405b", "gb200", 4, "fp4", 1000, 1000, 5389, "TP4"),
    # TensorRT-LLM DeepSeek-R1 guide, max-throughput runs on 8 GPUs: each section's trtllm-bench command
    # states its concurrency, per-rank token budget and request count.
    PublishedResult("deepseek-r1", "b200", 8, "fp4", "throughput", 1024, 2048, None, 4548.0105,
                    "TP8 EP8 attention-DP", _TRT_DSR1, "FP16 KV cache (simulated in FP8), concurrency 3072, "
                    "--max_num_tokens 1536, commit b6261862", 49152, max_num_seqs=3072, max_num_batched_tokens=1536),
    PublishedResult("deepseek-r1", "b200", 8, "fp4", "throughput", 1024, 2048, None, 5393.2755,
                    "TP8 EP8 attention-DP", _TRT_DSR1,
                    "R1-0528 with FP8 KV cache, concurrency 7168, --max_num_tokens 2048; the section does not "
                    "restate ISL/OSL, but its totals give 2,048 output and about 1,042 input tokens per request",
                    114688, max_num_seqs=7168, max_num_batched_tokens=2048),
    PublishedResult("deepseek-r1", "h200", 8, "fp8", "throughput", 1024, 2048, None, 1436.1584,
                    "TP8 EP8 attention-DP", _TRT_DSR1, "concurrency 1024, --max_num_tokens 1151, synthetic dataset",
                    5120, max_num_seqs=1024, max_num_batched_tokens=1151),
)
