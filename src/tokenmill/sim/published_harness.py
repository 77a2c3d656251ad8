"""What NVIDIA's MLPerf harness ran under each published run: which TensorRT-LLM runtime, and the
step budget where a row's config sets one the simulation takes (sim/published.py rows).

The harness (``closed/<org>/code/llmlib/``, v5.1 and v6.0) drives one of several "cores" per
benchmark (``code/<benchmark>/tensorrt/__init__.py`` ``DEFAULT_CORE_TYPE``):
- DeepSeek-R1 and gpt-oss-120b: ``TRTLLM_ENDPOINT``, ``trtllm-serve`` on TensorRT-LLM's PyTorch
  backend, whose overlap scheduler is on unless a config switches it off (config.py
  ``DEFAULT_EXTRA_CONFIG``: ``disable_overlap_scheduler: False``);
- the Llama models: ``TRTLLM_EXECUTOR``, the C++ executor running a TensorRT engine the harness
  builds from the config's ``trtllm_build_flags`` (cores/trtllm_executor_core.py ``ExecutorConfig``:
  batch, token budget, scheduler and chunking policies, KV cache; no overlap scheduler, which is the
  PyTorch backend's: config.py says its extra options "apply only in pytorch backend"; and no CUDA
  graphs: NVIDIA's and Nebius's v5.1 Llama-3.1-405B configs set ``use_graphs: False``).
The v6.0 Llama configs moved to the PyTorch backend (Lambda_SIT's Llama-3.1-8B: ``torch_compile_config``
with piecewise CUDA graphs, ``sampler_type``, ``stream_interval``; NVIDIA's Llama-3.1-405B: ``trtllm-serve``
workers behind Dynamo). v4.1 (2024) predates the PyTorch backend: its Llama runs are executor runs too.
"""

from __future__ import annotations

EXECUTOR_ROUNDS = ("v4.1", "v5.1")
"""The rounds whose Llama runs ran the C++ executor (module docstring)."""


def runs_overlap_scheduler(round_name: str, model: str) -> bool:
    """Whether the published run's runtime had TensorRT-LLM's overlap scheduler on: every MLPerf
    run but the executor-core ones (a Llama model in v4.1 or v5.1)."""
    return not (model.startswith("llama") and round_name in EXECUTOR_ROUNDS)


MLPERF_MAX_NUM_TOKENS: dict[tuple[str, str, str, str, str], int] = {
    ("v5.1", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "llama3.1-405b", "Offline"): 1536,
    ("v5.1", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "llama3.1-405b", "Server"): 1536,
    ("v5.1", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "llama3.1-405b", "Offline"): 1536,
    ("v5.1", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "llama3.1-405b", "Server"): 2048,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-405b", "Offline"): 1536,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-405b", "Server"): 2048,
    ("v5.1", "Nebius", "H200-SXM-141GBx8_TRT", "llama3.1-405b", "Offline"): 1536,
    ("v5.1", "Nebius", "H200-SXM-141GBx8_TRT", "llama3.1-405b", "Server"): 2560,
    ("v6.0", "Google", "B200-SXM-180GBx8_TRT", "llama3.1-405b", "Offline"): 1536,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama3.1-8b", "Offline"): 1536,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama3.1-8b", "Server"): 1536,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama2-70b-99", "Offline"): 1536,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama2-70b-99", "Server"): 1536,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama2-70b-99", "Interactive"): 256,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "deepseek-r1", "Offline"): 4608,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "deepseek-r1", "Server"): 4608,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "llama2-70b-99", "Offline"): 4608,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "llama2-70b-99", "Server"): 4608,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "llama3.1-405b", "Offline"): 1536,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "llama3.1-405b", "Server"): 1024,
    ("v6.0", "Nebius", "nebius_b300_n1", "deepseek-r1", "Server"): 4608,
    ("v6.0", "GigaComputing", "G894-SD3-AAX7_B300-SXM-270GBx8_TRT", "llama2-70b-99", "Interactive"): 768,
    ("v6.0", "GigaComputing", "G894-SD3-AAX7_B300-SXM-270GBx8_TRT", "llama3.1-8b", "Interactive"): 12000,
}
"""The per-rank step budget (the runtime flags' ``max_num_tokens``, at most the build flags': 256-12,000)
of the MLPerf v5.1 Llama-3.1-405B runs of NVIDIA and Nebius: ``closed/<org>/configs/<system without
_TRT>/<Scenario>/llama3_1-405b.py`` in mlcommons/inference_results_v5.1 @965182b (Nebius's H200 rows
run their configs' layouts: TP4 PP2 Offline, TP8 Server, which the Server row's search finds; NVIDIA's
B200 and GB200 rack Offline rows, TP2 PP2, 1,536 like the GB300's), Google's v6.0 B200 Offline run, whose config
(closed/Google/configs/B200-SXM-180GBx8/Offline/llama3_1-405b.py in inference_results_v6.0 @232fbf9) is
NVIDIA's v5.1 one (TP2 PP2, batch 128, 1,536 tokens); and Dell's v6.0 H200 NVL runs, ``closed/Dell/configs/
XE7740_H200_NVL_141GBx8/<Scenario>/{llama3_1-8b,llama2-70b}.py`` (1,536 tokens, the Interactive run
256 beside a batch of 256); and NVIDIA's v6.0 B300 node, ``closed/NVIDIA/configs/B300-SXM-270GBx{8,1,2}/
<Scenario>/{deepseek-r1,llama2-70b,llama3_1-405b}.py`` (DeepSeek-R1 and Llama-2-70B 4,608, the build
flags' where the runtime's names more; Llama-3.1-405B 1,536 Offline and 1,024 Server, "reducing this to
1024 to meet tpot"; its Llama-3.1-8B config is not published), Nebius's B300 DeepSeek-R1 Server
run, whose config is NVIDIA's, and GigaComputing's B300 Interactive runs (Llama-2-70B 768 tokens, Llama-3.1-8B
12,000). The other MLPerf rows keep the simulator's 8,192
(``Deployment.max_num_batched_tokens``); their configs' budgets were not read in."""
