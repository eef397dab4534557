"""An ordinary PyG training script wrapped with `gnnorch.Runtime`, started by torchrun in
tests/test_torchrun.py (every rank runs this file; gnnorch joins torchrun's world).

    python -m torch.distributed.run ... world_train.py MODE OUT_DIR [ARGS]

MODE "steps": three SGD steps of a dropout-free GraphSAGE with full neighbourhoods (only the
seeds of each batch can differ from one process), each rank seeded differently before the
call (the ranks must agree on one shuffle: the function seeds torch itself, at its top, so
the run's data seed is the digest of that state, `gnnorch.intercept.data_seed`); writes
rank<r>.pt, and at exit
exit<r>.txt: whether the process group was still initialised after gnnorch's exit handler.
MODE "accuracy": examples/train_vanilla.py's `train` on Cora for each seed in ARGS with one
Runtime (the process group stays initialised between calls); rank 0 writes accuracy.json.
MODE "fail": a long training run; rank 1 ends itself after GNNORCH_TEST_FAIL_AFTER batches,
killed by SIGKILL (GNNORCH_TEST_FAIL_HOW=kill) or raising ValueError (=raise).
"""
import atexit
import importlib.util
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch.datasets import load_cora

ROOT = Path(__file__).resolve().parents[2]


def sage_steps(data, batch_size, steps, input_nodes=None, shuffle=True):
    """Deterministic sampling (full neighbourhoods), no dropout: only the seeds differ. Returns
    the parameters after `steps` SGD steps and each step's seed vertices."""
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[-1, -1],
                            input_nodes=data.train_mask if input_nodes is None else input_nodes,
                            batch_size=batch_size, shuffle=shuffle)
    model = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=7)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    seeds = []
    for batch in loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()
        seeds.append(batch.n_id[:batch.batch_size].tolist())
        if len(seeds) == steps:
            break
    return model.state_dict(), seeds


def long_training(data, epochs):
    """Trains for a long time; rank 1 ends itself mid-epoch when told to."""
    fail_after = int(os.environ.get("GNNORCH_TEST_FAIL_AFTER", "0"))
    how = os.environ.get("GNNORCH_TEST_FAIL_HOW", "kill")
    loader = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=data.train_mask,
                            batch_size=20, shuffle=True)
    model = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    step = 0
    for epoch in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
            step += 1
            if fail_after and step == fail_after and dist.get_rank() == 1:
                print(f"rank 1 ends itself ({how}) at step {step}, epoch {epoch}, at "
                      f"{time.time():.3f}", flush=True)
                if how == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise ValueError(f"rank one gives up at step {step}")
    return step


def test_accuracy(model, data):
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=-1)
    return float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())


def load_vanilla_example():
    spec = importlib.util.spec_from_file_location("train_vanilla",
                                                  ROOT / "examples" / "train_vanilla.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    mode, out = sys.argv[1], Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    data = load_cora()
    if mode == "steps":
        # runs after gnnorch's own exit handler (registered later): was its group destroyed?
        atexit.register(lambda: (out / f"exit{rank}.txt").write_text(str(dist.is_initialized())))
        torch.manual_seed(1000 + rank)       # (the function seeds itself: no effect on data)
        runtime = gnnorch.Runtime(sage_steps, launch={"threads": 1, "bind": False})
        state, seeds = runtime(data, 20, 3)
        torch.save({"state": state, "seeds": seeds, "plan": runtime.plan.as_tuple(),
                    "initialised": dist.is_initialized(), "world": dist.get_world_size(),
                    "epochs": runtime.last_run.epochs,
                    "data_seed": runtime.last_run.stats[rank]["data_seed"]},
                   out / f"rank{rank}.pt")
    elif mode == "accuracy":
        example = load_vanilla_example()
        runtime = gnnorch.Runtime(example.train, launch={"threads": 1, "bind": False})
        accuracies, walls = [], []
        for seed in map(int, sys.argv[3:]):
            torch.manual_seed(seed)   # the runtime's shuffle seed: torch.initial_seed()
            model = runtime(data, epochs=20, seed=seed)
            accuracies.append(test_accuracy(model, data))
            walls.append(runtime.last_run.wall_seconds)
        if rank == 0:
            (out / "accuracy.json").write_text(json.dumps({"accuracy": accuracies,
                                                           "wall": walls}))
    elif mode == "fail":
        print(f"rank {rank} pid {os.getpid()} starts", flush=True)
        gnnorch.Runtime(long_training, launch={"threads": 1, "bind": False,
                                               "collective_timeout": 300})(data, 10_000)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
