"""Building a heterogeneous NeighborLoader / LinkNeighborLoader batch (a ``HeteroData``) from a
sampled subgraph, with the attributes gathered where they live: the `GatherPlan` of
`gnnorch.device.gather` for a ``HeteroData``.

For a ``HeteroSamplerOutput`` (``node`` / ``row`` / ``col`` / ``edge`` dicts, hop counts per
type, input ids) a `HeteroGatherPlan`'s `batch` is the batch PyG's ``NodeLoader.filter_fn``
makes of it (its ``filter_hetero_data``), store by store, field by field, in the same key
order (tested against it): a shallow copy of the data whose every node store has each
node-level attribute indexed by its type's sampled nodes (``num_nodes`` their count) and
every edge store ``edge_index = [row; col]`` and each edge-level attribute indexed by the
sampled edges' original ids (``perm[edge]``); a node or edge type the sampler did not reach
gets empty ids. Then ``n_id`` per node type, ``e_id`` per edge type, ``batch`` (disjoint
sampling), the hop counts per type, the original edges of a bidirectional sampler, and on the
input node type ``input_id``, ``seed_time`` and ``batch_size``; then the loader's
``transform``. `link_batch` is ``LinkLoader.filter_fn``'s (the supervision fields on the input
edge type, or a triplet's on its end types).

Where values live is `GatherPlan`'s rule without the split and the deferral (those serve a
``Data``'s ``x``): ``features="gpu"``, every gathered tensor but the ids has a device copy
(`ResidentTensors`, shared by loaders over the same tensors) indexed there; ``"pinned"`` /
``"host"``, rows are gathered on the host into pinned memory and copied asynchronously. The id
fields (``n_id``, ``e_id``, ``input_id``) stay on the host, each with its device twin.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import Tensor

from ..compat.pyg import set_orig_edge_index
from ..compat.torch import tensor_version
from .gather import ID_FIELDS, ResidentTensors, gather_rows
from .transfer import ids_on_host, to_device
from .twin import concrete_device, host_twin

if TYPE_CHECKING:
    from torch_geometric.data import HeteroData
    from torch_geometric.sampler import HeteroSamplerOutput, NegativeSampling

__all__ = ["HeteroGatherPlan", "hetero_gathered_attributes", "hetero_device_attributes",
           "hetero_learnt_attributes", "hetero_untensored_attributes", "hetero_snapshot"]

#: a node type (str) or an edge type (a (src, rel, dst) tuple): a store of a HeteroData
StoreKey = Any


def _stores(data: HeteroData) -> list[tuple[StoreKey, Any]]:
    """(key, store) of every node store, then every edge store, in PyG's order."""
    return [(t, data[t]) for t in data.node_types] + [(e, data[e]) for e in data.edge_types]


def hetero_gathered_attributes(data: HeteroData
                               ) -> tuple[dict[StoreKey, list[str]], dict[StoreKey, list[str]]]:
    """(per node type, per edge type) the attributes a batch gathers, as PyG's
    ``filter_node_store_`` / ``filter_edge_store_`` decide (``is_node_attr`` /
    ``is_edge_attr``; ``num_nodes``, ``edge_index`` and ``adj_t`` excluded)."""
    node = {t: [k for k in data[t].keys() if k != "num_nodes" and data[t].is_node_attr(k)]
            for t in data.node_types}
    edge = {e: [k for k in data[e].keys() if k not in ("edge_index", "adj_t")
                and data[e].is_edge_attr(k)] for e in data.edge_types}
    return node, edge


def _gathered(data: HeteroData) -> list[tuple[StoreKey, str, Any]]:
    node, edge = hetero_gathered_attributes(data)
    return [(key, name, data[key][name]) for key, names in [*node.items(), *edge.items()]
            for name in names]


def hetero_device_attributes(data: HeteroData) -> dict[tuple[StoreKey, str], Tensor]:
    """The gathered tensors a ``features="gpu"`` plan copies to the device whole: every one but
    the id fields (`ID_FIELDS`: kept on the host), keyed by (store, name)."""
    return {(key, name): value for key, name, value in _gathered(data)
            if isinstance(value, Tensor) and name not in ID_FIELDS}


def hetero_untensored_attributes(data: HeteroData) -> list[str]:
    """Gathered attributes that are not torch tensors (numpy arrays, TensorFrames), as
    ``"store.name"``: gathered on the host with PyG's ``index_select``."""
    return [f"{key}.{name}" for key, name, value in _gathered(data)
            if not isinstance(value, Tensor)]


def hetero_learnt_attributes(data: HeteroData) -> list[str]:
    """Tensors of any store that require grad (features learnt with the model), as
    ``"store.name"``: PyG's gather gives them gradients, a device copy would not."""
    return [f"{key}.{name}" for key, store in _stores(data) for name, value in store.items()
            if isinstance(value, Tensor) and value.requires_grad]


def hetero_snapshot(data: HeteroData) -> tuple:
    """What a `HeteroGatherPlan` read from `data`: every store's attributes, each with its
    identity and, for a tensor, its in-place version (as `gather.data_snapshot`)."""
    return tuple((key, name, id(value),
                  tensor_version(value) if isinstance(value, Tensor) else None)
                 for key, store in _stores(data) for name, value in store.items())


class HeteroGatherPlan:
    """Where each gathered attribute of one loader's ``HeteroData`` lives, and how a batch is
    built (the module docstring). ``features``: ``"gpu"``, ``"pinned"`` or ``"host"``."""

    #: attributes left on the host for DAHA's host transform: none (it reads a Data's x)
    defer: tuple[str, ...] = ()

    def __init__(self, data: HeteroData, device: torch.device, features: str,
                 resident: ResidentTensors, pin: bool = True) -> None:
        self.data, self.snapshot = data, hetero_snapshot(data)
        self.device = concrete_device(device)
        self.features = features
        self.pin = pin and self.device.type == "cuda" and features != "gpu"
        self.node, self.edge = hetero_gathered_attributes(data)
        copied = hetero_device_attributes(data) if features == "gpu" else {}
        self.sources: dict[tuple[StoreKey, str], Any] = {}
        self.dims: dict[tuple[StoreKey, str], int] = {}
        for key, name, value in _gathered(data):
            self.dims[key, name] = data.__cat_dim__(name, value, data[key])
            self.sources[key, name] = (resident.on_device(value, self.device)
                                       if (key, name) in copied else value)
        on_host = [k for k, t in self.sources.items()
                   if not (isinstance(t, Tensor) and t.device == self.device)]
        # batches index sources on the device (the user's data may be there already)
        self.device_sources = self.device.type != "cpu" and len(on_host) < len(self.sources)

    def current(self, data: Any) -> bool:
        """Whether batches of `data` built with this plan equal PyG's now: the same object,
        nothing in it changed since the plan was made (`hetero_snapshot`)."""
        return data is self.data and hetero_snapshot(data) == self.snapshot

    def remade(self, data: HeteroData, resident: ResidentTensors,
               pin: bool) -> "HeteroGatherPlan":
        """A plan over `data` as it is now, with this plan's device and placement."""
        return HeteroGatherPlan(data, self.device, self.features, resident, pin=pin)

    # -- batches ---------------------------------------------------------------------------
    def batch(self, out: HeteroSamplerOutput, perm: dict | None, input_type: str,
              transform: Callable | None = None) -> HeteroData:
        """The batch of a node loader's sampler output `out` (PyG's ``NodeLoader.filter_fn``
        for a HeteroData): the `subgraph`, the original edges of a bidirectional sampler, then
        the seeds' fields on `input_type`; `perm`: the sampler's edge permutation per edge
        type (PyG's ``edge_permutation``)."""
        batch = self.subgraph(out, perm)
        if out.orig_row is not None and out.orig_col is not None:
            for key in out.orig_row:
                set_orig_edge_index(batch[key], torch.stack([out.orig_row[key],
                                                             out.orig_col[key]], dim=0))
        store = batch[input_type]
        store.input_id = self.host_id(out.metadata[0])
        store.seed_time = out.metadata[1]
        store.batch_size = out.metadata[0].size(0)
        return batch if transform is None else transform(batch)

    def link_batch(self, out: HeteroSamplerOutput, perm: dict | None,
                   input_type: tuple[str, str, str],
                   neg_sampling: NegativeSampling | None) -> HeteroData:
        """The batch PyG's ``LinkLoader.filter_fn`` makes of `out` for a HeteroData: the
        `subgraph`, ``input_id`` on the input edge type, then without negatives or with binary
        ones ``edge_label_index`` / ``edge_label`` / ``edge_label_time`` there; with triplet
        ones ``src_index`` and ``seed_time`` on the source type, ``dst_pos_index``,
        ``dst_neg_index`` and ``seed_time`` on the destination type, and no
        ``edge_label_index`` / ``edge_label_time`` on the input edge type (PyG deletes them
        in case the data carries them)."""
        batch = self.subgraph(out, perm)
        batch[input_type].input_id = self.host_id(out.metadata[0])
        if neg_sampling is None or neg_sampling.is_binary():
            store = batch[input_type]
            store.edge_label_index = out.metadata[1]
            store.edge_label = out.metadata[2]
            store.edge_label_time = out.metadata[3]
        else:   # triplet
            batch[input_type[0]].src_index = out.metadata[1]
            batch[input_type[-1]].dst_pos_index = out.metadata[2]
            batch[input_type[-1]].dst_neg_index = out.metadata[3]
            batch[input_type[0]].seed_time = out.metadata[4]
            batch[input_type[-1]].seed_time = out.metadata[4]
            if input_type in batch.edge_types:
                del batch[input_type].edge_label_index
                del batch[input_type].edge_label_time
        return batch

    def subgraph(self, out: HeteroSamplerOutput, perm: dict | None) -> HeteroData:
        """The sampled subgraph of `out` with every attribute gathered, the ids per type (on
        the host with device twins) and the hop counts: the fields node and link batches
        share, in PyG's order."""
        data = self.data
        batch = copy.copy(data)
        sampled = next(iter([*out.node.values(), *out.row.values()]), None)
        where = sampled.device if isinstance(sampled, Tensor) else torch.device("cpu")
        empty = torch.empty(0, dtype=torch.long, device=where)
        nodes = {t: out.node.get(t, empty) for t in data.node_types}
        edges: dict[StoreKey, Tensor] = {}   # the sampled edges' original ids, per type
        for e in data.edge_types:
            edge = out.edge.get(e, empty) if out.edge is not None else None
            if edge is not None:
                e_id = edge.long()
                p = perm.get(e) if perm else None
                edges[e] = p.to(e_id.device)[e_id] if p is not None else e_id
        keys = [*nodes, *edges]
        host = dict(zip(keys, ids_on_host([*nodes.values(), *edges.values()])))
        n_ids: dict[StoreKey, Tensor] = {}
        for t, node in nodes.items():
            node = self._on_sources(node)
            n_ids[t] = host_twin(host[t], self.device, node)
            store = batch[t]
            for name in data[t].keys():
                if name == "num_nodes":
                    store.num_nodes = node.numel()
                elif name in self.node[t]:
                    store[name] = self._gather(t, name, node, host[t])
        e_ids: dict[StoreKey, Tensor] = {}
        for e in data.edge_types:
            e_dev = self._on_sources(edges[e]) if e in edges else None
            if e_dev is not None:
                e_ids[e] = host_twin(host[e], self.device, e_dev)
            store = batch[e]
            for name in data[e].keys():
                if name == "edge_index":
                    store.edge_index = torch.stack([out.row.get(e, empty),
                                                    out.col.get(e, empty)], dim=0)
                elif name in self.edge[e]:
                    store[name] = (None if e_dev is None
                                   else self._gather(e, name, e_dev, host[e]))
        for t, n_id in n_ids.items():
            if "n_id" not in batch[t]:
                batch[t].n_id = n_id
        for e, e_id in e_ids.items():
            if "e_id" not in batch[e]:
                batch[e].e_id = e_id
        batch.set_value_dict("batch", out.batch)
        batch.set_value_dict("num_sampled_nodes", out.num_sampled_nodes)
        batch.set_value_dict("num_sampled_edges", out.num_sampled_edges)
        return batch

    def host_id(self, ids: Tensor) -> Tensor:
        """An id field of the batch (`ID_FIELDS`): kept on the host, with its device twin."""
        return host_twin(ids, self.device)

    def _on_sources(self, index: Tensor) -> Tensor:
        """`index` where device-resident sources live (host sampling with device features:
        copied once per batch, from pinned memory)."""
        if not self.device_sources or index.device == self.device:
            return index
        return to_device(index, self.device)

    def _gather(self, key: StoreKey, name: str, index: Tensor, index_host: Tensor) -> Any:
        return gather_rows(name, self.sources[key, name], self.dims[key, name], index,
                           index_host, self.device, self.pin, deferred=False)
