"""The seed of a run's data: fixed where the user's function builds its first loader.

What it seeds: the ranks' sampling streams (`rank_streams`), the device path's sampling
generators (`device.seeds`), the historical-embedding cache's draws, and the permutation a
sharded epoch deals where the ranks' draws of PyG's own differ (`epoch_order`,
`shard.ShardSampler.permutation`). One process on the host path draws none of these:
there PyG's own order and sampling come from torch's global generator, as without gnnorch.

Which value (`DataSeed.fix`, at the first loader built inside the run):

* ``Runtime(seed=s)``: s.
* Otherwise a digest of torch's CPU generator state at that moment (read, not advanced).
  Whoever seeds torch before the first loader is built -- the caller, or the function itself,
  as ``torch.manual_seed(0)`` at its top -- then repeats the data order exactly as the model's
  initialisation and dropout repeat; a run that seeds nothing draws a new order each time,
  as PyG does. (Before, the seed was ``torch.initial_seed()`` of the caller, so a function that
  seeded only itself repeated its model but not its two-rank shard order.)

Why the first loader, and once: every rank starts from the caller's generator state
(`execute.rank.RankJob`) and, up to the first loader, runs the same code, so the ranks'
digests are equal there. Sharded steps draw from per-rank streams (`rank_streams.rank_steps`),
which keeps the ranks' generators in one state afterwards too, but a function may still draw
by rank itself. Later loaders therefore derive their seeds from this one and their
construction index, as before.

With p > 1 ranks sharding (not a function that manages distribution itself,
`procgroup.UserDistribution`), sharding needs one permutation: the ranks compare their digests
(`DataSeed.shard_seed`, one all-gather of one integer) when the first training epoch of a
loader that can be sharded starts, a point every rank reaches (a loader built or evaluated on
some ranks only never asks). Where they differ (a function that seeds each rank differently,
e.g. ``torch.manual_seed(1000 + rank)``) the shard permutations derive from the run's seed
instead, agreed when the ranks started, and rank 0 warns; so they do, without a comparison,
once the function manages distribution itself (loaders it built before its
``init_process_group`` stay sharded). A loader *trained* on some ranks only
cannot be sharded: the all-gather fails within the run's collective timeout with a
`CollectiveError` saying so. ``stats[rank]["data_seed"]`` says which values were taken and
why.
"""
from __future__ import annotations

import hashlib
import time
import warnings
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from ..errors import CollectiveError, GnnorchWarning
from .join import PROGRESS
from .procgroup import UserDistribution

if TYPE_CHECKING:
    from ..launch.context import RankContext

__all__ = ["DataSeed", "generator_digest"]

SEED_RANGE = 2 ** 31   # as the run seed's (`Runtime._request`)
AGREEING = "comparing the ranks' data seeds at the first training epoch of a sharded loader"


def generator_digest() -> int:
    """A digest in [0, 2**31) of torch's CPU generator state, which it leaves as it was."""
    state = torch.get_rng_state().numpy().tobytes()
    return int.from_bytes(hashlib.blake2b(state, digest_size=8).digest(), "little") % SEED_RANGE


class DataSeed:
    """Fixes ``ctx.data_seed`` once per run, and the shard permutations' seed (the module
    docstring says which values).

    `comm_device`: the device the ranks' collectives use (None: the CPU, gloo);
    `distribution`: the user's own distribution, which ends sharding and so the need to
    agree."""

    def __init__(self, ctx: RankContext, comm_device: torch.device | None = None,
                 distribution: UserDistribution | None = None) -> None:
        self.ctx = ctx
        self.comm_device = comm_device
        self.distribution = distribution or UserDistribution()
        self._shard_seed: int | None = None

    def fix(self) -> int:
        """The run's data seed, fixed at the first call (a loader being built); this rank's
        own, not yet compared with the other ranks' (`shard_seed`)."""
        ctx = self.ctx
        if ctx.data_seed_fixed:
            return ctx.data_seed
        if ctx.seed_given:
            seed, source = ctx.seed, "Runtime(seed=)"
        else:
            seed, source = generator_digest(), "torch's generator where the first loader was built"
        ctx.fix_data_seed(seed)
        ctx.stats["data_seed"] = {"seed": seed, "source": source}
        return seed

    @property
    def agreed(self) -> int | None:
        """The shard seed once `shard_seed` has compared it over the ranks, else None."""
        return self._shard_seed

    def shard_seed(self) -> int:
        """The seed the shard permutations derive from: the data seed, compared over the ranks
        at the first call (the first training epoch of a loader that can be sharded: every
        rank trains it), or the run's seed where the ranks' differ, or where the function has
        taken over distribution (a loader it built before `init_process_group` is still
        sharded; its own collectives run on the group, so none of gnnorch's is added)."""
        ctx = self.ctx
        if self._shard_seed is None:
            seed = self.fix()
            if ctx.distributed and not ctx.seed_given and self.distribution.active:
                seed = ctx.seed   # the user's collectives run on that group: none of ours
                ctx.stats["data_seed"].update(
                    shard_seed=seed, shard_source="the run's seed: the function manages "
                                                  "distribution itself (nothing compared)")
            elif ctx.distributed and not ctx.seed_given:
                if len(set(self._gathered(seed))) > 1:
                    seed = ctx.seed
                    ctx.stats["data_seed"].update(
                        shard_seed=seed, shard_source="the run's seed: the ranks' generators "
                                                      "differed where the first loader was built")
                    if ctx.rank == 0:
                        warnings.warn(
                            "gnnorch: the ranks' torch generators differ where the first loader "
                            "is built (the function seeds each rank differently?), so the shard "
                            "order cannot follow them: it follows the run's seed instead "
                            "(Runtime(seed=...), default torch.initial_seed() of the caller).",
                            GnnorchWarning, stacklevel=6)
            self._shard_seed = seed
        return self._shard_seed

    def _gathered(self, value: int) -> list[int]:
        """Every rank's `value`, in rank order (one all-gather on the default group). Where
        the watchdog looks (`join.PROGRESS`), this rank is seen waiting in it; a rank that
        never comes (it trains no such loader) fails the run with `CollectiveError`."""
        own = torch.tensor([value], dtype=torch.long, device=self.comm_device)
        out = [torch.empty_like(own) for _ in range(self.ctx.world_size)]
        PROGRESS.doing, PROGRESS.since, PROGRESS.waiting = AGREEING, time.monotonic(), True
        try:
            dist.all_gather(out, own)
        except (RuntimeError, dist.DistError) as exc:
            raise CollectiveError(
                f"rank {self.ctx.rank}: {AGREEING}: not every rank came (a loader trained on "
                f"some ranks only, after torch.distributed.get_rank(), cannot be sharded). "
                f"Train the same loaders on every rank, or call "
                f"torch.distributed.init_process_group() to manage distribution yourself "
                f"({type(exc).__name__}: {exc})") from exc
        finally:
            PROGRESS.waiting, PROGRESS.since = False, time.monotonic()
        return [int(t.item()) for t in out]
