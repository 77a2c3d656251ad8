"""Shared steps of every loader: build an uninitialised model on the target
device and dtype through its registry entry (model/registry.py)."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from tokenmill.model.protocol import ArchInfo, CausalLM
from tokenmill.model.registry import entry_for_arch


def build_empty_model(arch: ArchInfo, device: torch.device, dtype: torch.dtype, max_positions: int) -> CausalLM:
    """Allocate (not initialise) the parameters directly on ``device``; the
    entry's weight map restores tied parameters and computed buffers."""
    entry = entry_for_arch(arch)
    positions = max_positions or arch.max_position_embeddings
    with torch.device("meta"), _SkipInitializers():
        model = entry.model_class(arch, positions)
    # What ``to_empty(device).to(dtype)`` does, in one allocation per tensor
    # and without torch.empty_like on meta tensors (a Python reference kernel
    # that imports torch's symbolic-shapes module, with sympy: ~0.45 s). Only
    # floating-point tensors take ``dtype``, as with ``.to(dtype)``.
    model = model._apply(lambda t: torch.empty(t.shape, device=device,
                                               dtype=dtype if t.is_floating_point() else t.dtype))
    entry.weights.finish_empty(model)
    return model.eval().requires_grad_(False)


class _SkipInitializers(TorchFunctionMode):
    """Skips the modules' parameter initialisers (``torch.nn.init.*``) while a
    model is built on the meta device. ``to_empty()`` throws away whatever they
    write, and on meta tensors they run torch's Python reference kernels,
    whose first call imports ``torch._dynamo``: about 1.7 s of every fresh
    process's start (server, Ray worker) on a path that never compiles. The
    rope tables are computed on CPU for the same reason (model/rope.py)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]  # every initialiser fills its first argument in place
        return func(*args, **kwargs)
