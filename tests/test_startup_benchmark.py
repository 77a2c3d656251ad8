"""benchmarks/startup.py: one fresh process parses the embedded GGUF both ways and builds an engine, and
reports each step's seconds."""

from benchmarks.startup import in_process


def test_a_fresh_process_reports_each_step():
    figures = in_process(threads=1)
    assert set(figures) == {"gguf_metadata_ours_s", "gguf_metadata_package_s", "engine_build_s"}
    assert all(0 < seconds < 120 for seconds in figures.values())
    # The point of model/gguf_file.py: its parse is a small part of the package reader's.
    assert figures["gguf_metadata_ours_s"] < figures["gguf_metadata_package_s"]
