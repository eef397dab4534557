"""One layer call below the seam's outer hooks: trim -> rewrite -> the unpatched call.

`TrimAndRewrite.call` runs layer call l of a traced forward on the batch graph: untrimmed while the
model is calibrated or not trimmed, else on input rows [0, c_{D+1}) and the edges into rows
[0, c_D) (`gnnorch.trim.call`; bounds from `gnnorch.trim.hops`, per edge type on a HeteroData
batch from `gnnorch.trim.hetero`: source rows of the source type, destination rows of the
destination type). A call whose inputs do not
match the plan (not one row per batch vertex, fewer rows than it reads, more layer calls than
K) runs untrimmed and records the problem on the trace, so the seam recomputes that forward
untrimmed and stops trimming the model. Below trimming, the rewrite engine (when on) computes
the layer's own forward in the cheaper exact order.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Hashable

from torch import Tensor

from ..trim.batch import BatchGraph
from ..trim.call import trimmable, trimmed_call
from ..trim.hetero import SampledGraph
from ..trim.hops import LayerBounds
from ..trim.state import Mode
from .chain import LayerCall, Trace

if TYPE_CHECKING:
    from ..rewrite.engine import RewriteEngine

__all__ = ["TrimAndRewrite"]


class TrimAndRewrite:
    """The chain's links below the outer hooks: a layer call trimmed (when its model is) and
    rewritten (when rewrites are on), counting the output rows trimming computes."""

    def __init__(self, rewrites: RewriteEngine | None = None) -> None:
        self.rewrites = rewrites
        self.rows_computed = 0               # output rows computed by trimmed layer calls
        self.rows_untrimmed = 0              # what the same calls compute untrimmed

    def call(self, trace: Trace, batch: SampledGraph, key: Hashable, index: int | None,
             layer: Any, original: LayerCall, args: tuple, kwargs: dict, x: Any,
             edge_index: Tensor, *, count: bool = True) -> Any:
        """Layer call `index` of edge key `key` (`BatchGraph.edge_key`) in the traced forward
        on `batch`, trimmed when the model is (`count`: add its rows to the statistics; the
        one-off check does not); `index` None: untrimmed (a data-flow plan's call whose
        output the model's output does not use)."""
        if trace.mode.untrimmed or index is None:   # (None: untrimmed in a data-flow plan)
            return self.untrimmed(batch, layer, original, args, kwargs, x, edge_index)
        rows = batch.call_rows(key)
        compact_input = trace.mode.compact and trace.state.compact and index > 0
        problem = _input_problem(x, rows, compact_input)
        if problem is not None:
            trace.problem = f"{type(layer).__name__} received {problem}"
            return self.run(layer, original, args, kwargs)
        if trace.mode is Mode.CALIBRATE:
            return self.untrimmed(batch, layer, original, args, kwargs, x, edge_index)
        if index >= (trace.state.layers or 0):
            trace.problem = f"a forward made more than {trace.state.layers} layer calls"
            return self.run(layer, original, args, kwargs)
        bounds = batch.call_bounds(key, index, trace.state.layers)
        if bounds is None or not trimmable(layer, kwargs, hetero=batch.hetero):
            return self.untrimmed(batch, layer, original, args, kwargs, x, edge_index)
        if _too_few_rows(x, bounds):
            trace.problem = f"{type(layer).__name__} received fewer rows than it reads"
            return self.run(layer, original, args, kwargs)
        state = trace.state    # a model keeping only the seed rows itself gets its last
        #   layers' outputs padded, so a read beyond them shows (`TrimmedOutputs.seeds_problem`)
        compact = state.compact and not (state.seeds_only and index == state.layers - 1)
        out = trimmed_call(lambda *a, **k: self.run(layer, original, a, k), layer, args,
                           kwargs, x, edge_index, batch, bounds, compact, rows=rows[1])
        if count:
            self.rows_computed += bounds.num_dst
            self.rows_untrimmed += rows[1]
        return out

    def untrimmed(self, batch: BatchGraph, layer: Any, original: LayerCall, args: tuple,
                  kwargs: dict, x: Any, edge_index: Tensor) -> Any:
        """An untrimmed call; a GCN layer on a batch with pruned vertices (`extra_degree`) is
        normalised with their degrees all the same."""
        from torch_geometric.nn import GCNConv

        if (batch.extra_degree is not None and isinstance(layer, GCNConv) and layer.normalize
                and trimmable(layer, kwargs) and isinstance(x, Tensor)
                and x.size(0) == batch.num_nodes):
            return self.trimmed(batch, layer, original, args, kwargs, x, edge_index)
        return self.run(layer, original, args, kwargs)

    def run(self, layer: Any, original: LayerCall, args: tuple, kwargs: dict) -> Any:
        """Run one layer call: through the rewrite engine when rewrites are on (it returns what
        the layer's own forward would), else the layer's own call."""
        if self.rewrites is None:
            return original(layer, *args, **kwargs)
        return self.rewrites.forward(layer, lambda *a, **k: original(layer, *a, **k), args,
                                     kwargs)

    def trimmed(self, batch: BatchGraph, layer: Any, original: LayerCall, args: tuple,
                kwargs: dict, x: Tensor, edge_index: Tensor) -> Tensor:
        """A GCN call on every row of a batch with pruned vertices, normalised with their
        degrees (`gnnorch.trim.call`), the rest of the chain (rewrite, the unpatched call)
        below it."""
        return trimmed_call(lambda *a, **k: self.run(layer, original, a, k), layer, args,
                            kwargs, x, edge_index, batch, None, False, rows=batch.num_nodes)


def _sides(x: Any) -> tuple[Any, Any]:
    """(source, destination) inputs of a layer call: a bipartite pair's two parts, or one
    tensor for both."""
    if isinstance(x, tuple) and len(x) == 2:
        return x[0], x[1]
    return x, x


def _input_problem(x: Any, rows: tuple[int, int], compact: bool) -> str | None:
    """Why a layer call's input `x` (a tensor, or a bipartite pair whose destination part may
    be None) is not one row per batch vertex of its types (`rows`: source and destination
    rows), or None. A compact forward's later layers receive fewer rows: any count passes
    here (`_too_few_rows` checks the bounds)."""
    src, dst = _sides(x)
    if not isinstance(src, Tensor) or not (dst is None or isinstance(dst, Tensor)):
        return "inputs that are not tensors"
    if compact:
        return None
    if src.size(0) != rows[0] or (dst is not None and dst.size(0) != rows[1]):
        return "inputs that are not one row per batch vertex"
    return None


def _too_few_rows(x: Any, bounds: LayerBounds) -> bool:
    src, dst = _sides(x)
    return src.size(0) < bounds.num_src or (dst is not None and dst.size(0) < bounds.num_dst)
