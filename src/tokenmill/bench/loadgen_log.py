"""Reading LoadGen's own logs: the verdict and figures of mlperf_log_summary.txt,
and the responses recorded in mlperf_log_accuracy.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tokenmill.bench.results import Verdict

SUMMARY_FILE = "mlperf_log_summary.txt"
DETAIL_FILE = "mlperf_log_detail.txt"
ACCURACY_FILE = "mlperf_log_accuracy.json"

_KEY_VALUE = re.compile(r"^\s*([^:*][^:]*?)\s*:\s*(.+?)\s*$")
# Figures worth carrying into results.json (LoadGen's spelling, as printed).
_FIGURE_KEYS = re.compile(
    r"samples per second|tokens per second|TPS w|QPS w|percentile (first token )?latency|"
    r"percentile time to output token|Mean (First Token )?latency|Mean Time per Output Token|"
    r"Scheduled samples per second", re.IGNORECASE)


def read_summary(log_dir: str | Path) -> tuple[Verdict, dict[str, str]]:
    """(verdict, figures) from the summary; the verdict's reasons are each
    failed check and every line LoadGen printed under Recommendations or an
    early-stopping heading."""
    path = Path(log_dir) / SUMMARY_FILE
    if not path.exists():
        return Verdict("ERROR", {}, [f"LoadGen wrote no {SUMMARY_FILE} in {log_dir}"]), {}
    result, checks, notes, figures = "UNKNOWN", {}, [], {}
    section = None
    for line in path.read_text(errors="replace").splitlines():
        stripped = line.strip()
        if stripped.startswith("Result is"):
            result = stripped.split(":", 1)[1].strip()
            continue
        if "satisfied" in stripped and ":" in stripped:
            name, value = (x.strip() for x in stripped.split(":", 1))
            checks[name] = value.lower().startswith("yes")
            continue
        if stripped.startswith(("Recommendations", "TTFT Early Stopping", "TPOT Early Stopping",
                                "Early Stopping Result")):
            section = stripped.rstrip(":")
            continue
        if stripped.startswith("*") and section:
            notes.append(f"{section}: {stripped.lstrip('* ').strip()}")
            continue
        if section and notes and stripped and ":" not in stripped and not stripped.startswith("="):
            notes[-1] += " " + stripped  # a bullet wrapped onto the next line
            continue
        if stripped.startswith("====") or not stripped:
            section = None if stripped.startswith("====") else section
            continue
        match = _KEY_VALUE.match(line)
        if match and _FIGURE_KEYS.search(match.group(1)):
            figures[match.group(1)] = match.group(2)
    reasons = [f"{name}: NO" for name, ok in checks.items() if not ok]
    if result != "VALID":
        reasons += notes
    return Verdict(result, checks, reasons), figures


def read_accuracy_log(log_dir: str | Path) -> dict[int, bytes]:
    """Sample index -> the response bytes the SUT handed LoadGen (last one wins)."""
    path = Path(log_dir) / ACCURACY_FILE
    if not path.exists():
        return {}
    text = path.read_text().strip()
    try:
        entries = json.loads(text) if text else []
    except json.JSONDecodeError as exc:
        raise ValueError(f"accuracy log: {path} is not valid JSON: {exc}") from None
    return {int(e["qsl_idx"]): bytes.fromhex(e["data"]) for e in entries}
