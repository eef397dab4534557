"""Data-parallel synchronisation without wrapping the user's model.

Invariant: every rank holds identical parameters and buffers whenever a module computes.
* When an optimizer is built (its parameters) and at a root module's first forward (global
  forward pre-hook: its parameters and buffers), tensors not broadcast before are broadcast from
  rank 0, so models built with different random states start equal. Each tensor is broadcast
  once, so ranks that run different modules (a branch used on one rank only) still issue the
  same collectives.
* Before every optimizer step (global step pre-hook), the gradients of that optimizer's
  parameters are averaged over ranks: g <- (1/p) * sum_r g_r, in flat buckets per dtype and
  device. A parameter whose gradient is None on some ranks gets zeros there when any rank has one
  (one small all-reduce of flags decides), so all ranks reduce the same tensors in the same order.
  With equal per-rank batches of b/p seeds and a mean loss, the average is exactly the gradient of
  the mean loss over the global batch of b seeds.
* After averaging, floating-point buffers of the synced root modules (e.g. BatchNorm running
  statistics) are broadcast from rank 0, as DistributedDataParallel does.
Inside a torch.compile'd region the forward pre-hook does nothing (it is the first statement, so
dynamo traces it as a constant and adds no graph break): `torch.compile(model)` returns an
`OptimizedModule` whose own call runs eagerly and is the root module broadcast here, and
`model.compile()` keeps `model` itself as the eager root.
Optimizer updates are deterministic functions of (parameters, gradients, state), so parameters
stay identical. Modules whose parameters are still uninitialised (lazy) at their first forward
are broadcast at their optimizer's first step instead.
"""
from __future__ import annotations

import contextlib
import weakref
from typing import Any, Iterable, Iterator

import torch
import torch.distributed as dist
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter
from torch.optim.optimizer import register_optimizer_step_pre_hook

BUCKET_BYTES = 25 * 1024 * 1024


def _initialised(tensors: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    return [t for t in tensors if not isinstance(t, (UninitializedParameter, UninitializedBuffer))]


def _buckets(tensors: list[torch.Tensor], limit: int = BUCKET_BYTES) -> Iterator[list[torch.Tensor]]:
    """Group tensors by (dtype, device) into buckets of at most `limit` bytes (one tensor may
    exceed it alone). Order within a group is preserved, so every rank builds equal buckets."""
    groups: dict[tuple, list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.dtype, t.device), []).append(t)
    for group in groups.values():
        bucket: list[torch.Tensor] = []
        size = 0
        for t in group:
            nbytes = t.numel() * t.element_size()
            if bucket and size + nbytes > limit:
                yield bucket
                bucket, size = [], 0
            bucket.append(t)
            size += nbytes
        if bucket:
            yield bucket


class GradientSynchronizer:
    """Global hooks that keep ranks' models equal; install with `installed()`."""

    def __init__(self, world_size: int, device: torch.device | None = None,
                 distribution: Any = None) -> None:
        self.world_size = world_size
        # an `intercept.procgroup.UserDistribution`: once active, the user's code syncs
        self.distribution = distribution
        # nccl reduces only device tensors: CPU tensors are staged through this device.
        self.comm_device = device
        self._synced: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
        # Strong references: what is synced must not depend on garbage-collection timing, which
        # differs between ranks and would desynchronise the collectives.
        self._roots: list[torch.nn.Module] = []
        self._broadcast_params: dict[int, torch.Tensor] = {}
        self.steps = 0

    @contextlib.contextmanager
    def installed(self) -> Iterator["GradientSynchronizer"]:
        h1 = register_module_forward_pre_hook(self._on_forward)
        h2 = register_optimizer_step_pre_hook(self._on_step)
        original_init = torch.optim.Optimizer.__init__
        sync = self

        def __init__(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
            original_init(optimizer, *args, **kwargs)
            sync._on_optimizer(optimizer)

        torch.optim.Optimizer.__init__ = __init__
        try:
            yield self
        finally:
            torch.optim.Optimizer.__init__ = original_init
            h1.remove()
            h2.remove()

    def _user_managed(self) -> bool:
        return self.distribution is not None and self.distribution.active

    # -- collectives ----------------------------------------------------------------------
    def _flat_collective(self, bucket: list[torch.Tensor], op: str) -> None:
        """All-reduce-average (op="mean") or broadcast from rank 0 (op="broadcast") in place."""
        flat = torch.cat([t.detach().reshape(-1) for t in bucket])
        staged = self.comm_device is not None and flat.device != self.comm_device
        work = flat.to(self.comm_device) if staged else flat
        if op == "mean":
            dist.all_reduce(work)
            work.div_(self.world_size)
        else:
            dist.broadcast(work, src=0)
        if staged:
            flat = work.to(flat.device)
        else:
            flat = work
        offset = 0
        with torch.no_grad():
            for t in bucket:
                n = t.numel()
                t.copy_(flat[offset:offset + n].view_as(t))
                offset += n

    def broadcast(self, tensors: list[torch.Tensor]) -> None:
        for bucket in _buckets(tensors):
            self._flat_collective(bucket, "broadcast")

    def average(self, tensors: list[torch.Tensor]) -> None:
        for bucket in _buckets(tensors):
            self._flat_collective(bucket, "mean")

    # -- hooks ----------------------------------------------------------------------------
    def _on_forward(self, module: torch.nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling():  # compiled regions: the eager outer call broadcasts
            return None
        if module in self._synced or self._user_managed():
            return None
        params = [p for p in _initialised(module.parameters())
                  if id(p) not in self._broadcast_params]  # e.g. already at optimizer build
        buffers = [b for b in _initialised(module.buffers())
                   if id(b) not in self._broadcast_params]
        if params or buffers:
            self.broadcast(params + buffers)
        self._broadcast_params.update((id(t), t) for t in params + buffers)
        for sub in module.modules():
            self._synced.add(sub)
        self._roots.append(module)
        return None

    def _on_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """A new optimizer: its (initialised) parameters are broadcast from rank 0 now, before
        any forward, so that models whose forward runs compiled (`model.compile()`, where no
        eager forward pre-hook fires) also start equal on every rank."""
        if self._user_managed():
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        fresh = [p for p in _initialised(params) if id(p) not in self._broadcast_params]
        if fresh:
            self.broadcast(fresh)
            self._broadcast_params.update((id(p), p) for p in fresh)

    def _on_step(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        if self._user_managed():
            return
        # `args` holds the step's positional arguments including the optimizer itself.
        closure = args[1] if len(args) > 1 else kwargs.get("closure")
        if closure is not None:
            raise NotImplementedError(
                f"{type(optimizer).__name__}.step(closure) re-evaluates the loss inside the step; "
                "gnnorch averages gradients before the step and cannot follow a closure. Use an "
                "optimizer without closure, or processes=1.")
        params = [p for group in optimizer.param_groups for p in group["params"]]
        late = [p for p in _initialised(params) if id(p) not in self._broadcast_params]
        if late:  # lazily initialised parameters: make them equal before the first update
            self.broadcast(late)
            self._broadcast_params.update((id(p), p) for p in late)
        for p in params:
            if p.grad is not None and p.grad.is_sparse:
                raise NotImplementedError(
                    "sparse gradients (e.g. Embedding(sparse=True)) are not averaged by gnnorch; "
                    "use dense gradients or processes=1")
        flags = torch.tensor([p.grad is not None for p in params], dtype=torch.int32)
        self._sum_flags(flags)
        grads = []
        for p, flag in zip(params, flags.tolist()):
            if flag:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                grads.append(p.grad)
        self.average(grads)
        self._broadcast_buffers()
        self.steps += 1

    def _sum_flags(self, flags: torch.Tensor) -> None:
        if self.comm_device is not None:
            staged = flags.to(self.comm_device)
            dist.all_reduce(staged)
            flags.copy_(staged.cpu())
        else:
            dist.all_reduce(flags)

    def _broadcast_buffers(self) -> None:
        buffers = [b for module in self._roots for b in _initialised(module.buffers())
                   if b.is_floating_point()]
        if buffers:
            self.broadcast(buffers)
