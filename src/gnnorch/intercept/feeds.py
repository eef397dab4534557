"""What the NeighborLoader seam knows about one loader, and the feeds that plug into it.

`LoaderState` is the seam's record of one intercepted loader. It lives in a mapping the seam
owns (`LoaderInterceptor.states`, keyed weakly by the loader), never on the user's
object. Two feeds plug into the seam as collaborators passed to its constructor:

* the partitioned feature store (`intercept.features_fetch.PartitionManager`): `adopt` rewrites
  the loader's arguments before PyG's ``__init__``; `feed` fills ``batch.x`` per batch;
* the GPU data path (`DevicePathHook`, issue 21): `adopt` sees every intercepted loader at the
  end of its ``__init__`` and records its decision in ``state.device`` (`DeviceDecision`);
  `epoch_start` may decide again before an epoch's iterator is made; `feed` wraps the
  epoch's batches after the partition feed; `close` (the session's end) gives every loader
  it changed back as PyG built it.

The seam's order in ``__iter__`` is fixed: PyG's iterator -> partition feed -> device path
feed -> announced to the layer seam -> timed. A loader whose ``state.device`` says
``samples_on_device`` runs without loader workers (``num_workers=0``, no CPU-affinity context),
whatever the sampler plan or the user's ``num_workers`` says: device tensors cannot be sampled
in forked workers.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

from .graph_outputs import GraphOutputs
from .shard import ShardSampler

if TYPE_CHECKING:
    from torch import Tensor
    from torch_geometric.loader import NeighborLoader

    from ..cache.loader import LoaderCache
    from .features_fetch import Feed

__all__ = ["DeviceDecision", "DevicePathHook", "LoaderState"]


class DeviceDecision(Protocol):
    """The device path's decision about one loader (``LoaderState.device``)."""

    @property
    def samples_on_device(self) -> bool:
        """Whether the loader's batches are sampled from device tensors (no loader workers)."""

    def to_dict(self) -> dict:
        """The decision for the loader's statistics (JSON-serialisable)."""


@dataclasses.dataclass
class LoaderState:
    """What the runtime knows about one intercepted loader."""

    role: str                      # "train" (may run training epochs: built with shuffle=True,
    #                                or promoted at its first training epoch) or "eval"
    index: int                     # training loaders: order of construction (same on all ranks)
    global_batch_size: int | None
    user_num_workers: int | None   # None: the user left num_workers to the runtime
    epochs: int = 0                # training epochs run
    eval_epochs: int = 0           # epochs run as evaluation (not training)
    promoted_at: int | None = None  # built with shuffle=False: epochs run before it trained
    record: dict | None = None     # its entry in the rank's sampler statistics
    shard: ShardSampler | None = None
    shard_key: int = 0             # the index its shard seed derives from (`loader`)
    unsharded: str | None = None   # several ranks, no shard: why every rank runs all of it
    backend: str = "pyg"           # which sampler draws its batches
    backend_reason: str | None = None
    directional: bool = True       # hop layout meaningful (trimming possible)
    num_hops: int | None = None
    transform: str | None = None   # the loader's batch transform (its repr): batches' edges
    #                                are checked against their hop layout before trimming
    cache: LoaderCache | None = None     # training loaders, with the cache on: attached at
    #                                      their first training epoch
    sampler_choice: dict | None = None   # sampler="auto": the measured times and the choice
    setup_s: float | None = None   # gnnorch's sampler: its set-up (PyG's CSC conversion)
    partition: Feed | None = None  # set when its features come from the partitioned store
    device: DeviceDecision | None = None  # set by the device path's `adopt`
    kind: str = "node"             # "node" (NeighborLoader) or "link" (LinkNeighborLoader)
    graph: str | None = None       # its input's type: "Data", "HeteroData", a feature/graph store
    graph_outputs: GraphOutputs | None = None   # graph-level: what the model returned for its
    #                                             batches (None: not seen yet)
    head_pending: bool = False     # graph-level: an epoch's head ran, its sharding undecided

    @property
    def samples_on_device(self) -> bool:
        """Whether the device path samples this loader's batches on the device."""
        return self.device is not None and self.device.samples_on_device

    def to_dict(self) -> dict:
        if self.user_num_workers is not None:
            workers = f"user ({self.user_num_workers})"
        else:   # left out: the plan's, except for a graph-level loader (`loader_pass`)
            workers = "0 (PyG's default)" if self.kind == "graph" else "plan"
        out = {"kind": self.kind, "graph": self.graph, "role": self.role, "index": self.index,
               "backend": self.backend,
               "reason": self.backend_reason, "directional": self.directional,
               "num_hops": self.num_hops, "transform": self.transform,
               "num_workers": workers,
               "sampler_choice": self.sampler_choice, "setup_s": self.setup_s}
        if self.device is not None:
            out["device"] = self.device.to_dict()
            if self.samples_on_device:
                out["num_workers"] = "0 (sampled on the device)"
        return out


class DevicePathHook(Protocol):
    """The GPU data path as the NeighborLoader seam calls it (`gnnorch.intercept.device_path`)."""

    def adopt(self, loader: NeighborLoader, state: LoaderState) -> None:
        """Called at the end of every intercepted ``__init__`` (after PyG's own, the sampler
        choice, sharding and the partition feed's `adopt`). May move ``loader.data`` /
        ``loader.neighbor_sampler`` tensors to the device; records its decision in
        ``state.device`` (left None: the loader runs as without the device path)."""

    def epoch_start(self, loader: NeighborLoader, state: LoaderState) -> None:
        """Called in the intercepted ``__iter__`` before the epoch's iterator is made (before
        ``state.samples_on_device`` decides the loader's workers): may decide again for a
        loader it stepped aside from (a device found after the loader was built), and makes a
        served loader's batches follow what the user changed in ``loader.data`` since."""

    def feature_source(self, loader: NeighborLoader) -> Callable[[], Tensor] | None:
        """Where `loader`'s batches gather ``x`` when that is a device-resident copy (a
        function returning the current copy), else None: the cache's refreshes read it."""

    def feed(self, iterator: Iterator[Any], loader: NeighborLoader, state: LoaderState,
             training: bool) -> Iterator[Any]:
        """One epoch's batches: called in the intercepted ``__iter__`` right after PyG's
        iterator is made (and after the partition feed), before the batches are announced to
        the layer seam and timed. Returns the iterator the user's loop consumes."""

    def close(self) -> None:
        """Called once when the session ends (also when the user's function raised): every
        loader `adopt` changed is given back as PyG built it (no device tensor, no instance
        ``filter_fn``, its own ``num_workers``), so a loader the user keeps after the run
        iterates as a plain PyG loader."""
