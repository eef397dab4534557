"""The one-off check: whether trimming is exact for a model, decided once, on its first batch.

By construction for a closed set of PyG models (`gnnorch.trim.trusted`), else by comparing
the seed rows of an untrimmed and a trimmed forward of that batch (`gnnorch.trim.verify`),
both run through the layer seam (`intercept.layers.LayerSeam`) in the check modes. A model
that mixes rows across the batch (`gnnorch.trim.mixing`, in training or eval mode), or whose
first forward met a problem (self-trimming, activation checkpointing), is never checked.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator, Protocol

import torch

from ..trim.hetero import SampledGraph, typed_view
from ..trim.mixing import batch_mixing_modules
from ..trim.state import Mode, ModelState
from ..trim.trusted import trusted_trimming
from ..trim.verify import NOT_ONE_TENSOR, NOT_PER_TYPE, pad_compact, rows_per_vertex, \
    same_values, seed_rows_differ, seed_rows_only, verify_trimming
from .chain import Trace
from .dataflow import DataflowRecorder, Plan, layer_plan
from .encoder import NO_ENCODER, EncoderFound, find_encoder

__all__ = ["CheckedSeam", "OneOffCheck"]


class NotRepeatable(Exception):
    """The model's forward raised when the one-off check ran it again."""


class CheckedSeam(Protocol):
    """What the check needs of the layer seam (`intercept.layers.LayerSeam`)."""

    batch: SampledGraph | None
    flow: DataflowRecorder | None    # records the layer calls of a data-flow forward

    def forward_in(self, mode: Mode, module: torch.nn.Module, args: tuple,
                   kwargs: dict) -> Any:
        """`module(*args, **kwargs)`, the forward entered in `mode`."""

    def clear_forward(self) -> None:
        """No forward in flight."""

    def in_flight(self) -> Trace | None:
        """The forward in flight (None: none)."""


class OneOffCheck:
    """Whether trimming is exact for a model, decided once, on its first batch: by
    construction (`trim.trusted`) or by the check of `gnnorch.trim.verify` (trimmed and
    untrimmed seed outputs equal), whose forwards run through `seam` in the check modes
    (`Mode.CHECK_PLAIN`, `Mode.CHECK_TRIM`): in eval mode, without gradients, the RNG
    untouched, the outer hooks bypassed."""

    def __init__(self, seam: CheckedSeam) -> None:
        self.seam = seam
        self.seconds = 0.0               # spent in reference / trimmed check forwards
        self.problem: str | None = None  # what the latest trimmed check forward met
        self.encoder_outputs: list = []  # what the encoder returned in it (padded), per call
        self._rng = torch.get_rng_state()  # the random state every check forward starts from

    def speculated(self, module: torch.nn.Module, state: ModelState, args: tuple,
                   kwargs: dict) -> bool:
        """The model's first forward ran trimmed (padded) with K = the batch's hop count, so
        that no untrimmed training step is paid for (its time, and its activations: they set
        the run's peak memory). Whether trimming is exact for it: by construction
        (`trim.trusted`: no reference forward) or by the check, as in `calibrated`."""
        trusted, why = trusted_trimming(module, args, kwargs)
        if trusted:
            state.trim, state.compact, state.reason = True, not hasattr(module, "jk"), None
            state.verified_by = why
        else:
            self.verify(module, state, args, kwargs)
        return state.trim

    def calibrated(self, model: torch.nn.Module, state: ModelState, trace: Trace,
                   args: tuple, kwargs: dict) -> None:
        """The model's first forward ran untrimmed: K is its layer calls; then the check."""
        state.layers = trace.calls
        if trace.calls == 0:
            state.reason = "no MessagePassing layer ran on the batch's edge_index"
            return
        why = trace.problem
        uneven = why is not None and why == trace.uneven()   # layers from data flow instead?
        if why is None or uneven:
            mixing = batch_mixing_modules(model, any_mode=True)
            if mixing:
                state.reason = "mixes vertices across the batch: " + ", ".join(mixing)
                return
        if uneven:
            why = self._planned(model, state, args, kwargs, why)
        if why is not None:
            state.reason = why
            return
        self.verify(model, state, args, kwargs)

    def _planned(self, model: torch.nn.Module, state: ModelState, args: tuple, kwargs: dict,
                 uneven: str) -> str | None:
        """None when the model, whose layers do not all call the same edge types (`uneven`
        says how), has a layer plan from its data flow (`_dataflow_plan`; the plan and K go
        to `state`), else why not."""
        start = time.perf_counter()
        try:
            with self._quiet(model):
                plan, why = self._dataflow_plan(model, args, kwargs)
        except NotRepeatable as exc:
            return f"{uneven}; {exc}"
        finally:
            self.seconds += time.perf_counter() - start
        if plan is None:
            return f"{uneven}; no layer plan from its data flow: {why}"
        state.plan = plan
        state.layers = max(layer for _, layer in plan if layer is not None) + 1
        return None

    def _dataflow_plan(self, model: torch.nn.Module, args: tuple, kwargs: dict
                       ) -> tuple[Plan | None, str | None]:
        """(plan, None) or (None, why): the layer plan of the model's data flow
        (`intercept.dataflow`), recorded in one untrimmed forward (`_quiet` already)."""
        recorder = DataflowRecorder()
        try:
            with recorder:
                self.seam.flow = recorder
                output = self._plain_again(model, args, kwargs)
        finally:
            self.seam.flow = None
        return layer_plan(recorder.steps, output)

    def verify(self, model: torch.nn.Module, state: ModelState, args: tuple,
               kwargs: dict) -> None:
        """The check (`_check`), timed; its verdict goes to `state`."""
        start = time.perf_counter()
        try:
            state.trim, state.compact, state.reason = self._check(model, state, args, kwargs)
        except NotRepeatable as exc:
            state.trim, state.compact, state.reason = False, False, str(exc)
        state.verified_by = "the one-off check" if state.trim else None
        if not state.trim:
            state.seeds_only, state.encoder, state.encoder_calls = False, None, ()
        if not state.trim and state.plan is not None:
            state.plan, state.reason = None, f"with layers from its data flow: {state.reason}"
        self.seconds += time.perf_counter() - start

    def _plain_again(self, model: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        """The model's forward run again untrimmed (`Mode.CHECK_PLAIN`); `NotRepeatable` when
        it raises (the seam's forward state cleared)."""
        try:
            torch.set_rng_state(self._rng)
            return self.seam.forward_in(Mode.CHECK_PLAIN, model, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - the user's forward, run once more
            self.seam.clear_forward()
            first = (str(exc).splitlines() or [""])[0][:200]
            raise NotRepeatable(
                f"the one-off check could not run its forward again ({type(exc).__name__}: "
                f"{first}); a forward that changes its arguments (replacing an entry of "
                f"batch.x_dict, say) cannot be run twice") from exc

    @contextlib.contextmanager
    def _quiet(self, model: torch.nn.Module) -> Iterator[None]:
        """The model in eval mode, without gradients, the RNG untouched (its modules'
        train/eval flags restored afterwards). Every check forward starts from the same CPU
        random state (`_rng`), so a model drawing random numbers draws the same in each."""
        flags = [(m, m.training) for m in model.modules()]
        try:
            model.eval()
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                self._rng = torch.get_rng_state()
                yield
        finally:
            for m, training in flags:
                m.training = training

    def _check(self, model: torch.nn.Module, state: ModelState, args: tuple,
               kwargs: dict) -> tuple[bool, bool, str | None]:
        """(trim, compact, reason): `gnnorch.trim.verify` on this batch (`_quiet`)."""
        seam = self.seam

        def trimmed(compact: bool) -> tuple[Any, str | None]:
            if compact and state.plan is not None:   # a forward off the plan must be able to
                return None, "padded: layers from data flow"  # run its calls untrimmed
            state.compact = compact
            self.problem, self.encoder_outputs = None, []
            try:
                torch.set_rng_state(self._rng)
                out = pad_compact(seam.forward_in(Mode.CHECK_TRIM, model, args, kwargs),
                                  seam.batch, state.pads_output)
            finally:
                seam.clear_forward()
            return out, self.problem

        with self._quiet(model):
            # one reference forward, its sub-module calls recorded in case the output has
            # no row per vertex and the model is to be checked at its encoder
            plain, found = find_encoder(
                model, lambda: self._plain_again(model, args, kwargs),
                lambda: 0 if seam.in_flight() is None else seam.in_flight().made, seam.batch,
                lambda: () if seam.in_flight() is None else tuple(seam.in_flight().order))
            state.seeds_only = seed_rows_only(plain, seam.batch)   # x[:batch_size] itself
            if state.seeds_only or rows_per_vertex(plain, seam.batch):
                return verify_trimming(plain, trimmed, seam.batch)
            if found is not None:
                return self._check_at_encoder(model, state, plain, found, trimmed, args, kwargs)
            trim, compact, reason = verify_trimming(plain, trimmed, seam.batch)
            if reason in (NOT_ONE_TENSOR, NOT_PER_TYPE):
                reason = f"{reason}, and {NO_ENCODER}"
            return trim, compact, reason

    def _check_at_encoder(self, model: torch.nn.Module, state: ModelState, plain: Any,
                          found: EncoderFound, trimmed: Callable[[bool], tuple[Any, str | None]],
                          args: tuple, kwargs: dict) -> tuple[bool, bool, str | None]:
        """(trim, compact, reason) for a model whose output (untrimmed: `plain`) has no row per
        vertex, trimmed at its encoder calls `found` (`intercept.encoder`) when the trimmed
        forwards give the seed rows of each of their outputs, and the model's whole output,
        as the untrimmed one does. Several encoder calls need a layer plan from the model's
        data flow (`intercept.dataflow`) in which each ends at the top layer; a planned
        model runs padded."""
        seam, before = self.seam, (state.plan, state.layers)
        state.encoder, state.encoder_calls = found.label, found.planned()
        state.seeds_only = seed_rows_only(found.output, typed_view(
            seam.batch, found.node_type(found.calls[0])))
        why = None
        if len(found.calls) > 1:
            plan = state.plan
            if plan is None:
                plan, why = self._dataflow_plan(model, args, kwargs)
            why = f"no layer plan ({why})" if plan is None else found.feeds_layers(plan)
            if why is None:
                state.plan = plan
                state.layers = max(layer for _, layer in plan if layer is not None) + 1
            elif plan is not None:
                why = f"the output of {why} feeds layers of the model"

        def at_encoder(compact: bool) -> tuple[Any, str | None]:
            out, problem = trimmed(compact)
            if problem is None and not same_values(plain, out):
                problem = (f"the model reads its encoder's output beyond the seed rows (its "
                           f"trimmed and untrimmed outputs differ)")
            got = self.encoder_outputs
            if problem is None and len(got) != len(found.calls):
                problem = f"its encoders returned {len(got)} times, not {len(found.calls)}"
            for call, have in zip(found.calls[1:], got[1:]):
                if problem is None:
                    view = typed_view(seam.batch, found.node_type(call))
                    problem = seed_rows_differ(call.output, have, view)
                    problem = problem and f"{call.name}: {problem}"
            return (got[0] if got else None), problem

        if why is None:
            trim, compact, reason = verify_trimming(found.output, at_encoder, typed_view(
                seam.batch, found.node_type(found.calls[0])))
        else:
            trim, compact, reason = False, False, why
        if not trim:
            state.encoder, state.encoder_calls = None, ()
            state.plan, state.layers = before
            reason = f"at its encoder {found.label}: {reason}"
        return trim, compact, reason
