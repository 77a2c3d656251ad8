"""``tokenmill sim --pareto``: the front on hand-made points, and a small sweep end to end."""

from __future__ import annotations

import json

import pytest

from tokenmill.cli import main
from tokenmill.sim.pareto import pareto_front

SMALL = ["--model", "llama3.1-8b", "--hardware", "h100", "--isl", "128", "--osl", "64", "--num-requests", "16"]


def test_dominated_points_are_off_the_front():
    xy = [(10, 100), (20, 80), (15, 70), (5, 90), (30, 10), (1, 50)]
    # (15, 70) loses to (20, 80); (5, 90) to (10, 100); (1, 50) to both.
    assert pareto_front(xy) == [True, True, False, False, True, False]


def test_ties_keep_equal_points_and_drop_weaker_ones_on_a_shared_axis():
    xy = [(10, 100), (10, 100), (10, 90), (5, 100), (20, 50)]
    assert pareto_front(xy) == [True, True, False, False, True]
    assert pareto_front([]) == []
    assert pareto_front([(1, 1)]) == [True]


def test_sweep_writes_the_plot_and_the_points(tmp_path, capsys):
    png = tmp_path / "front.png"
    assert main(["sim", *SMALL, "--num-gpus", "2", "--pareto", str(png)]) == 0
    out = capsys.readouterr().out
    assert str(png) in out and "Pareto front" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(png.with_suffix(".json").read_text())
    points = doc["points"]
    assert {(p["tp"], p["ep"]) for p in points} == {(1, 1), (2, 1)}  # search.layouts on 2 GPUs
    assert max(p["max_num_seqs"] for p in points) == 16  # no more sequences than requests
    front = [p for p in points if p["on_front"]]
    assert len(points) > 1 and front
    # Along the front a bigger batch buys tokens/s per GPU with tokens/s per user.
    for layout in {(p["tp"], p["ep"]) for p in front}:
        mine = sorted((p for p in front if (p["tp"], p["ep"]) == layout), key=lambda p: p["max_num_seqs"])
        for small, big in zip(mine, mine[1:]):
            assert big["tokens_per_s_per_gpu"] > small["tokens_per_s_per_gpu"]
            assert big["tokens_per_s_per_user"] < small["tokens_per_s_per_user"]


def test_without_num_gpus_only_the_given_layout_is_swept(tmp_path, capsys):
    png = tmp_path / "tp2.png"
    assert main(["sim", *SMALL, "--tp", "2", "--pareto", str(png), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {(p["tp"], p["ep"]) for p in doc["points"]} == {(2, 1)}
    assert [p["max_num_seqs"] for p in doc["points"]] == [1, 2, 4, 8, 16]
    assert doc == json.loads(png.with_suffix(".json").read_text())


@pytest.mark.parametrize("args, message", [
    (["--search", "--num-gpus", "2"], "--pareto and --search"),
    (["--osl", "1"], "--osl"),
])
def test_bad_pareto_runs_name_the_flag(tmp_path, capsys, args, message):
    assert main(["sim", *SMALL, "--pareto", str(tmp_path / "p.png"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "p.png").exists()


def test_pareto_path_must_be_a_png(tmp_path, capsys):
    assert main(["sim", *SMALL, "--pareto", str(tmp_path / "p.json")]) == 2
    assert "--pareto" in capsys.readouterr().err
