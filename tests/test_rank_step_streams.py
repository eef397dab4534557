"""Training steps of a sharded epoch draw from a stream of their rank's own
(`gnnorch.intercept.rank_streams.rank_steps`), and the caller's stream stays the same in every
rank (`scripts/rank_step_draws.py`, README "Your training step's own draws"):

* paired dropout masks of two ranks' k-th sharded steps are independent (agree in about half
  their entries), as one process's rows are; a whole batch (an epoch's head, a kept-whole
  epoch) draws from the caller's stream, equal in every rank, as one process's step needs;
* outside sharded steps every rank's torch generator is in the same state, so what the function
  draws between epochs -- a model's `reset_parameters()` for the next fold of a
  cross-validation (PyG's `benchmark/kernel`), a new split -- is the same in every rank;
* one process draws exactly as PyG does (nothing changes without ranks).
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import rank_step_draws  # noqa: E402

import gnnorch  # noqa: E402


def _digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _everyone(value):
    if not dist.is_initialized():
        return [value]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def test_sharded_steps_draw_independently_and_whole_batches_alike(tmp_path: Path) -> None:
    run = gnnorch.Runtime(rank_step_draws.train, processes=2, verbose=False)
    steps = run(rank_step_draws.graphs(), str(tmp_path))
    first, second = (torch.load(tmp_path / f"masks_{r}.pt") for r in (0, 1))
    assert steps == len(first) == len(second) == 1 + 3 + 4   # the head whole, then halves
    assert first[0].size(0) == 160 and {m.size(0) for m in first[1:]} == {80}
    assert torch.equal(first[0], second[0])   # the head: one whole batch, one draw
    agreement = torch.cat([(a == b).float().flatten() for a, b in zip(first[1:], second[1:])])
    assert 0.45 < agreement.mean().item() < 0.55, agreement.mean().item()
    [record] = run.last_run.stats[0]["sampler"]["loaders"]
    assert record["kept_whole"] is None


def cross_validation(data: list) -> list:
    """Three folds of PyG's `benchmark/kernel` loop: a new loader, `reset_parameters()` and a
    new optimizer per fold; the model drops nodes (so the ranks' steps draw different counts).
    Returns, per fold, every rank's parameter digest at the fold's first forward and its
    generator's digest after the fold."""
    from torch_geometric.loader import DataLoader
    from torch_geometric.nn import GCNConv, global_mean_pool

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.lin = GCNConv(4, 16), torch.nn.Linear(16, 2)

        def reset_parameters(self) -> None:
            self.conv.reset_parameters()
            self.lin.reset_parameters()

        def forward(self, x, edge_index, batch):
            h = F.dropout(self.conv(x, edge_index).relu(), p=0.5, training=self.training)
            return self.lin(global_mean_pool(h, batch))

    torch.manual_seed(0)
    model = Net()
    seen = []
    for fold in range(3):
        part = [g for i, g in enumerate(data) if i % 3 != fold]
        loader = DataLoader(part, batch_size=8, shuffle=True)
        model.reset_parameters()
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        start = None
        for _ in range(2):
            model.train()
            for batch in loader:
                if start is None:
                    start = _everyone(_digest(model.parameters()))
                optimizer.zero_grad()
                F.cross_entropy(model(batch.x, batch.edge_index, batch.batch),
                                batch.y).backward()
                optimizer.step()
        seen.append({"start": start, "generator": _everyone(_digest([torch.get_rng_state()]))})
    return seen


def uneven_graphs() -> list:
    """Graphs of 5 to 14 nodes: the ranks' halves of a batch hold different node counts."""
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(0)
    out = []
    for i in range(48):
        n = 5 + i % 10
        chain = torch.stack([torch.arange(n - 1), torch.arange(1, n)])
        out.append(Data(x=torch.randn(n, 4, generator=gen), edge_index=chain,
                        y=torch.tensor([i % 2])))
    return out


def test_every_fold_starts_from_one_model_in_every_rank() -> None:
    folds = gnnorch.Runtime(cross_validation, processes=2, verbose=False)(uneven_graphs())
    for fold in folds:
        assert len(set(fold["start"])) == 1, fold
        assert len(set(fold["generator"])) == 1, fold


def test_one_process_draws_as_pyg_does() -> None:
    plain = cross_validation(uneven_graphs())
    ran = gnnorch.Runtime(cross_validation, processes=1, verbose=False)(uneven_graphs())
    assert ran == plain


def _steps_drawing(device: str) -> tuple[list, torch.Tensor, torch.Tensor]:
    """Three sharded batches through `rank_steps`, each step drawing on `device`: the draws,
    and the device's default generator state before and after the loop."""
    from types import SimpleNamespace

    from gnnorch.intercept.rank_streams import rank_steps

    generator = (torch.default_generator if device == "cpu"
                 else torch.cuda.default_generators[torch.cuda.current_device()])
    ctx = SimpleNamespace(data_seed=7, rank=1)
    state = SimpleNamespace(shard=SimpleNamespace(sharded=True), index=0)
    before = generator.get_state()
    draws = [torch.rand(4, device=device) for _ in rank_steps(iter(range(3)), ctx, state, 0)]
    return draws, before, generator.get_state()


def test_a_step_draws_from_its_stream_and_puts_the_callers_state_back() -> None:
    draws, before, after = _steps_drawing("cpu")
    assert torch.equal(before, after)             # the caller's stream did not move
    assert len({tuple(d.tolist()) for d in draws}) == 3   # one stream, advanced step by step
    again, _, _ = _steps_drawing("cpu")
    assert all(torch.equal(a, b) for a, b in zip(draws, again))   # seeded: it repeats
    assert not torch.equal(draws[0], torch.rand(4))   # not the caller's next draw


@pytest.mark.gpu
def test_a_step_on_cuda_draws_from_its_stream_and_puts_the_callers_state_back() -> None:
    torch.cuda.init()
    draws, before, after = _steps_drawing("cuda")
    assert torch.equal(before, after)
    assert len({tuple(d.tolist()) for d in draws}) == 3
    assert not torch.equal(draws[0], torch.rand(4, device="cuda"))
