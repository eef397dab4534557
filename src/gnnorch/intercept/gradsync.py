"""Data-parallel synchronisation without wrapping the user's model, even and uneven ranks.

Invariant: every rank holds identical parameters, buffers and optimizer states whenever a
module computes, also when ranks take different numbers of optimizer steps.
* When an optimizer is built (its parameters) and at a root module's first forward (global
  forward pre-hook: its parameters and buffers), tensors not broadcast before are broadcast from
  rank 0, so models built with different random states start equal. Each tensor is broadcast
  once. A module first run on some ranks only (e.g. built for an evaluation on rank 0) is not
  broadcast: it stays that rank's own (`join`: a void round).
* Before every optimizer step (global step pre-hook) the ranks meet in a round (`join`): the
  k-th step of every rank within a training epoch is averaged with the others' k-th step,
  g <- (1/c) * sum_{r stepping} g_r over the c ranks that step, in flat buckets per dtype and
  device; where the steppers trained different numbers of seeds since their last step (p does
  not divide the batch size, an epoch's last batch), each is weighed by its seeds,
  g <- sum_r w_r g_r / sum_r w_r (`step_weight`, `join.Decision.scale`). A parameter whose
  gradient is None on some stepping ranks gets zeros there when any has one; one without a
  gradient on every stepping rank keeps None everywhere. With equal
  per-rank batches of b/p seeds and a mean loss (c = p), the average is exactly the gradient of
  the mean loss over the global batch of b seeds; with unequal ones, the weighted average is.
  Ranks pair their tensors in an order that is the same on every rank (`param_order`), also
  for an optimizer built from a ``set`` of parameters, whose own order is not. Sparse
  gradients (``Embedding(sparse=True)`` with ``SparseAdam``) are averaged as sparse tensors
  over the union of the ranks' rows (`step_grads`).
* Uneven ranks: a rank whose training epoch ended (its loop ran out or it left with `break`)
  joins before its next step; until every rank has ended that epoch it *follows* the others'
  steps: it contributes no gradient, receives the average and applies the same update (its own
  optimizer, the stepping rank's hyper-parameters). After its function returns a rank follows
  until every rank's has. So a rank-dependent `break`, loaders of different lengths, a skipped
  step (`if loss.isfinite(): opt.step()`) or an evaluation on one rank run to completion with
  identical models; steps that cannot be matched raise `UnevenRanksError` on every rank.
* With the gradients, floating-point buffers of the synced root modules (e.g. BatchNorm
  running statistics) take the first stepping rank's values, as DistributedDataParallel
  broadcasts rank 0's: in the gradients' all-reduce, where the other ranks send zeros for them
  (`FlatCollectives.average_and_share`: one collective a step fewer than a broadcast).
Every wait is bounded by the run's collective timeout (`join.Rounds`).
Inside a torch.compile'd region the forward pre-hook does nothing (it is the first statement, so
dynamo traces it as a constant and adds no graph break): `torch.compile(model)` returns an
`OptimizedModule` whose own call runs eagerly and is the root module broadcast here, and
`model.compile()` keeps `model` itself as the eager root.
Modules whose parameters are still uninitialised (lazy) at their root's first forward are
broadcast again, all their own tensors, right after their own initialisation and before they
compute (`lazy_init`); at their optimizer's next step when that moment was missed.
"""
from __future__ import annotations

import contextlib
import weakref
from typing import Any, Callable, Iterable, Iterator

import torch
import torch.distributed as dist
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter
from torch.optim.optimizer import register_optimizer_step_pre_hook

from ..compat.grad_clip import total_norm_replaced
from ..launch import context
from .clipnorm import AveragedNorm
from .collectives import FlatCollectives, Optimizers, hyper_slots, hyper_values
from .join import Ask, Decision, Kind, Rounds
from .lazy_init import LazyInitWatch
from .param_order import unordered
from .procgroup import UserDistribution
from .step_grads import gradient_layouts, round_gradients
from .step_weight import StepWeight, weigh

DEFAULT_BOUND = 1800.0   # seconds: torch's default collective timeout, when the group has none


def _initialised(tensors: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    return [t for t in tensors if not isinstance(t, (UninitializedParameter, UninitializedBuffer))]



def _epochs_ended_in_context() -> int:
    """Training epochs the active rank context records as ended (0 outside a run)."""
    ctx = context.current()
    return len(ctx.epochs) if ctx is not None else 0


def _default_bound() -> float:
    from ..compat.distributed import default_group_timeout

    timeout = default_group_timeout()
    return timeout.total_seconds() if timeout is not None else DEFAULT_BOUND


class GradientSynchronizer:
    """Global hooks that keep ranks' models equal; install with `installed()`.

    `epochs_ended` counts the training epochs this rank has ended (default: the active rank
    context's epoch records, which the loader seam appends when an epoch's iterator closes);
    `bound` is the longest wait in one collective (default: the default group's timeout)."""

    def __init__(self, world_size: int, device: torch.device | None = None,
                 distribution: UserDistribution | None = None, *,
                 epochs_ended: Callable[[], int] | None = None,
                 trained: Callable[[], tuple[int, int]] | None = None,
                 bound: float | None = None) -> None:
        self.world_size = world_size
        # once active, the user's code syncs
        self.distribution = distribution
        # nccl reduces only device tensors: CPU tensors are staged through this device.
        self.comm_device = device
        self.collectives = FlatCollectives(world_size, device)
        self.epochs_ended = epochs_ended or _epochs_ended_in_context
        self.weight = StepWeight(trained)   # this rank's weight in a step's average
        self.bound = bound
        self._synced: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
        # Strong references: what is synced must not depend on garbage-collection timing, which
        # differs between ranks and would desynchronise the collectives.
        self.roots: list[torch.nn.Module] = []   # root modules synced at their first forward
        self._broadcast_params: dict[int, torch.Tensor] = {}
        self.optimizers = Optimizers()
        self._lazy = LazyInitWatch(
            self._broadcast_lazy, lambda: not self._following and not self._user_managed())
        self._rounds: Rounds | None = None
        self._norms = AveragedNorm(self)
        self._following = False
        self._epochs_seen = 0
        self._epoch_steps = 0
        self.steps = 0
        self.stats = {"steps": 0, "followed_steps": 0, "epoch_joins": 0, "void_broadcasts": 0,
                      "rounds": 0}

    @contextlib.contextmanager
    def installed(self) -> Iterator["GradientSynchronizer"]:
        bound = self.bound if self.bound is not None else _default_bound()
        self._rounds = Rounds(dist.get_rank(), self.world_size, bound)
        hooks = [register_module_forward_pre_hook(self._on_forward),
                 register_optimizer_step_pre_hook(self._on_step)]
        original_init = torch.optim.Optimizer.__init__
        sync = self

        def __init__(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
            original_init(optimizer, *args, **kwargs)
            sync._on_optimizer(optimizer, unordered(args, kwargs))

        torch.optim.Optimizer.__init__ = __init__
        try:
            with total_norm_replaced(self._norms.total_norm), \
                    self.optimizers.order.installed():   # clip_grad_norm_ (clipnorm), param_order
                yield self
                if not self._user_managed():   # the function returned: follow until all have
                    self.wait(Kind.FINAL)
        finally:
            torch.optim.Optimizer.__init__ = original_init
            for hook in hooks:
                hook.remove()
            self._lazy.close()
            self.stats["rounds"], self.stats["clip_norms"] = self._rounds.count, self._norms.rounds
            self._rounds.close()
            ctx = context.current()
            if ctx is not None:
                ctx.stats["gradsync"] = dict(self.stats)

    def _user_managed(self) -> bool:
        return self.distribution is not None and self.distribution.active

    def averaging(self) -> bool:
        """Whether gnnorch averages this rank's gradients now (`clipnorm.NormHost`)."""
        return not self._following and not self._user_managed()

    # -- collectives ----------------------------------------------------------------------
    @property
    def rounds(self) -> Rounds:
        assert self._rounds is not None, "installed() makes the rounds"
        return self._rounds

    def ask(self, kind: Kind, **fields: Any) -> Ask:
        return Ask(kind, epoch=self._epochs_seen, step=self._epoch_steps, **fields)

    def _broadcast_round(self, tensors: list[torch.Tensor], what: str) -> bool:
        """Broadcast `tensors` from rank 0 if every rank asks for the same in this round;
        False (nothing sent) when the round is void."""
        decision = self._rounds.round(self.ask(Kind.BROADCAST, tensors=len(tensors),
                                                numel=sum(t.numel() for t in tensors)))
        if decision.action != "broadcast":
            self.stats["void_broadcasts"] += 1
            return False
        with self._rounds.collective(f"the broadcast of {what}"):
            self.collectives.broadcast(tensors)
        return True

    def _broadcast_lazy(self, tensors: list[torch.Tensor], what: str) -> bool:
        shared = self._broadcast_round(tensors, what)
        self._broadcast_params.update((id(t), t) for t in tensors if shared)
        return shared

    # -- hooks ----------------------------------------------------------------------------
    def _on_forward(self, module: torch.nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling():  # compiled regions: the eager outer call broadcasts
            return None
        if module in self._synced or self._user_managed():
            return None
        self.optimizers.order.note(module.parameters())   # the module tree's order
        if self._following:
            return None
        params = [p for p in _initialised(module.parameters())
                  if id(p) not in self._broadcast_params]  # e.g. already at optimizer build
        buffers = [b for b in _initialised(module.buffers())
                   if id(b) not in self._broadcast_params]
        shared = True
        if params or buffers:
            shared = self._broadcast_round(params + buffers,
                                           f"{type(module).__name__}'s first forward")
        self._broadcast_params.update((id(t), t) for t in params + buffers)
        for sub in module.modules():
            self._synced.add(sub)
        if shared:
            self.roots.append(module)
            self._lazy.watch(module)
        return None

    def _on_optimizer(self, optimizer: torch.optim.Optimizer, unordered: bool) -> None:
        """A new optimizer: its (initialised) parameters are broadcast from rank 0 now, before
        any forward, so that models whose forward runs compiled (`model.compile()`, where no
        eager forward pre-hook fires) also start equal on every rank (of a set: `shareable`)."""
        if self._following or self._user_managed():
            return
        self.optimizers.add(optimizer, unordered)
        fresh = [p for p in _initialised(self.optimizers.shareable(optimizer))
                 if id(p) not in self._broadcast_params]
        if fresh:
            self._broadcast_round(fresh, f"{type(optimizer).__name__}'s parameters")
            self._broadcast_params.update((id(p), p) for p in fresh)

    @property
    def optimizers_built(self) -> int:
        """Optimizers built (or first stepped) in this rank's run so far."""
        return len(self.optimizers)

    def _on_step(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        if self._following or self._user_managed():
            return
        params = self.optimizers.params(optimizer)
        _check_step(optimizer, args, kwargs)
        index = self.optimizers.index(optimizer)   # known before `join_if_ended` keeps grads
        late = [p for p in _initialised(params) if id(p) not in self._broadcast_params]
        known = {id(p) for p in late}
        late += [t for t in self._lazy.ready() if id(t) not in known]
        if late:  # lazily initialised parameters: make them equal before the first update
            self._broadcast_round(late, f"{type(optimizer).__name__}'s lazy parameters")
            self._broadcast_params.update((id(p), p) for p in late)
        self.join_if_ended()
        slots = hyper_slots(optimizer)
        buffers = _float_buffers(self.roots)
        ask = self.ask(Kind.STEP, optimizer=index, tensors=len(params),
                        numel=sum(p.numel() for p in params), buffers=len(buffers),
                        hypers=len(slots), all_grads=all(p.grad is not None for p in params),
                        hyper_sum=sum(hyper_values(optimizer, slots)),
                        weight=self.weight.now(),
                        sparse=sum(p.grad is not None and p.grad.is_sparse for p in params))
        decision = self._rounds.round(ask)
        while decision.action != "step":   # void: a rank asked for a broadcast meanwhile
            decision = self._rounds.round(ask)
        self._step_collectives(optimizer, params, decision, stepping=True, buffers=buffers)
        self.weight.stepped()
        self.steps += 1
        self._epoch_steps += 1
        self.stats["steps"] = self.steps

    # -- uneven ranks ---------------------------------------------------------------------
    def join_if_ended(self, kind: Kind = Kind.JOIN, **fields: int) -> Decision | None:
        """If this rank's training epoch ended since its last step, follow the others until
        they end it too, asking `kind` (JOIN; ORDER, with `fields`, asked at a sharded epoch's
        start even if none ended: `epoch_order`); this step's gradients are kept. The round
        that released this rank, if one ran."""
        ended = self.epochs_ended() if self.epochs_ended is not None else 0
        if ended <= self._epochs_seen:
            return None if kind == Kind.JOIN else self.wait(kind, **fields)
        self._epochs_seen = ended
        own = [(p, p.grad) for p in self.optimizers.parameters()]
        decision = self.wait(kind, **fields)
        for p, grad in own:
            p.grad = grad
        self._epoch_steps = 0
        self.stats["epoch_joins"] += 1
        return decision

    def wait(self, kind: Kind, **fields: int) -> Decision:
        """JOIN / FINAL / ORDER (`fields`: the ask's): follow the other ranks' steps until this
        rank may go on (`join`); the round that released it."""
        ask = self.ask(kind, **fields)
        while True:
            decision = self.rounds.round(ask)
            if decision.action == "step":
                self._follow(decision)
            elif decision.action == "norm":
                self._norms.follow(decision)
            elif decision.released(self.rounds.rank):
                return decision

    def _follow(self, decision: Decision) -> None:
        """Apply the step the stepping ranks take, contributing no gradient."""
        index = decision.optimizer
        optimizer = self.optimizers.get(index)
        params = self.optimizers.params(optimizer) if optimizer is not None else []
        self._step_collectives(optimizer, params, decision, stepping=False)
        self._following = True
        try:
            optimizer.step()
        finally:
            self._following = False
        self.stats["followed_steps"] += 1

    def _step_collectives(self, optimizer: torch.optim.Optimizer | None,
                          params: list[torch.Tensor], decision: Decision,
                          stepping: bool, buffers: list[torch.Tensor] | None = None) -> None:
        """The collectives of one step round, in every rank (steppers and followers): the
        gradients' average and the source's floating `buffers` (listed here when None) in
        one all-reduce a bucket (`average_and_share`), then the source's hyper-parameters."""
        rounds = self._rounds
        what = decision.asks[decision.source].where()
        buffers = _float_buffers(self.roots) if buffers is None else buffers
        if decision.followers:   # followers check they hold the same optimizer, then adopt
            mine = (Ask(Kind.STEP, self.optimizers.index(optimizer), len(params),
                        sum(p.numel() for p in params), len(buffers),
                        len(hyper_slots(optimizer))).signature()
                    if optimizer is not None else (-1, 0, 0, 0, 0))
            rounds.agree(mine, f"the step that rank {decision.source} takes at {what}")
        present, sparse = [True] * len(params), [False] * len(params)
        if decision.flags_needed or decision.sparse_needed:
            with rounds.collective(f"which gradients exist at {what}"):
                present, sparse = gradient_layouts(self.collectives, params, stepping)
        grads, rows = round_gradients(params, present, sparse, stepping)
        weigh(grads + [p.grad for p in rows],
              decision.scale(rounds.rank) if stepping else 1.0)   # by its seeds
        with rounds.collective(f"the gradient average of {what}"):
            self.collectives.average_and_share(grads, len(decision.steppers), buffers,
                                               owner=self._rounds.rank == decision.source)
            averaged = self.collectives.average_rows([p.grad for p in rows],
                                                     len(decision.steppers))
            for p, grad in zip(rows, averaged):
                p.grad = grad
            if decision.adopt_hypers:
                self.collectives.adopt_hypers(optimizer, decision.source)


def _float_buffers(roots: list[torch.nn.Module]) -> list[torch.Tensor]:
    """The floating-point buffers of the synced root modules (a step shares the source's)."""
    return [b for module in roots for b in _initialised(module.buffers())
            if b.is_floating_point()]


def _check_step(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
    """What a step must not do for gnnorch to average it (`args`: the step's positional
    arguments, the optimizer itself first)."""
    closure = args[1] if len(args) > 1 else kwargs.get("closure")
    if closure is not None:
        raise NotImplementedError(
            f"{type(optimizer).__name__}.step(closure) re-evaluates the loss inside the step; "
            "gnnorch averages gradients before the step and cannot follow a closure. Use an "
            "optimizer without closure, or processes=1.")
