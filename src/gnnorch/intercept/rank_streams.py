"""Independent sampling streams for the ranks of a run, on the host path.

Why: ranks are forked from one process, so each starts with the same state of torch's global
RNG, and a user's function usually seeds it alike in every rank anyway (``torch.manual_seed
(12345)`` in PyG's DDP examples). A sampler that draws from torch's global RNG (PyG's with
pyg-lib or torch_sparse, gnnorch's without a generator of its own) then draws the same random
numbers in every rank: rank 1's k-th batch picks neighbours at the positions rank 0's k-th batch
picks (on a star forest with 100 leaves per seed, about half of the draws agreed across two
ranks, where 1 in 100 would by chance; `tests/test_unshuffled_training.py`). The k-th per-rank
batches of a sharded epoch together stand for one process's batch of b seeds, whose neighbour
draws are independent, so theirs must be too.

Policy: a sharded training epoch ``e`` of training loader ``l`` in rank ``r`` of a run with seed
``s`` samples from a stream seeded with ``sampling_seed(s, r, l, e, stream=2)``
(`gnnorch.device.seeds`; the device path's own epochs use streams 0 and 1):

* sampled in the trainer's process (``num_workers=0``): each draw of a batch runs with torch's
  global CPU RNG set to the epoch stream's state, which is then saved back, and the user's own
  state is put back (`independent_draws`). Whatever draws inside -- the sampler, PyG's negative
  link samples, a loader ``transform`` -- draws from the rank's stream; the user's own random
  stream (dropout, initialisation) is not advanced by sampling;
* sampled by loader workers: the DataLoader's ``generator``, from which torch draws the workers'
  base seed at the start of the epoch, is the epoch's stream while the epoch starts, so worker
  ``w`` of rank ``r`` seeds its RNG with a base seed of its rank's.

A loader the device path serves samples from its own per-rank generators already
(`gnnorch.device.seeds`); evaluation epochs and runs of one process draw as PyG draws, from
torch's global RNG. A fixed run seed repeats every epoch exactly, as before.

The training steps of a sharded epoch (`rank_steps`) draw from a stream of their rank's own
too: ``sampling_seed(s, r, l, e, stream=3)``, on the CPU and, where CUDA is in use, on the
rank's current GPU. What a step draws between its batch and the next -- dropout, noise, a
pooling's random matching, negatives drawn in the step -- is then independent across ranks, as
one process's draws for the rows of one batch are (with the caller's stream in every rank, row i
of a dropout mask was the same in every rank's half of the batch), and the caller's own stream
is never advanced by a rank's share: outside sharded steps it is in the same state in every
rank, which a step's draws of rank-dependent sizes otherwise end (the ranks' halves hold
different node counts). So what the function draws between epochs -- a model's
``reset_parameters()`` for the next fold of a cross-validation (PyG's ``benchmark/kernel``), a
new split -- is the same in every rank, as gradient averaging needs. A whole batch (an epoch's
head, a kept-whole epoch) is the same in every rank and draws from the caller's stream: one
draw, as one process's step makes.
"""
from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, Iterator

import torch

from ..device.seeds import sampling_seed
from .feeds import LoaderState

if TYPE_CHECKING:
    from ..launch.context import RankContext

__all__ = ["RANK_STREAM", "STEP_STREAM", "epoch_generator", "independent_draws", "rank_steps",
           "rank_stream"]

#: The `sampling_seed` stream number of the host path's per-rank sampling (module docstring).
RANK_STREAM = 2
#: The `sampling_seed` stream number of the training steps of a sharded epoch (`rank_steps`).
STEP_STREAM = 3


def epoch_generator(run_seed: int, rank: int, loader: int, epoch: int) -> torch.Generator:
    """The CPU generator of one sharded training epoch's sampling in one rank."""
    return torch.Generator().manual_seed(
        sampling_seed(run_seed, rank, loader, epoch, stream=RANK_STREAM))


def independent_draws(iterator: Iterator[Any], stream: torch.Generator) -> Iterator[Any]:
    """`iterator`'s items, each drawn with torch's global CPU RNG in `stream`'s state; after
    each draw the advanced state goes back into `stream` and the caller's state is restored
    (also when the draw raises).

    Only in the thread that made the pass: an item drawn in another thread (the GPU data
    path's pipeline, which draws ahead only batches whose making draws nothing from torch's
    global RNG, `draw_ahead.why_not_drawn_ahead`) is drawn without the swap, which, on the
    process-wide generator, would race the trainer thread's own draws and `rank_steps`'
    swap (their states were crossed between the two threads)."""
    owner = threading.get_ident()
    pairs = [(torch.default_generator, stream)]

    def draws() -> Iterator[Any]:
        while True:
            swap = (_drawing_from(pairs) if threading.get_ident() == owner
                    else contextlib.nullcontext())
            with swap:
                try:
                    item = next(iterator)
                except StopIteration:
                    return
            yield item

    return draws()


def rank_stream(ctx: RankContext, state: LoaderState, training: bool,
                epoch: int | None = None) -> torch.Generator | None:
    """The stream of the epoch of the loader `state` describes, starting now in rank
    ``ctx.rank`` (`epoch`: its training epoch, by default the next, ``state.epochs``): for a
    sharded training epoch of a loader the device path does not serve, else None (the epoch
    draws as PyG draws)."""
    shard, device = state.shard, state.device
    if not training or shard is None or not shard.sharded:
        return None
    if device is not None and device.served:   # its own per-rank generators already
        return None
    return epoch_generator(ctx.data_seed, ctx.rank, state.index,
                           state.epochs if epoch is None else epoch)


def rank_steps(batches: Iterator[Any], ctx: RankContext, state: LoaderState,
               epoch: int) -> Iterator[Any]:
    """`batches` as the user's loop gets them, the step of each sharded batch (the user's code
    from the batch to the next request, or to leaving the loop) drawing from this rank's step
    stream of training epoch `epoch` (the module docstring); a whole batch's step, and all
    else, from the caller's generators. Whether a batch is sharded is read as it is handed out
    (an epoch's head is whole, its rest sharded as `split_epoch` decided)."""
    shard = state.shard
    streams: list[tuple[torch.Generator, torch.Generator]] | None = None
    for batch in batches:
        if shard is None or not shard.sharded:
            yield batch
            continue
        if streams is None:
            streams = _step_streams(ctx, state, epoch)
        with _drawing_from(streams):
            yield batch


def _step_streams(ctx: RankContext, state: LoaderState, epoch: int
                  ) -> list[tuple[torch.Generator, torch.Generator]]:
    """(the default generator, this epoch's step stream) for the CPU and, where CUDA is in
    use, the current GPU."""
    seed = sampling_seed(ctx.data_seed, ctx.rank, state.index, epoch, stream=STEP_STREAM)
    pairs = [(torch.default_generator, torch.Generator().manual_seed(seed))]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        index = torch.cuda.current_device()
        pairs.append((torch.cuda.default_generators[index],
                      torch.Generator(device=f"cuda:{index}").manual_seed(seed)))
    return pairs


@contextlib.contextmanager
def _drawing_from(pairs: list[tuple[torch.Generator, torch.Generator]]) -> Iterator[None]:
    """Each default generator in its stream's state inside; afterwards the advanced state goes
    back into the stream and the default generator's own is restored."""
    own = [default.get_state() for default, _ in pairs]
    for default, stream in pairs:
        default.set_state(stream.get_state())
    try:
        yield
    finally:
        for (default, stream), state in zip(pairs, own):
            stream.set_state(default.get_state())
            default.set_state(state)
