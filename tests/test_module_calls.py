"""The layer seam's module hooks (`intercept.module_calls`): global while no model runs, only
the model's own exit while it runs; nothing of gnnorch's left on a model between forwards."""
import copy
import io

import pytest
import torch
from torch.nn.modules import module as torch_module
from torch_geometric.nn import GraphSAGE

from gnnorch import compat
from gnnorch.errors import TrimmingWarning
from gnnorch.compat import pyg as compat_pyg
from gnnorch.intercept.layers import LayerSeam
from gnnorch.trim.batch import BatchGraph

from test_trim import sampled_batch


def _global_hooks() -> int:
    return len(torch_module._global_forward_pre_hooks) + len(torch_module._global_forward_hooks)


class Witness(torch.nn.Module):
    """Records how many global module hooks exist while it computes."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def forward(self, x):
        self.seen.append(_global_hooks())
        return x


class WithWitness(torch.nn.Module):
    def __init__(self, sage: GraphSAGE, fail_once: bool = False) -> None:
        super().__init__()
        self.sage, self.witness, self.fail_once = sage, Witness(), fail_once

    def forward(self, x, edge_index):
        if self.fail_once:
            self.fail_once = False
            raise RuntimeError("the user's forward failed")
        return self.sage(self.witness(x), edge_index)


def _model():
    torch.manual_seed(0)
    return GraphSAGE(1433, 16, 2, 7).double().eval()


def test_modules_nested_in_a_model_see_no_global_hook_and_results_are_pyg():
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    model = WithWitness(_model())
    with torch.no_grad():
        ref = model(x, edge_index)[:seeds]
    before = _global_hooks()
    nested, alone = [], []
    seam = LayerSeam(trim=True)
    with seam.installed():
        assert _global_hooks() == before + 2
        for _ in range(3):
            seam.set_batch(BatchGraph(edge_index, x.size(0), seeds, layout))
            model.witness.seen.clear()
            with torch.no_grad():
                out = model(x, edge_index)[:seeds]
            nested += model.witness.seen     # (the first batch: the one-off check's too)
            torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-10)
            assert not model._forward_hooks      # the model's exit hook lives for one call
            model.witness.seen.clear()
            model.witness(x)                     # called alone: an outermost call itself
            alone += model.witness.seen
            assert _global_hooks() == before + 2  # back once no model runs
        state = seam.models[model]
        assert state.trim and state.trimmed_forwards == 2, state.reason   # the first learns
    # inside an outermost call: no global hook of the seam's (torch's fast path)
    assert len(nested) >= 3 and set(nested) == {before}
    assert alone == [before] * 3
    assert seam.module_calls.narrowed_calls >= 6
    assert _global_hooks() == before and not model._forward_hooks


def test_a_forward_that_raises_leaves_the_seam_whole():
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    model = WithWitness(_model(), fail_once=True)
    seam = LayerSeam(trim=True)
    before = _global_hooks()
    with seam.installed(), torch.no_grad():
        seam.set_batch(BatchGraph(edge_index, x.size(0), seeds, layout))
        with pytest.raises(RuntimeError, match="the user's forward failed"):
            model(x, edge_index)
        assert _global_hooks() == before + 2 and not model._forward_hooks
        for _ in range(2):       # same batch, no set_batch in between: the seam recovered
            model(x, edge_index)
        state = seam.models[model]
        assert state.untrimmed_forwards == 1 and state.trimmed_forwards == 1, state.reason
    assert _global_hooks() == before


def test_a_model_copied_and_pickled_between_forwards_carries_nothing_of_gnnorch():
    """Users deep-copy the best model and `torch.save` whole models inside their loops."""
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    model = _model()
    seam = LayerSeam(trim=True)
    with seam.installed(), torch.no_grad():
        seam.set_batch(BatchGraph(edge_index, x.size(0), seeds, layout))
        out = model(x, edge_index)[:seeds]
        best = copy.deepcopy(model)
        buffer = io.BytesIO()
        torch.save(model, buffer)
    assert not best._forward_hooks and not best._forward_pre_hooks
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x, edge_index)[:seeds], out, rtol=1e-9, atol=1e-10)


def test_a_trimmed_output_read_inside_another_models_call_is_recomputed_through_the_seam():
    """The untrimmed recomputation may start inside another module's call (a loss module that
    reads every row), while the seam sees only that module's exit: it sees the model again."""
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    model = _model()
    with torch.no_grad():
        ref = model(x, edge_index)

    class ReadsEveryRow(torch.nn.Module):
        def forward(self, out):
            return out.sum(dim=1)

    before = _global_hooks()
    seam = LayerSeam(trim=True)
    with seam.installed(), torch.no_grad(), pytest.warns(TrimmingWarning, match="read beyond"):
        seam.set_batch(BatchGraph(edge_index, x.size(0), seeds, layout))
        out = model(x, edge_index)
        reader = ReadsEveryRow()
        total = reader(out)
        assert _global_hooks() == before + 2
        assert not model._forward_hooks and not reader._forward_hooks
    torch.testing.assert_close(total, ref.sum(dim=1), rtol=1e-9, atol=1e-10)
    state = seam.models[model]
    assert state.materialized == 1 and not state.trim
    assert _global_hooks() == before


def test_without_trim_to_layer_the_global_hooks_stay_and_see_every_call(monkeypatch):
    """Fail closed: when PyG's `TrimToLayer` cannot be recognised, every nested module call
    is seen (and counts as the model trimming itself), as before the narrowing."""
    from torch_geometric.utils import _trim_to_layer

    x, edge_index, layout, seeds = sampled_batch([5, 5])
    model = WithWitness(_model())
    monkeypatch.delattr(_trim_to_layer, "TrimToLayer")
    compat.reset()
    try:
        assert compat_pyg.trim_to_layer_type() is None
        before = _global_hooks()
        seam = LayerSeam(trim=True)
        with seam.installed(), torch.no_grad():
            seam.set_batch(BatchGraph(edge_index, x.size(0), seeds, layout))
            model(x, edge_index)
        assert model.witness.seen == [before + 2]
        assert seam.module_calls.narrowed_calls == 0
        assert not seam.models[model].trim
    finally:
        monkeypatch.undo()
        compat.reset()


def test_a_torchscript_model_keeps_the_global_hooks():
    """A scripted model refuses forward hooks: its calls stay seen by the global hooks."""
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    model = torch.nn.Sequential(torch.nn.Linear(1433, 7)).double()
    scripted = torch.jit.script(model)
    before = _global_hooks()
    seam = LayerSeam(trim=True)
    with seam.installed(), torch.no_grad():
        seam.set_batch(BatchGraph(edge_index, x.size(0), seeds, layout))
        torch.testing.assert_close(scripted(x), model(x))
        assert _global_hooks() == before + 2
    assert seam.module_calls.narrowed_calls == 1      # the plain model only
    assert _global_hooks() == before


def test_a_raising_forward_with_a_hook_after_the_seams_raises_the_users_error():
    """When forward raises, torch runs a module's always-called hooks over its live hook dict:
    the seam's exit hook must not remove itself from under a hook the user registered after
    it (during the forward); it is removed, inert, at the next model call."""
    x, edge_index, layout, seeds = sampled_batch([5, 5])
    sage = _model()
    user_calls = []

    class RegistersAHookThenFails(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.sage = sage
            self.fail = True

        def forward(self, x, edge_index):
            if self.fail:
                self.fail = False
                self.register_forward_hook(lambda *a: user_calls.append(1), always_call=True)
                raise ValueError("the user's own error")
            return self.sage(x, edge_index)

    model = RegistersAHookThenFails()
    seam = LayerSeam(trim=True)
    before = _global_hooks()
    with seam.installed(), torch.no_grad():
        seam.set_batch(BatchGraph(edge_index, x.size(0), seeds, layout))
        with pytest.raises(ValueError, match="the user's own error") as raised:
            model(x, edge_index)
        assert raised.value.__context__ is None and user_calls == [1]
        assert _global_hooks() == before + 2
        assert len(model._forward_hooks) == 2     # the seam's, inert, and the user's
        model(x, edge_index)
        assert len(model._forward_hooks) == 1 and len(user_calls) >= 2   # (+ the check's)
        assert seam.models[model].untrimmed_forwards == 1
    assert _global_hooks() == before and len(model._forward_hooks) == 1
