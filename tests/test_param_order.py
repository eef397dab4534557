"""Optimizers built from an unordered collection of parameters (a ``set``, whose order follows
memory addresses and so differs between ranks) average the right pairs of gradients.

PyG's ``examples/tgn.py`` builds ``Adam(set(memory.parameters()) | set(gnn.parameters()) |
set(link_pred.parameters()))``. The gradient seam pairs the k-th parameter of one rank with the
k-th of another, so it must take them in an order that is the same on every rank
(`intercept.param_order`)."""
from collections.abc import Set

import pytest
import torch
import torch.distributed as dist

import gnnorch
from gnnorch.intercept.param_order import ParameterOrder, parameters_in


class RankOrderedSet(Set):
    """A set of tensors whose iteration order depends on the rank, as a ``set``'s may: rank 0
    iterates in insertion order, every other rank in reverse. (A real ``set`` of parameters
    iterates by address and differs between ranks only by chance; this one always does.)"""

    def __init__(self, items):
        self._items = list({id(t): t for t in items}.values())

    def __iter__(self):
        rank = dist.get_rank() if dist.is_initialized() else 0
        return iter(self._items if rank == 0 else self._items[::-1])

    def __len__(self):
        return len(self._items)

    def __contains__(self, item):
        return any(item is t for t in self._items)


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.ReLU(), torch.nn.Linear(6, 6),
                               torch.nn.ReLU(), torch.nn.Linear(6, 3))


def train_whole(x, y, steps, out_dir, container, model=None, clip=None):
    """Every rank trains on every batch: with the gradients averaged right, each rank's
    update is one process's. Rank r builds its model from seed 100 + r unless one is given
    (then it came pickled from the caller)."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    model = make_model(100 + rank) if model is None else model
    params = {"list": list, "set": set, "rank_ordered": RankOrderedSet,
              "list_of_rank_ordered": lambda ps: list(RankOrderedSet(ps))}[container](
        model.parameters())
    opt = torch.optim.SGD(params, lr=0.5, momentum=0.9)
    for step in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(opt.param_groups[0]["params"], clip)
        opt.step()
    torch.save(model.state_dict(), f"{out_dir}/rank{rank}.pt")
    return model.state_dict()


def reference(x, y, steps, clip=None):
    model = make_model(100)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
    return model.state_dict()


def assert_as_one_process(tmp_path, want):
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    for key, value in want.items():
        assert torch.equal(r0[key], r1[key]), key
        assert torch.allclose(r0[key], value, atol=1e-6, rtol=1e-5), key


@pytest.mark.parametrize("container", ["rank_ordered", "set"])
def test_an_optimizer_of_a_set_of_parameters_trains_as_one_process(tmp_path, container):
    """Two Linear(6, 6) layers give two pairs of same-shaped tensors, so a rank-dependent
    order pairs a weight with the other layer's weight (and the broadcast at the optimizer's
    construction copies rank 0's into the wrong one) without any shape error."""
    torch.manual_seed(0)
    x, y = torch.randn(32, 6), torch.randint(0, 3, (32, ))
    gnnorch.Runtime(train_whole, processes=2)(x, y, 4, str(tmp_path), container)
    assert_as_one_process(tmp_path, reference(x, y, 4))


def test_clip_grad_norm_of_the_optimizers_own_set_ordered_list(tmp_path):
    """``clip_grad_norm_(opt.param_groups[0]["params"], ...)`` (PyG's txt2kg_rag example) of
    an optimizer built from a set: the norm round's index space is in the same order too."""
    torch.manual_seed(0)
    x, y = torch.randn(32, 6), torch.randint(0, 3, (32, ))
    gnnorch.Runtime(train_whole, processes=2)(x, y, 4, str(tmp_path), "rank_ordered",
                                              clip=0.05)
    assert_as_one_process(tmp_path, reference(x, y, 4, clip=0.05))


def test_a_model_built_by_the_caller_and_a_set_ordered_optimizer(tmp_path):
    """A model built before the run reaches the ranks pickled: no module registers its
    parameters there, so they take their order from the model's first forward."""
    torch.manual_seed(0)
    x, y = torch.randn(32, 6), torch.randint(0, 3, (32, ))
    gnnorch.Runtime(train_whole, processes=2)(x, y, 4, str(tmp_path), "rank_ordered",
                                              model=make_model(100))
    assert_as_one_process(tmp_path, reference(x, y, 4))


def test_a_model_passed_in_and_a_list_made_from_a_set(tmp_path):
    """``Adam(list(set(model.parameters())))`` over a model built before the run: the list
    hides the set, and nothing numbers the pickled model's parameters before the optimizer is
    built, unless the rank numbers its arguments' parameters when the run starts (in argument
    order, then the module tree's)."""
    torch.manual_seed(0)
    x, y = torch.randn(32, 6), torch.randint(0, 3, (32, ))
    gnnorch.Runtime(train_whole, processes=2)(x, y, 4, str(tmp_path), "list_of_rank_ordered",
                                              model=make_model(100))
    assert_as_one_process(tmp_path, reference(x, y, 4))


def test_order_follows_registration_then_first_forward_then_a_list():
    order = ParameterOrder()
    with order.installed():
        late = torch.nn.Parameter(torch.zeros(2))   # no module registers it
        model = torch.nn.Linear(2, 2)
    pickled = torch.nn.Linear(2, 2)                  # built while the order was not watching
    with order.installed():
        assert order.sorted([late, model.bias, model.weight], unordered=False) == [
            model.weight, model.bias, late]           # registered, then the list's order
        order.note(pickled.parameters())
        assert order.sorted([pickled.bias, pickled.weight, model.bias], unordered=True) == [
            model.bias, pickled.weight, pickled.bias]


def test_free_tensors_of_a_set_are_told_apart_by_shape_or_refused():
    order = ParameterOrder()
    a, b = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2, 2))
    assert order.sorted([a, b], unordered=True) == order.sorted([b, a], unordered=True)
    c, d = torch.nn.Parameter(torch.zeros(5)), torch.nn.Parameter(torch.ones(5))
    with pytest.raises(NotImplementedError, match="set of parameters"):
        order.sorted([c, d], unordered=True)


def test_the_arguments_parameters_in_structure_order():
    class Config:
        def __init__(self, model):
            self.name, self.model = "run", model

    a, b, c = (torch.nn.Linear(2, 2) for _ in range(3))
    free = torch.zeros(3, requires_grad=True)
    found = list(parameters_in([(Config(a), torch.zeros(2), {"m": b, "s": {c}}), {"w": free}]))
    assert [id(p) for p in found] == [id(p) for p in [a.weight, a.bias, b.weight, b.bias, free]]
    order = ParameterOrder()
    order.note_arguments((Config(b),), {"first": a})
    assert order.sorted([a.bias, a.weight, b.bias, b.weight], unordered=False) == [
        b.weight, b.bias, a.weight, a.bias]
