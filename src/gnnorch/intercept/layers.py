"""The MessagePassing seam: every layer call on the current sampled batch goes through here.

Seams (installed for one run, removed afterwards):
* `MessagePassing.__call__` is patched at the class, so every PyG layer (and user subclasses)
  is seen with its real arguments, however the model is written (BasicGNN or a custom stack).
* Module forward hooks track the *outermost* module call on a batch (the "model"): global
  ones while no model runs, only the model's own exit while it runs (`intercept.module_calls`),
  so the modules nested in a model take torch's hook-free path. PyG's `TrimToLayer` is seen at
  its class (`__call__` patched), like the layers.
* While a program is traced rather than run (torch.compile / dynamo, torch.fx including PyG's
  `to_hetero`, TorchScript: `tracing()`), both step aside as their first statement, so compiled
  models get no graph break and fx records PyG's own modules.

One chain per layer call of a traced model on the batch's own edge_index:
    hooks[0] -> ... -> hooks[-1] -> trim -> rewrite -> the unpatched call
Each outer hook (`LayerHook`; today the historical-embedding cache, `gnnorch.cache`) gets a
`HookedCall` whose `run()` proceeds down the chain and whose `unpatched` runs a layer past the
seam; it returns the call's output (possibly with rows replaced) and hears every finished
forward (`on_forward_end`). Below them (`intercept.layer_calls`), trimming (`gnnorch.trim.call`)
restricts rows and edges, and the rewrite engine (`gnnorch.rewrite`), when on, computes the
layer's own forward in the cheaper exact order. Calls on other edge_index tensors run
rewrite -> unpatched only. The chain's vocabulary is `intercept.chain`.

Hop-aware trimming (the invariant is in `gnnorch.trim.hops`): the k-th layer call of a model
on a batch whose edge_index is the batch's own is layer l = k of K. On a HeteroData batch
(`gnnorch.trim.hetero`) calls are counted per edge type, recognised by its edge_index: the
k-th call of an edge type is layer k, and K is the calls per edge type (the same for all).
Layer l runs on input rows [0, c_{D+1}) and the edges into rows [0, c_D). K comes from the
model's first forward on a batch: a model whose trimmed forward cannot fail where its own
would not (a trusted PyG BasicGNN, `gnnorch.trim.trusted`) runs that forward trimmed with K
guessed from the batch's hop count (recomputed untrimmed from the same RNG state if the
guess or the check fails); any other model's first forward runs untrimmed, as without
gnnorch, and K is its layer count.
Models whose code between layers is row-local and shape-agnostic (activation, dropout,
Linear: e.g. PyG's BasicGNN without JumpingKnowledge) skip the padding ("compact"): each layer
returns only the rows the next one reads; the one-off check decides.
The model's output is a `gnnorch.trim.exact_output.PrefixExact` tensor: its seed rows are the
trimmed forward's own, and any read of another row recomputes the forward untrimmed (exact
values, gradients through the untrimmed graph: `gnnorch.trim.materialize`) and switches
trimming off for that model with a `TrimmingWarning`. No value a user can observe is a placeholder.
A model whose output has no row per vertex (a link decoder's edge scores) is trimmed at its
encoder instead, the sub-module call that makes all its layer calls (`intercept.encoder`): the
encoder's output is the prefix-exact one, handed on to the rest of the model at its return
(`intercept.trimmed_outputs` hands back both kinds).

A model is trimmed only if (1) it holds no module that mixes rows across the batch
(`gnnorch.trim.mixing`; inside its layers too, e.g. a BatchNorm in a GINConv's `nn`), (2) it
does not trim itself (PyG's `trim_to_layer`: a layer receives a column slice of the batch's
edge_index), and (3) a one-off check on its first batch (`intercept.trim_check`), in eval
mode without gradients and with the RNG state preserved, finds trimmed and untrimmed seed
outputs equal (`gnnorch.trim.verify`; a trusted BasicGNN is exact by construction and skips
it); this catches functional mixing (global pooling, attention over the batch). A trimmed
forward that meets an unexpected layer count falls back to an untrimmed recomputation and
disables trimming for that model. The one-off check's forwards bypass the outer hooks.

Activation checkpointing (`torch.utils.checkpoint`, e.g. PyG's `DeepGCNLayer(ckpt_grad=True)`):
the backward pass recomputes a checkpointed region and needs every saved tensor back with the
shape it had, so a layer call made under it runs past the seam (no hook, trimming or rewrite)
in the forward and in the recomputation alike, and its model is never trimmed
(`intercept.checkpointed`).

The modes of a forward and every move between them are `gnnorch.trim.state`'s pure
transition functions (`Mode`, `enter`, `forward_end`, ...); the hooks here are their adapter.
The seam follows the thread that installed it only; other threads (e.g. the cache's background
refresh) pass through untouched.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import torch

from ..compat import pyg as compat_pyg
from ..compat import torch as compat_torch
from ..trim.batch import BatchGraph
from ..trim.hetero import SampledGraph
from ..trim.state import (CHECKPOINTED, SELF_TRIMMING, Action, Mode, ModelState,
                          check_result, enter, forward_end, non_seed_read, self_trimming)
from ..trim.trusted import trusted_model
from .chain import (HookedCall, LayerCall, LayerHook, Trace, entry_copy, patched_call, run_chain,
                    tracing)
from .checkpointed import runs_past_seam
from .dataflow import DataflowRecorder
from .layer_calls import TrimAndRewrite
from .module_calls import ModuleCalls
from .trim_check import OneOffCheck
from .trimmed_outputs import TrimmedOutputs

if TYPE_CHECKING:
    from ..rewrite.engine import RewriteEngine

__all__ = ["LayerSeam", "BatchGraph", "HookedCall", "LayerHook", "ModelState", "tracing"]


def _self_trimming(module: torch.nn.Module, args: tuple) -> bool:
    """Whether this module call is PyG's `TrimToLayer` trimming with hop counts: checked at
    `TrimToLayer`'s class when it is recognised, else on every nested module call of a traced
    forward, where every call counts (gnnorch never trims a model that may trim itself)."""
    return compat_pyg.self_trimming(module, args)


def _left_to_pyg(trace: Trace) -> None:
    """The traced model is about to trim itself with PyG's `TrimToLayer` (BasicGNN with
    `num_sampled_nodes_per_hop`): the rest of the forward runs as PyG runs it, and the
    model is never trimmed by gnnorch (its layers already compute only what they must)."""
    step = self_trimming(trace.mode, trace.calls)
    trace.mode = step.mode
    if step.action is Action.DISABLE:
        trace.problem = None
        trace.state.disable(SELF_TRIMMING)
    else:
        trace.problem = SELF_TRIMMING


class LayerSeam:
    """Installs the MessagePassing seam; `set_batch` announces each sampled batch.

    Collaborators, passed in: `rewrites` (the rewrite engine, below trimming in every layer
    call) and `hooks` (the chain's outer links, e.g. the historical-embedding cache).

    The hooks are a thin adapter over `gnnorch.trim.state`'s transition functions: the
    pre-hook asks `enter` for a forward's `Mode`, the post-hook asks `forward_end` (and
    `check_result`) for the `Action` and carries it out. A recomputation re-enters the model
    in the mode the transition names (`forward_in`)."""

    def __init__(self, trim: bool = True, rewrites: RewriteEngine | None = None,
                 hooks: Sequence[LayerHook] = ()) -> None:
        from torch_geometric.nn import MessagePassing

        self.cls = MessagePassing
        self.trim_enabled = trim
        self.rewrites = rewrites
        self.batch: SampledGraph | None = None
        self.models: "weakref.WeakKeyDictionary[torch.nn.Module, ModelState]" = \
            weakref.WeakKeyDictionary()
        self.states: list[ModelState] = []  # outlive their models, for the report
        self._named: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()  # roots named
        self._depth = 0
        self._trace: Trace | None = None
        self._entry: Mode | None = None       # the mode the next model entry must take
        self._untraced: ModelState | None = None  # a model entered under checkpointing
        self._outer: torch.nn.Module | None = None  # entered without a batch graph
        self.calls = TrimAndRewrite(rewrites)  # trim -> rewrite -> unpatched, row counts
        self.hooks: list[LayerHook] = list(hooks)  # the chain's outer links (module docstring)
        self._thread: int | None = None      # the thread the seam follows
        self.module_calls = ModuleCalls(self._on_enter, self._on_exit)
        self._narrows = False    # TrimToLayer seen at its class: nested calls need no hooks
        self.check = OneOffCheck(self)       # the one-off check (its forwards come through here)
        self.outputs = TrimmedOutputs(self, self.check)  # what trimmed forwards hand back
        self.flow: DataflowRecorder | None = None  # set by the check (`intercept.dataflow`)

    def one_off_seconds(self) -> float:
        """Seconds spent so far measuring rather than training: trimming checks, rewrite
        probes and calibration (monotone; see `RankContext.one_off_seconds`)."""
        return self.check.seconds + (self.rewrites.overhead_s if self.rewrites is not None
                                     else 0.0)

    # -- installation ---------------------------------------------------------------------
    @contextlib.contextmanager
    def installed(self) -> Iterator["LayerSeam"]:
        self._thread = threading.get_ident()
        trim_type = compat_pyg.trim_to_layer_type()
        self._narrows = trim_type is not None
        with patched_call(self.cls, self._on_layer), self.module_calls.installed(), (
                patched_call(trim_type, self._on_trim) if self._narrows
                else contextlib.nullcontext()):
            yield self

    def set_batch(self, batch: SampledGraph | None) -> None:
        """Announce the batch the user's next forwards work on (None: no sampled batch)."""
        self.batch = batch
        self.clear_forward()

    def clear_forward(self) -> None:
        """No forward in flight (after a forward that may have raised mid-way)."""
        self._depth = 0
        self._trace = None
        self._entry = None
        self._untraced = None
        self._outer = None
        self.module_calls.reset()
        self.outputs.disarm()

    def in_flight(self) -> Trace | None:
        """The forward in flight (None: none)."""
        return self._trace

    def stats(self) -> dict:
        return {"enabled": self.trim_enabled, "check_s": self.check.seconds,
                "models": [s.to_dict() for s in self.states if s.layers or s.checkpointed_calls
                           or (self.trim_enabled and s.untrimmed_forwards)],
                "rows_computed": self.calls.rows_computed,
                "rows_untrimmed": self.calls.rows_untrimmed}

    # -- model boundaries -----------------------------------------------------------------
    def _on_enter(self, module: torch.nn.Module, args: tuple) -> None:
        if tracing() or threading.get_ident() != self._thread:
            return None
        self._depth += 1
        if (self._depth > 1 and self._trace is not None and not self._narrows
                and _self_trimming(module, args)):
            _left_to_pyg(self._trace)
        if self._depth != 1 or isinstance(module, self.cls):
            return None
        if self._narrows:
            self.module_calls.narrow_to(module)   # nested calls unseen until its exit
        if self.rewrites is not None and module not in self._named:
            self._named.add(module)  # the rewrite report names layers like convs.0
            self.rewrites.register_names(module)
        if self.batch is None:
            self._outer = module   # a model if a layer call comes below it (`_on_layer`)
            return None
        state = self._state(module)
        if compat_torch.in_activation_checkpoint():  # checkpoint(model, ...): not traced, so
            state.disable(CHECKPOINTED)   # its layer calls run past the seam (`checkpointed`)
            self._untraced = state
            return None
        check, self._entry = self._entry, None
        layout = self.batch.layout
        if check is None and layout is None and state.layers is None:
            state.reason = self.batch.reason
        mode = enter(check=check, trim_enabled=self.trim_enabled, has_layout=layout is not None,
                     layers_known=state.layers is not None, trims=state.trim,
                     may_speculate=lambda: self._may_speculate(module, state))
        self._trace = Trace(module, state, mode, args=None if mode is Mode.PLAIN else
                            entry_copy(args))  # to run it again as it was entered
        if state.encoder is not None and mode in (Mode.TRIM, Mode.CHECK_TRIM):
            self.outputs.arm(self._trace, self.batch)
        if mode is Mode.SPECULATE:  # K guessed: one layer per sampled hop, padded
            state.layers, state.compact, state.speculated = layout.num_hops, False, True
            self._trace.rng = torch.get_rng_state()
        return None

    def _state(self, module: torch.nn.Module) -> ModelState:
        """The state of a model (an outermost module call, not a layer) the seam has seen."""
        state = self.models.get(module)
        if state is None:
            state = ModelState(name=type(module).__name__)
            self.models[module] = state
            self.states.append(state)
        return state

    def _may_speculate(self, module: torch.nn.Module, state: ModelState) -> bool:
        """Whether the model's first forward on a batch may run trimmed before the one-off
        check: no outer hooks, not tried before, and a model whose trimmed forward cannot fail
        where its untrimmed one would not (`trim.trusted.trusted_model`); any other model's
        first forward runs untrimmed, as without gnnorch, and the check decides after it."""
        return (not self.hooks and not state.speculated and self.batch.layout.num_hops > 0
                and trusted_model(module)[0])

    def _on_exit(self, module: torch.nn.Module, args: tuple, kwargs: dict,
                 output: Any = None) -> Any:  # no output when the forward raised
        if tracing() or threading.get_ident() != self._thread:
            return None
        self._depth = max(0, self._depth - 1)
        if self._depth == 0:
            self._untraced = self._outer = None
        trace = self._trace
        if self._depth != 0 or trace is None or trace.model is not module:
            return None
        self._trace = None
        state, args = trace.state, args if trace.args is None else trace.args
        trace.problem = trace.problem or trace.uneven() or self.outputs.exit_problem(
            trace, output, self.batch)
        if trace.mode.checking:
            step = forward_end(trace.mode, calls=trace.calls, layers=state.layers,
                               problem=trace.problem)
            if step.action is Action.RECORD_CHECK:
                self.check.problem = trace.problem or "the layer count changed"
            return None
        if output is None:
            return None
        for hook in self.hooks:
            hook.on_forward_end(module, state, trace.calls, self.batch)
        step = forward_end(trace.mode, calls=trace.calls, layers=state.layers,
                           problem=trace.problem)
        if step.action is Action.VERIFY:
            step = check_result(trace.mode, self.check.speculated(module, state, args, kwargs))
        action = step.action
        if action is Action.COUNT_UNTRIMMED or action is Action.LEARN:
            state.untrimmed_forwards += 1
            if action is Action.LEARN:
                self.check.calibrated(module, state, trace, args, kwargs)
            return None
        if action is Action.SERVE_TRIMMED:   # (at an encoder: served at its exit)
            return None if state.encoder else self.outputs.serve(module, state, self.batch,
                                                                 args, kwargs, output)
        if action is Action.RECOMPUTE:
            state.disable(trace.problem or (
                f"a forward made {trace.calls} layer calls instead of {state.layers}"))
        else:  # REPLAY / REPLAY_RELEARN: from the random state the forward began with
            if action is Action.REPLAY_RELEARN:
                state.layers = None  # learnt again by the untrimmed forward
            torch.set_rng_state(trace.rng)
        return self.forward_in(step.mode, module, args, kwargs)

    def forward_in(self, mode: Mode, module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        """`module(*args, **kwargs)` (once more), the forward entered in `mode`."""
        self._entry = mode
        try:
            return module(*entry_copy(args), **kwargs)
        finally:
            self._entry = None

    @contextlib.contextmanager
    def reentered(self, batch: SampledGraph, nested: bool) -> Iterator[None]:
        """The seam set for an untrimmed recomputation on `batch` (`TrimmedOutputs`): of a
        model, entered in the mode `non_seed_read` names; `nested`, of a module run as inside
        a model (untraced). The forward in flight is restored afterwards."""
        saved = (self.batch, self._depth, self._trace)
        self.batch, self._depth, self._trace = batch, int(nested), None
        self._entry = None if nested else non_seed_read(Mode.TRIM).mode
        try:
            with self.module_calls.widened():   # maybe inside another model's call
                yield
        finally:
            self._entry = None
            self.batch, self._depth, self._trace = saved

    # -- layer calls ----------------------------------------------------------------------
    def _on_trim(self, trim: Any, original: LayerCall, args: tuple, kwargs: dict) -> Any:
        """PyG's `TrimToLayer` called with hop counts in a traced forward: `_left_to_pyg`."""
        if (threading.get_ident() == self._thread and self._depth >= 1
                and self._trace is not None and _self_trimming(trim, args)):
            _left_to_pyg(self._trace)
        return original(trim, *args, **kwargs)

    def _on_layer(self, layer: Any, original: LayerCall, args: tuple, kwargs: dict) -> Any:
        if threading.get_ident() != self._thread:  # other threads (cache refresh): untouched
            return original(layer, *args, **kwargs)
        trace = self._trace
        batch = self.batch
        if self._outer is not None:  # a layer call below a module entered without a batch
            #   graph (e.g. on HeteroData batches): a model seen, whose training mode says
            #   whether a loader's epoch trains (`epoch_role.training_now`)
            self._state(self._outer)
            self._outer = None
        if compat_torch.in_activation_checkpoint() and runs_past_seam(
                trace, batch, self._depth >= 1, self._untraced, args, kwargs):
            return original(layer, *args, **kwargs)
        if (trace is None or batch is None or self._depth < 1
                or (trace.mode is Mode.PLAIN and not self.hooks and batch.extra_degree is None)):
            return self.calls.run(layer, original, args, kwargs)
        edge_index = args[1] if len(args) > 1 else kwargs.get("edge_index")
        key = batch.edge_key(edge_index, trace.counts)
        if key is None:
            if batch.is_narrowed(edge_index):  # a layer of a self-trimming model, mid-forward
                trace.problem = SELF_TRIMMING
            return self.calls.run(layer, original, args, kwargs)
        index = trace.layer_of(key)
        x = args[0] if args else kwargs.get("x")
        checking = trace.mode.checking
        run = functools.partial(self.calls.call, trace, batch, key, index, layer, original,
                                args, kwargs, x, edge_index, count=not checking)
        if self.flow is not None:       # the one-off check's data-flow forward
            return self.flow.layer(key, x, run)
        if not self.hooks or checking:  # the one-off check bypasses hooks
            return run()
        return run_chain(self.hooks, functools.partial(
            HookedCall, trace.model, trace.state, trace.mode, index, layer, x, edge_index, args,
            kwargs, batch), run, original)
