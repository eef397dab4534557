"""Sparse gradients over ranks (`intercept.step_grads`, `FlatCollectives.average_rows`):
``Embedding(sparse=True)`` trained by ``SparseAdam`` / ``SGD`` over two ranks equals one process
whose loss is the mean of the ranks' losses, ranks stay identical, and a rank that stops early
(follows) or has no gradient for the table in a step contributes an empty one."""

import io

import pytest
import torch
import torch.distributed as dist

import gnnorch
from gnnorch.intercept.step_grads import round_gradients

NODES, DIM, STEPS = 40, 4, 6


class Shallow(torch.nn.Module):
    """A Node2Vec-like model: a sparse embedding table and a dense head."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(NODES, DIM, sparse=True)
        self.head = torch.nn.Linear(DIM, 1)

    def forward(self, index):
        return self.head(self.emb(index)).squeeze(-1)


def rank_batch(step, rank, world):
    """Rank `rank`'s indices at `step`: overlapping rows between ranks, duplicates within."""
    g = torch.Generator().manual_seed(1000 * step + rank if world > 1 else 1000 * step)
    return torch.randint(0, NODES // 2, (7,), generator=g)


def rank_loss(model, step, rank, world, pattern):
    if pattern == "no_table_on_rank1" and rank == 1 and step % 2 == 1:
        return model.head(torch.ones(3, DIM)).pow(2).mean()   # the table takes no gradient
    index = rank_batch(step, rank, world)
    return (model(index) - index.float() / NODES).pow(2).mean()


class Snapshot:
    """A rank's model and SparseAdam state, serialised only when pickled: after the rank has
    followed the others' steps (which run after its function returned)."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def __reduce__(self):
        buffer = io.BytesIO()
        torch.save({"state": {k: v.clone() for k, v in self.model.state_dict().items()},
                    "moments": [s["exp_avg"].clone() for s in self.optimizer.state.values()]},
                   buffer)
        return (bytes, (buffer.getvalue(),))


def train(pattern):
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    torch.manual_seed(7)
    model = Shallow()
    sparse_opt = torch.optim.SparseAdam(list(model.emb.parameters()), lr=0.05)
    dense_opt = torch.optim.SGD(model.head.parameters(), lr=0.1)
    steps = STEPS - 3 if pattern == "rank1_stops" and rank == 1 else STEPS
    for step in range(steps):
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        rank_loss(model, step, rank, world, pattern).backward()
        sparse_opt.step()
        dense_opt.step()
    from gnnorch.launch import context

    context.current().stats["test_final"] = Snapshot(model, sparse_opt)


def reference(pattern):
    """One process: the mean of the two ranks' losses (the loss whose gradient the ranks'
    average is); where rank 1 has stopped, rank 0's loss alone."""
    torch.manual_seed(7)
    model = Shallow()
    sparse_opt = torch.optim.SparseAdam(list(model.emb.parameters()), lr=0.05)
    dense_opt = torch.optim.SGD(model.head.parameters(), lr=0.1)
    for step in range(STEPS):
        sparse_opt.zero_grad()
        dense_opt.zero_grad()
        ranks = [0] if pattern == "rank1_stops" and step >= STEPS - 3 else [0, 1]
        loss = sum(rank_loss(model, step, r, 2, pattern) for r in ranks) / len(ranks)
        loss.backward()
        sparse_opt.step()
        dense_opt.step()
    return model.state_dict()


@pytest.mark.parametrize("pattern", ["even", "rank1_stops", "no_table_on_rank1"])
def test_sparse_embedding_over_two_ranks_equals_one_process(pattern):
    runtime = gnnorch.Runtime(train, processes=2, launch={"threads": 1, "bind": False})
    runtime(pattern)
    r0, r1 = (torch.load(io.BytesIO(runtime.last_run.stats[r]["test_final"])) for r in (0, 1))
    for a, b in zip(r0["moments"], r1["moments"]):
        assert torch.equal(a, b)                 # SparseAdam's states too
    r0, r1 = r0["state"], r1["state"]
    want = reference(pattern)
    for key in want:
        assert torch.equal(r0[key], r1[key]), key
        assert torch.allclose(r0[key], want[key], atol=1e-6, rtol=1e-5), key
    # the table moved where the batches touched it, and only there (SparseAdam)
    torch.manual_seed(7)
    start = Shallow().emb.weight.detach()
    moved = (r0["emb.weight"] != start).any(dim=1)
    assert moved[:NODES // 2].any() and not moved[NODES // 2:].any()


def test_round_gradients_layouts():
    """A follower sends an empty row-sparse gradient; a mixed (sparse here, dense elsewhere)
    one is made dense; a gradient with two sparse dimensions is written by whole rows."""
    table = torch.nn.Parameter(torch.zeros(5, 3))
    mixed = torch.nn.Parameter(torch.zeros(5, 3))
    wide = torch.nn.Parameter(torch.zeros(5, 3))
    mixed.grad = torch.sparse_coo_tensor([[1]], torch.ones(1, 3), (5, 3))
    wide.grad = torch.sparse_coo_tensor([[2, 2], [0, 1]], torch.tensor([1.0, 2.0]), (5, 3))
    dense, rows = round_gradients([table, mixed, wide], [True, True, True], [True, False, True],
                                  stepping=True)
    assert rows == [table, wide] and len(dense) == 1 and not dense[0].is_sparse
    assert table.grad._nnz() == 0 and table.grad.shape == (5, 3)   # it had none: empty
    expected = torch.zeros(5, 3)
    expected[1] = 1.0
    assert not mixed.grad.is_sparse and torch.equal(mixed.grad, expected)
    assert wide.grad.sparse_dim() == 1
    assert torch.equal(wide.grad.to_dense(), torch.tensor([[0.0] * 3] * 2 + [[1.0, 2.0, 0.0]]
                                                          + [[0.0] * 3] * 2))
