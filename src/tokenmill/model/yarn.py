"""YaRN's scalar terms, torch-free (the architecture configs and `tokenmill sim` read them
without torch; model/rope.py builds the tables)."""

from __future__ import annotations

import math


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature term (1 when the context is not stretched)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0
