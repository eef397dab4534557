"""Seed sharding of a training loader over p ranks (the invariant is in `ShardSampler`'s
docstring; `intercept.loader` decides per epoch whether an epoch is sharded)."""
from __future__ import annotations

from typing import Callable, Iterator

import torch
from torch.utils.data import Sampler

__all__ = ["ShardSampler", "sharded_by_user", "why_whole_in_every_rank"]


def sharded_by_user(sampler: object, batch_sampler: object) -> bool:
    """Whether a loader's own ``sampler=`` (or its ``batch_sampler=``'s sampler) is a
    ``DistributedSampler``: the function shards its data itself, and each rank runs its part."""
    from torch.utils.data.distributed import DistributedSampler

    inner = getattr(batch_sampler, "sampler", None)
    return isinstance(sampler, DistributedSampler) or isinstance(inner, DistributedSampler)


def why_whole_in_every_rank(kind: str, dataset: object, sampler: object,
                        batch_sampler: object) -> str | None:
    """Why a loader built with these arguments (and not `sharded_by_user`) cannot be dealt
    out over the ranks, so that every rank runs all of its batches; None when it can. Dealing
    needs an index per item, drawn once per epoch on every rank (`ShardSampler`): a sized
    dataset (graph-level loaders), an index ``Sampler`` as ``sampler=`` and no
    ``batch_sampler=``, which makes the batches itself (PyG's ``DynamicBatchSampler``)."""
    from torch.utils.data import IterableDataset

    if batch_sampler is not None:
        return (f"its batch_sampler= ({type(batch_sampler).__name__}) makes the batches, "
                f"which cannot be dealt out: every rank runs every batch")
    if sampler is not None and not isinstance(sampler, Sampler):
        return (f"its sampler= ({type(sampler).__name__}) is not an index Sampler: every rank "
                f"runs every batch")
    if kind == "graph" and (isinstance(dataset, IterableDataset)
                            or not hasattr(dataset, "__len__")):
        return (f"its dataset ({type(dataset).__name__}) has no length to deal out: every "
                f"rank runs every batch")
    return None


class ShardSampler(Sampler[int]):
    """Epoch-wise common permutation of range(n), dealt out over p ranks batch by batch.

    Dealing: the permutation's positions form the global batches of b consecutive positions
    that one process would train (`batch_size` b, the user's; the last batch has the
    m = n mod b left, or is dropped with `drop_last`, as one process drops it). In each global
    batch, the position at offset o goes to rank o mod p. Rank r's per-rank batch of a full
    global batch is therefore c_r = ceil((b - r) / p) positions (b // p, plus one for the
    first b mod p ranks), and its loader's batch size is c_r (`rank_batch_size`): the k-th
    per-rank batches of the ranks together are exactly the k-th global batch, every position
    once. Where p does not divide b (or m) the ranks' batches differ by one seed, and the
    gradient synchroniser weighs each rank's gradient by its batch's seeds
    (`join.Decision.scale`), so that a mean loss averages as over the global batch. A rank
    with no position in a batch (the last batch's m < p, or b < p) is dealt that batch's
    first position once more, a padding batch of weight 0 (`padding`): every rank runs the
    same number of batches, and the padding adds nothing to the average. Without a batch
    size, b = p (plain striding).
    With `sharded = False` (an evaluation epoch) every rank yields the whole permutation.

    `shuffle=False` (a loader the user built without shuffling) makes the permutation the
    identity, every epoch: unsharded it yields 0, 1, ..., n-1 as PyG's SequentialSampler does.

    `source` (the loader's own ``sampler=``, e.g. PyG's ``ImbalancedSampler``) replaces the
    permutation: a sequence of n = len(source) positions (repeats allowed), dealt out as above.

    Which permutation an epoch deals: the one `take` was given for it, normally PyG's own,
    drawn from the function's generators as PyG's loader draws it (`draw_as_pyg`, called by
    `intercept.epoch_order` at the epoch's start); without one, the run seed's
    (`permutation`: a shuffle seeded from (seed, epoch); a source drawn with torch's global
    generator seeded so), the same on every rank by construction.

    `head` splits one epoch into two passes (`epoch_role.decided_after_first_batch`): set to
    h (one global batch), the next pass yields the first h positions of the epoch's
    permutation, unsharded, and leaves the epoch open; the pass after it yields the rest,
    positions h..n-1, dealt out (as above, from position h) or not, and closes the epoch. The
    two passes together draw the epoch's positions in the order one unsplit pass would;
    `close_epoch` ends an epoch whose second pass never ran."""

    def __init__(self, rank: int, world_size: int, seed: int, shuffle: bool = True,
                 source: Sampler | None = None, batch_size: int | None = None,
                 drop_last: bool = False, generator: torch.Generator | None = None) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        if batch_size is not None and int(batch_size) < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.batch_size = int(batch_size) if batch_size is not None else world_size
        self.drop_last = drop_last
        self.shuffle = shuffle and source is None
        self.source = source
        self.num_items = 0
        self.epoch = 0
        self.sharded = self.shuffle   # an unshuffled loader shards only once an epoch trains
        self.head: int | None = None
        self.generator = generator   # the loader's own generator= (PyG's shuffle draws on it)
        self._rest: torch.Tensor | None = None   # the open epoch's positions after its head
        self._taken: torch.Tensor | None = None  # the coming epoch's permutation (`take`)

    @property
    def items(self) -> int:
        """n: the positions one epoch draws."""
        return self.num_items if self.source is None else len(self.source)

    def rank_batch_size(self, rank: int | None = None) -> int:
        """c_r = ceil((b - r) / p): the positions rank r takes of a full global batch (at
        least 1, for a loader's batch size, where b < p leaves rank r none)."""
        r = self.rank if rank is None else rank
        return max(1, -(-(self.batch_size - r) // self.world_size))

    def uneven_batch(self) -> str | None:
        """Where p does not divide b: how each batch is dealt out, in words (a loader's
        record); else None."""
        if self.batch_size % self.world_size == 0:
            return None
        sizes = "/".join(str(self.rank_batch_size(r)) for r in range(self.world_size))
        return (f"batch size {self.batch_size} is not a multiple of the {self.world_size} "
                f"ranks: sharded epochs deal each batch out as {sizes} seeds, gradients "
                f"weighted by each rank's seeds")

    def _dealt_count(self, n: int, rank: int) -> int:
        """How many positions rank `rank` is dealt of n (`drop_last` applied; padding
        included)."""
        full, m = divmod(n, self.batch_size)
        last = 0 if self.drop_last or m == 0 else max(1, -(-(m - rank) // self.world_size))
        return full * self.rank_batch_size(rank) + last

    def padding(self, rank: int | None = None) -> Callable[[int], bool]:
        """For the sharded pass about to start (the whole epoch, or the rest after a head):
        whether rank `rank`'s k-th batch of it is a padding batch (the rank holds no position
        of that global batch and is dealt its first position again: weight 0)."""
        r = self.rank if rank is None else rank
        remaining = self.items if self._rest is None else self._rest.numel()
        full, m = divmod(remaining, self.batch_size)
        every, last = r >= self.batch_size, (not self.drop_last and 0 < m <= r)
        return lambda k: every or (last and k == full)

    def __len__(self) -> int:
        if self.head is not None:
            return min(self.head, self.items)
        remaining = self.items if self._rest is None else self._rest.numel()
        if not self.sharded:
            return remaining
        return self._dealt_count(remaining, self.rank)

    def close_epoch(self) -> None:
        """End the open epoch of a head pass whose second pass never ran (the user left the
        loop after its first batch)."""
        if self._rest is not None:
            self._rest = None
            self.epoch += 1

    def draw_as_pyg(self) -> torch.Tensor | None:
        """The coming epoch's positions as PyG's loader, unsharded, draws them at its first
        item, from the function's generators (advanced as that draw advances them); None for an
        unshuffled loader, which draws nothing (its order is the identity).

        A shuffling loader draws as torch's ``RandomSampler``: one int64 from torch's default
        generator seeds a generator of its own, whose ``randperm(n)`` is the order; given the
        loader's own ``generator=``, ``randperm(n)`` is drawn from that one, followed by the
        second, empty-sliced ``randperm(n)`` that ``RandomSampler`` draws when the epoch runs
        out. A `source` is iterated once (PyG's ``ImbalancedSampler`` draws its multinomial)."""
        if self.source is not None:
            return torch.as_tensor(list(iter(self.source)), dtype=torch.long)
        if not self.shuffle:
            return None
        n = self.num_items
        if self.generator is not None:
            perm = torch.randperm(n, generator=self.generator)
            torch.randperm(n, generator=self.generator)   # RandomSampler's run-out draw
            return perm
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
        return torch.randperm(n, generator=torch.Generator().manual_seed(seed))

    def take(self, perm: torch.Tensor | None) -> None:
        """The permutation the coming epoch deals (`draw_as_pyg`'s, agreed on every rank), or
        None: the run seed's (`permutation`)."""
        self._taken = perm

    def permutation(self, epoch: int) -> torch.Tensor:
        """The run seed's global permutation of `epoch` (identical on every rank), unpadded."""
        if self.source is not None:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed + epoch)
                perm = torch.as_tensor(list(iter(self.source)), dtype=torch.long)
        elif self.shuffle:
            gen = torch.Generator().manual_seed(self.seed + epoch)
            perm = torch.randperm(self.num_items, generator=gen)
        else:
            perm = torch.arange(self.num_items)
        return perm

    def _draw(self, epoch: int) -> torch.Tensor:
        """The unpadded global permutation of `epoch`: the one taken for it, else the run
        seed's."""
        perm, self._taken = self._taken, None
        return self.permutation(epoch) if perm is None else perm

    def dealt(self, perm: torch.Tensor, rank: int | None = None) -> torch.Tensor:
        """Rank `rank`'s positions of `perm` (the class docstring's dealing), in order."""
        r, b = self.rank if rank is None else rank, self.batch_size
        n = perm.numel()
        if self.drop_last:
            n = n // b * b
        keep = torch.arange(n) % b % self.world_size == r
        starts = torch.arange(0, n, b)
        keep[starts[(n - starts).clamp(max=b) <= r]] = True   # padding: a batch's first
        return perm[:n][keep]

    def __iter__(self) -> Iterator[int]:
        if self.head is not None:   # the open epoch's first positions, in every rank
            perm = self._draw(self.epoch)
            head, self.head, self._rest = perm[:self.head], None, perm[self.head:]
            return iter(head.tolist())
        perm = self._draw(self.epoch) if self._rest is None else self._rest
        self._rest = None
        self.epoch += 1
        if not self.sharded:   # the whole draw
            return iter(perm.tolist())
        return iter(self.dealt(perm).tolist())
