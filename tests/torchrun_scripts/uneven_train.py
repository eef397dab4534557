"""Training functions whose ranks take different numbers of optimizer steps (issue 22), run by
tests/test_uneven.py with ``processes=2`` and, through this file, by two torchrun nodes:

    python -m torch.distributed.run ... uneven_train.py PATTERN[,PATTERN...] OUT_DIR

Each pattern is an ordinary PyG loop with one rank-dependent turn; it returns the number of
optimizer steps this rank called and leaves `Final` in its rank's statistics
(``RunInfo.stats[r]["test_final"]``): the model, Adam state and learning rate as they are when
the run's summary is sent, i.e. after the rank's last join (a rank whose function returned
first follows the others' remaining steps, so a copy taken inside the function would be stale). The patterns that must run to completion leave
every rank with the same parameters; ``mismatched_optimizers`` cannot be run with p > 1
(`UnevenRanksError`), ``sleeper`` stops calling the optimizer on rank 1 (`CollectiveError` once
the collective timeout passes). Under torchrun each pattern gets its own `gnnorch.Runtime` call
in the same world; a failing pattern's error is written to ``OUT_DIR/<pattern>-error<r>.txt``.
"""
import io
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch.datasets import load_cora


def _rank():
    return dist.get_rank() if dist.is_initialized() else 0


def _setup(data, input_nodes=None, lr=0.01):
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[5, 5], batch_size=20, shuffle=True,
                            input_nodes=data.train_mask if input_nodes is None else input_nodes)
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    return loader, model, optimizer


def _loss(model, batch):
    out = model(batch.x, batch.edge_index)[:batch.batch_size]
    return F.cross_entropy(out, batch.y[:batch.batch_size])


class Final:
    """A rank's model and optimizer, serialised (``torch.save`` bytes) only when pickled."""

    def __init__(self, model, optimizer, steps):
        self.model, self.optimizer, self.steps = model, optimizer, steps

    def __reduce__(self):
        buffer = io.BytesIO()
        torch.save({"state": {k: v.clone() for k, v in self.model.state_dict().items()},
                    "adam": [s["exp_avg"].clone() for s in self.optimizer.state.values()
                             if "exp_avg" in s],
                    "lr": [g["lr"] for g in self.optimizer.param_groups],
                    "steps": self.steps}, buffer)
        return (bytes, (buffer.getvalue(),))


def final_state(blob):
    """What `Final` became in the caller."""
    return torch.load(io.BytesIO(blob))


def _save(out, name, model, optimizer, steps):
    from gnnorch.launch import context

    context.current().stats["test_final"] = Final(model, optimizer, steps)
    return steps


def loss_break(data, out, threshold=0.05):
    """The issue's loop: leave the epoch when this rank's own loss is small."""
    loader, model, optimizer = _setup(data, lr=0.05)
    steps = 0
    for epoch in range(4):
        for batch in loader:
            optimizer.zero_grad()
            loss = _loss(model, batch)
            loss.backward()
            optimizer.step()
            steps += 1
            if epoch >= 2 and loss.item() < threshold:
                break
    return _save(out, "loss_break", model, optimizer, steps)


def rank_break(data, out):
    """A `break` that leaves epochs 2 and 3 at a different step on each rank; gradients
    clipped (the rank that left follows the other's clip_grad_norm_ rounds too)."""
    loader, model, optimizer = _setup(data)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    steps = 0
    for epoch in range(3):
        for i, batch in enumerate(loader):
            optimizer.zero_grad()
            _loss(model, batch).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            scheduler.step()              # per step: moves only on the ranks that step
            steps += 1
            if epoch >= 1 and i >= 1 + 3 * _rank():
                break
    return _save(out, "rank_break", model, optimizer, steps)


def uneven_lengths(data, out):
    """Each rank's loader has its own length (3 and 6 batches per epoch)."""
    seeds = data.train_mask.nonzero().view(-1)
    loader, model, optimizer = _setup(data, input_nodes=seeds[:60 + 60 * _rank()])
    steps = 0
    for _ in range(2):
        for batch in loader:
            optimizer.zero_grad()
            _loss(model, batch).backward()
            optimizer.step()
            steps += 1
    return _save(out, "uneven_lengths", model, optimizer, steps)


def skipped_step(data, out):
    """`if loss.isfinite(): opt.step()` with a non-finite loss on rank 1 at one step."""
    loader, model, optimizer = _setup(data)
    steps = 0
    for epoch in range(2):
        for i, batch in enumerate(loader):
            optimizer.zero_grad()
            loss = _loss(model, batch)
            if _rank() == 1 and epoch == 0 and i == 2:
                loss = loss * float("nan")
            if loss.isfinite():
                loss.backward()
                optimizer.step()
                steps += 1
    return _save(out, "skipped_step", model, optimizer, steps)


def rank0_validation(data, out):
    """A validation pass on rank 0 only, with a module built and run there only."""
    loader, model, optimizer = _setup(data)
    steps = 0
    for _ in range(2):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            _loss(model, batch).backward()
            optimizer.step()
            steps += 1
        if _rank() == 0:
            model.eval()
            with torch.no_grad():
                logits = model(data.x, data.edge_index)
                torch.nn.Linear(7, 7)(logits)      # a module of rank 0's own
            time.sleep(0.5)
    return _save(out, "rank0_validation", model, optimizer, steps)


def mismatched_optimizers(data, out):
    """Rank 0 steps one optimizer, rank 1 another: these steps cannot be averaged."""
    small, large = torch.nn.Linear(4, 2), torch.nn.Linear(8, 2)
    optimizers = [torch.optim.SGD(small.parameters(), lr=0.1),
                  torch.optim.SGD(large.parameters(), lr=0.1)]
    model, width = (small, 4) if _rank() == 0 else (large, 8)
    optimizer = optimizers[_rank()]
    optimizer.zero_grad()
    model(torch.randn(3, width)).sum().backward()
    optimizer.step()
    return 1


def sleeper(data, out):
    """Rank 1 stops calling the optimizer (sleeps far past the collective timeout)."""
    loader, model, optimizer = _setup(data)
    for i, batch in enumerate(loader):
        optimizer.zero_grad()
        _loss(model, batch).backward()
        optimizer.step()
        if i == 1 and _rank() == 1:
            print(f"rank 1 sleeps at {time.time():.3f}", flush=True)
            time.sleep(600)
    return 0


COMPLETING = ("loss_break", "rank_break", "uneven_lengths", "skipped_step", "rank0_validation")
PATTERNS = {name: globals()[name] for name in COMPLETING + ("mismatched_optimizers", "sleeper")}


def main():
    names, out = sys.argv[1].split(","), Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    data = load_cora()
    timeout = float(os.environ.get("GNNORCH_TEST_COLLECTIVE_TIMEOUT", "60"))
    failed = False
    for name in names:
        runtime = gnnorch.Runtime(PATTERNS[name], launch={"threads": 1, "bind": False,
                                                          "collective_timeout": timeout})
        start = time.time()
        try:
            runtime(data, str(out))
        except Exception as exc:  # noqa: BLE001 - written for the test to read
            failed = True
            (out / f"{name}-error{rank}.txt").write_text(
                f"{type(exc).__name__}\n{time.time() - start:.2f}\n{exc}\n"
                + "".join(traceback.format_exception(exc)))
            break
        stats = {r: {k: s[k] for k in ("gradsync", "test_final") if k in s}
                 for r, s in runtime.last_run.stats.items()}
        torch.save(stats, out / f"{name}-stats{rank}.pt")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
