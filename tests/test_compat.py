"""`gnnorch.compat`: the only place that names private PyG / torch names, and every accessor
fails closed.

1. A source check (`ast`, like `test_layering.py`): no module of gnnorch outside
   `gnnorch.compat` names a private (``_``-prefixed, not dunder) attribute or submodule of
   torch / torch_geometric (or of `multiprocessing`, where torch's reducers live): attribute
   chains rooted at an imported name or an alias of one (``torch._C.X``, ``dist.x._y()``,
   ``_aten = torch.ops.aten; _aten._to_copy``), ``from torch._C import ...``,
   ``getattr(x, "_name")``, ``self._x`` / ``super()._x`` in a class derived from a torch / PyG
   class when the base has ``_x``, and any attribute or string naming one of the private names
   `gnnorch.compat` resolves (``layer._cached_edge_index``, ``module._forward_hooks``, ...).
2. Each accessor, with its name monkeypatched away or changed: no exception escapes, the
   accessor answers its safe value, the reason is in `compat.unavailable()`, and the feature
   that needs it steps aside.
"""
from __future__ import annotations

import ast
import datetime
import importlib
import re

import pytest
import torch

from gnnorch import compat
from gnnorch.compat import distributed as compat_distributed
from gnnorch.compat import processes as compat_processes
from gnnorch.compat import pyg as compat_pyg
from gnnorch.compat import torch as compat_torch

from source_tree import ROOT
from source_tree import modules as _modules
ROOTS = ("torch", "torch_geometric", "multiprocessing")


@pytest.fixture(autouse=True)
def fresh_probes():
    """Every test starts and ends with unresolved probes (monkeypatches are undone first)."""
    compat.reset()
    yield
    compat.reset()


# =============================================================== 1. the source check
def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_names() -> frozenset[str]:
    """Every private token of the names `gnnorch.compat` resolves (receiver-agnostic)."""
    found = set(compat_pyg.MESSAGE_PASSING_HOOKS)
    for name in compat.probes():
        if "{" in name:             # a pattern (the MessagePassing registries, listed above)
            continue
        found.update(re.findall(r"(?<![A-Za-z0-9_])_[A-Za-z]\w*", name))
    return frozenset(found)


def _import_path(dotted: str):
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for part in parts[k:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(dotted)


class _Checker(ast.NodeVisitor):
    """Finds private torch / PyG names in one module's source."""

    def __init__(self, tree: ast.AST, denied: frozenset[str]) -> None:
        self.denied = denied
        self.aliases: dict[str, str] = {}
        self.found: list[tuple[int, str]] = []
        self.bases: list[tuple] = []   # per enclosing class: its torch / PyG base classes
        self._collect_aliases(tree)

    # -- aliases: imported names, and names assigned a rooted chain ------------------------
    def _collect_aliases(self, tree: ast.AST) -> None:
        for _ in range(3):   # assignments of assignments
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.split(".")[0] in ROOTS:
                            local = alias.asname or alias.name.split(".")[0]
                            self.aliases[local] = alias.name if alias.asname else local
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                        and node.module.split(".")[0] in ROOTS:
                    for alias in node.names:
                        self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                        and isinstance(node.targets[0], ast.Name):
                    path = self.path(node.value)
                    if path is not None:
                        self.aliases.setdefault(node.targets[0].id, path)

    def path(self, node: ast.AST) -> str | None:
        """The dotted torch / PyG path an expression stands for (calls and subscripts keep
        their root: ``torch.zeros(1)._version`` is rooted at torch, marked ``()``); None if
        unrooted."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.path(node.value)
            return None if base is None else f"{base}.{node.attr}"
        if isinstance(node, ast.Call):
            base = self.path(node.func)
            return None if base is None else f"{base}()"
        if isinstance(node, ast.Subscript):
            return self.path(node.value)
        return None

    def flag(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), what))

    # -- imports ---------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] in ROOTS and any(_private(p) for p in parts):
                self.flag(node, f"import {alias.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module or node.module.split(".")[0] not in ROOTS:
            return
        for alias in node.names:
            parts = node.module.split(".") + [alias.name]
            if any(_private(p) for p in parts):
                self.flag(node, f"from {node.module} import {alias.name}")

    # -- classes derived from torch / PyG classes --------------------------------------------
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = []
        for base in node.bases:
            path = self.path(base)
            if path is not None:
                try:
                    bases.append(_import_path(path))
                except (ImportError, AttributeError):
                    self.flag(base, f"unresolvable base {path}")
        self.bases.append(tuple(bases))
        self.generic_visit(node)
        self.bases.pop()

    def _inherited(self, receiver: ast.AST, name: str) -> bool:
        """`receiver.name` reaches a private name of the enclosing class's torch / PyG base."""
        own = (isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")) or (
            isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name)
            and receiver.func.id == "super")
        return own and bool(self.bases) and any(hasattr(b, name) for b in self.bases[-1])

    def _receiver_is_own(self, receiver: ast.AST) -> bool:
        return isinstance(receiver, ast.Name) and receiver.id in ("self", "cls")

    # -- attributes, getattr and friends, strings -------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if _private(node.attr):
            base = self.path(node.value)
            # a call's result is some torch object: only the names compat resolves count
            # (``torch.zeros(1)._version``), not gnnorch's own (``make(...)._root``)
            if base is not None and ("()" not in base or node.attr in self.denied):
                self.flag(node, f"{base}.{node.attr}")
            elif self._inherited(node.value, node.attr):
                self.flag(node, f"{ast.unparse(node)} (inherited from torch / PyG)")
            elif node.attr in self.denied and not self._receiver_is_own(node.value):
                self.flag(node, f"{ast.unparse(node)} (a name gnnorch.compat resolves)")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "hasattr", "setattr",
                                                      "delattr") and len(node.args) >= 2:
            target, name = node.args[0], node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) \
                    and _private(name.value):
                if self.path(target) is not None or name.value in self.denied \
                        or self._inherited(target, name.value):
                    self.flag(node, f"{func.id}({ast.unparse(target)}, {name.value!r})")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and node.value in self.denied:
            self.flag(node, f"string {node.value!r} (a name gnnorch.compat resolves)")


def _violations(source: str, denied: frozenset[str]) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    checker = _Checker(tree, denied)
    checker.visit(tree)
    return checker.found



def test_no_private_torch_or_pyg_name_outside_compat():
    denied = _private_names()
    bad = []
    for name, path in _modules().items():
        if name == "gnnorch.compat" or name.startswith("gnnorch.compat."):
            continue
        for line, what in _violations(path.read_text(), denied):
            bad.append(f"  {path.relative_to(ROOT.parent)}:{line}: {what}")
    assert not bad, ("private torch / PyG names outside gnnorch.compat (add an accessor "
                     "there, see docs/compat.md):\n" + "\n".join(bad))


def test_the_checker_sees_what_it_must():
    denied = _private_names()
    assert {"_cached_edge_index", "_forward_hooks", "_sample", "_version",
            "_message_forward_hooks", "_extra_reducers", "_is_fx_tracing_flag"} <= denied
    planted = '''
import torch
import torch.distributed as dist
from torch._C import DisableTorchFunctionSubclass
from torch.fx import _symbolic_trace
from torch_geometric.utils._trim_to_layer import TrimToLayer
from torch_geometric.sampler import NeighborSampler
from multiprocessing.reduction import ForkingPickler
_aten = torch.ops.aten
a = torch._C._nn._parse_to
b = dist.distributed_c10d._get_default_group()._get_backend(None)
c = _aten._to_copy.default
d = getattr(torch.fx, "_private_flag", False)
e = layer._cached_edge_index
f = ForkingPickler._extra_reducers
g = torch.zeros(1)._version
h = ("_message_forward_hooks",)
class S(NeighborSampler):
    def x(self, seed):
        return super()._sample(seed), self._sample(seed), self.own_thing._private
def fine(self):
    import os
    os._exit(0)
    return self._own, torch.nn.Linear, dist.is_initialized(), "_not_a_torch_name", \
        other._private, torch.empty(1)._gnnorch_own
'''
    found = [what for _, what in _violations(planted, denied)]
    expected = ["from torch._C import DisableTorchFunctionSubclass",
                "from torch.fx import _symbolic_trace",
                "from torch_geometric.utils._trim_to_layer import TrimToLayer",
                "torch._C", "torch._C._nn", "torch._C._nn._parse_to",
                "torch.distributed.distributed_c10d._get_default_group",
                "torch.distributed.distributed_c10d._get_default_group()._get_backend",
                "torch.ops.aten._to_copy",
                "getattr(torch.fx, '_private_flag')",
                "layer._cached_edge_index (a name gnnorch.compat resolves)",
                "multiprocessing.reduction.ForkingPickler._extra_reducers",
                "torch.zeros()._version",
                "string '_message_forward_hooks' (a name gnnorch.compat resolves)",
                "super()._sample (inherited from torch / PyG)",
                "self._sample (inherited from torch / PyG)"]
    for item in expected:
        assert item in found, (item, found)
    assert len(found) == len(expected), found      # nothing in `fine` is flagged


# =============================================================== 2. failing closed
def test_every_name_resolves_on_the_tested_versions():
    """The versions pyproject.toml claims: every private name resolves and passes its check."""
    assert compat.unavailable() == {}
    assert all(probe.available for probe in compat.probes().values())


def test_a_probe_that_raises_is_unavailable_with_its_reason():
    def boom():
        raise RuntimeError("renamed upstream")

    probe = compat.Probe("test.compat._planted", "tests", "nothing happens", boom,
                         fallback="safe")
    try:
        assert probe.get() == "safe" and not probe.available
        assert compat.unavailable()["test.compat._planted"] == \
            "RuntimeError: renamed upstream; nothing happens"
    finally:
        compat.registry._PROBES.pop("test.compat._planted")


def _gone(monkeypatch, owner, name):
    """Remove `owner.name` for the test (shadow it with a non-callable where it is inherited
    from a C type and cannot be deleted)."""
    if name in vars(owner):
        monkeypatch.delattr(owner, name)
    else:
        monkeypatch.setattr(owner, name, None)
    compat.reset()


# -- torch: tensor subclassing (host transform, prefix-exact outputs) ----------------------
@pytest.mark.parametrize("owner, name", [
    (torch._C, "DisableTorchFunctionSubclass"),
    (torch._C, "_disabled_torch_function_impl"),
    (torch._C._nn, "_parse_to"),
    (torch.Tensor, "_make_wrapper_subclass"),
])
def test_host_transform_is_off_without_a_subclassing_name(monkeypatch, owner, name):
    from gnnorch.rewrite.host import mark_host_features

    x = torch.randn(6, 3)
    _gone(monkeypatch, owner, name)
    reason = compat_torch.host_subclass_reason()
    assert reason is not None and name in reason and "host transform off" in reason
    assert mark_host_features(x) is x                      # nothing deferred: plain tensors
    assert any(name in key for key in compat.unavailable())


def test_without_make_subclass_features_are_marked_through_as_subclass(monkeypatch):
    from gnnorch.rewrite.host import HostBatchFeatures, mark_host_features

    x = torch.randn(6, 3)
    _gone(monkeypatch, torch.Tensor, "_make_subclass")
    marked = mark_host_features(x)
    assert isinstance(marked, HostBatchFeatures) and marked.data_ptr() == x.data_ptr()
    assert "torch.Tensor._make_subclass" in compat.unavailable()


def test_trimmed_outputs_are_exact_at_once_without_disable_torch_function(monkeypatch):
    from gnnorch.trim.exact_output import PrefixExact, prefix_exact

    exact = torch.arange(12.0).view(6, 2)
    asked = []

    def materialize(reason):
        asked.append(reason)
        return exact

    _gone(monkeypatch, torch._C, "DisableTorchFunctionSubclass")
    out = prefix_exact(torch.zeros(6, 2), 2, materialize)
    assert out is exact and not isinstance(out, PrefixExact)
    assert asked and "DisableTorchFunctionSubclass" in asked[0]


def test_aten_mutability_unknown_counts_every_op_as_a_write(monkeypatch):
    from gnnorch.rewrite.host import DeferredFeatures

    monkeypatch.setattr(compat_torch.OP_SCHEMA_MUTABLE, "_resolve", _raising("no _schema"))
    monkeypatch.setattr(compat_torch.ATEN_TO_COPY, "_resolve", _raising("no _to_copy"))
    compat.reset()
    assert compat_torch.op_is_mutable(torch.ops.aten.add.Tensor) is True
    assert compat_torch.aten_to_copy() is None
    x = torch.randn(5, 3, dtype=torch.float64)
    d = DeferredFeatures.defer(x, "cpu")
    assert torch.equal(d * 2, x * 2)                       # still exact
    assert not d.usable                                     # host path skips it from now on
    assert {"torch._ops.OpOverload._schema.is_mutable",
            "torch.ops.aten._to_copy.default"} <= set(compat.unavailable())


def _raising(message):
    def resolve():
        raise AttributeError(message)
    return resolve


def test_tree_map_falls_back_to_a_local_one(monkeypatch):
    from torch.utils import _pytree

    _gone(monkeypatch, _pytree, "tree_map")
    tree = ({"a": [1, (2, 3)]}, 4)
    assert compat_torch.tree_map(lambda v: v * 10, tree) == ({"a": [10, (20, 30)]}, 40)
    assert "torch.utils._pytree.tree_map" in compat.unavailable()


# -- torch: version counters (materialising trimmed outputs) ------------------------------
def test_without_version_counters_parameters_are_compared_by_value(monkeypatch):
    from gnnorch.errors import TrimmingError
    from gnnorch.trim.materialize import materializer, parameter_versions
    from gnnorch.trim.state import ModelState

    monkeypatch.setattr(torch.Tensor, "_version", property(lambda self: None))
    compat.reset()
    model = torch.nn.Linear(3, 2)
    assert parameter_versions(model) is None
    assert "torch.Tensor._version" in compat.unavailable()
    runs = []

    def rerun(grad, training, parameters):
        runs.append(parameters)
        return torch.zeros(1)

    with pytest.warns(Warning):                      # unchanged: rerun with its own parameters
        materializer(model, ModelState("m"), 1, rerun)("test")
    assert runs == [None]
    model.eval()
    with torch.no_grad():
        read = materializer(model, ModelState("m"), 1, rerun)
        model.weight.add_(1.0)                       # changed in place: old weights are gone
        with pytest.raises(TrimmingError):
            read("test")
    model.train()
    read = materializer(model, ModelState("m"), 1, rerun)   # a training forward: a snapshot
    with torch.no_grad():
        model.weight.add_(1.0)
    with pytest.warns(Warning):
        read("test")
    assert runs[-1] is not None and not torch.equal(runs[-1]["weight"], model.weight)


# -- torch: the total norm clip_grad_norm_ scales by (several ranks' clipping) ---------------
def _clip_once():
    param = torch.nn.Parameter(torch.zeros(4))
    param.grad = torch.full((4,), 2.0)
    return float(torch.nn.utils.clip_grad_norm_([param], 1.0)), param.grad


def test_total_norm_replacement_reaches_clip_grad_norm_and_is_undone():
    from gnnorch.compat.grad_clip import total_norm_replaced

    told = []

    def replacement(original, tensors, norm_type, error_if_nonfinite, foreach):
        told.append(norm_type)
        return original(tensors, norm_type, error_if_nonfinite, foreach) * 2

    with total_norm_replaced(replacement) as replaced:
        norm, grad = _clip_once()
    assert replaced and told == [2.0] and norm == 8.0
    assert torch.allclose(grad, torch.full((4,), 2.0 / 8.0), atol=1e-6)
    assert _clip_once()[0] == 4.0 and told == [2.0]          # torch's own again


@pytest.mark.parametrize("gone", ["_get_total_norm", "clip_grad_norm_"])
def test_without_the_total_norm_seam_nothing_is_replaced(monkeypatch, gone):
    import torch.nn.utils.clip_grad as clip_grad
    from gnnorch.compat.grad_clip import TOTAL_NORM, total_norm_replaced

    if gone == "_get_total_norm":
        _gone(monkeypatch, clip_grad, gone)
    else:   # a clip_grad_norm_ that is not the module's (e.g. wrapped by another library)
        monkeypatch.setattr(clip_grad, gone, lambda *a, **k: torch.tensor(0.0))
        compat.reset()
    with total_norm_replaced(lambda *args: torch.tensor(-1.0)) as replaced:
        pass
    assert not replaced and not TOTAL_NORM.available
    assert "clips each rank's own gradient" in compat.unavailable()[TOTAL_NORM.name]


# -- torch: fx tracing flag, norm base classes, module hooks, reducers ----------------------
def test_fx_tracing_unknown_leaves_the_call_patch_check(monkeypatch):
    from torch.fx import _symbolic_trace

    from gnnorch.intercept.chain import tracing

    for name in ("is_fx_symbolic_tracing", "_is_fx_tracing_flag"):
        monkeypatch.delattr(_symbolic_trace, name, raising=False)
    compat.reset()
    assert compat_torch.is_fx_tracing() is False and tracing() is False
    assert any("_is_fx_tracing_flag" in key for key in compat.unavailable())


@pytest.mark.parametrize("module, name, norm", [
    ("torch.nn.modules.batchnorm", "_BatchNorm", torch.nn.BatchNorm1d),
    ("torch.nn.modules.instancenorm", "_InstanceNorm", torch.nn.InstanceNorm1d),
])
def test_norm_bases_fall_back_to_the_public_classes(monkeypatch, module, name, norm):
    from gnnorch.trim.mixing import batch_mixing_modules

    _gone(monkeypatch, importlib.import_module(module), name)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), norm(4))
    assert batch_mixing_modules(model, any_mode=True) == ["1 (" + norm.__name__ + ")"]
    assert f"{module}.{name}" in compat.unavailable()


def test_module_hooks_unknown_make_every_rewrite_decline(monkeypatch):
    from torch_geometric.nn import SAGEConv

    from gnnorch.rewrite.rules import rule_for

    layer = SAGEConv(4, 3)
    rule = rule_for(layer)
    assert rule.applicable(layer) is None
    monkeypatch.setattr(torch.nn.Module, "register_forward_hook",
                        lambda self, hook, **kw: torch.utils.hooks.RemovableHandle({}))
    compat.reset()
    reason = rule.applicable(layer)
    assert reason is not None and "hooks cannot be checked" in reason
    assert compat_torch.hooks_reason(torch.nn.Identity()) is not None


def test_shared_memory_reducers_fall_back_without_the_registry(monkeypatch):
    from multiprocessing.reduction import ForkingPickler

    _gone(monkeypatch, ForkingPickler, "_extra_reducers")
    table = compat_processes.forking_reducers()
    assert isinstance(table, dict)
    assert any("_extra_reducers" in key for key in compat.unavailable())


@pytest.mark.parametrize("changed", ["gone", "other keys"])
def test_print_options_unreadable_are_not_carried_to_ranks(monkeypatch, changed):
    from gnnorch.execute.caller_state import CallerState

    if changed == "gone":
        _gone(monkeypatch, torch._tensor_str, "get_printoptions")
    else:
        monkeypatch.setattr(torch._tensor_str, "get_printoptions", lambda: {"precision": 4})
        compat.reset()
    assert compat_processes.tensor_print_options() is None
    assert CallerState.capture().torch_print is None     # the ranks keep torch's defaults
    assert "torch._tensor_str.get_printoptions" in compat.unavailable()


# -- PyG: TrimToLayer, the sampler hook, layer internals ------------------------------------
def test_without_trim_to_layer_every_model_counts_as_trimming_itself(monkeypatch):
    from torch_geometric.nn import GraphSAGE
    from torch_geometric.utils import _trim_to_layer

    from gnnorch.trim import trusted

    model = GraphSAGE(4, 8, num_layers=2, out_channels=3)
    assert trusted.trusted_model(model)[0]
    monkeypatch.delattr(_trim_to_layer, "TrimToLayer")
    compat.reset()
    trusted._types.cache_clear()
    try:
        assert compat_pyg.trim_to_layer_type() is None
        assert compat_pyg.self_trimming(torch.nn.Identity(), ()) is True
        ok, why = trusted.trusted_model(model)
        assert not ok and "TrimToLayer is not a known row-local module" in why
        assert "torch_geometric.utils._trim_to_layer.TrimToLayer" in compat.unavailable()
    finally:
        trusted._types.cache_clear()


def test_trim_to_layer_with_another_signature_is_not_recognised(monkeypatch):
    from torch_geometric.utils._trim_to_layer import TrimToLayer

    monkeypatch.setattr(TrimToLayer, "forward", lambda self, x, edge_index: (x, edge_index))
    compat.reset()
    assert compat_pyg.trim_to_layer_type() is None
    assert "TrimToLayer.forward takes" in compat.unavailable()[
        "torch_geometric.utils._trim_to_layer.TrimToLayer"]


def _small_graph():
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 40, (2, 200), generator=gen)
    return Data(x=torch.randn(40, 4, generator=gen), edge_index=edge_index, num_nodes=40)


@pytest.mark.filterwarnings("ignore:Using 'FastNeighborSampler' without a 'pyg-lib'")
def test_sampler_hook_missing_or_changed_leaves_sampling_to_pyg(monkeypatch):
    from torch_geometric.sampler import NeighborSampler

    from gnnorch.sampling import FastNeighborSampler

    data = _small_graph()
    assert FastNeighborSampler(data, [3]).fallback_reason is None
    monkeypatch.setattr(NeighborSampler, "_sample", lambda self, seed: None)   # changed shape
    compat.reset()
    reason = FastNeighborSampler(data, [3]).fallback_reason
    assert reason is not None and "_sample" in reason
    monkeypatch.delattr(NeighborSampler, "_sample")                            # gone
    compat.reset()
    assert "defines no _sample" in FastNeighborSampler(data, [3]).fallback_reason
    with pytest.raises(compat.CompatError):
        compat_pyg.pyg_sample(FastNeighborSampler(data, [3]), torch.arange(3))


@pytest.mark.filterwarnings("ignore:Using 'FastNeighborSampler' without a 'pyg-lib'")
def test_sampler_options_follow_the_installed_signature(monkeypatch):
    """PyG < 2.7 has no `sample_direction`: the default is dropped, another value refused."""
    from torch_geometric.sampler import NeighborSampler

    from gnnorch.sampling import FastNeighborSampler

    original = NeighborSampler.__init__

    def older(self, data, num_neighbors, subgraph_type="directional", replace=False,
              disjoint=False, temporal_strategy="uniform", time_attr=None, weight_attr=None,
              is_sorted=False, share_memory=False, directed=True):
        original(self, data, num_neighbors, subgraph_type=subgraph_type, replace=replace,
                 disjoint=disjoint, temporal_strategy=temporal_strategy, time_attr=time_attr,
                 weight_attr=weight_attr, is_sorted=is_sorted, share_memory=share_memory,
                 directed=directed)

    monkeypatch.setattr(NeighborSampler, "__init__", older)
    compat.reset()
    data = _small_graph()
    sampler = FastNeighborSampler(data, [3])
    assert sampler.sample_direction == "forward" and sampler.fallback_reason is None
    out = sampler.sample_ours(torch.arange(4))
    assert out.node.numel() >= 4
    with pytest.raises(TypeError, match="sample_direction"):
        FastNeighborSampler(data, [3], sample_direction="backward")


def test_message_passing_hook_registries_changed_make_rewrites_decline(monkeypatch):
    from torch_geometric.nn import MessagePassing, SAGEConv

    from gnnorch.rewrite.rules import rule_for

    original = MessagePassing.__init__

    def renamed(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._message_hooks_v2 = self.__dict__.pop("_message_forward_hooks")

    monkeypatch.setattr(MessagePassing, "__init__", renamed)
    compat.reset()
    layer = SAGEConv(4, 3)
    reason = rule_for(layer).applicable(layer)
    assert reason is not None and "_message_forward_hooks" in reason
    assert any("MessagePassing" in key for key in compat.unavailable())


def test_message_passing_hooks_are_seen(monkeypatch):
    from torch_geometric.nn import SAGEConv

    from gnnorch.rewrite.rules import rule_for

    layer = SAGEConv(4, 3)
    handle = layer.register_message_forward_hook(lambda *a: None)
    assert "message forward hooks registered" in rule_for(layer).applicable(layer)
    handle.remove()
    handle = layer.lin_l.register_forward_pre_hook(lambda *a: None)
    assert "forward pre hooks" in rule_for(layer).applicable(layer)
    handle.remove()
    assert rule_for(layer).applicable(layer) is None


def test_gcn_cache_unknown_declines_cached_layers_only(monkeypatch):
    from torch_geometric.nn import GCNConv

    from gnnorch.rewrite.rules import rule_for

    cached, plain = GCNConv(4, 8, cached=True), GCNConv(4, 8)
    assert rule_for(cached).applicable(cached) is None
    original = GCNConv.__init__

    def renamed(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._norm_cache = self.__dict__.pop("_cached_edge_index")

    monkeypatch.setattr(GCNConv, "__init__", renamed)
    compat.reset()
    reason = rule_for(cached).applicable(cached)
    assert reason is not None and "cache unavailable" in reason
    assert rule_for(plain).applicable(plain) is None
    assert compat_pyg.gcn_cached(cached) is None
    assert "torch_geometric.nn.GCNConv._cached_edge_index" in compat.unavailable()


def test_rules_decline_layers_missing_an_attribute_they_read():
    from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv

    from gnnorch.rewrite.rules import rule_for

    cases = [(SAGEConv(4, 3), "lin_l"), (GCNConv(4, 3), "lin"), (GATConv(4, 3), "att_src"),
             (GINConv(torch.nn.Linear(4, 3)), "eps")]
    if compat_pyg.gat_has_residual():
        cases.append((GATConv(4, 3), "res"))
    for layer, name in cases:
        rule = rule_for(layer)
        assert rule.applicable(layer) is None, type(layer).__name__
        delattr(layer, name)
        reason = rule.applicable(layer)
        assert reason is not None and name in reason and "not rewritten" in reason


def test_gat_return_attention_weights_false_is_left_to_pyg():
    from torch_geometric.nn import GATConv

    from gnnorch.rewrite.rules import rule_for

    layer = GATConv(4, 3)
    x, edge_index = torch.randn(5, 4), torch.tensor([[0, 1, 2], [1, 2, 3]])
    rule = rule_for(layer)
    assert isinstance(rule.bind(layer, (x, edge_index), {}), dict)
    assert "PyG versions differ" in rule.bind(layer, (x, edge_index),
                                              {"return_attention_weights": False})


def test_graph_loader_keywords_name_positional_arguments_and_fail_closed():
    from torch_geometric.loader import DataLoader

    dataset = [object()] * 3
    got = compat_pyg.graph_loader_keywords(DataLoader.__init__, (dataset, 128, True),
                                           {"num_workers": 2})
    assert got == ((dataset, ), {"batch_size": 128, "shuffle": True, "num_workers": 2})
    assert compat_pyg.graph_loader_keywords(DataLoader.__init__, (dataset, 1, 2, 3, 4, 5),
                                            {}) is None   # does not bind: PyG's own error
    assert not compat.unavailable()

    def init(self, dataset, size=1, **kwargs):   # a changed signature: no batch_size
        pass

    assert compat_pyg.graph_loader_keywords(init, (dataset, 8), {}) is None
    assert any("DataLoader.__init__" in key for key in compat.unavailable())


def test_loader_and_basic_gnn_signatures_fail_closed(monkeypatch):
    from torch_geometric.nn import GraphSAGE
    from torch_geometric.nn.models.basic_gnn import BasicGNN

    from gnnorch.trim.trusted import trusted_trimming

    def init(self, dataset, fanout, **kwargs):
        pass

    assert compat_pyg.loader_arguments(init, (1, [2]), {}) == {}
    assert any("NeighborLoader" in key for key in compat.unavailable())

    model = GraphSAGE(4, 8, num_layers=2)
    x, edge_index = torch.randn(5, 4), torch.tensor([[0, 1], [1, 2]])
    assert trusted_trimming(model, (x, edge_index), {})[0]
    monkeypatch.setattr(BasicGNN, "forward", lambda self, inputs, adj: inputs)
    compat.reset()
    ok, why = trusted_trimming(model, (x, edge_index), {})
    assert not ok and "BasicGNN.forward unrecognised" in why


def test_orig_edge_index_is_set_only_where_pyg_sets_it(monkeypatch):
    from torch_geometric.data import Data
    from torch_geometric.loader.node_loader import NodeLoader

    batch, edges = Data(), torch.tensor([[0], [1]])
    compat_pyg.set_orig_edge_index(batch, edges)
    assert torch.equal(batch._orig_edge_index, edges)

    def filter_fn(self, out):   # a PyG whose loader no longer keeps the original edges
        return out

    monkeypatch.setattr(NodeLoader, "filter_fn", filter_fn)
    compat.reset()
    batch = Data()
    compat_pyg.set_orig_edge_index(batch, edges)
    assert getattr(batch, "_orig_edge_index", None) is None
    assert any("_orig_edge_index" in key for key in compat.unavailable())


def _device_path_over(data):
    from types import SimpleNamespace

    from torch_geometric.loader import NeighborLoader

    from gnnorch.device.config import DataPathConfig
    from gnnorch.intercept.device_path import DevicePath
    from gnnorch.launch.context import RankContext
    from gnnorch.launch.plan import CorePlan
    from gnnorch.run_options import RunOptions
    from gnnorch.sampling.neighbor import FastNeighborSampler

    config = DataPathConfig(mode="device")
    ctx = RankContext(rank=0, world_size=1, plan=CorePlan(1, 0, 1), cores=None, seed=0,
                      options=RunOptions(data_path=config))
    path = DevicePath(ctx, config, None)
    loader = NeighborLoader(data, num_neighbors=[2], batch_size=4,
                            neighbor_sampler=FastNeighborSampler(data, num_neighbors=[2]))
    state = SimpleNamespace(role="train", index=0, user_num_workers=0, partition=None,
                            device=None, kind="node")
    path.adopt(loader, state)
    return state.device


def test_without_pyg_index_select_numpy_attributes_are_left_to_pyg(monkeypatch):
    import numpy as np
    from torch_geometric.data import Data
    from torch_geometric.loader import utils as loader_utils

    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    numpy_data = Data(x=np.ones((4, 2), dtype=np.float32), edge_index=edge_index)
    tensor_data = Data(x=torch.ones(4, 2), edge_index=edge_index)
    assert _device_path_over(numpy_data).served

    def index_select(value, index):   # a PyG whose gather takes other arguments
        return value

    monkeypatch.setattr(loader_utils, "index_select", index_select)
    compat.reset()
    record = _device_path_over(numpy_data)
    assert not record.served and "not tensors (x)" in record.reason
    assert _device_path_over(tensor_data).served
    assert "torch_geometric.loader.utils.index_select" in compat.unavailable()


def test_without_version_counters_the_device_path_keeps_features_on_the_host(monkeypatch):
    from torch_geometric.data import Data

    data = Data(x=torch.ones(4, 2), edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]]))
    assert _device_path_over(data).features == "gpu"
    monkeypatch.setattr(torch.Tensor, "_version", property(lambda self: None))
    compat.reset()
    record = _device_path_over(data)
    assert record.served and record.features == "host"
    assert "version counters" in record.placement.reasons[-1]


# -- torch.distributed ------------------------------------------------------------------------
def test_process_group_names_fail_closed(monkeypatch):
    from torch.distributed import distributed_c10d

    for name in ("_get_default_store", "_get_default_group", "_abort_process_group"):
        monkeypatch.delattr(distributed_c10d, name)
    compat.reset()
    with pytest.raises(compat.CompatError, match="_get_default_store"):
        compat_distributed.default_store()
    assert compat_distributed.default_group_timeout() is None
    assert compat_distributed.abort_process_group() is False
    assert len([k for k in compat.unavailable() if "distributed_c10d" in k]) == 3


def test_process_group_names_resolve_in_a_real_group(tmp_path):
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=123))
    try:
        assert compat_distributed.default_group_timeout() == datetime.timedelta(seconds=123)
        store = compat_distributed.default_store()
        store.set("k", "v")
        assert store.get("k") == b"v"
    finally:
        dist.destroy_process_group()
    assert not any("distributed_c10d" in k for k in compat.unavailable())


# -- in a run: the reasons reach the rank's statistics -------------------------------------
def test_a_run_reports_missing_names_and_trims_nothing_without_trim_to_layer(monkeypatch):
    import torch.nn.functional as F
    from torch_geometric.utils import _trim_to_layer

    import gnnorch
    from helpers import cora

    def train(data):
        from torch_geometric.loader import NeighborLoader
        from torch_geometric.nn import GraphSAGE

        torch.manual_seed(0)
        loader = NeighborLoader(data, num_neighbors=[5, 5], batch_size=512,
                                input_nodes=data.train_mask, shuffle=True)
        model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
        return True

    monkeypatch.delattr(_trim_to_layer, "TrimToLayer")
    compat.reset()
    from gnnorch.trim import trusted
    trusted._types.cache_clear()
    try:
        runtime = gnnorch.Runtime(train, processes=1, autotune=False)
        assert runtime(cora()) is True
    finally:
        trusted._types.cache_clear()
    stats = runtime.last_run.stats[0]
    assert "torch_geometric.utils._trim_to_layer.TrimToLayer" in stats["compat"]
    models = stats["trim"]["models"]
    assert models and not any(m["trimmed"] for m in models)
    assert stats["trim"]["rows_computed"] == stats["trim"]["rows_untrimmed"]


def test_probes_leave_pygs_message_passing_base_class_as_it_was(tmp_path):
    """PyG compiles ``propagate`` at a class's first instantiation and sets it on that class;
    a probe that instantiated ``MessagePassing`` itself replaced the base class's propagate, so
    every subclass defined after a run lost PyG's explain mode and TorchScript (found by PyG's
    test_message_passing.py under the runtime, in file order)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import torch
        from torch_geometric.nn import MessagePassing
        import torch_geometric.nn.conv.message_passing as mp
        import gnnorch
        from gnnorch.compat import pyg

        names = ("propagate", "collect", "_orig_propagate", "_jinja_propagate")
        before = {n: MessagePassing.__dict__.get(n) for n in names}
        assert pyg.MP_HOOKS.get() is not None
        gnnorch.Runtime(lambda: None, processes=1, autotune=False, verbose=False)()
        assert {n: MessagePassing.__dict__.get(n) for n in names} == before

        class Later(MessagePassing):
            def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
                return self.propagate(edge_index, x=x)

        conv = Later()
        assert conv.propagate.__module__.endswith("Later_propagate")
        conv.explain = True
        assert conv.propagate.__module__.endswith("message_passing")
        conv.explain = False
        torch.jit.script(Later())
        print("ok")
    """)
    script = tmp_path / "later.py"      # a file: PyG compiles a class from its source
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_persistent_workers_are_left_to_garbage_collection_without_the_shutdown(monkeypatch):
    from torch.utils.data import DataLoader

    monkeypatch.setattr(compat_processes.WORKER_STOPPER, "_resolve", _raising("no _iterator"))
    compat.reset()
    loader = DataLoader(list(range(4)), num_workers=1, persistent_workers=True)
    assert sum(len(batch) for batch in loader) == 4
    assert compat_processes.stop_persistent_workers(loader) is False     # nothing done
    assert any("_shutdown_workers" in name for name in compat.unavailable())
    monkeypatch.undo()
    compat.reset()
    assert compat_processes.stop_persistent_workers(loader) is True
    assert sum(len(batch) for batch in loader) == 4                      # new workers
    assert compat_processes.stop_persistent_workers(loader) is True
