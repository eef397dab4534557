"""The order of a sharded loader's epoch: PyG's own, drawn from the function's generators.

Without gnnorch, an epoch of a PyG loader draws from torch's default generator (or the
loader's own ``generator=``) at two points: when its iterator is made, one int64 (the base
seed of its workers; none where persistent workers' iterator is reused), and at its first
item, the index sampler's draw (``RandomSampler``: one int64 seeding its permutation; PyG's
``ImbalancedSampler``: its multinomial; an unshuffled loader draws nothing). One process under
the runtime lets PyG make them. Over p ranks a loader's index sampler is a `ShardSampler`,
which must deal out one permutation that every rank holds.

Policy (`EpochOrder.begin`, at the start of each pass of a sharded loader, `loader_pass`):

* at an epoch's first pass, before PyG's iterator is made, the draws PyG would make are made
  here, in PyG's order, from the function's generator: the base seed, then the sampler's
  (`ShardSampler.draw_as_pyg`), whose permutation the epoch deals (`ShardSampler.take`).
  PyG's iterator then draws its base seed from a copy of the generator taken before them (the
  value PyG draws) or, for a sharded epoch sampled by workers, from the rank's stream
  (`rank_streams`). Drawn before the pass starts, the permutation cannot come from the rank's
  sampling stream, in which an in-process sharded pass runs (`rank_streams.independent_draws`);
* a split epoch's second pass (`split_epoch`) draws nothing from the function's generator:
  its base seed comes from a copy, and it deals the rest of the first pass's permutation.

So the function's generator moves as it moves in one process, and a training epoch deals the
permutation one process would draw. Every rank draws it alike where the function's generator
is in one state in every rank, as it is outside sharded steps (`rank_streams.rank_steps`)
unless the function draws by rank. A training epoch's permutation must be the same on every
rank (its batches are dealt out, or run whole and their gradients averaged), so the ranks
compare a digest of it in a round of the gradient synchroniser (`join.Kind.ORDER`, which is
also the rank's join: a rank that left its last epoch early follows the others to its end, as
at its next step; ranks that arrive together need one small all-reduce); where the digests differ, or cannot be compared (the function manages
distribution itself, a rank's function has returned, torch's iterator slot is missing:
`compat.processes.reuses_iterator`), the epoch deals the run seed's permutation
(`ShardSampler.permutation`), as every epoch did before, and rank 0 warns once where they
differ. An evaluation epoch runs every position in every rank: its draw is not compared. The loader's
record says which order its last epoch took (``stats[rank]["sampler"]["loaders"][i]
["order"]``).
"""
from __future__ import annotations

import hashlib
import warnings
from typing import TYPE_CHECKING, Protocol

import torch

from ..compat import processes as compat_processes
from ..errors import GnnorchWarning
from .feeds import LoaderState
from .join import Decision, Kind
from .procgroup import UserDistribution

if TYPE_CHECKING:
    from torch_geometric.loader import NeighborLoader

__all__ = ["EpochOrder", "EpochSync", "PYG_ORDER", "permutation_digest"]

#: A loader record's ``order`` when its epoch dealt PyG's own permutation.
PYG_ORDER = "PyG's: drawn from the function's generator, the same on every rank"


def permutation_digest(perm: torch.Tensor) -> int:
    """A digest in [0, 2**52) of a permutation's positions, in order (exact in a round's
    float64 table)."""
    data = perm.to(torch.long).contiguous().numpy().tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") % 2 ** 52


class EpochSync(Protocol):
    """What the epoch order asks of the gradient synchroniser (`gradsync`)."""

    def join_if_ended(self, kind: Kind, **fields: int) -> Decision | None:
        """Ask `kind` (ORDER, `fields`: the ask's) in rounds, following the other ranks'
        steps meanwhile, until released (having ended the training epochs this rank has);
        the round that released it."""


def _copy(generator: torch.Generator) -> torch.Generator:
    """A generator in `generator`'s current state (drawing what it would draw next)."""
    copy = torch.Generator(device=generator.device)
    copy.set_state(generator.get_state())
    return copy


class EpochOrder:
    """Makes each sharded loader's epoch draw PyG's order from the function's generators (the
    module docstring); one per run of a rank, beside the loader interceptor. `sync`: the
    ranks' gradient synchroniser, in whose rounds they compare (None: no comparison, the run
    seed's permutation); `distribution`: the function's own (active: no round of gnnorch's)."""

    def __init__(self, sync: EpochSync | None, distribution: UserDistribution,
                 rank: int) -> None:
        self.sync, self.distribution, self.rank = sync, distribution, rank
        self.warned = False

    def begin(self, loader: NeighborLoader, state: LoaderState, first: bool,
              training: bool) -> torch.Generator | None:
        """Before PyG's iterator over `loader` is made for a pass (`first`: the epoch's first
        pass; `training`: a training epoch): the draws PyG would make, and the permutation
        the epoch deals. Returns the generator PyG's iterator should draw its base seed from
        (a copy of the function's, taken before), or None: PyG draws as it draws (the order
        cannot be told, and the epoch deals the run seed's permutation)."""
        shard = state.shard
        assert shard is not None
        reused = compat_processes.reuses_iterator(loader)
        users = loader.generator if loader.generator is not None else torch.default_generator
        if reused is None:
            shard.take(None)
            self._note(state, training, "the run seed's: torch's iterator slot is missing, so "
                                        "whether PyG draws a base seed cannot be told")
            return None
        before = _copy(users)
        if not first:
            return before
        if not reused:   # the base seed PyG's new iterator draws
            torch.empty((), dtype=torch.int64).random_(generator=users)
        perm = shard.draw_as_pyg()
        if perm is not None and training and not self._agreed(perm, state):
            perm = None
        elif perm is not None and training:
            self._note(state, training, PYG_ORDER)
        shard.take(perm)
        return before

    def _agreed(self, perm: torch.Tensor, state: LoaderState) -> bool:
        """Whether every rank drew `perm` (a `join.Kind.ORDER` round); else noted, and warned
        once on rank 0 where the ranks' draws differ."""
        if self.sync is None or self.distribution.active:
            self._note(state, True, "the run seed's: " + (
                "the function manages distribution itself, so the ranks' draws are not "
                "compared" if self.distribution.active else "no gradient synchroniser to "
                                                             "compare the ranks' draws in"))
            return False
        decision = self.sync.join_if_ended(Kind.ORDER, numel=permutation_digest(perm))
        if decision is not None and decision.same_order:
            return True
        if decision is None or decision.action != "order":   # a rank's function returned
            self._note(state, True, "the run seed's: a rank's function has returned")
            return False
        why = ("the ranks drew different permutations from the function's generators (it "
               "draws by rank?)")
        self._note(state, True, f"the run seed's: {why}")
        if not self.warned and self.rank == 0:
            warnings.warn(
                f"gnnorch: at a training epoch of a sharded loader, {why}: the epoch deals a "
                f"permutation of the run's seed instead (the same on every rank), not the one "
                f"the function's generator would give one process.", GnnorchWarning,
                stacklevel=5)
        self.warned = True
        return False

    @staticmethod
    def _note(state: LoaderState, training: bool, order: str) -> None:
        """The loader record's ``order`` (training epochs only: an evaluation epoch's order is
        each rank's own draw)."""
        if training and state.record is not None:
            state.record["order"] = order
