"""How many samples or queries each published MLPerf run issued (sim/published.py's MLPerf rows).

Keyed like ``published_kv.MLPERF_KV_FREE_FRACTION``: (round, submitter, system, benchmark, scenario)
as in the results path ``closed/<submitter>/results/<system>/<benchmark>/<scenario>/``.
"""

MLPERF_QUERIES: dict[tuple[str, str, str, str, str], int] = {
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Offline"): 877_600,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Server"): 219_400,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Interactive"): 245_728,
    ("v6.0", "Nebius", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Offline"): 658_200,
    ("v6.0", "Nebius", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Server"): 219_400,
    ("v6.0", "CoreWeave", "GB300-NVL72_GB300-288GB_aarch64x8_TRT", "deepseek-r1", "Offline"): 105_312,
    ("v6.0", "Nebius", "GB300-NVL72_GB300-288GB_aarch64x8_TRT", "deepseek-r1", "Server"): 105_312,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "llama3.1-405b", "Offline"): 149_634,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "llama3.1-405b", "Server"): 33_252,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "gpt-oss-120b", "Offline"): 562_848,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "gpt-oss-120b", "Server"): 1_010_568,
    ("v6.0", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "llama2-70b-99", "Offline"): 11_427_840,
    ("v6.0", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "deepseek-r1", "Offline"): 561_664,
    ("v6.0", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "deepseek-r1", "Server"): 210_624,
    ("v6.0", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "llama3.1-405b", "Offline"): 91_443,
    ("v6.0", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "gpt-oss-120b", "Offline"): 466_908,
    ("v6.0", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "llama2-70b-99", "Offline"): 9_314_304,
    ("v6.0", "Nebius", "nebius_b200_n1", "deepseek-r1", "Offline"): 140_416,
    ("v6.0", "Nebius", "nebius_b200_n1", "deepseek-r1", "Server"): 105_312,
    ("v6.0", "Nebius", "nebius_b200_n1", "gpt-oss-120b", "Offline"): 102_336,
    ("v6.0", "Nebius", "nebius_b200_n1", "gpt-oss-120b", "Server"): 44_772,
    ("v6.0", "Google", "B200-SXM-180GBx8_TRT", "llama3.1-405b", "Offline"): 8_313,
    ("v6.0", "Lambda_SIT", "B200-SXM-180GBx8_TRT", "llama3.1-8b", "Offline"): 815_448,
    ("v6.0", "Lambda_SIT", "B200-SXM-180GBx8_TRT", "llama3.1-8b", "Server"): 614_928,
    ("v6.0", "Supermicro", "SYS-822GS-NBRT_B200-SXM-180GB_TRT", "llama2-70b-99", "Offline"): 1_007_616,
    ("v6.0", "RedHat", "8xH200-LLM-D-Openshift", "gpt-oss-120b", "Offline"): 12_792,
    ("v6.0", "RedHat", "8xH200-LLM-D-Openshift", "gpt-oss-120b", "Server"): 12_792,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama3.1-8b", "Offline"): 534_720,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama2-70b-99", "Offline"): 442_368,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama3.1-8b", "Server"): 213_888,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama2-70b-99", "Server"): 245_760,
    ("v6.0", "Dell", "XE7740_H200_NVL_141GBx8_TRT", "llama2-70b-99", "Interactive"): 73_728,
    ("v5.1", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Offline"): 399_308,
    ("v5.1", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "deepseek-r1", "Server"): 219_400,
    ("v5.1", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "llama3.1-405b", "Offline"): 149_634,
    ("v5.1", "NVIDIA", "GB300-NVL72_GB300-288GB_aarch64x72_TRT", "llama3.1-405b", "Server"): 99_756,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "deepseek-r1", "Offline"): 26_328,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "deepseek-r1", "Server"): 26_328,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama2-70b-99", "Offline"): 1_007_616,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama2-70b-99", "Server"): 884_736,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama2-70b-99", "Interactive"): 270_336,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-405b", "Offline"): 8_313,
    ("v5.1", "NVIDIA", "GB200-NVL72_GB200-186GB_aarch64x72_TRT", "llama3.1-405b", "Server"): 33_252,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-405b", "Server"): 8_313,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-8b", "Offline"): 735_240,
    ("v5.1", "NVIDIA", "B200-SXM-180GBx8_TRT", "llama3.1-8b", "Server"): 601_560,
    ("v5.1", "Nebius", "H200-SXM-141GBx8_TRT", "llama2-70b-99", "Offline"): 1_228_800,
    ("v5.1", "Nebius", "H200-SXM-141GBx8_TRT", "llama2-70b-99", "Server"): 294_912,
    ("v5.1", "Nebius", "H200-SXM-141GBx8_TRT", "llama3.1-405b", "Offline"): 16_626,
    ("v5.1", "Nebius", "H200-SXM-141GBx8_TRT", "llama3.1-405b", "Server"): 8_313,
    ("v5.1", "HPE", "HPE_Cray_XD670_H200_SXM_141GBx8_TRT", "llama3.1-8b", "Offline"): 761_976,
    ("v5.1", "HPE", "HPE_Cray_XD670_H200_SXM_141GBx8_TRT", "llama3.1-8b", "Server"): 307_464,
    ("v5.1", "Cisco", "HGX-H100_H100-SXM-80GBx16_TRT", "llama2-70b-99", "Offline"): 589_824,
    ("v5.1", "Cisco", "HGX-H100_H100-SXM-80GBx16_TRT", "llama3_1-405b", "Offline"): 8_313,
    ("v4.1", "NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "llama2-70b-99", "Offline"): 200_640,
    ("v4.1", "NVIDIA", "DGX-H100_H100-SXM-80GBx8_TRT", "llama2-70b-99", "Server"): 196_608,
    ("v4.1", "NVIDIA", "H200-SXM-141GBx8_TRT", "llama2-70b-99", "Offline"): 274_560,
    ("v4.1", "NVIDIA", "H200-SXM-141GBx8_TRT", "llama2-70b-99", "Server"): 245_760,
}
"""What each MLPerf run issued, read in its performance/run_1/mlperf_log_detail.txt (beside the
summary its row cites): Offline ``generated_samples_per_query``, Server and Interactive
``result_query_count``. Most submitters set these far above mlperf.conf's minimums (DeepSeek-R1
Offline: 4,388 samples, and 600 s; a few Llama-3.1-405B runs issued just the minimum, 8,313):
NVIDIA's v6.0 GB300 rack ran 877,600 DeepSeek-R1 samples (200 x 4,388) for 5,089 s, so the drain
of the longest outputs weighs little in the published figure; its Server run issued 219,400
queries at 110 QPS, over half an hour of arrivals where LoadGen asks for 600 s."""
