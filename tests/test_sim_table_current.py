"""benchmarks/sim_table_current.py: the validation table collected from the run files."""

from pathlib import Path

from benchmarks.sim_table_current import (
    GROUPS,
    RUN_DIR,
    RUNS,
    latest_lines,
    plot,
    read_run,
    render,
    row_key,
    skip_reason,
)
from tokenmill.sim.published import RESULTS
from tokenmill.sim.validate import Checked, parse_parallel, table

REPO = Path(__file__).resolve().parents[1]


def _checked(rows, ratio):
    return [Checked(r, r.tokens_per_s_per_gpu * ratio, 256, parallel=parse_parallel("TP8")) for r in rows]


def test_a_run_file_reads_back_each_row_validate_wrote(tmp_path):
    rows = [r for r in RESULTS if not skip_reason(r)][:6]
    path = tmp_path / "run.md"
    path.write_text(table(_checked(rows, 1.3)) + "\n")
    lines = read_run(path)
    assert set(lines) == {row_key(r) for r in rows}
    for r in rows:
        line = lines[row_key(r)]
        assert line.ratio == 1.3 and line.run == "run.md"
        assert abs(line.simulated - r.tokens_per_s_per_gpu * 1.3) <= 0.5


def test_a_later_run_replaces_a_rows_earlier_line(tmp_path):
    rows = [r for r in RESULTS if not skip_reason(r)][:4]
    (tmp_path / "old.md").write_text(table(_checked(rows, 0.5)))
    (tmp_path / "new.md").write_text(table(_checked(rows[:2], 1.1)))
    found = latest_lines(tmp_path, ("old.md", "new.md"))
    assert [found[row_key(r)].ratio for r in rows] == [1.1, 1.1, 0.5, 0.5]
    text = render(tuple(rows), found)
    assert "2 of 4 within 25%" in text  # 1.1 twice in, 0.5 twice out
    assert text.count(" **x** | old.md |") == 2
    png = plot(tuple(rows), found, tmp_path / "plot" / "table.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_published_row_is_in_the_table_or_skipped_by_the_simulator():
    """The listed run files cover every row the simulator runs; each group is named."""
    for name in RUNS:
        assert (REPO / RUN_DIR / name).is_file(), name
    found = latest_lines(REPO / RUN_DIR)
    unrun = [r for r in RESULTS if row_key(r) not in found]
    assert all(skip_reason(r) for r in unrun), [row_key(r) for r in unrun if not skip_reason(r)]
    assert len(unrun) < 10
    assert all(any(member(r) for _, member in GROUPS) for r in RESULTS)
    used = {found[row_key(r)].run for r in RESULTS if row_key(r) in found}
    assert used == set(RUNS)  # no listed file is wholly superseded by later ones


def test_the_verdict_is_the_run_files_own(tmp_path):
    """A ratio printed as 1.25 can be just outside 25% unrounded: the file's mark decides, as validate did."""
    r = next(r for r in RESULTS if not skip_reason(r))
    lengths = f"{r.isl}/{r.osl}" if r.dataset is None else f"{r.dataset} dataset"
    head = table([])
    row = (f"| {r.model} | {r.hardware} | {r.num_gpus} | {r.precision} | {r.scenario} | TP1 | {lengths} | "
           f"{r.tokens_per_s_per_gpu:,.0f} | 1 | 1.25 **x** | 8 |")
    (tmp_path / "edge.md").write_text(head.split("\n\n")[0] + "\n" + row + "\n")
    (line,) = read_run(tmp_path / "edge.md").values()
    assert line.ratio == 1.25 and not line.within
    assert "0 of 1 within 25%" in render((r,), {row_key(r): line})
