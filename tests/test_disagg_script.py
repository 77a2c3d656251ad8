"""`python -m benchmarks.disagg`'s pure parts: the peak VALID QPS of a sweep and
the printed table. No servers, no network."""

from __future__ import annotations

import pytest

from benchmarks.disagg import build_parser, format_table, launch, main, peak_valid_qps


def _point(qps: float, valid: bool, tpot_p99: float = 100.0, over: int = 0) -> dict:
    return {"qps": qps, "valid": valid, "tpot_p99_ms": tpot_p99, "tpot_p50_ms": 50.0, "tpot_max_ms": tpot_p99 + 10,
            "over_tpot_limit": over, "queries": 460, "ttft_p99_ms": 900.0, "output_tok_s": 10.0 * qps}


def test_peak_valid_qps_is_the_highest_valid_point_not_the_last():
    # A sweep may pass at a higher load after failing at a lower one (noise):
    # the peak is the highest VALID load, whatever the order of the points.
    points = [_point(0.75, False), _point(0.25, True), _point(1.0, True), _point(0.5, False)]
    assert peak_valid_qps(points) == 1.0


def test_peak_valid_qps_none_when_no_point_passed():
    assert peak_valid_qps([_point(0.5, False), _point(0.75, False)]) is None
    assert peak_valid_qps([]) is None


def test_table_rows_by_qps_then_system():
    results = {"aggregated": [_point(0.5, False, 302.9, over=44)], "disaggregated": [_point(0.5, True, 139.9)]}
    lines = format_table(results).splitlines()
    assert lines[2].startswith("| 0.5 | aggregated | 302.9 | 50.0 | 312.9 | 44 of 460 |")
    assert lines[2].endswith("| INVALID |")
    assert lines[3].startswith("| 0.5 | disaggregated | 139.9 |") and lines[3].endswith("| VALID |")


def test_launch_roles_and_rule():
    opts = build_parser().parse_args(["--disagg-min-prefill-tokens", "64"])
    aggregated = launch("aggregated", opts).cmd
    disaggregated = launch("disaggregated", opts).cmd
    assert "--workers" in aggregated and "--prefill-workers" not in aggregated
    i = disaggregated.index("--disagg-min-prefill-tokens")
    assert disaggregated[i + 1] == "64" and "--no-enable-prefix-caching" in disaggregated
    assert "--prefill-worker-nice" not in disaggregated
    nice = launch("disaggregated-nice", opts).cmd
    assert nice[:len(disaggregated)] == disaggregated and nice[len(disaggregated):] == ["--prefill-worker-nice", "19"]


def test_unknown_systems_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["--systems", "aggregated,disagregated"])
    assert "--systems: unknown disagregated" in capsys.readouterr().err
