"""Building a NeighborLoader batch from a sampled subgraph, with the attributes gathered where
they live: on the training device, or in (pinned) host memory.

A `GatherPlan` is made once per loader from its `Data` and the placement decision. For a
sampler output (``node``, ``row``, ``col``, ``edge``, hop counts, input ids) its `batch` is the
batch PyG's ``NodeLoader.filter_fn`` makes for the same output, field by field and in the same
key order (tested against it): every node-level tensor indexed by the sampled nodes along its
concatenation dimension, ``edge_index = [row; col]``, every edge-level tensor indexed by the
sampled edges' original ids (``perm[edge]``), the other attributes as they are, then ``n_id``,
``e_id``, ``batch``, the hop counts (that much is the `subgraph`, which link batches share:
`gnnorch.intercept.served_loader.link_batch` adds ``LinkLoader.filter_fn``'s fields), then
``input_id``, ``seed_time`` and ``batch_size``, and the loader's ``transform``. Where the
values live differs:

* ``features="gpu"``: the gathered tensors have a device copy (`ResidentTensors`, one per run,
  so loaders over the same data share it) and are indexed there;
* ``"split"``: the hottest rows (``hot_rows``) of every node-level tensor on the host have a
  device copy, and a batch takes those rows from it and gathers only the others on the host
  (`gnnorch.device.split_rows`); edge-level tensors stay on the host, as below;
* ``"pinned"`` / ``"host"``: they stay on the host, as the user's tensors (a tensor the user
  already put on the device is indexed there); a batch's rows are gathered on the host
  straight into pinned memory when the device is CUDA and ``pin`` (the caching host
  allocator reuses a block only once the copies that read it are done) and copied to the
  device asynchronously on the current (side) stream; names in ``defer`` are left on the host,
  in their pinned rows (DAHA's host pre-transformation reads them there,
  `gnnorch.rewrite.host`).

The id fields ``n_id``, ``e_id`` and ``input_id`` are returned on the host whatever the device:
user code indexes host tensors with them, and the host gathers use them. That holds for the
user's own attributes of those names too (PyG's examples set ``data.n_id =
torch.arange(N)``): they are never copied to the device whole, and their rows are gathered on
the host. On a device other than the CPU each carries its device copy (`gnnorch.device.twin`),
so the user's ``batch.to(device)`` copies none of them and waits for nothing.
Structure (``edge_index``) stays where the sampler produced it (the device when it samples
there; the host otherwise, then moved by the pipeline's transfer).
"""
from __future__ import annotations

import copy
import weakref
from typing import Any, Callable

import torch
from torch import Tensor

from ..compat.pyg import pyg_index_select, set_orig_edge_index
from ..compat.torch import tensor_version
from .split_rows import SplitCounts, SplitLookup, SplitRows, slot_tables
from .transfer import ids_on_host, to_device
from .twin import concrete_device, host_twin

__all__ = ["GatherPlan", "ResidentTensors", "gathered_attributes", "device_attributes",
           "untensored_attributes", "learnt_attributes", "data_snapshot", "ID_FIELDS",
           "sampled_exclusion", "gather_rows"]

#: batch fields kept on the host (ids: user code indexes host tensors with them)
ID_FIELDS = ("n_id", "e_id", "input_id")

#: where a batch carries its sampler's ``exclusion_version`` (a private attribute of the
#: batch's storage, not one of its keys: the batch's fields are PyG's)
_EXCLUSION = "_exclusion_version"


def sampled_exclusion(batch: Any) -> int | None:
    """The ``exclusion_version`` of the sampler's pruning mask that `batch` was sampled with
    (`gnnorch.sampling.neighbor.FastNeighborSampler`), or None when the batch does not carry it
    (not built by a `GatherPlan`, or sampled by another sampler). Set at sampling time, so a
    batch drawn ahead of the trainer says which mask pruned it, whatever the mask is now."""
    value = getattr(batch, _EXCLUSION, None)
    return value if isinstance(value, int) else None


def gathered_attributes(data: Any) -> tuple[list[str], list[str]]:
    """(node-level, edge-level) attributes of a homogeneous `Data` that a batch gathers, as
    PyG's loaders decide (`is_node_attr` / `is_edge_attr`; ``edge_index`` excluded): tensors,
    and the numpy arrays / TensorFrames PyG gathers with its ``index_select``."""
    node, edge = [], []
    for key in data.keys():
        if key == "edge_index":
            continue
        if data.is_node_attr(key):
            node.append(key)
        elif data.is_edge_attr(key):
            edge.append(key)
    return node, edge


def device_attributes(data: Any) -> dict[str, Tensor]:
    """The tensors a batch gathers that a ``features="gpu"`` plan copies to the device whole:
    every gathered tensor attribute but the id fields (`ID_FIELDS`: kept on the host)."""
    node, edge = gathered_attributes(data)
    return {k: data[k] for k in node + edge
            if isinstance(data[k], Tensor) and k not in ID_FIELDS}


def untensored_attributes(data: Any) -> list[str]:
    """Gathered attributes of `data` that are not torch tensors (numpy arrays, TensorFrames):
    gathered on the host with PyG's own ``index_select``, never copied to the device whole."""
    node, edge = gathered_attributes(data)
    return [k for k in node + edge if not isinstance(data[k], Tensor)]


def learnt_attributes(data: Any) -> list[str]:
    """Attributes of `data` that are tensors requiring grad (features learnt with the model,
    e.g. a Parameter in ``data.x``). PyG gathers their rows with autograd at every batch; a
    copy on the device would get no gradient and lag the optimizer's updates."""
    return [k for k in data.keys() if isinstance(data[k], Tensor) and data[k].requires_grad]


def data_snapshot(data: Any) -> tuple:
    """What a `GatherPlan` read from `data` when it was made: every attribute's name and, for
    a tensor, its identity and in-place version. PyG's ``filter_fn`` reads ``loader.data`` at
    each batch, so a plan whose snapshot no longer matches (an attribute added, deleted,
    replaced or written in place) must be made again."""
    return tuple((key, id(value), tensor_version(value) if isinstance(value, Tensor) else None)
                 for key, value in ((k, data[k]) for k in data.keys()))


class ResidentTensors:
    """Device copies and pinned host copies of data tensors, made once per source tensor and
    shared by every loader that gathers from it. An entry is keyed by its source's identity
    and dies with its source (a weak reference: a tensor the user replaced and dropped, e.g.
    ``data.x = augment(x0)`` at each epoch, frees its copy; its identity cannot be reused
    while the entry lives). A copy is as current as its source's in-place version counter
    (`gnnorch.compat.torch.tensor_version`): a source written in place since is copied again
    when next asked for."""

    def __init__(self) -> None:
        self._copies: dict[tuple[int, str], tuple[weakref.ref, int | None, Any]] = {}
        self.bytes_copied = 0

    def _entry(self, source: Tensor, where: str) -> tuple[Any, int | None, Any] | None:
        found = self._copies.get((id(source), where))
        return found if found is not None and found[0]() is source else None

    def _keep(self, source: Tensor, where: str, version: int | None, value: Any) -> None:
        key, copies = (id(source), where), self._copies

        def forget(_: weakref.ref) -> None:   # the source is gone: so is its copy
            entry = copies.get(key)
            if entry is not None and entry[0] is ref:
                del copies[key]

        ref = weakref.ref(source, forget)
        copies[key] = (ref, version, value)

    def _get(self, tensor: Tensor, where: str, make: Callable[[Tensor], Tensor]) -> Tensor:
        version = tensor_version(tensor)
        found = self._entry(tensor, where)
        if found is None or found[1] != version:
            copied = make(tensor)
            if copied is not tensor:
                self.bytes_copied += tensor.numel() * tensor.element_size()
            # the source itself (already there) is not kept: the entry must not keep it alive
            self._keep(tensor, where, version, None if copied is tensor else copied)
            return copied
        return tensor if found[2] is None else found[2]

    def on_device(self, tensor: Tensor, device: torch.device) -> Tensor:
        return self._get(tensor, str(device), lambda t: t.to(device))

    def rows_on_device(self, tensor: Tensor, rows: Tensor, device: torch.device) -> Tensor:
        """A device copy of ``tensor[rows]`` (a split placement's hot rows), shared by the
        loaders that split `tensor` over the same rows; made again when `tensor` is written
        in place or other rows are asked for."""
        where = f"rows:{device}"
        found = self._entry(tensor, where)
        if (found is not None and found[1] == tensor_version(tensor)
                and torch.equal(found[2][0], rows)):
            return found[2][1]
        copied = tensor.index_select(0, rows).to(device)
        self.bytes_copied += copied.numel() * copied.element_size()
        self._keep(tensor, where, tensor_version(tensor), (rows, copied))
        return copied

    def slot_tables(self, rows: Tensor, num_nodes: int) -> dict[torch.device, Tensor]:
        """The slot tables of a split over the hot `rows` (`split_rows.slot_tables`), one
        per rows tensor: the loaders sharing a split (`rows_on_device`'s rows) share its
        table and the table's device copy."""
        found = self._entry(rows, f"slots:{num_nodes}")
        if found is None:
            tables = slot_tables(rows, num_nodes)
            self._keep(rows, f"slots:{num_nodes}", None, tables)
            return tables
        return found[2]

    def split_rows(self, tensor: Tensor, device: torch.device) -> Tensor | None:
        """The rows of `tensor`'s current split copy on `device` (`rows_on_device`), if any."""
        found = self._entry(tensor, f"rows:{device}")
        if found is None or found[1] != tensor_version(tensor):
            return None
        return found[2][0]

    def has_on_device(self, tensor: Tensor, device: torch.device) -> bool:
        """Whether `tensor` is on `device` already: the user's, or a current copy made here
        (the CPU standing in for a device counts only the copies, so budgets behave as on a
        GPU)."""
        if tensor.device == device and device.type != "cpu":
            return True
        found = self._entry(tensor, str(device))
        return found is not None and found[1] == tensor_version(tensor)

    def shared_structure(self, edge_index: Tensor, device: torch.device, tag: str,
                         make: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
        """One device CSC per graph (`edge_index`), device and `tag`, however many loaders
        sample it: made by `make` (e.g. a sampler moving its own CSC there) the first time."""
        where = f"csc:{device}:{tag}"
        found = self._entry(edge_index, where)
        if found is None:   # PyG's sampler builds its CSC once too: no version check
            made = make()
            self._keep(edge_index, where, None, made)
            return made
        return found[2]


class GatherPlan:
    """Where each gathered attribute of one loader's data lives, and how a batch is built
    (see the module docstring). ``features``: ``"gpu"``, ``"split"`` (with ``hot_rows``, the
    sorted ids of the rows kept on the device, and ``counts``, which hears every batch's
    split), ``"pinned"`` or ``"host"``."""

    def __init__(self, data: Any, device: torch.device, features: str,
                 resident: ResidentTensors, pin: bool = True,
                 defer: tuple[str, ...] = (), hot_rows: Tensor | None = None,
                 counts: SplitCounts | None = None) -> None:
        self.data = data
        self.snapshot = data_snapshot(data)
        self.device = concrete_device(device)
        self.features, self.requested_defer = features, defer
        self.node, self.edge = gathered_attributes(data)
        self.dims = {k: data.__cat_dim__(k, data[k]) for k in self.node + self.edge}
        self.pin = pin and self.device.type == "cuda" and features != "gpu"
        self.sources: dict[str, Tensor] = {}
        copied = device_attributes(data) if features == "gpu" else {}
        for key in self.node + self.edge:
            value = data[key]
            if key in copied:
                value = resident.on_device(value, self.device)
            # a host source stays as it is: its rows are gathered into pinned buffers, and
            # pinning the whole source would double (rounding up: quadruple) its memory
            self.sources[key] = value
        on_host = [k for k, t in self.sources.items()
                   if not (isinstance(t, Tensor) and t.device == self.device)]
        self.defer = tuple(k for k in defer if k in self.node and k in on_host)
        # batches index sources on the device (the user's data may be there already)
        self.device_sources = self.device.type != "cpu" and len(on_host) < len(self.sources)
        self.hot_rows, self.counts = hot_rows, counts if counts is not None else SplitCounts()
        self.split: SplitRows | None = None
        self.device_rows: dict[str, Tensor] = {}   # split tensors: their hot rows' copy
        if features == "split" and hot_rows is not None:
            # the user's host tensors (the CPU standing in for a device: all of them)
            host = on_host if self.device.type != "cpu" else list(self.sources)
            self.device_rows = {
                k: resident.rows_on_device(self.sources[k], hot_rows, self.device)
                for k in self.node if k in host and k not in self.defer
                and k not in ID_FIELDS and isinstance(self.sources[k], Tensor)
                and self.dims[k] == 0 and self.sources[k].dim() > 0}
            self.split = SplitRows(hot_rows, int(data.num_nodes), self.device, self.pin,
                                   self.counts,
                                   resident.slot_tables(hot_rows, int(data.num_nodes)))

    def current(self, data: Any) -> bool:
        """Whether batches of `data` built with this plan equal PyG's now: the same object,
        and nothing in it changed since the plan was made (`data_snapshot`)."""
        return data is self.data and data_snapshot(data) == self.snapshot

    def remade(self, data: Any, resident: ResidentTensors, pin: bool) -> "GatherPlan":
        """A plan over `data` as it is now, with this plan's device, placement and deferral."""
        return GatherPlan(data, self.device, self.features, resident, pin=pin,
                          defer=self.requested_defer, hot_rows=self.hot_rows,
                          counts=self.counts)

    def batch(self, out: Any, perm: Tensor | None, transform: Callable | None = None) -> Any:
        """The batch of a node loader's sampler output `out` (PyG's ``SamplerOutput``; the
        fields of PyG's ``NodeLoader.filter_fn``): the `subgraph`, then the seed nodes'
        fields; ``perm``: the sampler's CSC edge permutation (None: CSC positions are edge
        ids)."""
        batch = self.subgraph(out, perm)
        if getattr(out, "orig_row", None) is not None and out.orig_col is not None:
            set_orig_edge_index(batch, torch.stack([out.orig_row, out.orig_col], dim=0))
        batch.input_id = self.host_id(out.metadata[0])
        batch.seed_time = out.metadata[1]
        batch.batch_size = out.metadata[0].size(0)
        version = getattr(out, "exclusion_version", None)
        if isinstance(version, int):
            setattr(batch, _EXCLUSION, version)   # see `sampled_exclusion`
        return batch if transform is None else transform(batch)

    def subgraph(self, out: Any, perm: Tensor | None) -> Any:
        """The sampled subgraph of `out` with every attribute gathered, its ids (``n_id``,
        ``e_id``: on the host, see `host_id`) and hop counts: the fields node and link
        batches share, in PyG's order; the seeds' fields are the caller's."""
        node, edge = out.node, out.edge
        e_id = None
        if edge is not None:
            e_id = edge.long()
            e_id = perm.to(e_id.device)[e_id] if perm is not None else e_id
        n_id, e_host = ids_on_host([node, e_id])
        split = (self.split.lookup(n_id, node) if self.split is not None and self.device_rows
                 else None)
        node, e_id = self._on_sources(node), self._on_sources(e_id)
        n_id = self._twin(n_id, node)
        e_host = self._twin(e_host, e_id) if e_host is not None else None
        batch = copy.copy(self.data)
        for key in self.node:
            batch[key] = self._gather(key, node, n_id, split)
        if "num_nodes" in self.data:
            batch.num_nodes = node.numel()
        batch.edge_index = torch.stack([out.row, out.col], dim=0)
        for key in self.edge:
            batch[key] = None if e_id is None else self._gather(key, e_id, e_host)
        if "n_id" not in batch:
            batch.n_id = n_id
        if e_host is not None and "e_id" not in batch:
            batch.e_id = e_host
        batch.batch = out.batch
        batch.num_sampled_nodes = out.num_sampled_nodes
        batch.num_sampled_edges = out.num_sampled_edges
        return batch

    def host_id(self, ids: Tensor) -> Tensor:
        """An id field of the batch (``ID_FIELDS``): kept on the host, carrying its device
        copy (`_twin`)."""
        return self._twin(ids)

    def _on_sources(self, index: Tensor | None) -> Tensor | None:
        """`index` where device-resident sources live (host sampling with device features:
        copied once per batch, from pinned memory)."""
        if index is None or not self.device_sources or index.device == self.device:
            return index
        return to_device(index, self.device)

    def _twin(self, host: Tensor, device_copy: Tensor | None = None) -> Tensor:
        return host_twin(host, self.device, device_copy)

    def _gather(self, key: str, index: Tensor, index_host: Tensor,
                split: SplitLookup | None = None) -> Tensor:
        """Rows `index` of attribute `key` (`gather_rows`); a split tensor's rows from both
        halves (`split`: the batch's lookup)."""
        source, dim = self.sources[key], self.dims[key]
        if split is not None and key in self.device_rows:
            return self.split.gather(source, self.device_rows[key], split)
        return gather_rows(key, source, dim, index, index_host, self.device, self.pin,
                           key in self.defer)


def gather_rows(key: str, source: Any, dim: int, index: Tensor, index_host: Tensor,
                device: torch.device, pin: bool, deferred: bool) -> Any:
    """Rows `index` (`index_host`: the same ids on the host) of attribute `key`'s `source`
    along `dim`, for a batch trained on `device`: indexed where the source lives; the user's
    own id fields (``data.n_id = torch.arange(N)``, `ID_FIELDS`) gathered and kept on the
    host with a device twin; numpy arrays and TensorFrames through PyG's ``index_select``;
    host rows gathered into pinned memory (`pin`) and copied asynchronously to the device,
    unless `deferred` (left on the host for DAHA's host pre-transformation)."""
    if key in ID_FIELDS and isinstance(source, Tensor) and source.device.type == "cpu":
        return host_twin(source.index_select(dim, index_host), device)
    if not isinstance(source, Tensor):   # numpy / TensorFrame: PyG's gather, on the host
        rows = pyg_index_select()(source, index_host, dim=dim)  # type: ignore[misc]
        if deferred or device.type == "cpu" or not isinstance(rows, Tensor):
            return rows
        return (rows.pin_memory() if pin else rows).to(device, non_blocking=pin)
    if source.device == device:
        return source.index_select(dim, index if index.device == device else index_host)
    shape = list(source.shape)
    shape[dim] = index_host.numel()
    rows = torch.empty(shape, dtype=source.dtype, pin_memory=pin)
    torch.index_select(source, dim, index_host, out=rows)
    if deferred or device.type == "cpu":
        return rows
    return rows.to(device, non_blocking=pin)
