"""Which module calls the layer seam sees: every one while no model runs, only the model's own
exit while a model runs.

The seam needs the *outermost* module call on a batch (the model) and its end; the calls
nested inside it (a layer's `Linear`s, an activation, a norm) only need counting while their
outermost call is not known to end where it began. So:
* While no model runs, two global forward hooks (torch's public
  ``register_module_forward_pre_hook`` / ``register_module_forward_hook``) report every module
  call on the seam's thread (`on_enter`, `on_exit`).
* When the seam has entered an outermost model call (`narrow_to(module)`), a forward hook of
  that module alone, with ``always_call=True``, is registered for this one call, and the global
  hooks are removed. The nested calls then run torch's hook-free fast path and cost the seam
  nothing; the module's hook, at the call's end (returned or raised), removes itself, puts the
  global hooks back, then reports `on_exit`.

Invariant: between a `narrow_to` and its exit hook, the only module calls the seam does not see
are those nested inside that module's call. The layer calls it must see are seen at the class
(`patched_call`), whatever the hooks. Anything that resets the seam's depth to 0 mid-call
(`reset`, `widened`) puts the global hooks back, so a call it then enters is seen.

The transient hook lives in the module's ``_forward_hooks`` for one call only: a model the user
copies or pickles between forwards carries nothing of gnnorch's. A hook left by a call that never
reached its end (a ``BaseException`` in a forward) is removed at the next `reset` or at the end of
the run.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch.nn.modules.module import (register_module_forward_hook,
                                     register_module_forward_pre_hook)
from torch.utils.hooks import RemovableHandle

__all__ = ["ModuleCalls"]

OnEnter = Callable[[torch.nn.Module, tuple], None]
OnExit = Callable[..., Any]   # (module, args, kwargs, output=None) -> replacement output or None


class ModuleCalls:
    """The layer seam's module-boundary hooks (module docstring): global while no model runs,
    one transient forward hook of the model while it runs."""

    def __init__(self, on_enter: OnEnter, on_exit: OnExit) -> None:
        self._on_enter = on_enter
        self._on_exit = on_exit
        self._global: tuple[RemovableHandle, RemovableHandle] | None = None
        self._open: dict[int, RemovableHandle] = {}   # transient exit hooks not yet run
        self._spent: list[RemovableHandle] = []       # run, inert, removal deferred
        self._active = False     # between `installed()`'s entry and exit
        self.narrowed_calls = 0

    @contextlib.contextmanager
    def installed(self) -> Iterator["ModuleCalls"]:
        self._active = True
        self.attach()
        try:
            yield self
        finally:
            self._active = False
            self._close_open()
            self.detach()

    @property
    def attached(self) -> bool:
        """Whether the global hooks are registered (no model call narrowed to now)."""
        return self._global is not None

    def attach(self) -> None:
        if self._global is None and self._active:
            self._global = (register_module_forward_pre_hook(self._on_enter),
                            register_module_forward_hook(self._on_exit, with_kwargs=True,
                                                         always_call=True))

    def detach(self) -> None:
        if self._global is not None:
            for handle in self._global:
                handle.remove()
            self._global = None

    def narrow_to(self, module: torch.nn.Module) -> None:
        """An outermost model call of `module` has been entered (its pre-hook is running):
        until it ends, see only its end. A module that takes no forward hook (a TorchScript
        module: its nested calls run in TorchScript, unseen either way) keeps every call seen."""
        if isinstance(module, torch.jit.ScriptModule):
            return
        self._drop_spent()
        handle: RemovableHandle | None = None

        def exit_hook(mod: torch.nn.Module, args: tuple, kwargs: Any = None,
                      output: Any = None) -> Any:
            if self._open.pop(handle.id, None) is None:
                return None      # ran already, its removal deferred (`_release`)
            self._release(handle)
            self.attach()
            return self._on_exit(mod, args, kwargs, output)

        try:
            handle = module.register_forward_hook(exit_hook, with_kwargs=True, always_call=True)
        except (RuntimeError, TypeError, NotImplementedError):   # refuses hooks: stay global
            return
        self._open[handle.id] = handle
        self.narrowed_calls += 1
        self.detach()

    def reset(self) -> None:
        """No model call in flight: transient hooks of calls that never ended are removed and
        the global hooks are back."""
        self._close_open()
        self.attach()

    @contextlib.contextmanager
    def widened(self) -> Iterator[None]:
        """Every module call seen for the duration (a forward re-entered from inside another
        model's call: `LayerSeam.reentered`); narrowed again afterwards if it was."""
        was_narrowed = not self.attached
        self.attach()
        try:
            yield
        finally:
            if was_narrowed:
                self.detach()

    def _release(self, handle: RemovableHandle) -> None:
        """Remove a transient hook that has run. When forward raised, torch runs the module's
        always-called hooks while iterating its live hook dict: removing an entry that another
        follows would fail that iteration, so such a hook stays, inert, until the next
        `narrow_to`, `reset` or the run's end."""
        hooks = handle.hooks_dict_ref()
        if hooks is not None and next(reversed(hooks), None) != handle.id:
            self._spent.append(handle)
        else:
            handle.remove()

    def _drop_spent(self) -> None:
        for handle in self._spent:
            handle.remove()
        self._spent.clear()

    def _close_open(self) -> None:
        for handle in self._open.values():
            handle.remove()
        self._open.clear()
        self._drop_spent()
