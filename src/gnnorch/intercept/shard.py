"""Seed sharding of a training loader over p ranks (the invariant is in `ShardSampler`'s
docstring; `intercept.loader` decides per epoch whether an epoch is sharded)."""
from __future__ import annotations

from typing import Iterator

import torch
from torch.utils.data import Sampler

__all__ = ["ShardSampler"]


class ShardSampler(Sampler[int]):
    """Epoch-wise common permutation of range(n), padded by wrap-around to a multiple of p,
    strided over ranks: rank r yields positions r, r+p, ...; every rank yields ceil(n / p).
    With `sharded = False` (an evaluation epoch) every rank yields the whole unpadded
    permutation instead.

    `shuffle=False` (a loader the user built without shuffling) makes the permutation the
    identity, every epoch: unsharded it yields 0, 1, ..., n-1 as PyG's SequentialSampler
    does, and sharded the k-th per-rank batches of ceil(b / p) together are the k-th batch of
    b consecutive seeds that one process would draw."""

    def __init__(self, rank: int, world_size: int, seed: int, shuffle: bool = True) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.shuffle = shuffle
        self.num_items = 0
        self.epoch = 0
        self.sharded = shuffle   # an unshuffled loader shards only once an epoch trains

    def __len__(self) -> int:
        if not self.sharded:
            return self.num_items
        return -(-self.num_items // self.world_size)

    def permutation(self, epoch: int) -> torch.Tensor:
        """The padded global permutation of `epoch` (identical on every rank)."""
        if self.shuffle:
            gen = torch.Generator().manual_seed(self.seed + epoch)
            perm = torch.randperm(self.num_items, generator=gen)
        else:
            perm = torch.arange(self.num_items)
        total = -(-self.num_items // self.world_size) * self.world_size
        if total > self.num_items > 0:
            repeats = -(-total // self.num_items)
            perm = perm.repeat(repeats)[:total]
        return perm

    def __iter__(self) -> Iterator[int]:
        perm = self.permutation(self.epoch)
        self.epoch += 1
        if not self.sharded:
            return iter(perm[:self.num_items].tolist())
        return iter(perm[self.rank::self.world_size].tolist())
