"""A GGUF file's metadata and tensor table, parsed once per process.

The ``gguf`` package's reader builds a numpy view for every part of every
metadata value when it opens a file: the embedded model's tokenizer (49,152
tokens, 48,900 merges) took it 2.3-2.6 s on the CPUs here, before a tensor was
read, and the tokenizer and the weights loader each opened the file. This
parser reads the metadata with ``struct`` over a read-only memory map (about
0.1 s for that file) and maps each tensor's bytes as the array ``gguf.quants``
dequantizes; the file is parsed once per process and shared (keyed by its size
and mtime, so a file rewritten in place is parsed again).

The layout (GGUF v2 and v3, little-endian): magic ``GGUF``, u32 version, u64
tensor count, u64 metadata count; each metadata entry is a string key, a u32
value type and the value (an array: u32 element type, u64 count, elements);
each tensor entry is a string name, u32 dimension count, u64 dimensions
(innermost first), u32 GGML type and u64 offset into the data section, which
starts at the next multiple of ``general.alignment`` (default 32) after the
table. A string is a u64 byte length and UTF-8 bytes.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
STRING, ARRAY = 8, 9
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
"""GGUF value type -> struct format of one value."""
PLAIN_TENSOR_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "I16": np.int16,
                       "I32": np.int32, "I64": np.int64}
"""GGML types stored as plain numpy elements; every other type is blocks of bytes."""


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    tensor_type: Any
    """A ``gguf.GGMLQuantizationType``."""
    shape: tuple[int, ...]
    """GGUF order: innermost dimension first."""
    data: np.ndarray
    """Read-only view of the file: [outer dims..., inner] elements for plain types, and for
    block types [outer dims..., bytes per row] uint8 (what ``gguf.quants.dequantize`` takes)."""


@dataclass(frozen=True)
class GGUFFile:
    """One parsed file. ``gguf_file`` hands the same object to every caller in the process:
    read its fields and tensors, never modify them (copy what must change)."""

    version: int
    fields: dict[str, Any]
    """Metadata as plain Python values (arrays as lists)."""
    tensors: list[GGUFTensor]


def gguf_file(path: str | os.PathLike) -> GGUFFile:
    """The parsed file at ``path``, from this process's cache when the file is unchanged."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _parsed(str(resolved), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=2)
def _parsed(path: str, size: int, mtime_ns: int) -> GGUFFile:
    if size < 24:  # mmap refuses an empty file; a header is 24 bytes
        raise ValueError(f"{path}: {size} bytes, too short for a GGUF header")
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return parse(buf, path)


def parse(buf, name: str = "GGUF file") -> GGUFFile:
    """Parse the GGUF bytes ``buf`` (bytes or a memory map; tensor data stays views of it)."""
    if bytes(buf[:4]) != MAGIC:
        raise ValueError(f"{name}: not a GGUF file (magic {bytes(buf[:4])!r})")
    version, num_tensors, num_fields = struct.unpack_from("<IQQ", buf, 4)
    if version not in (2, 3):
        raise ValueError(f"{name}: GGUF version {version} is not supported (2 and 3 are; a big-endian file "
                         f"reads as a huge version)")
    reader = _Reader(buf, 24)
    try:
        fields = {}
        for _ in range(num_fields):
            key = reader.string()
            fields[key] = reader.value(reader.unpack("<I"))
        table = [(reader.string(), [reader.unpack("<Q") for _ in range(reader.unpack("<I"))], reader.unpack("<I"),
                  reader.unpack("<Q")) for _ in range(num_tensors)]
    except struct.error as exc:
        raise ValueError(f"{name}: the header ends early at byte {reader.offset} (a truncated file?)") from exc
    names = [entry[0] for entry in table]
    if len(set(names)) < len(names):
        raise ValueError(f"{name}: tensor {next(n for n in names if names.count(n) > 1)!r} appears twice")
    alignment = int(fields.get("general.alignment", DEFAULT_ALIGNMENT))
    data_start = -(-reader.offset // alignment) * alignment
    tensors = [_tensor(buf, name, data_start, *entry) for entry in table]
    return GGUFFile(version, fields, tensors)


def _tensor(buf, file: str, data_start: int, name: str, dims: list[int], raw_type: int,
            offset: int) -> GGUFTensor:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        qtype = GGMLQuantizationType(raw_type)
    except ValueError:
        raise ValueError(f"{file}: tensor {name}: unknown GGML type {raw_type}") from None
    count = int(np.prod(dims)) if dims else 1
    outer = tuple(reversed(dims))
    dtype = PLAIN_TENSOR_DTYPES.get(qtype.name)
    if dtype is None:  # blocks of bytes: [outer..., bytes per row]
        block, type_size = GGML_QUANT_SIZES[qtype]
        if dims[0] % block:
            raise ValueError(f"{file}: tensor {name}: {dims[0]} elements per row is not a multiple of "
                             f"{qtype.name}'s block of {block}")
        dtype, count, outer = np.uint8, count // block * type_size, (*outer[:-1], dims[0] // block * type_size)
    start = data_start + offset
    if start + count * np.dtype(dtype).itemsize > len(buf):
        raise ValueError(f"{file}: tensor {name}'s data runs past the end of the file (a truncated file?)")
    data = np.frombuffer(buf, dtype=dtype, count=count, offset=start).reshape(outer)
    return GGUFTensor(name, qtype, tuple(dims), data)


class _Reader:
    """Sequential little-endian reads over ``buf`` from ``offset``."""

    def __init__(self, buf, offset: int):
        self.buf, self.offset = buf, offset

    def unpack(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.buf, self.offset)
        self.offset += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        start, self.offset = self.offset, self.offset + n
        return str(self.buf[start:self.offset], "utf-8")

    def value(self, kind: int):
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            return self.array(self.unpack("<I"), self.unpack("<Q"))
        fmt = SCALARS.get(kind)
        if fmt is None:
            raise ValueError(f"GGUF metadata at byte {self.offset}: unknown value type {kind}")
        return self.unpack(fmt)

    def array(self, kind: int, count: int) -> list:
        if kind == STRING:
            return self.strings(count)
        fmt = SCALARS.get(kind)
        if fmt is None:  # nested arrays: one at a time
            return [self.value(kind) for _ in range(count)]
        values = np.frombuffer(self.buf, dtype=np.dtype(fmt), count=count, offset=self.offset)
        self.offset += values.nbytes
        return values.tolist()

    def strings(self, count: int) -> list[str]:
        """``count`` strings in a row (a vocabulary: the one loop here that runs ~10^5 times)."""
        buf, offset, length, out = self.buf, self.offset, _U64.unpack_from, []
        for _ in range(count):
            (n,) = length(buf, offset)
            offset += 8
            out.append(str(buf[offset:offset + n], "utf-8"))
            offset += n
        self.offset = offset
        return out


_U64 = struct.Struct("<Q")
