"""C++ CPU kernels, compiled on first use with torch's extension builder.

One module from every source in csrc/ (entry points in csrc/ops.h): the paged
attention (``paged_decode_attention``), DeepSeek's latent attention
(``paged_mla_attention``, kernels/mla_attention.py) and the fused ops of
kernels/fused_ops.py (``add_rms_norm``, ``silu_and_mul``, ``rotary_embedding``,
``argmax_rows``).
The first build on a machine takes about a minute (g++ and ninja must be on PATH) and
is cached under ``$TOKENMILL_KERNEL_CACHE`` (default ``~/.cache/tokenmill/kernels``)
in a folder keyed by the sources, this CPU's instruction-set flags and the torch
and Python versions: the code is compiled with ``-march=native`` against
torch's ABI, so a build is never reused on another CPU or torch.
A failed build is logged once and the caller falls back to plain torch.

A finished build is marked (``READY``) and later processes import its .so
directly, without torch's builder: the builder takes a file lock even to
check a build, and a process killed while holding it (a cluster worker that
dies or is killed as it starts) would leave every later process waiting on
that lock forever. A lock older than ``STALE_LOCK_S`` is removed for the
same reason (only a crashed build can leave one that old).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import platform
import shutil
import threading
import time
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

_CSRC = Path(__file__).parent / "csrc"
_FLAGS = ["-O3", "-march=native", "-fopenmp"]  # -fopenmp: at::parallel_for uses torch's OpenMP pool
_NAME = "tokenmill_cpu_kernels"
READY = "READY"
"""Written into the build folder after a build loaded successfully."""
STALE_LOCK_S = 600.0
"""A builder lock older than this was left by a build that died."""
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


def _sources() -> list[Path]:
    return sorted(_CSRC.glob("*.cpp"))


def _build_dir() -> Path:
    import torch

    # torch and Python versions too: the .so links against their ABI.
    stamp = f"{_cpu_flags()}|{' '.join(_FLAGS)}|torch {torch.__version__}|{platform.python_version()}"
    digest = hashlib.sha256(stamp.encode())
    for path in sorted(_CSRC.glob("*.[ch]*")):  # sources and headers: any edit means a rebuild
        digest.update(path.name.encode() + path.read_bytes())
    key = digest.hexdigest()[:16]
    root = Path(os.environ.get("TOKENMILL_KERNEL_CACHE", Path.home() / ".cache" / "tokenmill" / "kernels"))
    return root / key


def missing_toolchain() -> str | None:
    """Why the kernels cannot be built here, or None when g++ and ninja are present."""
    for tool in ("c++", "ninja"):
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH"
    return None


def load_cpu_kernels() -> ModuleType | None:
    """The compiled module, or None where it cannot be built (logged once)."""
    with _lock:
        if "module" not in _cached:
            _cached["module"] = _build()
        return _cached["module"]


def _build() -> ModuleType | None:
    why = missing_toolchain()
    if why:
        log.warning("C++ CPU kernels unavailable (%s); using plain torch", why)
        return None
    build_dir = _build_dir()
    built = build_dir / f"{_NAME}.so"
    if (build_dir / READY).exists() and built.exists():
        return _import_built(built)
    from torch.utils.cpp_extension import load

    build_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_lock(build_dir / "lock")
    if not built.exists():
        log.info("compiling the C++ CPU kernels for this CPU (once, ~1 min) in %s", build_dir)
    try:
        module = load(name=_NAME, sources=[str(p) for p in _sources()], extra_cflags=_FLAGS,
                      extra_include_paths=[str(_CSRC)], build_directory=str(build_dir), verbose=False)
    except Exception as exc:  # noqa: BLE001  compiler errors, missing headers: fall back, say why
        log.warning("C++ CPU kernels failed to build (%s); using plain torch", exc)
        return None
    (build_dir / READY).write_text("built and loaded\n")
    return module


def _import_built(path: Path) -> ModuleType:
    import torch  # noqa: F401  the extension links against torch's libraries: load them first

    spec = importlib.util.spec_from_file_location(_NAME, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _remove_stale_lock(lock: Path) -> None:
    try:
        age = time.time() - lock.stat().st_mtime
    except FileNotFoundError:
        return
    if age > STALE_LOCK_S:
        log.warning("removing a kernel build lock left %.0f s ago by a build that died: %s", age, lock)
        lock.unlink(missing_ok=True)


if __name__ == "__main__":  # `python -m tokenmill.kernels.cpu_kernels`: build now (make setup does)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    module = load_cpu_kernels()
    log.info("C++ CPU kernels: %s", "ready" if module is not None else "unavailable, plain torch in use")
