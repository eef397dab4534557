"""Shared pieces for tests: Cora, the example's train function, a dropout-free SAGE model."""
from __future__ import annotations

import contextlib
import functools
import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def cora():
    from gnnorch.datasets import load_cora

    return load_cora()


def load_example(name: str):
    """Import examples/<name>.py as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_accuracy(model, data) -> float:
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=-1)
    mask = data.test_mask
    return float((pred[mask] == data.y[mask]).float().mean())


test_accuracy.__test__ = False  # not a pytest test


def assert_same_batch(got, want):
    """Two loader batches carry the same fields, in the same key order, with equal values and
    dtypes (tensors compared on the host).

    The order is the store's insertion order (what ``for key, value in batch`` walks);
    ``Data.keys()`` goes through a ``set``, so its order varies with the string hash seed."""
    assert list(got.to_dict()) == list(want.to_dict())
    for key in want.keys():
        a, b = got[key], want[key]
        if isinstance(b, torch.Tensor):
            assert isinstance(a, torch.Tensor) and a.dtype == b.dtype, key
            assert torch.equal(a.cpu(), b.cpu()), key
        else:
            assert a == b, key


def reference_choice(lo: int, hi: int, k: int, replace: bool,
                     rng) -> "range | list[int]":
    """The CSC positions PyG's law picks for one node whose in-edges are ``lo .. hi-1`` with
    fanout `k`, drawn exactly with `rng` (a ``random.Random``): every position for ``k < 0``
    or ``hi - lo <= k`` without replacement, ``k`` uniform draws with replacement, else a
    uniform ``k``-subset (``random.sample``). The reference samplers' common step."""
    if k < 0 or (not replace and hi - lo <= k):
        return range(lo, hi)
    if replace:
        return [rng.randrange(lo, hi) for _ in range(k)]
    return rng.sample(range(lo, hi), k)


def plain_epoch(loader, seed: int, epoch: int, shuffle_seed: int = 11) -> list:
    """One epoch of PyG's own loader (its ``filter_fn``: node or link, Data or HeteroData),
    sampling and drawing negatives with the generators the device path's policy gives rank 0's
    first loader (`gnnorch.device.seeds.sampling_seed`) for a run seeded `seed`: the batches
    the path must give at that epoch."""
    from gnnorch.device.seeds import sampling_seed
    from gnnorch.sampling.negatives import seeded_negatives

    sampler = getattr(loader, "node_sampler", None) or loader.link_sampler
    sampler.generator = torch.Generator().manual_seed(sampling_seed(seed, 0, 0, epoch))
    users = getattr(loader, "neg_sampling", None)
    if users is not None:
        loader.neg_sampling = seeded_negatives(users, torch.Generator().manual_seed(
            sampling_seed(seed, 0, 0, epoch, stream=1)))
    torch.manual_seed(shuffle_seed)
    try:
        return list(loader)
    finally:
        if users is not None:
            loader.neg_sampling = users


@contextlib.contextmanager
def torchscript_gone(monkeypatch):
    """Within the block, ``torch.jit.script`` raises and gnnorch's compiled bodies are
    forgotten, so `gnnorch.compat.jit` must fail closed; afterwards both are as before."""
    from gnnorch.compat import jit as compat_jit

    def broken(fn):
        raise RuntimeError("TorchScript is gone")

    monkeypatch.setattr(torch.jit, "script", broken)
    monkeypatch.setattr(compat_jit, "_COMPILED", {})
    compat_jit.JIT_SCRIPT.reset()
    try:
        yield
    finally:
        monkeypatch.undo()
        compat_jit.JIT_SCRIPT.reset()


WRITES = ("author", "writes", "paper")


def small_hetero_graph(seed: int = 0, papers: int = 80, authors: int = 50, topic: bool = True):
    """Papers (features, labels, a train mask, the user's own ``n_id``), authors, venues
    reached only at hop 2, a ``topic`` type without edges (`topic`: to_hetero needs every node
    type updated); an edge attribute on ``writes``."""
    from torch_geometric.data import HeteroData

    gen = torch.Generator().manual_seed(seed)

    def edges(n_src, n_dst, count):
        return torch.stack([torch.randint(0, n_src, (count,), generator=gen),
                            torch.randint(0, n_dst, (count,), generator=gen)])

    data = HeteroData()
    data["paper"].x = torch.randn(papers, 8, generator=gen)
    data["paper"].y = torch.randint(0, 3, (papers,), generator=gen)
    data["paper"].train_mask = torch.rand(papers, generator=gen) < 0.6
    data["paper"].n_id = torch.arange(papers)
    data["author"].x = torch.randn(authors, 8, generator=gen)
    data["venue"].x = torch.randn(6, 8, generator=gen)
    data["venue"].num_nodes = 6
    if topic:
        data["topic"].x = torch.randn(3, 8, generator=gen)
    data[WRITES].edge_index = edges(authors, papers, 200)
    data[WRITES].edge_attr = torch.randn(200, 2, generator=gen)
    data["paper", "cites", "paper"].edge_index = edges(papers, papers, 300)
    data["paper", "rev_writes", "author"].edge_index = data[WRITES].edge_index.flip(0)
    data["venue", "hosts", "paper"].edge_index = edges(6, papers, 60)
    data["paper", "in", "venue"].edge_index = data["venue", "hosts", "paper"].edge_index.flip(0)
    return data


class SageStack(torch.nn.Module):
    """`layers` bipartite-capable SAGEConv layers (16 wide inside, `out` at the top), ReLU
    between: a model `to_hetero` can convert, or a link encoder."""

    def __init__(self, layers: int = 2, out: int = 3):
        from torch_geometric.nn import SAGEConv

        super().__init__()
        self.convs = torch.nn.ModuleList(
            [SAGEConv((-1, -1), 16) for _ in range(layers - 1)] + [SAGEConv((-1, -1), out)])

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu()
        return x


def train_steps(model, loader, loss_of, epochs: int = 1, lr: float = 0.01):
    """Adam steps of `model` over `epochs` passes of `loader`, each on `loss_of(model, batch)`:
    (the losses, the last step's gradients by parameter name)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses, grads = [], {}
    for _ in range(epochs):
        for batch in loader:
            opt.zero_grad()
            loss = loss_of(model, batch)
            loss.backward()
            grads = {n: p.grad.clone() for n, p in model.named_parameters()
                     if p.grad is not None}
            opt.step()
            losses.append(loss.item())
    return losses, grads


def assert_same_training(trimmed, untrimmed):
    """Two runs' (losses, gradients by name[, anything else]) equal: losses within 1e-5,
    gradients within 1e-4 relative / 1e-5 absolute, a third element (when not None) within
    1e-5."""
    assert len(trimmed[0]) == len(untrimmed[0]) > 0
    torch.testing.assert_close(trimmed[0], untrimmed[0], rtol=1e-5, atol=1e-5)
    assert trimmed[1].keys() == untrimmed[1].keys()
    for name in trimmed[1]:
        torch.testing.assert_close(trimmed[1][name], untrimmed[1][name], rtol=1e-4, atol=1e-5,
                                   msg=name)
    extra = [run[2] for run in (trimmed, untrimmed) if len(run) > 2]
    if len(extra) == 2 and (extra[0] is not None or extra[1] is not None):
        torch.testing.assert_close(extra[0], extra[1], rtol=1e-5, atol=1e-5)


def trimmed_and_untrimmed(train, data, seed: int, **options):
    """`train(data)` under `gnnorch.Runtime` (one process, `seed`, `options`) with trimming on
    and off: (trimmed result, untrimmed result, the trimmed run's Runtime)."""
    import gnnorch

    out, runtimes = {}, {}
    for trim in (True, False):
        runtimes[trim] = gnnorch.Runtime(train, processes=1, seed=seed, trim=trim, **options)
        out[trim] = runtimes[trim](data)
    return out[True], out[False], runtimes[True]
