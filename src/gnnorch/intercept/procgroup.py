"""A user's own `torch.distributed` set-up inside the runtime's rank processes.

PyG's multi-GPU examples (`examples/multi_gpu/*`) call `dist.init_process_group(...)` inside
their training function, split the seeds by `dist.get_rank()` themselves and wrap the model in
`DistributedDataParallel`. Inside ranks that gnnorch started (processes=p > 1) the default
process group already exists, so that call would raise "trying to initialize the default process
group twice". Under this seam instead:

* `init_process_group(...)` is a no-op: the runtime's group (gloo on CPU, nccl on CUDA, world
  size p) *is* the user's group. `get_rank()` / `get_world_size()` answer with the runtime's
  rank and p. A warning says so once per rank when the arguments ask for another world size.
* `destroy_process_group()` of the default group is a no-op too (the rank destroys it itself
  after the function returns); other groups are destroyed as usual.
* From that call on, the user's code manages distribution: the runtime no longer shards the
  training loaders built afterwards and no longer averages gradients (`UserDistribution.active`),
  exactly as the script would run under `torchrun --nproc-per-node p`. Loaders and models
  built before the call keep the runtime's data parallelism.
The seam is installed in every rank of a run with p > 1: ranks the runtime started, and ranks
of an existing world (torchrun, or a group the user initialised before calling the runtime,
`gnnorch.execute.world`), whose default group is then the one the user's call joins. With p = 1
the user's call creates their group as it would without gnnorch.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator

import torch.distributed as dist


class UserDistribution:
    """Whether the user's function took over distribution (see the module docstring)."""

    def __init__(self) -> None:
        self.active = False
        self.calls = 0
        self.requested_world_size: int | None = None

    def stats(self) -> dict:
        return {"user_init_process_group": self.calls, "user_managed": self.active,
                "requested_world_size": self.requested_world_size}

    @contextlib.contextmanager
    def installed(self) -> Iterator["UserDistribution"]:
        """Patch `torch.distributed`'s init/destroy of the default group for the run."""
        from torch.distributed import distributed_c10d as c10d

        modules = (dist, c10d)
        saved = [(m, m.init_process_group, m.destroy_process_group) for m in modules]
        original_destroy = c10d.destroy_process_group

        def init_process_group(*args: Any, **kwargs: Any) -> None:
            self._adopt(kwargs.get("world_size", args[3] if len(args) > 3 else -1))

        def destroy_process_group(group: Any = None) -> None:
            if group is None or group is c10d.GroupMember.WORLD:
                return None
            return original_destroy(group)

        for module in modules:
            module.init_process_group = init_process_group
            module.destroy_process_group = destroy_process_group
        try:
            yield self
        finally:
            for module, init, destroy in saved:
                module.init_process_group = init
                module.destroy_process_group = destroy

    def _adopt(self, world_size: Any) -> None:
        self.calls += 1
        self.active = True
        if isinstance(world_size, int) and world_size > 0:
            self.requested_world_size = world_size
            if world_size != dist.get_world_size() and self.calls == 1:
                warnings.warn(
                    f"gnnorch: init_process_group(world_size={world_size}) inside the runtime's "
                    f"{dist.get_world_size()} ranks joins the runtime's process group "
                    f"(world size {dist.get_world_size()}, rank {dist.get_rank()}); your code "
                    f"manages distribution from here (no seed sharding or gradient averaging by "
                    f"gnnorch). To run the script's own process group instead, call it outside "
                    f"gnnorch.Runtime (before the call, or with processes=1 when gnnorch started "
                    f"the ranks).",
                    stacklevel=3)
