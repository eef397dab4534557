"""The gradient seam's collectives on flat buckets, and an optimizer's hyper-parameters as data.

`FlatCollectives` averages or broadcasts lists of tensors in place (or both at once: an
average and one rank's values in one all-reduce, `average_and_share`), in buckets of at most
`BUCKET_BYTES` per (dtype, device), staged through `comm_device` when the group reduces device
tensors only (nccl). Every rank builds the same buckets from the same list, so the collectives
match. `Optimizers`: the run's optimizers in construction order, the index by which rounds
name them (`intercept.join`), and their parameters in an order the same on every rank
(`param_order`). `hyper_slots` / `hyper_values` / `adopt_hypers` read and write
the numeric hyper-parameters of an optimizer's param groups (``lr``, ``betas``, ...) in a
fixed order, so a following rank can take the stepping rank's values (`intercept.join`).
"""
from __future__ import annotations

from typing import Iterator

import torch
import torch.distributed as dist
from torch.nn.parameter import is_lazy

from .param_order import ParameterOrder

BUCKET_BYTES = 25 * 1024 * 1024


def buckets(tensors: list[torch.Tensor], limit: int = BUCKET_BYTES) -> Iterator[list[torch.Tensor]]:
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


class Optimizers:
    """The optimizers of one rank's run, in the order they were built (or first stepped, for
    one built before the run's hooks): the same order on every rank, so an index names the
    same optimizer everywhere. Their parameters are listed in `order` (`param_order`), the
    same on every rank whatever the collection an optimizer was built from."""

    def __init__(self) -> None:
        self._built: list[torch.optim.Optimizer] = []
        self._unordered: set[int] = set()   # ids of those built from a set
        self.order = ParameterOrder()

    def __len__(self) -> int:
        return len(self._built)

    def add(self, optimizer: torch.optim.Optimizer, unordered: bool = False) -> None:
        self._built.append(optimizer)
        if unordered:
            self._unordered.add(id(optimizer))

    def get(self, index: int) -> torch.optim.Optimizer | None:
        return self._built[index] if 0 <= index < len(self._built) else None

    def index(self, optimizer: torch.optim.Optimizer) -> int:
        """`optimizer`'s index, added at the end if new (built before the hooks)."""
        for i, known in enumerate(self._built):
            if known is optimizer:
                return i
        self._built.append(optimizer)
        return len(self._built) - 1

    def unordered(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether `optimizer` was built from an unordered collection (`param_order`)."""
        return id(optimizer) in self._unordered

    def shareable(self, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        """The parameters of a new `optimizer` that can be broadcast now, in `order`: all of
        them, or of one built from an unordered collection those that have a number (a
        module registered them in this rank); the others are broadcast when their module
        first runs forward, or at the first step."""
        if not self.unordered(optimizer):
            return self.params(optimizer)
        numbered = [p for p in _with_data(optimizer) if self.order.number(p) is not None]
        return sorted(numbered, key=self.order.number)

    def params(self, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
        """`optimizer`'s parameters that hold data, in `order`. A lazy parameter that no
        forward has materialised yet (`UninitializedParameter`: a `LazyLinear`, or PyG's
        ``in_channels=-1``, never called) has neither data nor gradient, and the optimizer
        skips it; it joins this list once a forward gives it a shape (PyTorch turns the same
        object into a `Parameter`). Every rank runs the same model, so the list is the same
        in every rank; where it is not, the step rounds' signatures disagree (`join`)."""
        return self.order.sorted(_with_data(optimizer), self.unordered(optimizer))

    def parameters(self) -> list[torch.Tensor]:
        """Every parameter of every optimizer, once each, in construction order."""
        return list({id(p): p for o in self._built for p in self.params(o)}.values())


def _with_data(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """`optimizer`'s parameters in group order, less the lazy ones (`Optimizers.params`)."""
    return [p for group in optimizer.param_groups for p in group["params"] if not is_lazy(p)]


def hyper_slots(optimizer: torch.optim.Optimizer) -> list[tuple[int, str, int]]:
    """(group, key, position) of every numeric hyper-parameter (lr, betas, ...) of `optimizer`,
    in a fixed order (position -1: a scalar, else the index in a tuple)."""
    slots = []
    for g, group in enumerate(optimizer.param_groups):
        for key in sorted(k for k in group if k != "params"):
            value = group[key]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                slots.append((g, key, -1))
            elif isinstance(value, tuple) and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
                slots += [(g, key, i) for i in range(len(value))]
    return slots


def hyper_values(optimizer: torch.optim.Optimizer,
                 slots: list[tuple[int, str, int]]) -> list[float]:
    groups = optimizer.param_groups
    return [float(groups[g][k] if i < 0 else groups[g][k][i]) for g, k, i in slots]


class FlatCollectives:
    """Bucketed in-place collectives on the default group (see the module docstring)."""

    def __init__(self, world_size: int, comm_device: torch.device | None = None) -> None:
        self.world_size = world_size
        self.comm_device = comm_device

    def _staged(self, flat: torch.Tensor) -> torch.Tensor:
        """`flat` on the device collectives reduce (itself when it is there already)."""
        if self.comm_device is not None and flat.device != self.comm_device:
            return flat.to(self.comm_device)
        return flat

    def _reduce(self, bucket: list[torch.Tensor], contributors: int, sharing: set[int],
                owner: bool) -> None:
        """One all-reduce of `bucket` in place: a tensor whose id is in `sharing` takes the sum
        as it is (only the owner sends its values, the other ranks zeros), every other one the
        sum divided by `contributors` (the ranks sending their own values)."""
        flat = torch.cat([t.detach().reshape(-1) if owner or id(t) not in sharing
                          else t.new_zeros(t.numel()) for t in bucket])
        work = self._staged(flat)
        dist.all_reduce(work)
        work = work.to(flat.device) if work is not flat else work
        divisor = contributors or self.world_size
        offset = 0
        with torch.no_grad():
            for t in bucket:
                n = t.numel()
                part = work[offset:offset + n].view_as(t)
                t.copy_(part if id(t) in sharing else part / divisor)
                offset += n

    def broadcast(self, tensors: list[torch.Tensor], src: int = 0) -> None:
        for bucket in buckets(tensors):
            flat = torch.cat([t.detach().reshape(-1) for t in bucket])
            work = self._staged(flat)
            dist.broadcast(work, src=src)
            work = work.to(flat.device) if work is not flat else work
            offset = 0
            with torch.no_grad():
                for t in bucket:
                    n = t.numel()
                    t.copy_(work[offset:offset + n].view_as(t))
                    offset += n

    def average(self, tensors: list[torch.Tensor], contributors: int = 0) -> None:
        """g <- (1/contributors) * sum over ranks (ranks that do not contribute send zeros)."""
        self.average_and_share(tensors, contributors, [], owner=False)

    def average_and_share(self, tensors: list[torch.Tensor], contributors: int,
                          shared: list[torch.Tensor], owner: bool) -> None:
        """`tensors` averaged as `average` does, and `shared` given the values of the one rank
        that calls with `owner` True, in the same all-reduces: the other ranks send zeros for
        them, and x + 0 + ... + 0 = x, so every rank gets the owner's values exactly (as a
        broadcast from it would give them; a -0.0 arrives as 0.0). Saves one collective a
        step over `average` then `broadcast`."""
        sharing = {id(t) for t in shared}
        for bucket in buckets(list(tensors) + list(shared)):
            self._reduce(bucket, contributors, sharing, owner)

    def average_rows(self, grads: list[torch.Tensor], contributors: int) -> list[torch.Tensor]:
        """Row-sparse gradients (sparse COO tensors with one sparse dimension: an
        ``Embedding(sparse=True)``'s) averaged over the ranks: for each, the sum over ranks
        divided by `contributors` (a rank that contributes nothing sends an empty one), as new
        coalesced tensors. The sum runs over the union of the ranks' rows, so a row only one
        rank touched is in it, as in one process over every rank's batch; summing the rows
        gathered from every rank is exact, whereas an all-reduce of the dense table would cost
        its full size every step. One all-gather of the row counts, then per tensor one of its
        row indices and one of its rows, padded to the largest count (every rank sends equal
        sizes)."""
        if not grads:
            return []
        merged = [g.coalesce() for g in grads]
        counts = torch.tensor([g._nnz() for g in merged], dtype=torch.long)
        every = self._gathered(counts)
        divisor = contributors or self.world_size
        out = []
        for i, g in enumerate(merged):
            sizes = [int(c[i]) for c in every]
            width = max(sizes)
            rows = torch.zeros(width, dtype=torch.long, device=g.device)
            rows[:g._nnz()] = g.indices()[0]
            values = g.values().new_zeros((width, *g.shape[1:]))
            values[:g._nnz()] = g.values()
            all_rows, all_values = self._gathered(rows), self._gathered(values)
            index = torch.cat([r[:n] for r, n in zip(all_rows, sizes)]).to(g.device)
            total = torch.cat([v[:n] for v, n in zip(all_values, sizes)]).to(g.device)
            summed = torch.sparse_coo_tensor(index.view(1, -1), total, g.shape,
                                             check_invariants=False).coalesce()
            out.append(summed / divisor)
        return out

    def _gathered(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's `tensor` (equal shapes), in rank order, on the device it was on."""
        work = self._staged(tensor)
        parts = [torch.empty_like(work) for _ in range(self.world_size)]
        dist.all_gather(parts, work)
        return [part.to(tensor.device) for part in parts]

    def sum_flags(self, flags: torch.Tensor) -> None:
        """Sum an int tensor over ranks in place."""
        if self.comm_device is not None:
            staged = flags.to(self.comm_device)
            dist.all_reduce(staged)
            flags.copy_(staged.cpu())
        else:
            dist.all_reduce(flags)

    def adopt_hypers(self, optimizer: torch.optim.Optimizer, source: int) -> None:
        """Every rank takes `source`'s numeric hyper-parameters (a scheduler stepped per batch
        moves the learning rate only on the ranks that step)."""
        slots = hyper_slots(optimizer)
        if not slots:
            return
        groups = optimizer.param_groups
        values = torch.tensor(hyper_values(optimizer, slots), dtype=torch.float64)
        self.broadcast([values], src=source)
        for (g, k, i), value in zip(slots, values.tolist()):
            old = groups[g][k]
            if i < 0:
                groups[g][k] = type(old)(value)
            else:
                items = list(old)
                items[i] = type(old[i])(value)
                groups[g][k] = tuple(items)
