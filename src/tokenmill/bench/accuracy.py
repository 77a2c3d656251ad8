"""Accuracy mode: score the outputs LoadGen logged (mlperf_log_accuracy.json),
as MLPerf's accuracy scripts do, against the workload's reference answers.

Scores: ROUGE-L F1 over whitespace-separated lowercase words (the longest common
subsequence measure MLPerf's LLM benchmarks report) and exact match. Samples
without a reference are written out but not scored.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from tokenmill.bench.loadgen_log import read_accuracy_log
from tokenmill.bench.workload import Workload

OUTPUTS_FILE = "accuracy_outputs.jsonl"


def score_accuracy(log_dir: str | Path, workload: Workload) -> dict:
    """Decode LoadGen's accuracy log, write accuracy_outputs.jsonl beside it and
    return {'samples_logged', 'samples_scored', 'rouge_l_f1', 'exact_match'}."""
    logged = read_accuracy_log(log_dir)
    rouge, exact = [], []
    with open(Path(log_dir) / OUTPUTS_FILE, "w", encoding="utf-8") as f:
        for index in sorted(logged):
            sample = workload.samples[index]
            text = logged[index].rstrip(b"\0").decode("utf-8", errors="replace")
            row = {"sample_index": index, "output": text, "reference": sample.reference}
            if sample.reference is not None:
                row["rouge_l_f1"] = rouge_l_f1(text, sample.reference)
                rouge.append(row["rouge_l_f1"])
                exact.append(text.strip() == sample.reference.strip())
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return {
        "samples_logged": len(logged),
        "samples_scored": len(rouge),
        "rouge_l_f1": statistics.fmean(rouge) if rouge else None,
        "exact_match": sum(exact) / len(exact) if exact else None,
        "outputs_file": OUTPUTS_FILE,
    }


def rouge_l_f1(candidate: str, reference: str) -> float:
    a, b = candidate.lower().split(), reference.lower().split()
    if not a or not b:
        return float(a == b)
    lcs = _lcs_length(a, b)
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(a), lcs / len(b)
    return 2 * precision * recall / (precision + recall)


def _lcs_length(a: list[str], b: list[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]
