"""`sampler="auto"`: choose between gnnorch's vectorised sampler and pyg-lib's by measurement.

Both draw from the same distribution (uniform k-subsets per vertex, every vertex expanded once
at the hop it first appears), so the choice is about speed only, and which is faster depends on
the graph (degree distribution, fanout, batch size) and the threads a sampling call gets. So
`choose_sampler` times both on the loader's own graph: `rounds` batches of `batch_size` seeds
drawn from the loader's input vertices with a private generator (the user's random stream is
untouched), each batch sampled by both backends in alternating order, at the thread count the
loader's sampling will have (1 in DataLoader workers, else the caller's). Each backend's time
is the median over batches; the faster wins, and the times and the measuring cost are kept for
the report. One decision per (graph, fanout, batch size, threads) per process: later loaders on
the same graph reuse it without measuring.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any, Callable

import torch
from torch import Tensor

__all__ = ["SamplerChoice", "choose_sampler", "seed_pool", "forget_choices"]


@dataclasses.dataclass(frozen=True)
class SamplerChoice:
    """The measured decision for one loader's graph and shape."""

    backend: str                   # "gnnorch" or "pyg-lib"
    ms_per_batch: dict[str, float]  # median sampling milliseconds per batch, per backend
    measure_s: float               # seconds spent measuring (0.0 when the decision was reused)
    threads: int
    reused: bool = False

    @property
    def reason(self) -> str:
        times = ", ".join(f"{name} {ms:.1f} ms" for name, ms in self.ms_per_batch.items())
        how = "reused measurement" if self.reused else "measured"
        return f"sampler='auto': {self.backend} faster ({how} per batch: {times})"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_DECISIONS: dict[tuple, SamplerChoice] = {}


def forget_choices() -> None:
    """Drop every remembered decision (tests; a changed machine)."""
    _DECISIONS.clear()


def seed_pool(input_nodes: Any, num_nodes: int) -> Tensor:
    """The vertex ids a loader draws seeds from: its `input_nodes` as an index tensor (a bool
    mask or an index tensor), else every vertex."""
    if isinstance(input_nodes, Tensor):
        if input_nodes.dtype == torch.bool:
            return input_nodes.nonzero().view(-1)
        return input_nodes.view(-1).long()
    return torch.arange(num_nodes)


def choose_sampler(samplers: dict[str, Callable[[Tensor], Any]], pool: Tensor,
                   batch_size: int, key: tuple, threads: int, rounds: int = 3,
                   seed: int = 0) -> SamplerChoice:
    """Time every backend in `samplers` (name -> one sampling call on a seed tensor) on
    `rounds` batches from `pool` at `threads` torch threads; return the faster (see the module
    docstring). `key` identifies graph and shape; a decision is remembered per `key` and
    `threads` and reused without measuring. The samplers' draws from torch's global CPU RNG
    are undone: the user's random stream is the same whether this measured or reused."""
    memo = (key, threads, tuple(sorted(samplers)))
    known = _DECISIONS.get(memo)
    if known is not None:
        return dataclasses.replace(known, measure_s=0.0, reused=True)
    start = time.perf_counter()
    generator = torch.Generator().manual_seed(seed)
    size = max(1, min(int(batch_size), pool.numel()))
    names = list(samplers)
    times: dict[str, list[float]] = {name: [] for name in names}
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        with torch.random.fork_rng(devices=[]):   # the user's random stream is untouched
            for round_ in range(rounds):
                seeds = pool[torch.randperm(pool.numel(), generator=generator)[:size]]
                for name in (names if round_ % 2 == 0 else names[::-1]):
                    tick = time.perf_counter()
                    samplers[name](seeds)
                    times[name].append(time.perf_counter() - tick)
    finally:
        torch.set_num_threads(saved_threads)
    medians = {name: 1e3 * statistics.median(values) for name, values in times.items()}
    best = min(names, key=lambda name: medians[name])
    choice = SamplerChoice(best, medians, time.perf_counter() - start, threads)
    _DECISIONS[memo] = choice
    return choice

