"""benchmarks/gpu_gemm_shapes.py: the GEMM shapes it times, and its comparison with the cost model
(the timing itself needs a CUDA GPU; its H200 figures are in docs/SIMULATOR.md)."""

import json

import pytest

from benchmarks.gpu_gemm_shapes import compare, main, modelled_seconds, shapes_of
from tokenmill.sim.hardware import get_hardware, with_tile_rule


def test_shapes_are_each_devices_share_under_tensor_parallelism():
    one = {s["gemm"]: (s["n"], s["k"], s["calls"]) for s in shapes_of("llama3.1-8b:1")}
    assert one == {"qkv": (6144, 4096, 32), "o": (4096, 4096, 32), "gate_up": (28672, 4096, 32),
                   "down": (4096, 14336, 32), "lm_head": (128256, 4096, 1)}
    two = {s["gemm"]: (s["n"], s["k"]) for s in shapes_of("llama2-70b:2")}
    # Column-parallel GEMMs split their outputs, row-parallel ones their inputs.
    assert two["qkv"] == (5120, 8192) and two["o"] == (8192, 4096)
    assert two["gate_up"] == (28672, 8192) and two["down"] == (8192, 14336)


def test_the_tile_rule_prices_a_ragged_gemm_above_the_flat_fraction():
    flat = get_hardware("h200")
    tiled = with_tile_rule(flat)
    # 384 rows of 6,144 columns: 6 x 24 tiles of 64 x 256 on 132 SMs, two waves, the second ~9% full.
    assert modelled_seconds(384, 6144, 4096, tiled) > 1.2 * modelled_seconds(384, 6144, 4096, flat)
    # Memory-bound rows: the weight stream decides, tiles or not (the sqrt rule leaves a trace of compute).
    assert modelled_seconds(1, 6144, 4096, tiled) == pytest.approx(modelled_seconds(1, 6144, 4096, flat), rel=1e-3)


def test_compare_reads_a_measured_file_and_plots(tmp_path, capsys):
    hw = get_hardware("h200")
    records = [{**s, "rows": m, "seconds": modelled_seconds(m, s["n"], s["k"], hw) * 2}
               for s in shapes_of("llama3.1-8b:1") for m in (1, 64, 1024)]
    path = tmp_path / "gemms.json"
    path.write_text(json.dumps({"device": "test", "records": records}))
    png = tmp_path / "gemms.png"
    main(["--compare", str(path), "--hardware", "h200", "--plot", str(png)])
    out = capsys.readouterr().out
    # Every GEMM took twice the flat price: each ratio, and the layers' median, is 0.50.
    assert "| llama3.1-8b | 1 | qkv | 1024 | 6144 x 4096 |" in out
    assert "flat: layers of 64+ rows, modelled / measured median 0.50, range 0.50-0.50" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_without_a_plot_prints_the_layer_table(capsys):
    hw = get_hardware("h200")
    records = [{**s, "rows": 256, "seconds": modelled_seconds(256, s["n"], s["k"], hw)}
               for s in shapes_of("llama2-70b:2")]
    compare(records, "h200")
    assert "| llama2-70b | 2 | 1.00 / " in capsys.readouterr().out
