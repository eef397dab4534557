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
forward (`on_forward_end`). Below them (`intercept.layer_calls`), trimming (`gnnorch.trim.call`)
restricts rows and edges, and the rewrite engine (`gnnorch.rewrite`), when on, computes the
layer's own forward in the cheaper exact order. Calls on other edge_index tensors run
rewrite -> unpatched only. The chain's vocabulary is `intercept.chain`.

Hop-aware trimming (the invariant is in `gnnorch.trim.hops`): the k-th layer call of a model
on a batch whose edge_index is the batch's own is layer l = k of K, K learnt from the model's
first forward on a batch (which runs untrimmed). It then runs on input rows [0, c_{D+1}) and the
edges into rows [0, c_D). Models whose code between layers is row-local and shape-agnostic
(activation, dropout, Linear: e.g. PyG's BasicGNN without JumpingKnowledge) skip the padding
("compact"): each layer returns only the rows the next one reads; the one-off check decides.
The model's output is a `gnnorch.trim.exact_output.PrefixExact` tensor: its seed rows are the
trimmed forward's own, and any read of another row recomputes the forward untrimmed (exact
values, gradients through the untrimmed graph: `gnnorch.trim.materialize`) and switches
trimming off for that model with a `TrimmingWarning`. No value a user can observe is a placeholder.

A model is trimmed only if (1) it holds no module that mixes rows across the batch
(`gnnorch.trim.mixing`), (2) it does not trim itself (PyG's `trim_to_layer`: a layer receives a
column slice of the batch's edge_index), and (3) a one-off check on its first batch, in eval
mode without gradients and with the RNG state preserved, finds trimmed and untrimmed seed
outputs equal (`gnnorch.trim.verify`); this catches functional mixing (global pooling, attention over the batch). A
trimmed forward that meets an unexpected layer count falls back to an untrimmed recomputation
and disables trimming for that model. The one-off check's forwards bypass the outer hooks.
The seam follows the thread that installed it only; other threads (e.g. the cache's background
refresh) pass through untouched.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import time
import weakref
from typing import Any, Iterator

import torch
from torch import Tensor
from torch.nn.modules.module import (register_module_forward_hook,
                                     register_module_forward_pre_hook)

from ..trim.batch import BatchGraph
from ..trim.exact_output import prefix_exact
from ..trim.materialize import materializer, run_as
from ..trim.mixing import batch_mixing_modules
from ..trim.state import SELF_TRIMMING, ModelState
from ..trim.trusted import trusted_model, trusted_trimming
from ..trim.verify import pad_compact, verify_trimming
from .chain import HookedCall, LayerCall, LayerHook, Trace, patched_call, run_chain, tracing
from .layer_calls import LayerCalls

__all__ = ["LayerSeam", "BatchGraph", "HookedCall", "LayerHook", "ModelState", "tracing"]


@functools.lru_cache(maxsize=None)
def _trim_to_layer_type() -> type:
    from torch_geometric.utils._trim_to_layer import TrimToLayer

    return TrimToLayer


def _self_trimming(module: torch.nn.Module, args: tuple) -> bool:
    """Whether this module call is PyG's `TrimToLayer` trimming with hop counts (checked on
    every nested module call of a traced forward: the class is looked up once)."""
    return isinstance(module, _trim_to_layer_type()) and len(args) > 1 and args[1] is not None


def _left_to_pyg(trace: Trace) -> None:
    """The traced model is about to trim itself with PyG's `TrimToLayer` (BasicGNN with
    `num_sampled_nodes_per_hop`): the rest of the forward runs as PyG runs it, and the
    model is never trimmed by gnnorch (its layers already compute only what they must)."""
    trace.problem = SELF_TRIMMING
    if trace.mode in ("trim", "speculate") and trace.calls == 0:
        trace.mode, trace.problem = "plain", None
        trace.state.disable(SELF_TRIMMING)


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
        self._trace: Trace | None = None
        self._forced: str | None = None      # mode forced by the one-off check
        self._forced_problem: str | None = None
        self.calls = LayerCalls(rewrites)    # trim -> rewrite -> unpatched, row counts
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
        self._thread = threading.get_ident()
        with patched_call(self.cls, self._on_layer):
            h1 = register_module_forward_pre_hook(self._on_enter)
            h2 = register_module_forward_hook(self._on_exit, with_kwargs=True, always_call=True)
            try:
                yield self
            finally:
                h1.remove()
                h2.remove()

    def set_batch(self, batch: BatchGraph | None) -> None:
        """Announce the batch the user's next forwards work on (None: no sampled batch)."""
        self.batch = batch
        self._depth = 0
        self._trace = None

    def stats(self) -> dict:
        return {"enabled": self.trim_enabled, "check_s": self.check_s,
                "models": [s.to_dict() for s in self.states if s.layers],
                "rows_computed": self.calls.rows_computed,
                "rows_untrimmed": self.calls.rows_untrimmed}

    # -- model boundaries -----------------------------------------------------------------
    def _on_enter(self, module: torch.nn.Module, args: tuple) -> None:
        if tracing() or threading.get_ident() != self._thread:
            return None
        self._depth += 1
        if self._depth > 1 and self._trace is not None and _self_trimming(module, args):
            _left_to_pyg(self._trace)
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
            mode = "speculate" if self._may_speculate(module, state) else "calibrate"
        else:
            mode = "trim" if state.trim else "plain"
        self._trace = Trace(module, state, mode)
        if mode == "speculate":  # K guessed: one layer per sampled hop, padded (see _speculated)
            state.layers, state.compact, state.speculated = self.batch.layout.num_hops, False, True
            self._trace.rng = torch.get_rng_state()
        return None

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
        if trace.mode == "speculate":
            return self._speculated(module, state, trace, args, kwargs, output)
        if trace.mode == "calibrate":
            state.untrimmed_forwards += 1
            self._calibrate(module, state, trace, args, kwargs)
            return None
        if trace.mode == "plain":
            state.untrimmed_forwards += 1
            return None
        if trace.problem is not None or trace.calls != state.layers:
            state.disable(trace.problem or (
                f"a forward made {trace.calls} layer calls instead of {state.layers}"))
            return module(*args, **kwargs)  # recomputed untrimmed (trim now off for it)
        return self._trimmed_output(module, state, args, kwargs, output)

    def _trimmed_output(self, module: torch.nn.Module, state: ModelState, args: tuple,
                        kwargs: dict, output: Any) -> Any:
        """A trimmed forward's output: padded to a row per vertex, prefix-exact."""
        state.trimmed_forwards += 1
        full = pad_compact(output, self.batch, state.compact)
        if not isinstance(full, Tensor) or self.batch.num_nodes <= self.batch.batch_size:
            return full
        batch = self.batch
        rerun = functools.partial(self._rerun_untrimmed, module, batch, args=args, kwargs=kwargs)
        return prefix_exact(full, batch.batch_size,
                            materializer(module, state, batch.batch_size, rerun))

    def _rerun_untrimmed(self, model: torch.nn.Module, batch: BatchGraph, grad: bool,
                         training: bool, parameters: dict[str, Tensor] | None, *,
                         args: tuple, kwargs: dict) -> Tensor:
        """`model(*args, **kwargs)` on `batch` as the seam would run it untrimmed (with the
        given parameter values instead of the model's own, when given)."""
        saved = (self.batch, self._depth, self._trace)
        self.batch, self._depth, self._trace = batch, 0, None
        try:
            return run_as(model, grad, training, parameters, args, kwargs)
        finally:
            self.batch, self._depth, self._trace = saved

    # -- the one-off check ----------------------------------------------------------------
    def _speculated(self, module: torch.nn.Module, state: ModelState, trace: Trace,
                    args: tuple, kwargs: dict, output: Any) -> Any:
        """The model's first forward ran trimmed (padded) with K = the batch's hop count, so
        that no untrimmed training step is paid for (its time, and its activations: they set
        the run's peak memory). The one-off check then decides as in `_calibrate`; when it
        fails, or the forward was not the K-layer forward guessed, the forward is recomputed
        untrimmed from the random state it started with, and that output is returned."""
        if trace.problem is None and trace.calls == state.layers:
            trusted, why = trusted_trimming(module, args, kwargs)
            if trusted:  # exact by construction (`trim.trusted`): no reference forward
                state.trim, state.compact, state.reason = True, not hasattr(module, "jk"), None
                state.verified_by = why
            else:
                self._verify(module, state, args, kwargs)
            if state.trim:
                return self._trimmed_output(module, state, args, kwargs, output)
        else:
            state.layers = None  # learnt again by the untrimmed forward below ("calibrate")
        torch.set_rng_state(trace.rng)
        return module(*args, **kwargs)

    def _calibrate(self, model: torch.nn.Module, state: ModelState, trace: Trace,
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
        self._verify(model, state, args, kwargs)

    def _verify(self, model: torch.nn.Module, state: ModelState, args: tuple,
                kwargs: dict) -> None:
        """The one-off check (`_check`), timed; its verdict goes to `state`."""
        start = time.perf_counter()
        state.trim, state.compact, state.reason = self._check(model, state, args, kwargs)
        state.verified_by = "the one-off check" if state.trim else None
        self.check_s += time.perf_counter() - start

    def _check(self, model: torch.nn.Module, state: ModelState, args: tuple,
               kwargs: dict) -> tuple[bool, bool, str | None]:
        """(trim, compact, reason): `gnnorch.trim.verify` on this batch, the forwards run in
        eval mode, without gradients, RNG untouched; train/eval flags are restored."""
        flags = [(m, m.training) for m in model.modules()]

        def trimmed(compact: bool) -> tuple[Any, str | None]:
            state.compact = compact
            self._forced, self._forced_problem = "trim", None
            try:
                out = pad_compact(model(*args, **kwargs), self.batch, compact)
            finally:
                self._depth, self._trace = 0, None
            return out, self._forced_problem

        try:
            model.eval()
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                self._forced = "plain"
                plain = model(*args, **kwargs)
                return verify_trimming(plain, trimmed, self.batch.batch_size)
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
            return self.calls.run(layer, original, args, kwargs)
        edge_index = args[1] if len(args) > 1 else kwargs.get("edge_index")
        if not batch.is_own(edge_index):
            if batch.is_narrowed(edge_index):
                trace.problem = SELF_TRIMMING
            return self.calls.run(layer, original, args, kwargs)
        index = trace.calls
        trace.calls += 1
        x = args[0] if args else kwargs.get("x")
        run = functools.partial(self.calls.call, trace, batch, index, layer, original, args,
                                kwargs, x, edge_index, count=self._forced is None)
        if not self.hooks or self._forced is not None:  # the one-off check bypasses hooks
            return run()
        return run_chain(self.hooks, functools.partial(
            HookedCall, trace.model, trace.state, trace.mode, index, layer, x, edge_index, args,
            kwargs, batch), run, original)
