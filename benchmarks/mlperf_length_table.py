"""Print the MLPerf dataset length quantiles that src/tokenmill/sim/mlperf_lengths.py holds.

The per-sample token counts come from openshift-psap/performance-dashboard,
mlperf-data/summaries/<dataset>.csv (columns input_length, output_length), which
that project extracted from the official MLCommons dataset files (its
mlperf-data/original/generate_dataset_summaries.py: DeepSeek-R1 and Llama-3.1-405B
tok_input_len / tok_ref_output_len, Llama-2-70B tok_input_length / tok_output_length,
Llama-3.1-8B len(tok_input) and an output estimated from characters, which is not
kept). Fetch the repository and pass the CSV files:

    git -C performance-dashboard show 71007029:mlperf-data/summaries/deepseek-r1.csv > deepseek-r1.csv
    python -m benchmarks.mlperf_length_table deepseek-r1=deepseek-r1.csv llama3.1-405b=llama3-1-405b.csv \
        llama3.1-8b=llama3-1-8b-datacenter.csv llama2-70b=llama2-70b-99.csv

Each quantile is a sample's own value (numpy's inverted_cdf), at 0, 1, ..., 100 percent.
"""

from __future__ import annotations

import argparse

import numpy as np

QUANTILES = np.arange(101)
NO_OUTPUT = {"llama3.1-8b"}  # its CSV estimates outputs from characters; the table keeps none


def _row(values: np.ndarray) -> str:
    q = np.percentile(values, QUANTILES, method="inverted_cdf").astype(int)
    return "(" + ", ".join(str(v) for v in q) + ")"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="NAME=CSV")
    args = parser.parse_args()
    for item in args.files:
        name, path = item.split("=", 1)
        data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64)
        inputs, outputs = data[:, 0], data[:, 1]
        print(f"# {name}: {len(inputs)} samples; input mean {inputs.mean():.2f}, median {np.median(inputs):.0f}, "
              f"max {inputs.max()}; reference output mean {outputs.mean():.2f}")
        print(f"{name} input: {_row(inputs)}")
        if name not in NO_OUTPUT:
            print(f"{name} output: {_row(outputs)}")


if __name__ == "__main__":
    main()
