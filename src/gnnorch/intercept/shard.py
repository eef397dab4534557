"""Seed sharding of a training loader over p ranks (the invariant is in `ShardSampler`'s
docstring; `intercept.loader` decides per epoch whether an epoch is sharded)."""
from __future__ import annotations

from typing import Iterator

import torch
from torch.utils.data import Sampler

__all__ = ["ShardSampler", "shardable_sampler"]


def shardable_sampler(sampler: object) -> bool:
    """Whether a loader's own ``sampler=`` can be drawn once per epoch on every rank and
    strided over them: any index sampler except ``DistributedSampler`` (the function shards
    its data itself)."""
    from torch.utils.data.distributed import DistributedSampler

    return isinstance(sampler, Sampler) and not isinstance(sampler, DistributedSampler)


class ShardSampler(Sampler[int]):
    """Epoch-wise common permutation of range(n), padded by wrap-around to a multiple of p,
    strided over ranks: rank r yields positions r, r+p, ...; every rank yields ceil(n / p).
    With `sharded = False` (an evaluation epoch) every rank yields the whole unpadded
    permutation instead.

    `shuffle=False` (a loader the user built without shuffling) makes the permutation the
    identity, every epoch: unsharded it yields 0, 1, ..., n-1 as PyG's SequentialSampler
    does, and sharded the k-th per-rank batches of ceil(b / p) together are the k-th batch of
    b consecutive seeds that one process would draw.

    `source` (the loader's own ``sampler=``, e.g. PyG's ``ImbalancedSampler``) replaces the
    permutation: each epoch every rank draws it once with torch's global generator seeded
    from (seed, epoch), so that all ranks draw the same sequence of n = len(source) positions
    (repeats allowed), which is then padded and strided as above.

    `head` splits one epoch into two passes (`epoch_role.decided_after_first_batch`): set to
    h, the next pass yields the first h positions of the epoch's permutation, unsharded, and
    leaves the epoch open; the pass after it yields the rest, positions h..n-1, sharded (padded
    and strided as above) or not, and closes the epoch. The two passes together draw the
    epoch's positions in the order one unsplit pass would; `close_epoch` ends an epoch whose
    second pass never ran."""

    def __init__(self, rank: int, world_size: int, seed: int, shuffle: bool = True,
                 source: Sampler | None = None) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.shuffle = shuffle and source is None
        self.source = source
        self.num_items = 0
        self.epoch = 0
        self.sharded = self.shuffle   # an unshuffled loader shards only once an epoch trains
        self.head: int | None = None
        self._rest: torch.Tensor | None = None   # the open epoch's positions after its head

    @property
    def items(self) -> int:
        """n: the positions one epoch draws."""
        return self.num_items if self.source is None else len(self.source)

    def __len__(self) -> int:
        if self.head is not None:
            return min(self.head, self.items)
        remaining = self.items if self._rest is None else self._rest.numel()
        if not self.sharded:
            return remaining
        return -(-remaining // self.world_size)

    def close_epoch(self) -> None:
        """End the open epoch of a head pass whose second pass never ran (the user left the
        loop after its first batch)."""
        if self._rest is not None:
            self._rest = None
            self.epoch += 1

    def permutation(self, epoch: int) -> torch.Tensor:
        """The padded global permutation of `epoch` (identical on every rank)."""
        return self._padded(self._draw(epoch))

    def _draw(self, epoch: int) -> torch.Tensor:
        """The unpadded global permutation of `epoch`."""
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

    def _padded(self, perm: torch.Tensor) -> torch.Tensor:
        """`perm` padded by wrap-around to a multiple of p."""
        items = perm.numel()
        total = -(-items // self.world_size) * self.world_size
        if total > items > 0:
            repeats = -(-total // items)
            perm = perm.repeat(repeats)[:total]
        return perm

    def __iter__(self) -> Iterator[int]:
        if self.head is not None:   # the open epoch's first positions, in every rank
            perm = self._draw(self.epoch)
            head, self.head, self._rest = perm[:self.head], None, perm[self.head:]
            return iter(head.tolist())
        perm = self._draw(self.epoch) if self._rest is None else self._rest
        self._rest = None
        self.epoch += 1
        if not self.sharded:   # the whole draw, without the padding to a multiple of p
            return iter(perm.tolist())
        return iter(self._padded(perm)[self.rank::self.world_size].tolist())
