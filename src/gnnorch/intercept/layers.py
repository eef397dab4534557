"""The MessagePassing seam: every layer call on the current sampled batch goes through here.

Seams (installed for one run, removed afterwards):
* `MessagePassing.__call__` is patched at the class, so every PyG layer (and user subclasses)
  is seen with its real arguments, however the model is written (BasicGNN or a custom stack).
* Global forward pre/post hooks track the *outermost* module call on a batch (the "model").

Hop-aware trimming (the invariant is in `gnnorch.trim.hops`): the k-th layer call of a model
on a batch whose edge_index is the batch's own is layer l = k of K, K learnt from the model's
first forward on a batch (which runs untrimmed). It then runs on input rows [0, c_{D+1}) and the
edges into rows [0, c_D), as a bipartite (x_src, x_dst) call when the layer type accepts one, and
its output is zero-padded back to all rows (zeros, not NaN: rows nobody reads must not poison
gradients through row-wise ops such as a Linear on all rows). The model's output rows other than
the seeds are set to NaN, so code that reads them fails loudly instead of silently. Models whose
code between layers is row-local and shape-agnostic (activation, dropout, Linear: e.g. PyG's
BasicGNN without JumpingKnowledge) skip the padding ("compact"): each layer returns only the
rows the next one reads. Which of the two a model gets is decided by the one-off check.

A model is trimmed only if (1) it holds no module that mixes rows across the batch
(`gnnorch.trim.mixing`), and (2) a one-off check on its first batch, in eval mode without
gradients and with the RNG state preserved, finds trimmed and untrimmed seed outputs equal;
this catches functional mixing (global pooling, attention over the batch). A trimmed forward
that meets an unexpected layer count falls back to an untrimmed recomputation and disables
trimming for that model. GCNConv's symmetric normalisation is computed on the untrimmed batch
graph (degrees of sources beyond the bound would otherwise change), then trimmed.

Layer hook (`LayerSeam.layer_hook`, used by the historical-embedding cache, `gnnorch.cache`):
every layer call of a traced model on the batch's edge_index, in any mode, is handed to
`hook.on_layer(HookedCall)`, which returns the call's output (normally `call.run()`, the seam's
own computation, possibly with rows replaced), and every finished forward to
`hook.on_forward_end(model, state, calls, batch)`. The one-off check's forwards bypass the hook.
A batch whose `extra_degree` is set (vertices whose in-edges were pruned from the sample) gets
GCN normalisations that count those in-edges, trimmed or not. The seam follows the thread that
installed it only; other threads (e.g. the cache's background refresh) pass through untouched.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.fx import _symbolic_trace as _fx_trace
from torch.nn.modules.module import (register_module_forward_hook,
                                     register_module_forward_pre_hook)

from ..errors import TrimmingError, TrimmingWarning
from ..trim.exact_output import prefix_exact
from ..trim.hops import HopLayout, LayerBounds
from ..trim.mixing import batch_mixing_modules

VERIFY_RTOL = 1e-4
VERIFY_ATOL = 1e-5


_MODULE_CALL = torch.nn.Module.__call__


def tracing() -> bool:
    """Whether the current call is being traced (torch.compile / dynamo, torch.fx symbolic
    tracing, TorchScript) rather than run: the seams then step aside entirely, so compiled and
    traced programs see PyG's own modules (no graph breaks, fx records its call_module nodes).
    fx tracers (torch's, and PyG's own in `to_hetero`, which does not set torch's flag) patch
    `torch.nn.Module.__call__` while they trace: that is detected too."""
    if torch.compiler.is_compiling():
        return True
    return (torch.nn.Module.__call__ is not _MODULE_CALL
            or getattr(_fx_trace, "_is_fx_tracing_flag", False) or torch.jit.is_scripting())


def _pair_capable() -> tuple[type, ...]:
    """PyG layers whose forward accepts (x_src, x_dst) and computes outputs for x_dst only."""
    from torch_geometric import nn as pyg_nn

    names = ("SAGEConv", "GATConv", "GATv2Conv", "GINConv", "GINEConv", "GraphConv")
    return tuple(getattr(pyg_nn, n) for n in names if isinstance(getattr(pyg_nn, n, None), type))


@dataclasses.dataclass
class BatchGraph:
    """The sampled batch the user is working on, as the layer seam needs it."""

    edge_index: Tensor
    num_nodes: int
    batch_size: int
    layout: HopLayout | None       # None: not trimmable (reason says why)
    reason: str | None = None
    n_id: Tensor | None = None     # global ids of the batch's vertices (batch.n_id)
    training: bool = True          # False for batches of evaluation loaders
    # in-edges pruned from the sample per vertex, counted by GCN normalisations (cache)
    extra_degree: Tensor | None = None
    cache: Any = None              # the historical-embedding cache's per-batch data
    _aliases: set[int] = dataclasses.field(default_factory=set)
    _storages: set[int] = dataclasses.field(default_factory=set)   # of the aliases
    _norms: dict[tuple, tuple[Tensor, Tensor]] = dataclasses.field(default_factory=dict)

    def is_own(self, edge_index: Any) -> bool:
        """Whether `edge_index` is this batch's edge_index (the same tensor, or an equal copy on
        another device, e.g. after `batch.to("cuda")`, checked once per batch)."""
        if edge_index is self.edge_index:
            return True
        if not isinstance(edge_index, Tensor) or edge_index.shape != self.edge_index.shape:
            return False
        key = id(edge_index)
        if key in self._aliases:
            return True
        if edge_index.device != self.edge_index.device and torch.equal(
                edge_index.to(self.edge_index.device), self.edge_index):
            self._aliases.add(key)
            self._storages.add(edge_index.untyped_storage().data_ptr())
            return True
        return False

    def is_narrowed(self, edge_index: Any) -> bool:
        """Whether `edge_index` is a column slice of this batch's edge_index (or of a device copy
        of it) rather than the batch's own: what PyG's `trim_to_layer` hands a layer."""
        if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or \
                edge_index.size(1) >= self.edge_index.size(1):
            return False
        ptr = edge_index.untyped_storage().data_ptr()
        return ptr in self._storages or ptr == self.edge_index.untyped_storage().data_ptr()

    def gcn_norm(self, edge_index: Tensor, edge_weight: Tensor | None, improved: bool,
                 add_self_loops: bool, flow: str, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """GCN's normalised edges on the *untrimmed* batch graph, once per batch and setting."""
        from torch_geometric.nn.conv.gcn_conv import gcn_norm

        key = (improved, add_self_loops, flow, dtype, edge_index.device,
               None if edge_weight is None else id(edge_weight))
        if key not in self._norms and self.extra_degree is not None:
            from ..cache.degree import gcn_norm_extra

            self._norms[key] = gcn_norm_extra(edge_index, edge_weight, self.num_nodes,
                                              improved, add_self_loops, flow, dtype,
                                              self.extra_degree)
        if key not in self._norms:
            self._norms[key] = gcn_norm(edge_index, edge_weight, self.num_nodes, improved,
                                        add_self_loops, flow, dtype)
        return self._norms[key]


@dataclasses.dataclass
class ModelState:
    """What the seam knows about one outermost module ("model")."""

    name: str
    layers: int | None = None      # K: MessagePassing calls on the batch graph per forward
    trim: bool = False
    compact: bool = False          # layers return only the rows the next layer reads
    reason: str | None = "not yet seen on a batch with hop counts"
    trimmed_forwards: int = 0
    untrimmed_forwards: int = 0
    materialized: int = 0          # trimmed forwards recomputed untrimmed (non-seed rows read)

    def to_dict(self) -> dict:
        return {"model": self.name, "layers": self.layers, "trimmed": self.trim,
                "compact": self.compact,
                "reason": None if self.trim else self.reason,
                "trimmed_forwards": self.trimmed_forwards,
                "untrimmed_forwards": self.untrimmed_forwards,
                "materialized": self.materialized}


@dataclasses.dataclass
class _Trace:
    """One forward of a model on the current batch."""

    model: torch.nn.Module
    state: ModelState
    mode: str                      # "calibrate" | "trim" | "plain"
    calls: int = 0
    problem: str | None = None     # why this forward could not be trimmed as planned


LayerCall = Callable[..., Any]

SELF_TRIMMING = ("the model trims its own layers (PyG's trim_to_layer / BasicGNN's "
                 "num_sampled_nodes_per_hop): left to PyG's trimming")


def _parameter_versions(model: torch.nn.Module) -> tuple[int, ...]:
    """In-place version counters of the model's parameters (an optimizer step bumps them)."""
    return tuple(p._version for p in model.parameters())


def _parameter_snapshot(model: torch.nn.Module) -> dict[str, Tensor]:
    """A detached copy of the model's parameters (leaves with the same `requires_grad`)."""
    return {name: p.detach().clone().requires_grad_(p.requires_grad)
            for name, p in model.named_parameters()}


@dataclasses.dataclass
class HookedCall:
    """A layer call of a traced model on the batch's edge_index, as the layer hook sees it;
    `run()` computes it the way the seam would without a hook (trimmed when it can)."""

    model: torch.nn.Module
    state: ModelState
    mode: str
    index: int                     # l: the call's position in the forward (0: bottom layer)
    layer: Any
    x: Any
    edge_index: Tensor
    args: tuple
    kwargs: dict
    batch: BatchGraph
    run: Callable[[], Any]
    unpatched: LayerCall           # unpatched(layer, *args, **kwargs): past gnnorch's seam


class LayerSeam:
    """Installs the MessagePassing seam; `set_batch` announces each sampled batch."""

    def __init__(self, trim: bool = True, rewrites: Any = None) -> None:
        from torch_geometric.nn import MessagePassing

        self.cls = MessagePassing
        self.trim_enabled = trim
        self.rewrites = rewrites             # a gnnorch.rewrite.RewriteEngine or None
        self.batch: BatchGraph | None = None
        self.models: "weakref.WeakKeyDictionary[torch.nn.Module, ModelState]" = \
            weakref.WeakKeyDictionary()
        self.states: list[ModelState] = []  # outlive their models, for the report
        self._depth = 0
        self._trace: _Trace | None = None
        self._forced: str | None = None      # mode forced by the one-off check
        self._forced_problem: str | None = None
        self._pair = _pair_capable()
        self.rows_computed = 0               # output rows computed by trimmed layer calls
        self.rows_untrimmed = 0              # what the same calls compute untrimmed
        self.layer_hook: Any = None          # see the module docstring (the cache)
        self._thread: int | None = None      # the thread the seam follows
        self.check_s = 0.0                   # seconds spent in one-off trimming checks

    def one_off_seconds(self) -> float:
        """Seconds spent so far measuring rather than training: trimming checks, rewrite
        probes and calibration (monotone; see `RankContext.one_off_seconds`)."""
        return self.check_s + (self.rewrites.overhead_s if self.rewrites is not None else 0.0)

    # -- installation ---------------------------------------------------------------------
    @contextlib.contextmanager
    def installed(self) -> Iterator["LayerSeam"]:
        seam = self
        had_call = "__call__" in self.cls.__dict__
        original = self.cls.__call__

        def __call__(layer: Any, *args: Any, **kwargs: Any) -> Any:
            if tracing():  # dynamo / fx see PyG's own call (fx patches Module.__call__ itself)
                call = original if had_call else torch.nn.Module.__call__
                return call(layer, *args, **kwargs)
            return seam._on_layer(layer, original, args, kwargs)

        self.cls.__call__ = __call__
        self.original_call = original  # for gnnorch's own layer calls (cache refreshes)
        self._thread = threading.get_ident()
        h1 = register_module_forward_pre_hook(self._on_enter)
        h2 = register_module_forward_hook(self._on_exit, with_kwargs=True, always_call=True)
        try:
            yield self
        finally:
            h1.remove()
            h2.remove()
            if had_call:
                self.cls.__call__ = original
            else:
                del self.cls.__call__

    def set_batch(self, batch: BatchGraph | None) -> None:
        """Announce the batch the user's next forwards work on (None: no sampled batch)."""
        self.batch = batch
        self._depth = 0
        self._trace = None

    def stats(self) -> dict:
        return {"enabled": self.trim_enabled,
                "models": [s.to_dict() for s in self.states if s.layers],
                "rows_computed": self.rows_computed, "rows_untrimmed": self.rows_untrimmed}

    # -- model boundaries -----------------------------------------------------------------
    def _on_enter(self, module: torch.nn.Module, args: tuple) -> None:
        if tracing() or threading.get_ident() != self._thread:
            return None
        self._depth += 1
        if self._depth != 1 or self.batch is None or isinstance(module, self.cls):
            return None
        state = self.models.get(module)
        if state is None:
            state = ModelState(name=type(module).__name__)
            self.models[module] = state
            self.states.append(state)
        if self._forced is not None:
            mode = self._forced
        elif not self.trim_enabled or self.batch.layout is None:
            mode = "plain"
            if self.batch.layout is None and state.layers is None:
                state.reason = self.batch.reason
        elif state.layers is None:
            mode = "calibrate"
        else:
            mode = "trim" if state.trim else "plain"
        self._trace = _Trace(module, state, mode)
        return None

    def _on_exit(self, module: torch.nn.Module, args: tuple, kwargs: dict,
                 output: Any = None) -> Any:  # no output when the forward raised
        if tracing() or threading.get_ident() != self._thread:
            return None
        self._depth = max(0, self._depth - 1)
        trace = self._trace
        if self._depth != 0 or trace is None or trace.model is not module:
            return None
        self._trace = None
        if self._forced is not None:
            if trace.problem is not None or trace.calls != trace.state.layers:
                self._forced_problem = trace.problem or "the layer count changed"
            return None
        if output is None:
            return None
        if self.layer_hook is not None:
            self.layer_hook.on_forward_end(module, trace.state, trace.calls, self.batch)
        state = trace.state
        if trace.mode == "calibrate":
            state.untrimmed_forwards += 1
            self._calibrate(module, state, trace, args, kwargs)
            return None
        if trace.mode == "plain":
            state.untrimmed_forwards += 1
            return None
        if trace.problem is not None or trace.calls != state.layers:
            state.trim = False
            state.reason = trace.problem or (
                f"a forward made {trace.calls} layer calls instead of {state.layers}")
            return module(*args, **kwargs)  # recomputed untrimmed (trim now off for it)
        state.trimmed_forwards += 1
        full = self._full_rows(output, state.compact)
        if not isinstance(full, Tensor) or self.batch.num_nodes <= self.batch.batch_size:
            return full
        return prefix_exact(full, self.batch.batch_size,
                            self._materializer(module, state, args, kwargs))

    def _full_rows(self, output: Any, compact: bool) -> Any:
        """A compact model output (seed rows only) zero-padded to a row per batch vertex;
        other outputs unchanged. Only the seed rows of the result are exact."""
        batch = self.batch
        if (compact and isinstance(output, Tensor) and output.dim() >= 1
                and output.size(0) == batch.batch_size and batch.num_nodes > batch.batch_size):
            pad = [0, 0] * (output.dim() - 1) + [0, batch.num_nodes - batch.batch_size]
            return F.pad(output, pad)
        return output

    def _materializer(self, model: torch.nn.Module, state: ModelState, args: tuple,
                      kwargs: dict) -> Callable[[str], Tensor]:
        """What recomputes this trimmed forward untrimmed when its output is read beyond the
        seed rows (`gnnorch.trim.exact_output`): same batch, inputs, grad mode and train/eval
        flag; trimming is switched off for the model from then on (with a `TrimmingWarning`).
        A forward that may be followed by an optimizer step (gradients on, training mode)
        keeps a copy of the parameters, so that rows read after the step are still the values
        of *this* forward; without one, a changed model is refused (`TrimmingError`)."""
        batch, grad, training = self.batch, torch.is_grad_enabled(), model.training
        versions = _parameter_versions(model)
        snapshot = _parameter_snapshot(model) if grad and training else None

        def materialize(reason: str) -> Tensor:
            stale = _parameter_versions(model) != versions
            if stale and snapshot is None:
                state.trim, state.reason = False, "output read beyond the seeds after a change"
                raise TrimmingError(
                    f"gnnorch: the output of {state.name} was read beyond its first "
                    f"{batch.batch_size} rows (the seed rows) by {reason} after its parameters "
                    f"changed in place. Hop-aware trimming computes only the seed rows exactly "
                    f"and can no longer recompute the others with the old weights. Read those "
                    f"rows before changing the model, or pass trim=False to gnnorch.Runtime.")
            state.trim = False
            state.reason = f"its output was read beyond the seed rows ({reason})"
            state.materialized += 1
            warnings.warn(TrimmingWarning(
                f"gnnorch: the output of {state.name} was read beyond its first "
                f"{batch.batch_size} rows (the seed rows of the batch) by {reason}; hop-aware "
                f"trimming computes only the seed rows, so this forward was recomputed "
                f"untrimmed (exact values) and trimming is now off for this model. To keep "
                f"trimming, read only out[:batch.batch_size]; to silence this, pass trim=False "
                f"to gnnorch.Runtime."), stacklevel=4)
            return self._rerun_untrimmed(model, batch, grad, training, args, kwargs,
                                         snapshot if stale else None)

        return materialize

    def _rerun_untrimmed(self, model: torch.nn.Module, batch: BatchGraph, grad: bool,
                         training: bool, args: tuple, kwargs: dict,
                         parameters: dict[str, Tensor] | None) -> Tensor:
        """`model(*args, **kwargs)` on `batch` as the seam would run it untrimmed (with the
        given parameter values instead of the model's own, when given)."""
        saved = (self.batch, self._depth, self._trace)
        self.batch, self._depth, self._trace = batch, 0, None
        flip = model.training != training
        try:
            if flip:
                model.train(training)
            with torch.set_grad_enabled(grad):
                if parameters is not None:
                    return torch.func.functional_call(model, parameters, args, kwargs,
                                                      strict=False)
                return model(*args, **kwargs)
        finally:
            if flip:
                model.train(not training)
            self.batch, self._depth, self._trace = saved

    # -- the one-off check ----------------------------------------------------------------
    def _calibrate(self, model: torch.nn.Module, state: ModelState, trace: _Trace,
                   args: tuple, kwargs: dict) -> None:
        state.layers = trace.calls
        if trace.calls == 0:
            state.reason = "no MessagePassing layer ran on the batch's edge_index"
            return
        if trace.problem is not None:
            state.reason = trace.problem
            return
        mixing = batch_mixing_modules(model, any_mode=True)
        if mixing:
            state.reason = "mixes vertices across the batch: " + ", ".join(mixing)
            return
        start = time.perf_counter()
        state.trim, state.compact, state.reason = self._check(model, state, args, kwargs)
        self.check_s += time.perf_counter() - start

    def _check(self, model: torch.nn.Module, state: ModelState, args: tuple,
               kwargs: dict) -> tuple[bool, bool, str | None]:
        """(trim, compact, reason): trimmed vs untrimmed seed outputs of `model` on this batch,
        in eval mode, without gradients, RNG untouched; train/eval flags are restored.

        Compact trimming (no padding) is tried first; a model whose code between layers needs
        every row (a residual on all rows, JumpingKnowledge concatenation) fails it, loudly
        (an exception) or by a different output, and is checked padded instead.
        """
        flags = [(m, m.training) for m in model.modules()]
        bs = self.batch.batch_size
        reason = "the model's output is not one tensor with a row per vertex"
        try:
            model.eval()
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                self._forced = "plain"
                plain = model(*args, **kwargs)
                if not (isinstance(plain, Tensor) and plain.dim() >= 1 and plain.size(0) >= bs):
                    return False, False, reason
                for compact in (True, False):
                    state.compact = compact
                    self._forced, self._forced_problem = "trim", None
                    try:
                        out = self._full_rows(model(*args, **kwargs), compact)
                    except Exception as exc:  # noqa: BLE001 - compact shapes may not fit
                        reason = f"trimmed forward failed: {type(exc).__name__}: {exc}"
                        continue
                    finally:
                        self._depth, self._trace = 0, None
                    if self._forced_problem is not None:
                        reason = self._forced_problem
                        continue
                    if not (isinstance(out, Tensor) and out.shape == plain.shape):
                        continue
                    a, b = plain[:bs], out[:bs]
                    if torch.allclose(a, b, rtol=VERIFY_RTOL, atol=VERIFY_ATOL, equal_nan=True):
                        return True, compact, None
                    diff = float((a - b).abs().nan_to_num(math.inf).max())
                    reason = (f"trimmed and untrimmed seed outputs differ (max abs diff "
                              f"{diff:.3g}): the model mixes vertices across the batch")
                return False, False, reason
        finally:
            self._forced = None
            for m, training in flags:
                m.training = training

    # -- layer calls ----------------------------------------------------------------------
    def _on_layer(self, layer: Any, original: LayerCall, args: tuple, kwargs: dict) -> Any:
        if threading.get_ident() != self._thread:  # other threads (cache refresh): untouched
            return original(layer, *args, **kwargs)
        trace = self._trace
        batch = self.batch
        if (trace is None or batch is None or self._depth < 1
                or (trace.mode == "plain" and self.layer_hook is None
                    and batch.extra_degree is None)):
            return self._run(layer, original, args, kwargs)
        edge_index = args[1] if len(args) > 1 else kwargs.get("edge_index")
        if not batch.is_own(edge_index):
            if batch.is_narrowed(edge_index):
                trace.problem = SELF_TRIMMING
            return self._run(layer, original, args, kwargs)
        index = trace.calls
        trace.calls += 1
        x = args[0] if args else kwargs.get("x")
        if self.layer_hook is not None and self._forced is None:
            run = functools.partial(self._layer_call, trace, index, layer, original, args,
                                    kwargs, x, edge_index)
            return self.layer_hook.on_layer(HookedCall(trace.model, trace.state, trace.mode,
                                                       index, layer, x, edge_index, args,
                                                       kwargs, batch, run, original))
        return self._layer_call(trace, index, layer, original, args, kwargs, x, edge_index)

    def _layer_call(self, trace: _Trace, index: int, layer: Any, original: LayerCall,
                    args: tuple, kwargs: dict, x: Any, edge_index: Tensor) -> Any:
        """Layer call `index` of the traced forward, trimmed when the model is."""
        batch = self.batch
        if trace.mode == "plain":
            return self._untrimmed_call(layer, original, args, kwargs, x, edge_index)
        compact_input = (trace.mode == "trim" and trace.state.compact and index > 0
                         and isinstance(x, Tensor))
        if not (isinstance(x, Tensor) and x.size(0) == batch.num_nodes) and not compact_input:
            trace.problem = (f"{type(layer).__name__} received inputs that are not one row per "
                             f"batch vertex")
            return self._run(layer, original, args, kwargs)
        if trace.mode == "calibrate":
            return self._untrimmed_call(layer, original, args, kwargs, x, edge_index)
        if index >= (trace.state.layers or 0):
            trace.problem = f"a forward made more than {trace.state.layers} layer calls"
            return self._run(layer, original, args, kwargs)
        bounds = batch.layout.bounds(index, trace.state.layers)
        if bounds is None or not self._trimmable(layer, kwargs):
            return self._untrimmed_call(layer, original, args, kwargs, x, edge_index)
        if x.size(0) < bounds.num_src:
            trace.problem = f"{type(layer).__name__} received fewer rows than it reads"
            return self._run(layer, original, args, kwargs)
        return self._trimmed_call(layer, original, args, kwargs, x, edge_index, bounds,
                                  trace.state.compact)

    def _untrimmed_call(self, layer: Any, original: LayerCall, args: tuple, kwargs: dict,
                        x: Any, edge_index: Tensor) -> Any:
        """An untrimmed call; a GCN layer on a batch with pruned vertices (`extra_degree`) is
        normalised with their degrees all the same."""
        from torch_geometric.nn import GCNConv

        batch = self.batch
        if (batch.extra_degree is not None and isinstance(layer, GCNConv) and layer.normalize
                and self._trimmable(layer, kwargs) and isinstance(x, Tensor)
                and x.size(0) == batch.num_nodes):
            return self._trimmed_call(layer, original, args, kwargs, x, edge_index, None, False)
        return self._run(layer, original, args, kwargs)

    def _run(self, layer: Any, original: LayerCall, args: tuple, kwargs: dict) -> Any:
        """Run one layer call: through the rewrite engine when rewrites are on (it returns what
        the layer's own forward would), else the layer's own call."""
        if self.rewrites is None:
            return original(layer, *args, **kwargs)
        return self.rewrites.forward(layer, lambda *a, **k: original(layer, *a, **k), args,
                                     kwargs)

    def _trimmable(self, layer: Any, kwargs: dict) -> bool:
        if getattr(layer, "flow", "source_to_target") != "source_to_target":
            return False
        if kwargs.get("return_attention_weights"):
            return False
        from torch_geometric.nn import GCNConv

        return not (isinstance(layer, GCNConv) and layer.cached)

    def _trimmed_call(self, layer: Any, original: LayerCall, args: tuple, kwargs: dict,
                      x: Tensor, edge_index: Tensor, bounds: LayerBounds | None,
                      compact: bool) -> Tensor:
        """The call on rows [0, bounds.num_dst) (bounds None: all rows, untrimmed)."""
        from torch_geometric.nn import GCNConv

        batch = self.batch
        full = bounds is None
        if full:
            bounds = LayerBounds(num_src=batch.num_nodes, num_dst=batch.num_nodes)
        num_edges = edge_index.size(1)
        rest_args = list(args[2:])
        rest_kwargs = {k: v for k, v in kwargs.items() if k not in ("x", "edge_index")}
        gcn = isinstance(layer, GCNConv) and layer.normalize
        if gcn:  # normalise on the untrimmed batch graph, then trim
            weight = rest_args.pop(0) if rest_args else rest_kwargs.pop("edge_weight", None)
            edge_index, weight = batch.gcn_norm(edge_index, weight, layer.improved,
                                                layer.add_self_loops, layer.flow, x.dtype)
            rest_kwargs["edge_weight"] = weight
            num_edges = edge_index.size(1)
        keep = edge_index[1] < bounds.num_dst
        edge_index = edge_index[:, keep]
        rest_args = [_keep_edges(v, keep, num_edges) for v in rest_args]
        rest_kwargs = {k: _keep_edges(v, keep, num_edges) for k, v in rest_kwargs.items()}
        if isinstance(layer, self._pair):
            inputs: Any = (x[:bounds.num_src], x[:bounds.num_dst])
        else:
            inputs = x[:bounds.num_src]
        if gcn:
            layer.normalize = False
        try:
            out = self._run(layer, original, (inputs, edge_index, *rest_args), rest_kwargs)
        finally:
            if gcn:
                layer.normalize = True
        out = out[:bounds.num_dst]
        if self._forced is None and not full:  # the one-off check does not count
            self.rows_computed += bounds.num_dst
            self.rows_untrimmed += batch.num_nodes
        if compact:
            return out
        pad = [0, 0] * (out.dim() - 1) + [0, batch.num_nodes - bounds.num_dst]
        return F.pad(out, pad)


def _keep_edges(value: Any, keep: Tensor, num_edges: int) -> Any:
    """Edge-aligned tensors (edge weights, edge features) follow the kept edges."""
    if isinstance(value, Tensor) and value.dim() >= 1 and value.size(0) == num_edges:
        return value[keep]
    return value
