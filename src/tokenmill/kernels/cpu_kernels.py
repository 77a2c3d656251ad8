"""C++ CPU kernels, compiled on first use with torch's extension builder.

The first build on a machine takes ~45 s (g++ and ninja must be on PATH) and
is cached under ``$TOKENMILL_KERNEL_CACHE`` (default ``~/.cache/tokenmill/kernels``)
in a folder keyed by the source, this CPU's instruction-set flags and the torch
and Python versions: the code is compiled with ``-march=native`` against
torch's ABI, so a build is never reused on another CPU or torch.
A failed build is logged once and the caller falls back to plain torch.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import threading
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).parent / "csrc" / "paged_decode_attention.cpp"
_FLAGS = ["-O3", "-march=native", "-fopenmp"]  # -fopenmp: at::parallel_for uses torch's OpenMP pool
_lock = threading.Lock()
_cached: dict[str, ModuleType | None] = {}


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor()


def _build_dir(source: bytes) -> Path:
    import torch

    # torch and Python versions too: the .so links against their ABI.
    stamp = f"{_cpu_flags()}|{' '.join(_FLAGS)}|torch {torch.__version__}|{platform.python_version()}"
    key = hashlib.sha256(source + stamp.encode()).hexdigest()[:16]
    root = Path(os.environ.get("TOKENMILL_KERNEL_CACHE", Path.home() / ".cache" / "tokenmill" / "kernels"))
    return root / key


def missing_toolchain() -> str | None:
    """Why the kernels cannot be built here, or None when g++ and ninja are present."""
    for tool in ("c++", "ninja"):
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH"
    return None


def paged_decode_kernels() -> ModuleType | None:
    """The compiled module (``paged_decode_attention``), or None where it cannot be built."""
    with _lock:
        if "paged" not in _cached:
            _cached["paged"] = _build()
        return _cached["paged"]


def _build() -> ModuleType | None:
    why = missing_toolchain()
    if why:
        log.warning("C++ paged attention unavailable (%s); using the torch path", why)
        return None
    from torch.utils.cpp_extension import load

    source = _SOURCE.read_bytes()
    build_dir = _build_dir(source)
    build_dir.mkdir(parents=True, exist_ok=True)
    if not any(build_dir.glob("*.so")):
        log.info("compiling the C++ paged attention kernel for this CPU (once, ~45 s) in %s", build_dir)
    try:
        return load(name="tokenmill_paged_decode", sources=[str(_SOURCE)], extra_cflags=_FLAGS,
                    build_directory=str(build_dir), verbose=False)
    except Exception as exc:  # noqa: BLE001  compiler errors, missing headers: fall back, say why
        log.warning("C++ paged attention failed to build (%s); using the torch path", exc)
        return None


if __name__ == "__main__":  # `python -m tokenmill.kernels.cpu_kernels`: build now (make setup does)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    module = paged_decode_kernels()
    log.info("C++ paged attention: %s", "ready" if module is not None else "unavailable, torch path in use")
