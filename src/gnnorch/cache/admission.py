"""Admission: the one-off inspection that decides whether the cache can serve a loader's model.

The first forward of a model on one of the loader's training batches runs exactly and is
recorded call by call (`Admission.record`). At its end (`Admission.decide`) the bottom layer
(the first MessagePassing call on the batch's edge_index) must read the raw features, be of a
`recomputable` type (`gnnorch.trim.layer_types`) and take no edge-aligned extras; the model must
make one layer call per sampled hop (K = L >= 2) and every layer must be `pruning_safe`; and a
check on that batch must find the refresh computation equal to the layer's own output for
vertices whose in-edges all come from the last hop. With p > 1 ranks the decision is agreed
(all ranks admit or none). The outcome is a `ServedModel` (what the rest of the cache works with) or
the reason the cache stays off.
"""
from __future__ import annotations

import dataclasses
import weakref
from typing import TYPE_CHECKING, Callable

import torch
from torch import Tensor

from ..trim.batch import BatchGraph
from ..trim.layer_types import pruning_safe, recomputable
from ..trim.mixing import batch_mixing_modules
from .config import CacheConfig
from .refresh import FeatureSource, LayerCall, Neighbourhoods, Refresher
from .stats import CacheStats

if TYPE_CHECKING:
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import MessagePassing

    from ..sampling.neighbor import FastNeighborSampler
    from .loader import LayerCallView

VERIFY_RTOL = 1e-4
VERIFY_ATOL = 1e-5
VERIFY_VERTICES = 64


@dataclasses.dataclass(frozen=True)
class LoaderSpec:
    """What the cache needs of a training loader it may serve (sampled by gnnorch's
    `FastNeighborSampler`, with a raw feature matrix)."""

    sampler: FastNeighborSampler   # the loader's sampler
    data: Data                     # the loader's graph (data.x: raw features)
    fanouts: list[int]
    seeds: Tensor         # the loader's input vertices
    batch_size: int
    features: FeatureSource   # where refreshes read data.x: the data path's device copy, or it

    @property
    def colptr(self) -> Tensor:
        """The graph's CSC ``colptr`` on the host (where the sampler samples or not: the
        cache's hotness, neighbourhoods and refreshes run on the host's copy)."""
        return self.sampler.host_structure[0]

    @property
    def row(self) -> Tensor:
        """The graph's CSC ``row`` on the host (see `colptr`)."""
        return self.sampler.host_structure[1]

    @property
    def hops(self) -> int:
        return len(self.fanouts)

    @classmethod
    def of(cls, loader: NeighborLoader,
           features: FeatureSource | None = None) -> "LoaderSpec":
        """The spec of `loader`; `features`: where its batches gather ``x`` from when that is
        not ``loader.data.x`` itself (the GPU data path's resident copy)."""
        sampler = loader.node_sampler
        data = getattr(loader, "data", None)
        seeds = loader.input_data.node
        if seeds is None:
            seeds = torch.arange(data.num_nodes)
        return cls(sampler, data, list(sampler.num_neighbors.get_mapped_values()), seeds,
                   int(loader.batch_size or 1),
                   features if features is not None else (lambda: data.x))


@dataclasses.dataclass(frozen=True)
class ServedModel:
    """What admission learnt of the model the cache serves (the invariant: `layer` is the
    first MessagePassing call of `model` on a batch, and `trainer_refresher` computes its rows
    as that layer does, checked on the admitted batch)."""

    model: "weakref.ref[torch.nn.Module]"   # the model (outermost module) whose bottom layer
    #                                         is cached
    layer: MessagePassing       # its bottom layer
    layers: int                 # K: its MessagePassing calls per forward (= the loader's hops)
    degree_fix: bool            # some layer is a normalising GCNConv: pruned degrees count
    aggregate: bool             # store="aggregate" (GCN rows finished with current weights)
    trainer_refresher: Refresher   # computes rows in the trainer thread (made for the check)


@dataclasses.dataclass
class _Call:
    """What the inspection keeps of one layer call of the first forward."""

    index: int
    layer: MessagePassing
    extras: list[str]
    raw_input: bool


class Admission:
    """The inspection of one loader's first served forward (see the module docstring)."""

    def __init__(self, spec: LoaderSpec, config: CacheConfig, stats: CacheStats,
                 seed: int) -> None:
        self.spec = spec
        self.config = config
        self.stats = stats
        self.seed = seed                      # of the trainer refresher's neighbourhoods
        self.candidate: torch.nn.Module | None = None   # the model whose first forward is
        #                                                 recorded
        self._calls: list[_Call] = []
        self._first: tuple[Tensor, Tensor] | None = None  # the bottom call's (x, edge_index)
        # findings of `_structural_reason`
        self._layer: MessagePassing | None = None
        self._degree_fix = False
        self._aggregate = False
        self._refresher: Refresher | None = None   # made by `_verify`

    def reset(self) -> None:
        """Forget the recorded forward (the cache is off)."""
        self.candidate, self._calls, self._first = None, [], None

    def record(self, call: LayerCallView) -> None:
        """A layer call of a forward on one of the loader's training batches (`HookedCall`)."""
        if self.candidate is None:
            self.candidate = call.model
        if call.model is not self.candidate:
            return
        extras = [f"argument {i + 2}" for i, v in enumerate(call.args[2:]) if v is not None]
        extras += [k for k, v in call.kwargs.items() if k not in ("x", "edge_index")
                   and v is not None and v is not False]
        raw = False
        info = call.batch.cache
        if call.index == 0 and isinstance(call.x, Tensor) and isinstance(info.x, Tensor):
            # the same dtype too: torch.equal compares values across dtypes, and a bottom
            # layer fed `batch.x.double()` must not be recomputed from float32 rows
            raw = call.x is info.x or (call.x.shape == info.x.shape
                                       and call.x.dtype == info.x.dtype
                                       and torch.equal(call.x.to(info.x.device), info.x))
            self._first = (call.x, call.edge_index)
        self._calls.append(_Call(call.index, call.layer, extras, raw))

    def decide(self, model: torch.nn.Module, calls: int, graph: BatchGraph,
               unpatched: LayerCall,
               agree: Callable[[str | None], str | None]) -> ServedModel | str:
        """After the candidate's first forward (`calls` layer calls on `graph`): what the cache
        serves, or why it cannot (agreed over ranks by `agree`)."""
        reason = self._structural_reason(calls, graph)
        detail = None
        if reason is None:
            try:
                reason, detail = self._verify(graph, unpatched)
            except Exception as exc:  # noqa: BLE001 -- the check runs the user's layer code;
                # whatever stops it stops the cache, not the run (and every rank still agrees)
                reason = (f"recomputing bottom layer {type(self._layer).__name__} from "
                          f"data.x failed ({type(exc).__name__}: {exc})")
        reason = agree(reason)
        if reason is not None:
            return reason
        assert self._refresher is not None
        self.stats.info["verify_max_abs_diff"] = detail
        return ServedModel(weakref.ref(model), self._layer, calls, self._degree_fix,
                      self._aggregate, self._refresher)

    def _structural_reason(self, calls: int, graph: BatchGraph) -> str | None:
        recorded = sorted(self._calls, key=lambda c: c.index)
        hops = self.spec.hops
        if graph is None or graph.layout is None or graph.n_id is None:
            return "the batch has no hop layout or node ids"
        if calls != hops:
            return (f"the model makes {calls} MessagePassing calls on a batch but the loader "
                    f"samples {hops} hops; the cache needs one layer per hop")
        if calls < 2:
            return "a one-layer model's bottom layer is its output layer"
        if not recorded or recorded[0].index != 0:
            return "the bottom layer call was not seen"
        first = recorded[0]
        self._layer = first.layer
        name = type(first.layer).__name__
        if not isinstance(first.layer, recomputable()):
            return (f"bottom layer {name} is not one the cache knows how to recompute "
                    f"(SAGEConv, GCNConv, GATConv, GATv2Conv, GINConv, GraphConv)")
        mixing = batch_mixing_modules(first.layer, any_mode=True)
        if mixing:
            return (f"bottom layer {name} mixes rows across the batch ({', '.join(mixing)}): "
                    f"a vertex's cached embedding would depend on the rows it was computed "
                    f"with (and refreshes would move running statistics)")
        substituted = [k for k, v in first.layer.named_parameters()
                       if not isinstance(v, torch.nn.Parameter)]
        if substituted:
            return (f"bottom layer {name} runs with parameters that are not its own "
                    f"({', '.join(substituted)}: torch.func.functional_call or another "
                    f"substitution); refreshes would read the module's registered weights")
        if getattr(first.layer, "flow", "source_to_target") != "source_to_target":
            return f"bottom layer {name} uses flow='target_to_source'"
        if first.extras:
            return (f"bottom layer {name} is called with {', '.join(first.extras)}; the cache "
                    f"recomputes it from (x, edge_index) only")
        from torch_geometric.nn import GCNConv

        if isinstance(first.layer, GCNConv) and first.layer.cached:
            return "bottom layer GCNConv(cached=True) caches one graph's normalisation"
        if not first.raw_input:
            return (f"bottom layer {name} does not read the batch's raw features (batch.x); "
                    f"the cache recomputes it from data.x")
        unsafe = [type(c.layer).__name__ for c in recorded
                  if not isinstance(c.layer, pruning_safe())]
        if unsafe:
            return (f"layer(s) {', '.join(unsafe)} may depend on the in-degree of pruned "
                    f"vertices; pruned sampling would change them")
        self._degree_fix = any(isinstance(c.layer, GCNConv) and c.layer.normalize
                               for c in recorded)
        gcn_bottom = isinstance(first.layer, GCNConv) and first.layer.normalize
        store = self.config.store
        if store == "auto":
            store = "aggregate" if gcn_bottom else "output"
        if store == "aggregate" and not gcn_bottom:
            return (f"store='aggregate' needs a GCNConv(normalize=True) bottom layer, not "
                    f"{name}")
        self._aggregate = store == "aggregate"
        self.stats.info["store"] = store
        if self.spec.data is None or not isinstance(getattr(self.spec.data, "x", None), Tensor):
            return "the loader's data has no raw feature matrix data.x"
        if self.spec.data.x.requires_grad:
            return ("data.x requires grad (learnt features): rows the cache serves would give "
                    "the features of pruned vertices no gradient")
        return None

    def _verify(self, graph: BatchGraph, unpatched: LayerCall) -> tuple[str | None, float | None]:
        """The refresh computation vs the layer's own output on the first (unpruned) batch, for
        hop L-1 vertices, on their in-edges in that batch (in eval mode, no gradient). Makes the
        trainer thread's refresher."""
        assert self._first is not None
        x, edge_index = self._first
        spec = self.spec
        sampler = spec.sampler
        layout = graph.layout
        lo, hi = layout.rows_within(spec.hops - 2), layout.rows_within(spec.hops - 1)
        src, dst = edge_index[0].cpu(), edge_index[1].cpu()
        into = (dst >= lo) & (dst < hi)
        has = torch.zeros(graph.num_nodes, dtype=torch.bool)
        has[dst[into]] = True
        test = has.nonzero().view(-1)[:VERIFY_VERTICES]
        hood = Neighbourhoods(spec.colptr, spec.row, spec.fanouts[-1],
                              bool(sampler.replace), False, self.seed)
        refresher = Refresher(self._layer, spec.features, hood, self.config.chunk_rows,
                         self._aggregate, unpatched=unpatched)
        self._refresher = refresher
        refresher.snapshot()
        if test.numel() == 0:
            return None, None
        n_id = graph.n_id.cpu()
        keep = torch.isin(dst, test) & into
        local = torch.full((graph.num_nodes,), -1, dtype=torch.long)
        local[test] = torch.arange(test.numel())
        degrees = graph.cache.degrees(graph) if self._degree_fix else None
        mine = refresher.compute_on(n_id[test], n_id[src[keep]], local[dst[keep]], degrees)
        with torch.no_grad():
            ref = refresher.own_output(x, edge_index)[test.to(x.device)]
        if not (isinstance(ref, Tensor) and ref.shape == mine.shape):
            return "the bottom layer's output is not one row per vertex", None
        diff = float((ref - mine.to(ref.dtype)).abs().max()) if ref.numel() else 0.0
        if not torch.allclose(ref, mine.to(ref.dtype), rtol=VERIFY_RTOL, atol=VERIFY_ATOL):
            return (f"recomputing bottom layer {type(self._layer).__name__} from in-neighbours "
                    f"does not reproduce its output on a batch (max abs diff {diff:.3g})"), diff
        return None, diff
