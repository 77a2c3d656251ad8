"""benchmarks/sim_speed.py: it keeps each case's output and catches an output that changed."""

from __future__ import annotations

import json

from benchmarks.sim_speed import main


def test_same_outputs_pass_and_a_changed_one_is_named(tmp_path, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["--out", str(first), "--cases", "ds_mtp_offline"]) == 0
    assert json.loads((first / "ds_mtp_offline.json").read_text())["config"]["mtp_depth"] == 3
    assert main(["--out", str(second), "--cases", "ds_mtp_offline", "--same-as", str(first)]) == 0
    assert "| ds_mtp_offline |" in capsys.readouterr().out
    (first / "ds_mtp_offline.json").write_text("{}")
    assert main(["--out", str(second), "--cases", "ds_mtp_offline", "--same-as", str(first)]) == 1
    assert "DIFFERS" in capsys.readouterr().out

