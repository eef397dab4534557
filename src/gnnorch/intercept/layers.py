"""The MessagePassing seam: every layer call on the current sampled batch goes through here.

Seams (installed for one run, removed afterwards):
* `MessagePassing.__call__` is patched at the class, so every PyG layer (and user subclasses)
  is seen with its real arguments, however the model is written (BasicGNN or a custom stack).
* Global forward pre/post hooks track the *outermost* module call on a batch (the "model").
* While a program is traced rather than run (torch.compile / dynamo, torch.fx including PyG's
  `to_hetero`, TorchScript: `tracing()`), both step aside as their first statement, so compiled
  models get no graph break and fx records PyG's own modules.

One chain per layer call of a traced model on the batch's own edge_index:
    hooks[0] -> ... -> hooks[-1] -> trim -> rewrite -> the unpatched call
Each outer hook (`LayerHook`; today the historical-embedding cache, `gnnorch.cache`) gets a
`HookedCall` whose `run()` proceeds down the chain and whose `unpatched` runs a layer past the
seam; it returns the call's output (possibly with rows replaced) and hears every finished
forward (`on_forward_end`). Trimming (`gnnorch.trim.call`) restricts rows and edges; the rewrite
engine (`gnnorch.rewrite`), when on, computes the layer's own forward in the cheaper exact order.
Calls on other edge_index tensors run rewrite -> unpatched only.

Hop-aware trimming (the invariant is in `gnnorch.trim.hops`): the k-th layer call of a model
on a batch whose edge_index is the batch's own is layer l = k of K, K learnt from the model's
first forward on a batch (which runs untrimmed). It then runs on input rows [0, c_{D+1}) and the
edges into rows [0, c_D). Models whose code between layers is row-local and shape-agnostic
(activation, dropout, Linear: e.g. PyG's BasicGNN without JumpingKnowledge) skip the padding
("compact"): each layer returns only the rows the next one reads; the one-off check decides.
The model's output is a `gnnorch.trim.exact_output.PrefixExact` tensor: its seed rows are the
trimmed forward's own, and any read of another row recomputes the forward untrimmed (exact
values, gradients through the untrimmed graph) and switches trimming off for that model with a
`TrimmingWarning`. No value a user can observe is a placeholder.

A model is trimmed only if (1) it holds no module that mixes rows across the batch
(`gnnorch.trim.mixing`), (2) it does not trim itself (PyG's `trim_to_layer`: a layer receives a
column slice of the batch's edge_index), and (3) a one-off check on its first batch, in eval
mode without gradients and with the RNG state preserved, finds trimmed and untrimmed seed
outputs equal; this catches functional mixing (global pooling, attention over the batch). A
trimmed forward that meets an unexpected layer count falls back to an untrimmed recomputation
and disables trimming for that model. The one-off check's forwards bypass the outer hooks.
The seam follows the thread that installed it only; other threads (e.g. the cache's background
refresh) pass through untouched.
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
from typing import Any, Callable, Iterator, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.fx import _symbolic_trace as _fx_trace
from torch.nn.modules.module import (register_module_forward_hook,
                                     register_module_forward_pre_hook)

from ..errors import TrimmingError, TrimmingWarning
from ..trim.batch import BatchGraph
from ..trim.call import trimmable, trimmed_call
from ..trim.exact_output import prefix_exact
from ..trim.hops import LayerBounds
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


class LayerHook(Protocol):
    """An outer link of the layer seam's chain (today: the historical-embedding cache)."""

    def on_layer(self, call: "HookedCall") -> Any:
        """The layer call's output; `call.run()` proceeds down the chain."""

    def on_forward_end(self, model: torch.nn.Module, state: "ModelState", calls: int,
                       batch: BatchGraph) -> None:
        """A traced forward of `model` on `batch` finished after `calls` layer calls."""

SELF_TRIMMING = ("the model trims its own layers (PyG's trim_to_layer / BasicGNN's "
                 "num_sampled_nodes_per_hop): left to PyG's trimming")


@functools.lru_cache(maxsize=None)
def _trim_to_layer_type() -> type:
    from torch_geometric.utils._trim_to_layer import TrimToLayer

    return TrimToLayer


def _self_trimming(module: torch.nn.Module, args: tuple) -> bool:
    """Whether this module call is PyG's `TrimToLayer` trimming with hop counts (checked on
    every nested module call of a traced forward: the class is looked up once)."""
    return isinstance(module, _trim_to_layer_type()) and len(args) > 1 and args[1] is not None


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
        self._named: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()  # roots named
        self._depth = 0
        self._trace: _Trace | None = None
        self._forced: str | None = None      # mode forced by the one-off check
        self._forced_problem: str | None = None
        self.rows_computed = 0               # output rows computed by trimmed layer calls
        self.rows_untrimmed = 0              # what the same calls compute untrimmed
        self.hooks: list[LayerHook] = []     # the chain's outer links (the module docstring)
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
        if self._depth > 1 and self._trace is not None and _self_trimming(module, args):
            self._self_trimming(self._trace)
        if self._depth != 1 or isinstance(module, self.cls):
            return None
        if self.rewrites is not None and module not in self._named:
            self._named.add(module)  # the rewrite report names layers like convs.0
            self.rewrites.register_names(module)
        if self.batch is None:
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

    def _self_trimming(self, trace: _Trace) -> None:
        """The traced model is about to trim itself with PyG's `TrimToLayer` (BasicGNN with
        `num_sampled_nodes_per_hop`): the rest of the forward runs as PyG runs it, and the
        model is never trimmed by gnnorch (its layers already compute only what they must)."""
        trace.problem = SELF_TRIMMING
        if trace.mode == "trim" and trace.calls == 0:
            trace.mode, trace.problem = "plain", None
            trace.state.trim, trace.state.reason = False, SELF_TRIMMING

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
        for hook in self.hooks:
            hook.on_forward_end(module, trace.state, trace.calls, self.batch)
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
                or (trace.mode == "plain" and not self.hooks
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
        run = functools.partial(self._layer_call, trace, index, layer, original, args, kwargs,
                                x, edge_index)
        if not self.hooks or self._forced is not None:  # the one-off check bypasses hooks
            return run()
        for hook in reversed(self.hooks[1:]):  # chain: hooks[0] -> ... -> hooks[-1] -> run
            run = functools.partial(hook.on_layer, HookedCall(
                trace.model, trace.state, trace.mode, index, layer, x, edge_index, args,
                kwargs, batch, run, original))
        return self.hooks[0].on_layer(HookedCall(trace.model, trace.state, trace.mode, index,
                                                 layer, x, edge_index, args, kwargs, batch,
                                                 run, original))

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
        if bounds is None or not trimmable(layer, kwargs):
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
                and trimmable(layer, kwargs) and isinstance(x, Tensor)
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

    def _trimmed_call(self, layer: Any, original: LayerCall, args: tuple, kwargs: dict,
                      x: Tensor, edge_index: Tensor, bounds: LayerBounds | None,
                      compact: bool) -> Tensor:
        """The call on rows [0, bounds.num_dst) (`gnnorch.trim.call`), the rest of the chain
        (rewrite, the unpatched call) below it; bounds None: all rows."""
        out = trimmed_call(lambda *a, **k: self._run(layer, original, a, k), layer, args,
                           kwargs, x, edge_index, self.batch, bounds, compact)
        if self._forced is None and bounds is not None:  # the one-off check does not count
            self.rows_computed += bounds.num_dst
            self.rows_untrimmed += self.batch.num_nodes
        return out
