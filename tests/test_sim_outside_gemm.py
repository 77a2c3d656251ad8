"""benchmarks/sim_outside_gemm.py: the published Hopper steps against their GEMMs at measured rates."""

import pytest

from benchmarks.sim_outside_gemm import GemmTable, hopper_runs, mean_parts
from tokenmill.sim.hardware import get_hardware


def test_the_table_interpolates_in_rows_and_extends_past_the_last():
    table = GemmTable([{"n": 8, "k": 4, "rows": m, "seconds": s} for m, s in ((1, 1.0), (64, 2.0), (128, 4.0))])
    assert table.seconds(1, 8, 4) == table.seconds(0, 8, 4) == 1.0
    assert table.seconds(96, 8, 4) == pytest.approx(3.0)
    assert table.seconds(256, 8, 4) == pytest.approx(8.0)  # linear through the last point
    with pytest.raises(KeyError, match="16 x 4"):
        table.seconds(1, 16, 4)


def test_gemms_timed_at_the_models_own_compute_price_leave_attention_and_the_rest():
    """A table whose every GEMM takes exactly its FLOPs at the fitted FP8 fraction: the GEMMs timed
    equal the GEMMs priced, step by step."""
    run = next(r for r in hopper_runs() if r.model == "llama3.1-8b" and r.hardware == "h200")
    hw = get_hardware("h200")
    rate = hw.flops["fp8"] * hw.efficiency.gemm_for("fp8")

    class ExactTable(GemmTable):
        def __init__(self):
            pass

        def seconds(self, rows, n, k):
            return 2.0 * rows * n * k / rate

    parts = mean_parts(run, ExactTable())
    assert parts["gemm_measured"] == pytest.approx(parts["gemm_model"], rel=1e-9)
    # The GEMMs' compute is most of the priced step; attention, communication and overhead add to it.
    assert parts["gemm_model"] < parts["measured"] < 1.5 * parts["model"]
    assert {r.hardware for r in hopper_runs()} == {"h100", "h200", "h200-nvl"}
