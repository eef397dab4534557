"""Where the model computes, found at its first forward: for a run whose device says the CPU
while a GPU is visible, the GPU data path (`intercept.device_path`) learns that the user's model
is on a CUDA device after all, and serves that device from then on.

`FirstModelWatch` is one global module forward pre-hook (torch's public
``register_module_forward_pre_hook``), installed only in that case and removed at the first
forward of a module that holds a MessagePassing layer: it costs nothing afterwards, and
nothing at all on a machine without a GPU.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.utils.hooks import RemovableHandle

__all__ = ["FirstModelWatch"]


class FirstModelWatch:
    """A global module forward pre-hook that waits for the first forward of a module holding a
    MessagePassing layer (the outermost such call: pre-hooks fire outside in), reports the
    device of its parameters to `found` when it is a CUDA device, and removes itself at that
    first forward whatever it found. Modules without a MessagePassing layer (pre-processing)
    are passed over."""

    def __init__(self, found: Callable[[torch.device], None]) -> None:
        from torch.nn.modules.module import register_module_forward_pre_hook

        self._found = found
        self._handle: RemovableHandle | None = register_module_forward_pre_hook(self._pre)

    def _pre(self, module: torch.nn.Module, args: tuple) -> None:
        from torch_geometric.nn import MessagePassing

        if self._handle is None or not any(isinstance(m, MessagePassing)
                                           for m in module.modules()):
            return None
        self.remove()
        param = next(module.parameters(), None)
        if param is not None and param.device.type == "cuda":
            self._found(param.device)
        return None

    @property
    def watching(self) -> bool:
        return self._handle is not None

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
