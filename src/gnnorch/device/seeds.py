"""The sampling generator policy of the device data path.

A loader served by the path samples with a `torch.Generator` of its own, on the device that
holds its graph structure, never with torch's global RNG: the sampling then runs in a producer
thread ahead of the trainer without touching the random stream of the user's step (dropout,
initialisation), and the batches it draws cannot depend on how far ahead it ran.

Policy: epoch ``e`` of loader ``l`` (the order in which the run built its loaders, equal on
every rank) in rank ``r`` of a run with seed ``s`` samples from a generator seeded with
`sampling_seed(s, r, l, e)`, a fixed mixing of the four numbers. So, with a fixed run seed and
the same ranks, every epoch's batches (a link loader's negative samples too, from a CPU
generator of the epoch's, `negatives`) repeat exactly whatever the prefetch depth, whether an
earlier epoch was left early (the batches drawn ahead and dropped do not shift later epochs),
and whatever the user's code draws from torch's RNG. A CUDA generator and a CPU generator with
the same seed draw different numbers: the same distribution, not the same batches.
"""
from __future__ import annotations

import torch

__all__ = ["SamplingGenerator", "sampling_seed"]

_MASK = (1 << 63) - 1


def sampling_seed(run_seed: int, rank: int, loader: int, epoch: int, stream: int = 0) -> int:
    """The seed of one epoch's sampling (the module docstring's policy): a splitmix64-style
    mixing of (run seed, rank, loader, epoch), so nearby tuples give unrelated streams;
    ``stream`` 1 (mixed in as a fifth part) seeds the same epoch's negative link samples."""
    value = 0x9E3779B97F4A7C15
    for part in (run_seed, rank, loader, epoch) + ((stream,) if stream else ()):
        value = (value ^ (int(part) & _MASK)) * 0xBF58476D1CE4E5B9 & ((1 << 64) - 1)
        value ^= value >> 31
    return value & _MASK


class SamplingGenerator:
    """One loader's sampling generators on `device`: a new one for each epoch (epochs of one
    loader may run at once, each drawing from its own)."""

    def __init__(self, device: torch.device | str, run_seed: int, rank: int,
                 loader: int) -> None:
        self.device = torch.device(device)
        self.run_seed, self.rank, self.loader = run_seed, rank, loader
        self.epochs = 0

    def next_epoch(self) -> torch.Generator:
        """A generator seeded for the next epoch of this loader."""
        seed = sampling_seed(self.run_seed, self.rank, self.loader, self.epochs)
        self.epochs += 1
        return torch.Generator(device=self.device).manual_seed(seed)

    def negatives(self) -> torch.Generator:
        """A CPU generator for the negative link samples of the epoch `next_epoch` last
        began (PyG draws negatives on the host, beside the host's supervision edges)."""
        epoch = self.epochs - 1
        return torch.Generator().manual_seed(
            sampling_seed(self.run_seed, self.rank, self.loader, epoch, stream=1))
