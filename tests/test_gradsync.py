"""Multi-process gradients equal single-process ones; parameters and buffers stay identical."""

import warnings

import pytest
import torch
import torch.distributed as dist

import gnnorch


def make_model(seed, batch_norm=False):
    """BatchNorm normalises over each rank's shard, not the global batch: with it, ranks stay
    identical to each other but are not equal to one process at the global batch."""
    torch.manual_seed(seed)
    norm = torch.nn.BatchNorm1d(16) if batch_norm else torch.nn.Identity()
    return torch.nn.Sequential(torch.nn.Linear(6, 16), norm, torch.nn.ReLU(), torch.nn.Linear(16, 3))


def train_shards(x, y, steps, lr, out_dir, batch_norm=False):
    """Each rank trains on its strided shard of every global batch (what the loader does)."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    model = make_model(100 + rank, batch_norm)   # different init per rank on purpose
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        idx = torch.arange(step * 8, step * 8 + 8)[rank::world]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    torch.save(model.state_dict(), f"{out_dir}/rank{rank}.pt")
    return model.state_dict()


def test_two_ranks_match_one_process_and_each_other(tmp_path):
    torch.manual_seed(0)
    x, y = torch.randn(64, 6, dtype=torch.float64).float(), torch.randint(0, 3, (64,))
    got = gnnorch.Runtime(train_shards, processes=2)(x, y, 5, 0.01, str(tmp_path))
    r0 = torch.load(tmp_path / "rank0.pt")
    r1 = torch.load(tmp_path / "rank1.pt")
    for key in r0:                                            # identical on all ranks
        assert torch.equal(r0[key], r1[key]), key
    # Reference: one process, rank 0's initial model, full batches of 8.
    model = make_model(seed=100)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for step in range(5):
        idx = torch.arange(step * 8, step * 8 + 8)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    for key, value in model.state_dict().items():
        assert torch.allclose(got[key], value, atol=1e-6, rtol=1e-5), key


def test_parameters_and_buffers_identical_across_ranks_with_batch_norm(tmp_path):
    torch.manual_seed(1)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    gnnorch.Runtime(train_shards, processes=2)(x, y, 4, 0.05, str(tmp_path), batch_norm=True)
    r0, r1 = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    assert any("running_mean" in k for k in r0)
    for key in r0:
        assert torch.equal(r0[key], r1[key]), key


class WithBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 1)
        self.register_buffer("stat", torch.zeros(3))

    def forward(self, x):
        return self.lin(x)


def step_with_rank_buffers():
    """One step; before it, each rank writes its own values into the floating buffer."""
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = WithBuffer()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model(torch.full((1, 2), float(rank + 1))).sum().backward()
    model.stat.copy_(torch.tensor([0.1, -1e-30, 3.0]) * (rank + 1) ** 3)
    grad = model.lin.weight.grad.clone()
    opt.step()
    return model.stat.clone(), model.lin.weight.grad.clone(), grad


def test_buffers_take_rank_0s_values_exactly_in_the_gradient_all_reduce():
    # rank 0 steps first: its buffers are every rank's after the step, bit for bit (the
    # others sent zeros), while the gradients are averaged over both ranks
    stat, grad, own = gnnorch.Runtime(step_with_rank_buffers, processes=2, verbose=False)()
    assert torch.equal(stat, torch.tensor([0.1, -1e-30, 3.0]))
    assert torch.equal(grad, (own + 2 * own) / 2)   # rank 1's input is twice rank 0's


def train_with_unused_branch(out_dir):
    rank = dist.get_rank()
    torch.manual_seed(0)
    used, unused = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(list(used.parameters()) + list(unused.parameters()), lr=0.5)
    x = torch.full((1, 2), float(rank + 1))
    out = used(x) if rank == 0 else used(x) + 0 * unused(x)   # grads exist on rank 1 only
    out.sum().backward()
    opt.step()
    torch.save([p.detach() for p in used.parameters()] + [p.detach() for p in unused.parameters()],
               f"{out_dir}/rank{rank}.pt")


def test_gradient_missing_on_one_rank_counts_as_zero(tmp_path):
    gnnorch.Runtime(train_with_unused_branch, processes=2)(str(tmp_path))
    a, b = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    for pa, pb in zip(a, b):
        assert torch.equal(pa, pb)
    # used.weight grad: rank0 x=1, rank1 x=2 -> mean 1.5 per entry
    torch.manual_seed(0)
    ref = torch.nn.Linear(2, 2)
    assert torch.allclose(a[0], ref.weight.detach() - 0.5 * 1.5)


class WithSpare(torch.nn.Sequential):
    """A Sequential with a lazy layer it never calls (`spare`), as a bipartite `SAGEConv((-1,
    -1), ...)` in a `HeteroConv` keeps its root weight uninitialised when the destination type
    has no features (PyG's mag240m_graphsage example): the parameter stays an
    `UninitializedParameter` in the optimizer for the whole run."""

    def __init__(self, *layers):
        super().__init__(*layers)
        self.spare = torch.nn.LazyLinear(4)

    def forward(self, x):
        for layer in list(self)[:-1]:   # the last child is `spare`
            x = layer(x)
        return x


def make_lazy_model(kind, spare=False):
    """A model whose first layer infers its input width at its first forward: PyG's
    `Linear(-1, ...)` (weight uninitialised, bias an ordinary parameter whose values are set at
    that forward) or torch's `LazyLinear` (both uninitialised); with `spare`, also a lazy layer
    that is never called (`WithSpare`)."""
    from torch_geometric.nn import Linear as PygLinear

    first = PygLinear(-1, 16) if kind == "pyg" else torch.nn.LazyLinear(16)
    layers = (first, torch.nn.ReLU(), torch.nn.Linear(16, 3))
    return WithSpare(*layers) if spare else torch.nn.Sequential(*layers)


def _materialised(state):
    return {k: v for k, v in state.items()
            if not isinstance(v, torch.nn.parameter.UninitializedParameter)}


def train_lazy(x, y, steps, out_dir, kind, optimizer_first, spare=False):
    """Each rank draws from its own random state before the model exists and again before its
    first forward (as dropout over a rank's differently sized batch does), so every lazily
    initialised value differs between ranks unless the runtime makes them equal."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    torch.manual_seed(100 + rank)
    model = make_lazy_model(kind, spare)
    opt = torch.optim.Adam(model.parameters(), lr=0.01) if optimizer_first else None
    torch.manual_seed(200 + rank)
    for step in range(steps):
        idx = torch.arange(step * 8, step * 8 + 8)[rank::world]
        out = model(x[idx])
        if opt is None:           # the example's `init_params()`: a forward, then the optimizer
            opt = torch.optim.Adam(model.parameters(), lr=0.01)
            out = model(x[idx])
        opt.zero_grad()
        torch.nn.functional.cross_entropy(out, y[idx]).backward()
        opt.step()
    state = _materialised(model.state_dict())
    torch.save(state, f"{out_dir}/rank{rank}.pt")
    return state


@pytest.mark.parametrize("kind", ["pyg", "torch"])
@pytest.mark.parametrize("optimizer_first", [True, False])
def test_lazy_layers_equal_across_ranks_and_to_one_process(tmp_path, kind, optimizer_first):
    torch.manual_seed(0)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    got = gnnorch.Runtime(train_lazy, processes=2)(x, y, 4, str(tmp_path), kind,
                                                   optimizer_first)
    r0, r1 = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    for key in r0:
        assert torch.equal(r0[key], r1[key]), key
    # One process from rank 0's random states, full batches of 8: the same computation when
    # rank 1's lazily initialised values are rank 0's from its first forward on.
    ref = train_lazy(x, y, 4, str(tmp_path / ".."), kind, optimizer_first)
    for key, value in ref.items():
        assert torch.allclose(got[key], value, atol=1e-6, rtol=1e-5), key


@pytest.mark.parametrize("optimizer_first", [True, False])
def test_lazy_parameter_never_materialised_is_left_out(tmp_path, optimizer_first):
    """An optimizer holding a lazy parameter that no forward ever materialises: the parameter
    has no data and no gradient in any rank, so the step averages the others, as one process's
    optimizer skips it (it used to fail on ``numel()`` of the uninitialised parameter)."""
    torch.manual_seed(0)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    got = gnnorch.Runtime(train_lazy, processes=2)(x, y, 4, str(tmp_path), "torch",
                                                   optimizer_first, spare=True)
    r0, r1 = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    assert set(r0) == set(r1) == set(got) and not any(k.startswith("spare") for k in r0)
    for key in r0:
        assert torch.equal(r0[key], r1[key]), key
    ref = train_lazy(x, y, 4, str(tmp_path / ".."), "torch", optimizer_first, spare=True)
    for key, value in ref.items():
        assert torch.allclose(got[key], value, atol=1e-6, rtol=1e-5), key


def train_clipped(x, y, steps, out_dir, max_norm, imported, steps_of_rank1=None):
    """`train_shards` with ``clip_grad_norm_`` between backward and step (called as
    ``torch.nn.utils.clip_grad_norm_`` or through a name imported before the run), SGD so
    that the clipped gradient is the update. Saves the state and the norms it was told."""
    from torch.nn.utils import clip_grad_norm_ as clip_imported

    clip = clip_imported if imported else torch.nn.utils.clip_grad_norm_
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    model = make_model(100 + rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    norms = []
    mine = steps if rank == 0 or steps_of_rank1 is None else steps_of_rank1
    for step in range(mine):
        idx = torch.arange(step * 8, step * 8 + 8)[rank::world]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        norms.append(float(clip(model.parameters(), max_norm)))
        opt.step()
    torch.save((model.state_dict(), norms), f"{out_dir}/rank{rank}.pt")
    return model.state_dict()


def _clipped_reference(x, y, steps, max_norm):
    """One process, rank 0's initial model, full batches of 8, the same clipping."""
    model = make_model(seed=100)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    norms = []
    for step in range(steps):
        idx = torch.arange(step * 8, step * 8 + 8)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)))
        opt.step()
    return model.state_dict(), norms


@pytest.mark.parametrize("imported", [False, True])
def test_clip_grad_norm_clips_the_averaged_gradient_as_one_process(tmp_path, imported):
    """Each rank's clip_grad_norm_ is told the norm of the gradient averaged over the ranks
    (what one process over the global batch, or DDP, computes) and scales by it: the update is
    one process's clipped update. (Clipping each rank's own gradient before the average would
    give neither the norms nor the parameters below: max_norm 0.05 clips every step.)"""
    torch.manual_seed(0)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    gnnorch.Runtime(train_clipped, processes=2)(x, y, 5, str(tmp_path), 0.05, imported)
    (s0, n0), (s1, n1) = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    want, want_norms = _clipped_reference(x, y, 5, 0.05)
    assert n0 == n1 and min(want_norms) > 0.05
    assert n0 == pytest.approx(want_norms, rel=1e-5)
    for key, value in want.items():
        assert torch.equal(s0[key], s1[key]), key
        assert torch.allclose(s0[key], value, atol=1e-6, rtol=1e-5), key


def train_given(model, opt, x, y, steps, out_dir):
    """Trains the model and optimizer it is handed on every batch in every rank."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    torch.save(model.state_dict(), f"{out_dir}/rank{rank}.pt")


def _momentum_model(x, y):
    """A model with a BatchNorm and an SGD optimizer that has momentum state already."""
    model = make_model(3, batch_norm=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    return model, opt


def test_a_model_and_optimizer_passed_in_train_as_in_one_process(tmp_path):
    """Arguments reach the ranks through shared memory. A model, its buffers and an
    optimizer's state that every rank shared would take every rank's in-place update (p
    updates a step, racing): each rank but 0 trains its own copy, and rank 0 the caller's
    own, so that the caller's model ends trained as one process leaves it."""
    torch.manual_seed(0)
    x, y = torch.randn(32, 6), torch.randint(0, 3, (32, ))
    model, opt = _momentum_model(x, y)
    with warnings.catch_warnings():   # the model is not shared: no in-place change to warn of
        warnings.filterwarnings("error", message=".*in place", category=gnnorch.GnnorchWarning)
        gnnorch.Runtime(train_given, processes=2)(model, opt, x, y, 4, str(tmp_path))
    want_model, want_opt = _momentum_model(x, y)
    train_given(want_model, want_opt, x, y, 4, str(tmp_path / ".."))
    r0, r1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    for key, value in want_model.state_dict().items():
        assert torch.equal(r0[key], r1[key]), key
        assert torch.allclose(r0[key], value, atol=1e-6, rtol=1e-5), key
        assert torch.equal(model.state_dict()[key], r0[key]), key   # the caller's, trained


def train_free_tensor(emb, x, steps):
    """Trains a tensor it is handed that no module holds."""
    opt = torch.optim.SGD([emb], lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        (x @ emb).pow(2).mean().backward()
        opt.step()
    return emb.detach().clone()


def test_a_tensor_that_requires_grad_passed_in_trains_as_in_one_process():
    torch.manual_seed(0)
    x = torch.randn(16, 4)
    emb = torch.randn(4, 3, requires_grad=True)
    want = train_free_tensor(emb.detach().clone().requires_grad_(), x, 5)
    got = gnnorch.Runtime(train_free_tensor, processes=2)(emb, x, 5)
    assert torch.allclose(got, want, atol=1e-6, rtol=1e-5)
    assert torch.equal(emb.detach(), got)   # the caller's tensor, trained by rank 0


def halve_in_place(x):
    x /= 2
    return x.clone()


def test_an_argument_changed_in_place_warns_that_every_rank_changed_it():
    """Data arguments stay shared between the ranks: an in-place change happens once per
    rank (here x / 4 instead of x / 2), which gnnorch cannot undo but says."""
    x = torch.ones(4, 3)
    with pytest.warns(gnnorch.GnnorchWarning, match=r"in place \(float32 \[4, 3\]\).*2 times"):
        gnnorch.Runtime(halve_in_place, processes=2)(x)
