"""What a trimmed forward hands back, and the untrimmed recomputation behind it.

A forward trimmed at the model's output hands back that output padded to a row per vertex and
prefix-exact (`gnnorch.trim.exact_output`: each tensor of a dict output by node type exact in
its type's seed rows), or, when the model keeps only the seed rows itself (``return
x[:batch_size]``: `ModelState.seeds_only`), as it is: every row of it is exact. A model
trimmed at its encoders (`intercept.encoder`: one call or several, of one module or one per
node type) gets each encoder call's output the same way, at its return, and the rest of the
model computes from them; a forward that did not go as planned (an encoder returning after
other layer calls than planned, or layer calls after the last) is recomputed untrimmed at the
model's exit (`encoder_problem`).

A read of a non-seed row recomputes the forward untrimmed (`gnnorch.trim.materialize`): the
model re-entered through the layer seam in the mode `non_seed_read` names, or the encoder run
as inside a model, untraced, its layer calls untrimmed (`ReenterableSeam.reentered`).
"""
from __future__ import annotations

import functools
import threading
import warnings
from typing import Any, ContextManager, Protocol

import torch
from torch import Tensor

from ..errors import TrimmingWarning
from ..trim.exact_output import prefix_exact_parts
from ..trim.hetero import SampledGraph, typed_view
from ..trim.materialize import materializer, run_as
from ..trim.state import Mode, ModelState
from ..trim.verify import output_parts, pad_compact, seed_rows_only
from .chain import Trace, entry_copy
from .encoder import EncoderWatch
from .trim_check import OneOffCheck

__all__ = ["ReenterableSeam", "TrimmedOutputs"]


class ReenterableSeam(Protocol):
    """What serving needs of the layer seam (`intercept.layers.LayerSeam`)."""

    def reentered(self, batch: SampledGraph, nested: bool) -> ContextManager[None]:
        """The seam set for a recomputation on `batch`: of a model (traced, entered in the
        mode `non_seed_read` names) or, `nested`, of a module run as inside a model (untraced,
        its layer calls untrimmed); the forward in flight restored afterwards."""


class TrimmedOutputs:
    """Hands back the outputs of trimmed forwards (module docstring); in the one-off check's
    trimmed forward of a model checked at its encoder, the encoder's output goes to `check`."""

    def __init__(self, seam: ReenterableSeam, check: OneOffCheck) -> None:
        self.seam = seam
        self.check = check
        self.watch = EncoderWatch()
        self._rerunning = 0       # untrimmed recomputations in flight

    def serve(self, module: torch.nn.Module, state: ModelState, batch: SampledGraph,
              args: tuple, kwargs: dict, output: Any, encoder: str | None = None,
              node_type: str | None = None) -> Any:
        """A trimmed forward's output (of the model, or of its encoder named `encoder`, whose
        one-tensor output has rows of `node_type` on a HeteroData batch) padded to a row per
        vertex and prefix-exact."""
        state.trimmed_forwards += encoder is None    # (at an encoder: by its first return)
        if state.seeds_only:      # every row exact (`trim.verify.seed_rows_only`)
            return output
        view = typed_view(batch, node_type)
        full = pad_compact(output, view, state.compact)
        parts = output_parts(full, view)
        if parts is None:
            return full
        rerun = functools.partial(self._rerun, module, batch, args=args, kwargs=kwargs,
                                  nested=encoder is not None)
        name = f"{state.name}.{encoder}" if encoder else None
        return prefix_exact_parts(parts, materializer(module, state, view.batch_size, rerun,
                                                      name))

    def _rerun(self, module: torch.nn.Module, batch: SampledGraph, grad: bool, training: bool,
               parameters: dict[str, Tensor] | None, *, args: tuple, kwargs: dict,
               nested: bool) -> Tensor:
        """`module(*args, **kwargs)` on `batch` untrimmed (with the given parameter values
        instead of the module's own, when given): its trimmed output was read beyond the seed
        rows."""
        self._rerunning += 1      # the encoder's calls in it are not watched
        try:
            with self.seam.reentered(batch, nested):
                return run_as(module, grad, training, parameters, entry_copy(args), kwargs)
        finally:
            self._rerunning -= 1

    # -- models trimmed at an encoder --------------------------------------------------
    def arm(self, trace: Trace, batch: SampledGraph) -> None:
        """A forward of a model trimmed (or checked) at its encoders began: watch them."""
        thread = threading.get_ident()

        def on_exit(name: str, encoder: torch.nn.Module, args: tuple, kwargs: dict,
                    output: Any) -> Any:
            if threading.get_ident() != thread or self._rerunning:
                return None
            return self._encoder_returned(trace, batch, name, encoder, args, kwargs, output)

        self.watch.arm(trace.model, (name for name, _, _ in trace.state.encoder_calls),
                       on_exit)

    def disarm(self) -> None:
        self.watch.disarm()

    def _encoder_returned(self, trace: Trace, batch: SampledGraph, name: str,
                          encoder: torch.nn.Module, args: tuple, kwargs: dict,
                          output: Any) -> Any:
        """An encoder's output handed on padded; prefix-exact (or, holding only the seed
        rows, as it is) when the forward went as planned so far (else the model's exit
        recomputes it untrimmed: `encoder_problem`)."""
        state, index = trace.state, trace.returns
        trace.served, trace.returns = trace.made, index + 1
        planned = state.encoder_calls[index] if index < len(state.encoder_calls) else None
        node_type = None if planned is None else planned[1]
        view = typed_view(batch, node_type)
        if trace.mode is Mode.CHECK_TRIM:
            self.check.encoder_outputs.append(pad_compact(output, view, state.pads_output))
            return self.check.encoder_outputs[-1]
        if trace.problem is None:
            if planned is None or planned[0] != name or trace.made != planned[2] or (
                    state.plan is None and trace.uneven()):
                trace.problem = (f"its encoder {name} returned after {trace.made} layer calls, "
                                 f"as call {index + 1} of a forward, off the plan")
            else:
                trace.problem = self.seeds_problem(trace, output, view)
        if trace.problem is None:
            state.trimmed_forwards += index == 0
            return self.serve(encoder, state, batch, args, kwargs, output, name, node_type)
        return pad_compact(output, view, state.pads_output)

    def seeds_problem(self, trace: Trace, output: Any, batch: SampledGraph) -> str | None:
        """In a trimmed forward of a module that keeps only the seed rows itself
        (`ModelState.seeds_only`), at its return: why its output (the model's or its
        encoder's) is not the seed rows (None: it is, or another kind of forward). Its last
        layers' outputs are padded to a row per vertex (`intercept.layer_calls`), so a read
        beyond the seed rows (``x[:256]`` on a batch of fewer seeds) shows in the rows it
        returns: the forward is recomputed untrimmed and trimming is off for the model."""
        state = trace.state
        if not state.seeds_only or trace.mode is not Mode.TRIM or output is None or \
                seed_rows_only(output, batch):
            return None
        name = state.name + (f".{state.encoder}" if state.encoder else "")
        warnings.warn(TrimmingWarning(
            f"gnnorch: {name} returned other rows than the {batch.batch_size} seed rows of "
            f"this batch, as it did on the first one; hop-aware trimming computes only the "
            f"seed rows, so this forward was recomputed untrimmed (exact values) and "
            f"trimming is now off for this model. To keep trimming, keep "
            f"x[:batch.batch_size]; to silence this, pass trim=False to gnnorch.Runtime."),
            stacklevel=4)
        return f"its output was not the seed rows in a later forward ({name})"

    def exit_problem(self, trace: Trace, output: Any, batch: SampledGraph) -> str | None:
        """At the model's exit: why its forward went otherwise than planned at its encoder
        (`encoder_problem`), or, for a model trimmed at its output, why that output is not
        the seed rows it should be (`seeds_problem`); None: as planned."""
        if trace.state.encoder is not None:
            return self.encoder_problem(trace)
        return self.seeds_problem(trace, output, batch)

    def encoder_problem(self, trace: Trace) -> str | None:
        """At the model's exit: why a forward trimmed (or checked) at its encoders went
        otherwise than planned (None: as planned, or not such a forward)."""
        name = trace.state.encoder
        if name is None or trace.mode not in (Mode.TRIM, Mode.CHECK_TRIM):
            return None
        self.disarm()
        if trace.served is None:
            return f"its encoder {name} did not return in a forward"
        if trace.returns != len(trace.state.encoder_calls):
            return (f"its encoders ({name}) returned {trace.returns} times in a forward, not "
                    f"{len(trace.state.encoder_calls)}")
        return None if trace.served == trace.made else (
            f"it made layer calls on the batch graph after its encoder {name}")
