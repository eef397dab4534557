"""What the device data path changes on a user's PyG loader it serves, and how the loader is
given back (`gnnorch.intercept.device_path` decides; this module applies and undoes).

Serving a `NeighborLoader` or a `LinkNeighborLoader` changes, on the instance only:

* ``filter_fn`` (PyG's hook from sampler output to batch): `build_batch`, through the loader's
  `gnnorch.device.gather.GatherPlan`; ``filter_per_worker`` off (worker processes, where the
  structure stays on the host, return sampler outputs);
* where the loader samples on the device: ``num_workers`` 0, and PyG's ``enable_cpu_affinity``
  / ``enable_multithreading`` context managers, which raise at 0 workers, become ones that run
  the user's block as it is (there is no worker to bind or thread);
* its sampler: its CSC on the device (one copy per graph, shared by the loaders sampling it:
  `structure_to_device`), ``use_pyg`` off, a generator of the path's.

`LoaderUndo`, taken before any of it, puts every one back (`ServedLoader.restore`): a loader the
user keeps after the run iterates as a plain PyG loader.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import TYPE_CHECKING, Any, Iterator

import torch

from ..device.gather import ID_FIELDS, GatherPlan, ResidentTensors
from ..device.hetero_gather import HeteroGatherPlan
from ..device.seeds import SamplingGenerator
from ..device.state import LoaderDevice
from ..device.transfer import DeviceTransfer

if TYPE_CHECKING:
    from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
    from torch_geometric.sampler import (BaseSampler, NegativeSampling, NeighborSampler,
                                         SamplerOutput)

    from ..sampling.hetero_neighbor import FastHeteroNeighborSampler
    from ..sampling.neighbor import FastNeighborSampler

__all__ = ["LoaderUndo", "ServedLoader", "build_batch", "link_batch", "loader_sampler",
           "sampler_structure", "structure_device", "structure_shapes", "structure_to_device"]

_ABSENT = object()

#: PyG's loader methods serving overrides on the instance: ``filter_fn`` builds the batch;
#: the worker context managers have no worker to act on when sampling runs on the device
_INSTANCE_METHODS = ("filter_fn", "enable_cpu_affinity", "enable_multithreading")


class LoaderUndo:
    """What serving changes on a user's loader, as it was before: the instance methods of
    `_INSTANCE_METHODS` (absent: PyG's own), ``filter_per_worker``, ``num_workers``, and its
    sampler's device, ``use_pyg`` and generator."""

    def __init__(self, loader: NeighborLoader) -> None:
        sampler = loader_sampler(loader)
        self.methods = {name: loader.__dict__.get(name, _ABSENT) for name in _INSTANCE_METHODS}
        self.filter_per_worker = loader.filter_per_worker
        self.num_workers = loader.num_workers
        self.sampler_device = structure_device(sampler)
        self.use_pyg = getattr(sampler, "use_pyg", None)
        self.generator = getattr(sampler, "generator", None)

    def restore(self, loader: NeighborLoader) -> None:
        for name, method in self.methods.items():
            if method is _ABSENT:
                loader.__dict__.pop(name, None)
            else:
                setattr(loader, name, method)
        loader.filter_per_worker = self.filter_per_worker
        loader.num_workers = self.num_workers
        sampler = loader_sampler(loader)
        now = structure_device(sampler)
        if self.sampler_device is not None and now is not None and now != self.sampler_device:
            sampler.move_to(self.sampler_device)
        if self.use_pyg is not None:
            sampler.use_pyg = self.use_pyg
        if hasattr(sampler, "generator"):
            sampler.generator = self.generator


class ServedLoader:
    """A served loader's parts: its gather plan, transfer, (fast-path) sampling generator and
    `LoaderUndo`; `install` / `use_plan` / `restore` apply and undo them on the loader."""

    def __init__(self, plan: GatherPlan | HeteroGatherPlan, move: DeviceTransfer,
                 generator: SamplingGenerator | None, on_device: bool, cached: bool,
                 undo: LoaderUndo) -> None:
        self.plan, self.move, self.generator, self.on_device = plan, move, generator, on_device
        self.cached = cached   # a training loader of the historical-embedding cache
        self.undo = undo
        # held while one epoch's batch is drawn with that epoch's generator (`own_generator`)
        self.sampling = threading.Lock()

    def install(self, loader: NeighborLoader, record: LoaderDevice,
                user_num_workers: int | None) -> None:
        """Batches built by the plan; on the device, no workers (the module docstring)."""
        self.use_plan(loader, self.plan)
        loader.filter_per_worker = False   # workers (host sampling) return sampler outputs
        user = "plan" if user_num_workers is None else f"user ({user_num_workers})"
        if not self.on_device:
            record.num_workers = user
            return
        record.num_workers = f"{user} -> 0: sampled on the device in the pipeline's thread"
        loader.num_workers = 0
        for name in _INSTANCE_METHODS[1:]:   # PyG's raise at 0 workers
            setattr(loader, name, functools.partial(_no_worker_to_act_on, record, name))

    def use_plan(self, loader: NeighborLoader, plan: GatherPlan | HeteroGatherPlan) -> None:
        """Build the loader's batches with `plan` from its next iterator on (PyG's iterator
        takes ``filter_fn`` when it is made)."""
        self.plan = plan
        self.move.host_fields = ID_FIELDS + plan.defer
        loader.filter_fn = functools.partial(build_batch, loader, plan)

    def restore(self, loader: NeighborLoader) -> None:
        self.undo.restore(loader)


def loader_sampler(loader: NeighborLoader | LinkNeighborLoader) -> NeighborSampler:
    """The loader's PyG sampler: a NeighborLoader's ``node_sampler``, a LinkNeighborLoader's
    ``link_sampler``."""
    sampler = getattr(loader, "node_sampler", None)
    return sampler if sampler is not None else loader.link_sampler


def sampler_structure(sampler: FastNeighborSampler | FastHeteroNeighborSampler
                      ) -> tuple[Any, ...]:
    """The CSC a gnnorch sampler samples from, as its ``use_structure`` takes it: ``(colptr,
    row, perm)``, or for a HeteroData's ``(colptr_dict, row_dict, perm)`` (one per edge type,
    PyG's keys)."""
    if hasattr(sampler, "colptr_dict"):
        return sampler.colptr_dict, sampler.row_dict, sampler.perm
    return sampler.colptr, sampler.row, sampler.perm


def structure_shapes(structure: tuple[Any, ...]) -> list[Any]:
    """The shapes of a CSC's tensors (dicts key by key): to tell one graph's from another's."""
    def shape(part: Any) -> Any:
        if isinstance(part, dict):
            return sorted((str(k), shape(v)) for k, v in part.items())
        return tuple(part.shape) if isinstance(part, torch.Tensor) else None
    return [shape(part) for part in structure]


def structure_device(sampler: BaseSampler) -> torch.device | None:
    """Where a PyG sampler's CSC lives (a HeteroData's: its first edge type's), or None when
    it holds none (a sampler over a feature / graph store)."""
    colptr = getattr(sampler, "colptr", None)
    if not isinstance(colptr, torch.Tensor):
        colptr = next(iter((getattr(sampler, "colptr_dict", None) or {}).values()), None)
    return colptr.device if isinstance(colptr, torch.Tensor) else None


def structure_to_device(sampler: FastNeighborSampler | FastHeteroNeighborSampler, data: Any,
                        device: torch.device, resident: ResidentTensors, nbytes: int,
                        keep_host: bool) -> int:
    """The sampler's CSC (a HeteroData's: one per edge type) on `device`, one copy per graph,
    device and sort flag, shared by every loader sampling that graph (PyG's CSC is a function
    of the edges and ``is_sorted`` alone; `resident` keeps the copy). `keep_host`: the sampler
    keeps its host CSC too (the cache's hotness and refreshes read it). Returns the bytes it
    put on the device: `nbytes` when this sampler made the copy, 0 when it shares one."""
    moved = []

    def move() -> tuple[Any, ...]:
        sampler.move_to(device, keep_host=keep_host)
        moved.append(nbytes)
        return sampler_structure(sampler)

    mine = sampler_structure(sampler)
    hetero = isinstance(mine[0], dict)
    if hetero:   # one CSC per edge type: kept with the first edge type's edges, told apart
        # by every edge type's edges (a copy of the data with one edge type replaced is
        # another graph)
        edges = [data[e].get("edge_index") for e in data.edge_types]
        key = next((t for t in edges if isinstance(t, torch.Tensor)), None)
        if key is None:   # no edges at all (seeds alone): nothing to share
            move()
            return sum(moved)
        sort = not any(p is not None for p in (mine[2] or {}).values())
        tag = f"hetero:sorted={sort}:{[id(t) for t in edges]}"
    else:
        key, tag = data.edge_index, f"sorted={mine[2] is None}"
    shared = resident.shared_structure(key, device, tag, move)
    if shared[0] is not sampler_structure(sampler)[0]:
        if structure_shapes(shared) == structure_shapes(mine):
            sampler.use_structure(*shared, **({} if hetero else {"keep_host": keep_host}))
        else:
            move()
    return sum(moved)


def build_batch(loader: NeighborLoader | LinkNeighborLoader,
                plan: GatherPlan | HeteroGatherPlan, out: Any) -> Any:
    """A served loader's ``filter_fn``: PyG's hook from sampler output to batch (a node batch,
    `GatherPlan.batch`, or a `link_batch`; a HeteroData's, `HeteroGatherPlan.batch` /
    `HeteroGatherPlan.link_batch`)."""
    transform_out = getattr(loader, "transform_sampler_output", None)
    if transform_out is not None:
        out = transform_out(out)
    transform = getattr(loader, "transform", None)
    input_type = getattr(loader.input_data, "input_type", None)
    if getattr(loader, "node_sampler", None) is not None:
        perm = loader.node_sampler.edge_permutation
        if isinstance(plan, HeteroGatherPlan):
            return plan.batch(out, perm, input_type, transform)
        return plan.batch(out, perm, transform)
    perm, negatives = loader.link_sampler.edge_permutation, getattr(loader, "neg_sampling", None)
    batch = (plan.link_batch(out, perm, input_type, negatives)
             if isinstance(plan, HeteroGatherPlan) else link_batch(plan, out, perm, negatives))
    return batch if transform is None else transform(batch)


def link_batch(plan: GatherPlan, out: SamplerOutput, perm: torch.Tensor | None,
               neg_sampling: NegativeSampling | None) -> Any:
    """The batch PyG's ``LinkLoader.filter_fn`` makes of `out`, gathered by `plan`: the
    `GatherPlan.subgraph`, then ``input_id`` (the supervision edges' ids, on the host) and the
    supervision fields of ``out.metadata`` (PyG's ``edge_sample``): without negatives or with
    binary ones, ``edge_label_index`` (local node indices), ``edge_label`` and
    ``edge_label_time``; with triplet ones, ``src_index``, ``dst_pos_index``,
    ``dst_neg_index`` and ``seed_time``, and no ``edge_label_index`` / ``edge_label_time``
    (PyG deletes them in case the data carries them)."""
    batch = plan.subgraph(out, perm)
    batch.input_id = plan.host_id(out.metadata[0])
    if neg_sampling is None or neg_sampling.is_binary():
        batch.edge_label_index = out.metadata[1]
        batch.edge_label = out.metadata[2]
        batch.edge_label_time = out.metadata[3]
    else:   # triplet
        batch.src_index = out.metadata[1]
        batch.dst_pos_index = out.metadata[2]
        batch.dst_neg_index = out.metadata[3]
        batch.seed_time = out.metadata[4]
        del batch.edge_label_index
        del batch.edge_label_time
    return batch


@contextlib.contextmanager
def _no_worker_to_act_on(record: LoaderDevice, name: str, *args: Any,
                         **kwargs: Any) -> Iterator[None]:
    """A served loader's ``enable_cpu_affinity`` / ``enable_multithreading`` while it samples
    on the device: it has no worker process for PyG's context manager to bind or thread (PyG
    raises at ``num_workers=0``), so the user's block runs as it is and the stats say so."""
    note = f"; the user's {name}() had no worker to act on"
    if record.num_workers is not None and note not in record.num_workers:
        record.num_workers += note
    yield
