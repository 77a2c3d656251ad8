"""The KV-cache memory fraction each published MLPerf run set: TensorRT-LLM's
``kv_cache_free_gpu_mem_fraction``, the share of the memory free after the weights (and the
runtime's buffers) that its cache takes (sim/predict.py ``Deployment.kv_free_fraction``).

Read in each submission's config, ``closed/<org>/configs/<system>/<Scenario>/<benchmark>.py``
(``kvcache_free_gpu_mem_frac``; the system directory with or without its results' ``_TRT`` suffix), except:
- NVIDIA's v6.0 rack configs of Llama-3.1-405B Offline and Llama-2-70B Offline leave it unset:
  NVIDIA's harness then takes 0.80 (closed/NVIDIA/code/llmlib/config.py ``DEFAULT_RUNTIME_FLAGS``,
  v5.1 and v6.0);
- disaggregated runs set it in their workers' yml (``free_gpu_memory_fraction``): Llama-3.1-405B
  Server 0.95 in both pools, DeepSeek-R1 Interactive 0.9 in the decode pool (0.85 in the prefill
  pool; the decode pool's is taken, where the cache fills);
- v4.1: ``closed/NVIDIA/configs/llama2-70b/<Scenario>/__init__.py``, 0.90 in the scenario's base
  class, not overridden for these systems;
- NVIDIA's v6.0 B300 Llama-3.1-8B runs have no published config: 0.90, its v5.1 B200 Llama-3.1-8B
  configs' value;
- Cisco's v5.1 two-node H100 runs name no 16-GPU class: 0.95, the value of its H100 TP2 class
  (Llama-2-70B) and of its Hopper base class (Llama-3.1-405B), ``closed/Cisco/configs/<benchmark>/
  Offline/__init__.py``.
gpt-oss-120b's rows are skipped by validation and not listed (``TRTLLM_BENCH_DEFAULT`` stands).
"""

TRTLLM_BENCH_DEFAULT = 0.90
"""``trtllm-bench``'s default, which TensorRT-LLM's performance tables ran unless they raised it to
0.95 ("in many cases", its perf-overview page says, not which)."""

MLPERF_KV_FREE_FRACTION: dict[tuple[str, str, str, str, str], float] = {
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Offline"): 0.95,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Server"): 0.95,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Interactive"): 0.90,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x288_TRT", "deepseek-r1", "Offline"): 0.95,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x288_TRT", "deepseek-r1", "Server"): 0.95,
    ("v6.0", "CoreWeave", "GB300-NVL72_GB300-288GB_aarch64x8_TRT", "deepseek-r1", "Offline"): 0.95,
    ("v6.0", "Nebius", "GB300-NVL72_GB300-288GB_aarch64x8_TRT", "deepseek-r1", "Server"): 0.95,
    ("v6.0", "Nebius", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Offline"): 0.95,
    ("v6.0", "Nebius", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Server"): 0.95,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "llama3.1-405b", "Offline"): 0.80,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "llama3.1-405b", "Server"): 0.95,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "llama2-70b-99", "Offline"): 0.80,
    ("v6.0", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "deepseek-r1", "Offline"): 0.90,
    ("v6.0", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "deepseek-r1", "Server"): 0.90,
    ("v6.0", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "llama3.1-405b", "Offline"): 0.80,
    ("v6.0", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "llama2-70b-99", "Offline"): 0.80,
    ("v6.0", "Nebius", "nebius_b200_n1", "deepseek-r1", "Offline"): 0.90,
    ("v6.0", "Nebius", "nebius_b200_n1", "deepseek-r1", "Server"): 0.95,
    ("v6.0", "Google", "B200-SXM-180GBx8_TRT", "llama3.1-405b", "Offline"): 0.95,
    ("v6.0", "Lambda_SIT", "B200-SXM-180GBx8_TRT", "llama3.1-8b", "Offline"): 0.90,
    ("v6.0", "Lambda_SIT", "B200-SXM-180GBx8_TRT", "llama3.1-8b", "Server"): 0.90,
    ("v6.0", "Supermicro", "SYS-822GS-NBRT_B200-SXM-180GB_TRT", "llama2-70b-99", "Offline"): 0.95,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama3.1-8b", "Offline"): 0.95,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama3.1-8b", "Server"): 0.95,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama2-70b-99", "Offline"): 0.90,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama2-70b-99", "Server"): 0.90,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama2-70b-99", "Interactive"): 0.90,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "deepseek-r1", "Offline"): 0.95,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "deepseek-r1", "Server"): 0.95,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "llama2-70b-99", "Offline"): 0.95,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "llama2-70b-99", "Server"): 0.95,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "llama3.1-405b", "Offline"): 0.95,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "llama3.1-405b", "Server"): 0.95,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "llama3.1-8b", "Offline"): 0.90,
    ("v6.0", "NVIDIA", "B300-SXM-270GBx8_TRT", "llama3.1-8b", "Server"): 0.90,
    ("v6.0", "Nebius", "nebius_b300_n1", "deepseek-r1", "Server"): 0.95,
    ("v6.0", "GigaComputing", "G894-SD3-AAX7_B300-SXM-270GBx8_TRT", "llama2-70b-99", "Interactive"): 0.95,
    ("v6.0", "GigaComputing", "G894-SD3-AAX7_B300-SXM-270GBx8_TRT", "llama3.1-8b", "Interactive"): 0.90,
    ("v5.1", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Offline"): 0.95,
    ("v5.1", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Server"): 0.90,
    ("v5.1", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "llama3.1-405b", "Offline"): 0.95,
    ("v5.1", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "llama3.1-405b", "Server"): 0.95,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "deepseek-r1", "Offline"): 0.90,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "deepseek-r1", "Server"): 0.90,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama2-70b-99", "Offline"): 0.95,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama2-70b-99", "Server"): 0.95,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama2-70b-99", "Interactive"): 0.95,
    ("v5.1", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "llama3.1-405b", "Offline"): 0.95,
    ("v5.1", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "llama3.1-405b", "Server"): 0.95,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-405b", "Offline"): 0.95,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-405b", "Server"): 0.95,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-8b", "Offline"): 0.90,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-8b", "Server"): 0.90,
    ("v5.1", "Nebius", "H200-SXM-141GBx8_TRT", "llama2-70b-99", "Offline"): 0.90,
    ("v5.1", "Nebius", "H200-SXM-141GBx8_TRT", "llama2-70b-99", "Server"): 0.90,
    ("v5.1", "Nebius", "H200-SXM-141GBx8_TRT", "llama3.1-405b", "Offline"): 0.95,
    ("v5.1", "Nebius", "H200-SXM-141GBx8_TRT", "llama3.1-405b", "Server"): 0.90,
    ("v5.1", "HPE", "HPE_Cray_XD670_H200_SXM_141GBx8_TRT", "llama3.1-8b", "Offline"): 0.99,
    ("v5.1", "HPE", "HPE_Cray_XD670_H200_SXM_141GBx8_TRT", "llama3.1-8b", "Server"): 0.99,
    ("v5.1", "Cisco", "HGX-H100_H100-SXM-80GBx16_TRT", "llama2-70b-99", "Offline"): 0.95,
    ("v5.1", "Cisco", "HGX-H100_H100-SXM-80GBx16_TRT", "llama3_1-405b", "Offline"): 0.95,
    ("v4.1", "NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "llama2-70b-99", "Offline"): 0.90,
    ("v4.1", "NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "llama2-70b-99", "Server"): 0.90,
    ("v4.1", "NVIDIA", "H200-SXM-141GBx8_TRT", "llama2-70b-99", "Offline"): 0.90,
    ("v4.1", "NVIDIA", "H200-SXM-141GBx8_TRT", "llama2-70b-99", "Server"): 0.90,
}
"""(round, submitter, system, benchmark, scenario) as in the results path -> the fraction."""
