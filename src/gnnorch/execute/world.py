"""This process as one rank of a torch.distributed world someone else started: torchrun (or any
launcher that sets its environment), or the user's own ``init_process_group`` before the call.

Invariants:
* `detect` never communicates: a world is this process's initialised default process group,
  else torchrun's environment (`WORLD_ENV`: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, with
  LOCAL_RANK / LOCAL_WORLD_SIZE when the launcher sets them). A malformed variable is a
  `ValueError` naming it.
* `join` initialises the default group from env:// only when none exists and the world has
  more than one rank (gloo on CPU, nccl on CUDA, the runtime's collective timeout). That group
  stays for later calls and is destroyed at interpreter exit; a group that existed before
  (the user's) is used as it is and never destroyed here.
* `with_layout` knows which ranks share this node: LOCAL_RANK / LOCAL_WORLD_SIZE, else the
  hostnames every rank posts in the default group's store (the only case that communicates,
  and only through the store). The node's usable cores are split between its local ranks.
* `agree` gives every rank rank 0's values (the shuffle seed, the RNG state, the run's token),
  so the world behaves as gnnorch's own ranks, which all start from the caller's.
"""
from __future__ import annotations

import atexit
import dataclasses
import datetime
import os
import socket
from typing import Any, Mapping

import torch
import torch.distributed as dist

# what torchrun (and torch.distributed's env:// rendezvous) sets in every process it starts;
# LOCAL_RANK / LOCAL_WORLD_SIZE are read when present (`LOCAL_ENV`)
WORLD_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
LOCAL_ENV = ("LOCAL_RANK", "LOCAL_WORLD_SIZE")

_created_here = False   # whether gnnorch initialised the default group of this process


@dataclasses.dataclass(frozen=True)
class World:
    """Who this process is in its world. `local_rank` / `local_size` (this node's ranks) are
    None until known; `initialised`: the default group existed before gnnorch looked."""

    rank: int
    size: int
    local_rank: int | None = None
    local_size: int | None = None
    initialised: bool = False

    @property
    def source(self) -> str:
        """How the world was found, for messages."""
        return "an initialised torch.distributed process group" if self.initialised else \
            "a torchrun world (RANK/WORLD_SIZE in the environment)"


def _env_int(env: Mapping[str, str], name: str, low: int) -> int:
    text = env[name]
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise ValueError(f"environment variable {name} must be an integer >= {low} (as "
                         f"torchrun sets it), got {text!r}")
    return value


def _local(env: Mapping[str, str]) -> tuple[int | None, int | None]:
    if not all(name in env for name in LOCAL_ENV):
        return None, None
    local_rank, local_size = _env_int(env, "LOCAL_RANK", 0), _env_int(env, "LOCAL_WORLD_SIZE", 1)
    if local_rank >= local_size:
        raise ValueError(f"environment variable LOCAL_RANK={local_rank} must be below "
                         f"LOCAL_WORLD_SIZE={local_size}")
    return local_rank, local_size


def present(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is a rank of a world (no communication, no validation)."""
    env = os.environ if environ is None else environ
    if dist.is_available() and dist.is_initialized():
        return True
    return all(name in env for name in WORLD_ENV)


def detect(environ: Mapping[str, str] | None = None) -> World | None:
    """This process's world, or None outside one (see the module docstring)."""
    env = os.environ if environ is None else environ
    local_rank, local_size = _local(env)
    if dist.is_available() and dist.is_initialized():
        world = World(dist.get_rank(), dist.get_world_size(), initialised=True)
    elif all(name in env for name in WORLD_ENV):
        world = World(_env_int(env, "RANK", 0), _env_int(env, "WORLD_SIZE", 1))
        if world.rank >= world.size:
            raise ValueError(f"environment variable RANK={world.rank} must be below "
                             f"WORLD_SIZE={world.size}")
    else:
        return None
    if local_size is not None and local_size <= world.size:
        world = dataclasses.replace(world, local_rank=local_rank, local_size=local_size)
    elif world.size == 1:
        world = dataclasses.replace(world, local_rank=0, local_size=1)
    return world


def group_backend(device: str) -> str:
    return "nccl" if device == "cuda" else "gloo"


def join(world: World, device: str, timeout: float) -> str | None:
    """Make sure the default group exists when the world has several ranks; returns its
    backend name (None: one rank, no group). On CUDA, this process's device becomes
    cuda:LOCAL_RANK first (`with_layout` must have run)."""
    global _created_here
    if device == "cuda" and world.local_rank is not None:
        torch.cuda.set_device(world.local_rank)
    if dist.is_initialized():
        return str(dist.get_backend())
    if world.size == 1:
        return None
    dist.init_process_group(group_backend(device), init_method="env://",
                            timeout=datetime.timedelta(seconds=timeout))
    if not _created_here:
        _created_here = True
        atexit.register(_destroy_own_group)
    return str(dist.get_backend())


def created_here() -> bool:
    """Whether gnnorch initialised this process's default group (and destroys it at exit)."""
    return _created_here and dist.is_initialized()


def _destroy_own_group() -> None:
    if _created_here and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - at exit, a dead peer must not raise
            pass


def default_store() -> Any:
    """The default group's store (the launcher's rendezvous store under torchrun)."""
    from ..compat.distributed import default_store as store

    return store()   # CompatError naming the private function where torch lacks it


def with_layout(world: World, device: str, timeout: float) -> World:
    """`world` with this node's ranks known (see the module docstring); joins the group first
    when the layout has to be found through its store."""
    if world.local_size is not None:
        return world
    join(world, device, timeout)
    store = dist.PrefixStore("gnnorch/hosts/", default_store())
    host = socket.gethostname()
    store.set(str(world.rank), host)
    hosts = [store.get(str(r)).decode() for r in range(world.size)]
    mine = [r for r, h in enumerate(hosts) if h == host]
    return dataclasses.replace(world, local_rank=mine.index(world.rank), local_size=len(mine))


def agree(values: list, comm_device: torch.device | None = None) -> list:
    """Rank 0's `values` (picklable) in every rank; needs the group (world size > 1)."""
    box = list(values)
    dist.broadcast_object_list(box, src=0, device=comm_device)
    return box


def gather(value: Any) -> list:
    """Every rank's `value` (picklable), in rank order, in every rank."""
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out
