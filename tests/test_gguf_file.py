"""model/gguf_file.py reads what the ``gguf`` package's reader reads: every metadata value and every
tensor's bytes, on the embedded model's file and on a file with every value type; bad files are refused
by name, and a file is parsed once per process until it changes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tokenmill.model.embedded import embedded_gguf_path
from tokenmill.model.gguf_file import gguf_file, parse

gguf = pytest.importorskip("gguf")


def assert_reads_like_the_gguf_package(path):
    ours, theirs = gguf_file(path), gguf.GGUFReader(str(path))
    # The package adds GGUF.version/tensor_count/kv_count as pseudo fields; the rest is the file's.
    want = {key: field.contents() for key, field in theirs.fields.items() if not key.startswith("GGUF.")}
    assert list(ours.fields) == list(want)
    assert ours.fields == want
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for a, b in zip(ours.tensors, theirs.tensors):
        assert (a.tensor_type, a.shape) == (b.tensor_type, tuple(b.shape.tolist())), a.name
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape, a.name
        assert np.array_equal(a.data, b.data), a.name
    return ours


def test_embedded_model_reads_like_the_gguf_package():
    parsed = assert_reads_like_the_gguf_package(embedded_gguf_path())
    assert len(parsed.fields["tokenizer.ggml.tokens"]) == 49152
    assert {t.tensor_type.name for t in parsed.tensors} >= {"Q4_1", "F32"}


def write_every_kind(path, alignment: int = 64):
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("test.u32", 7)
    writer.add_int32("test.i32", -3)
    writer.add_float32("test.f32", 0.25)
    writer.add_uint64("test.u64", 2**40)
    writer.add_int8("test.i8", -1)
    writer.add_uint16("test.u16", 65535)
    writer.add_float64("test.f64", 1e-300)
    writer.add_bool("test.bool", True)
    writer.add_string("test.text", "naïve — ✓")
    writer.add_array("test.ints", [1, 2, 3])
    writer.add_array("test.floats", [0.5, -1.5])
    writer.add_array("test.words", ["a", "", "ünï"])
    writer.add_array("test.empty", [])
    writer.add_custom_alignment(alignment)
    writer.add_tensor("plain", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.add_tensor("fp16s", np.arange(6, dtype=np.float16).reshape(2, 3))
    weights = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    writer.add_tensor("blocks", gguf.quants.quantize(weights, gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return weights


def test_every_value_type_and_tensor_kind_reads_like_the_gguf_package(tmp_path):
    weights = write_every_kind(tmp_path / "kinds.gguf")
    parsed = assert_reads_like_the_gguf_package(tmp_path / "kinds.gguf")
    assert parsed.fields["test.words"] == ["a", "", "ünï"] and parsed.fields["test.u64"] == 2**40
    blocks = {t.name: t for t in parsed.tensors}["blocks"]
    restored = gguf.quants.dequantize(blocks.data, blocks.tensor_type)
    np.testing.assert_allclose(restored, weights, atol=0.02)


def test_bad_files_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="bad.gguf: not a GGUF file"):
        parse(b"GGML" + bytes(20), "bad.gguf")
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match="empty.gguf: 0 bytes, too short for a GGUF header"):
        gguf_file(tmp_path / "empty.gguf")
    with pytest.raises(ValueError, match="GGUF version 1 is not supported"):
        parse(b"GGUF" + (1).to_bytes(4, "little") + bytes(16), "old.gguf")
    write_every_kind(tmp_path / "kinds.gguf")
    whole = (tmp_path / "kinds.gguf").read_bytes()
    with pytest.raises(ValueError, match="cut.gguf: the header ends early"):
        parse(whole[:200], "cut.gguf")
    with pytest.raises(ValueError, match="cut.gguf: tensor blocks's data runs past the end of the file"):
        parse(whole[:-100], "cut.gguf")  # past the last tensor's padding, into its 272 bytes
    assert whole.count(b"fp16s") == 1
    twice = whole.replace(b"fp16s", b"plain")  # the table's second name, now the first's
    with pytest.raises(ValueError, match="twice.gguf: tensor 'plain' appears twice"):
        parse(twice, "twice.gguf")


def test_a_file_is_parsed_once_until_it_changes(tmp_path):
    path = tmp_path / "kinds.gguf"
    write_every_kind(path)
    first = gguf_file(path)
    assert gguf_file(str(path)) is first
    write_every_kind(path, alignment=128)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a new mtime, even on a coarse clock
    second = gguf_file(path)
    assert second is not first and second.fields["general.alignment"] == 128
