"""Lazily initialised modules: find the moment their values exist, so ranks can share them.

PyG's `Linear(-1, ...)` (inside `SAGEConv(-1, ...)`, `to_hetero` models, ...) and torch's
`LazyLinear` create their values at their first forward, in a forward pre-hook of their own,
from the rank's random state. That state differs between ranks as soon as a rank's draws
depend on its data (dropout over a batch whose size is the rank's). PyG's lazy `Linear` keeps an
ordinary `bias` parameter whose values are only set then: a broadcast made before that forward
shares uninitialised memory.

Invariant kept with `gradsync`: a module that had uninitialised parameters or buffers when first
seen is broadcast again -- all of its own tensors -- right after its own initialisation hook ran
and before it computes (a forward pre-hook registered after the module's own runs after it), so
every rank's first forward already computes with rank 0's values. A module seen only while it
is being called (a lazy root module: hooks added during a call run from the next call on) is
broadcast at its optimizer's next step instead (`ready`).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter
from torch.utils.hooks import RemovableHandle

#: broadcast(tensors, what) -> whether every rank took part (False: a void round)
Broadcast = Callable[[list[torch.Tensor], str], bool]


def _own_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    return [*module.parameters(recurse=False), *module.buffers(recurse=False)]


def is_uninitialised(module: torch.nn.Module) -> bool:
    """Whether `module` itself (not its children) holds an uninitialised parameter or buffer."""
    return any(isinstance(t, (UninitializedParameter, UninitializedBuffer))
               for t in _own_tensors(module))


class LazyInitWatch:
    """Watches lazily initialised modules until their values were broadcast from rank 0.

    `enabled()` says whether a broadcast may run now. `watch(root)` hooks every still-uninitialised
    module under `root`; each hook fires at the module's next forward, after its own initialisation
    hook, and calls `broadcast` with the module's own tensors once none is uninitialised. A void
    round (the module ran on some ranks only) leaves it pending; `ready()` hands out pending
    modules that are initialised now (the step-time fallback). Modules are held strongly while
    pending: what is broadcast must not depend on garbage-collection timing, which differs between
    ranks."""

    def __init__(self, broadcast: Broadcast, enabled: Callable[[], bool]) -> None:
        self._broadcast = broadcast
        self._enabled = enabled     # False while the rank follows others or the user syncs
        self._pending: dict[int, torch.nn.Module] = {}
        self._hooks: dict[int, RemovableHandle] = {}

    def watch(self, root: torch.nn.Module) -> None:
        for module in root.modules():
            if id(module) in self._pending or not is_uninitialised(module):
                continue
            self._pending[id(module)] = module
            self._hooks[id(module)] = module.register_forward_pre_hook(self._on_call)

    def _on_call(self, module: torch.nn.Module, args: tuple) -> None:
        if torch.compiler.is_compiling() or not self._enabled() or is_uninitialised(module):
            return None
        self._hooks.pop(id(module)).remove()
        if self._broadcast(_own_tensors(module), f"{type(module).__name__}'s lazy values"):
            self._pending.pop(id(module), None)
        return None

    def ready(self) -> list[torch.Tensor]:
        """Own tensors of pending modules that are initialised now (no longer pending after)."""
        tensors: list[torch.Tensor] = []
        for key, module in list(self._pending.items()):
            if not is_uninitialised(module):
                tensors += _own_tensors(module)
                del self._pending[key]
                hook = self._hooks.pop(key, None)
                if hook is not None:
                    hook.remove()
        return tensors

    def close(self) -> None:
        for hook in self._hooks.values():
            hook.remove()
        self._hooks.clear()
        self._pending.clear()
