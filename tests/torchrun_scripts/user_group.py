"""Two plain processes (no torchrun) whose default process group the user initialised with a
FileStore, then gnnorch.Runtime calls: started by tests/test_torchrun.py as

    python user_group.py RANK STORE_PATH OUT_DIR

Rank r writes OUT_DIR/rank<r>.pt (what the runs did, and the group afterwards), then two calls
in which rank 1 raises while rank 0 computes (busy=True) or waits in a collective (False):
each rank that gets to raise writes OUT_DIR/failure<r>-<busy>.txt (start and end time, the
exception); rank 1 then stays alive a minute outside the world.
"""
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import gnnorch
from gnnorch.execute import world


def _sharded_training(x, y):
    """Records what gnnorch did in this rank: its cores, the seeds it trained on."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    n = x.size(0)
    data = Data(x=x, y=y, edge_index=torch.stack([torch.arange(n), (torch.arange(n) + 1) % n]))
    loader = NeighborLoader(data, num_neighbors=[2], batch_size=8, shuffle=True)
    model = torch.nn.Linear(x.size(1), 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    for batch in loader:
        optimizer.zero_grad()
        out = model(batch.x)[:batch.batch_size]
        torch.nn.functional.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()
        seen += batch.n_id[:batch.batch_size].tolist()
    return {"rank": dist.get_rank(), "seen": seen, "affinity": sorted(os.sched_getaffinity(0)),
            "threads": torch.get_num_threads(), "weight": model.weight.detach().clone()}


def _own_init_process_group():
    dist.init_process_group("gloo")            # the user's own call: joins the world
    rank, size = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()               # a no-op on the runtime's (the user's) group
    return rank, size, dist.is_initialized()


def _raise_in_rank_one(busy):
    if dist.get_rank() == 1:
        raise ValueError("rank one is unhappy" if busy else "rank one gives up")
    for _ in range(600):
        if busy:
            time.sleep(0.05)                   # rank 0 computes, no collective: stopped
        else:
            dist.all_reduce(torch.ones(1))     # rank 0 waits in a collective meanwhile


def main(rank, path, out):
    runtime = gnnorch.Runtime(_sharded_training, launch={"threads": 1})  # before the group
    store = dist.FileStore(path, 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    group = dist.group.WORLD
    affinity, threads = sorted(os.sched_getaffinity(0)), torch.get_num_threads()
    result = {"affinity_before": affinity}
    torch.manual_seed(0)
    x, y = torch.randn(64, 4), torch.randint(0, 3, (64,))
    result["value"] = runtime(x, y)
    result["cores"] = [(c.rank, c.trainer_cpus) for c in runtime.last_run.cores]
    result["plan"] = runtime.plan.as_tuple()
    own = gnnorch.Runtime(_own_init_process_group, launch={"threads": 1})  # same group
    result["own_init"] = own()
    result["user_managed"] = own.last_run.stats[rank]["distributed"]["user_managed"]
    result["after"] = (dist.is_initialized(), dist.group.WORLD is group,
                       world.created_here(), sorted(os.sched_getaffinity(0)) == affinity,
                       torch.get_num_threads() == threads)
    total = torch.ones(1)
    dist.all_reduce(total)                                    # the group still works
    result["all_reduce"] = total.item()
    torch.save(result, f"{out}/rank{rank}.pt")
    failing = gnnorch.Runtime(_raise_in_rank_one,
                              launch={"threads": 1, "bind": False, "collective_timeout": 4})
    for busy in (True, False):
        started = time.time()
        try:
            failing(busy)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            notes = "\n".join(getattr(exc, "__notes__", []))
            Path(f"{out}/failure{rank}-{busy}.txt").write_text(
                f"{started}\n{time.time()}\n{type(exc).__name__}: {exc}\n{notes}")
    if rank == 1:
        time.sleep(60)  # alive, but gone from the world: rank 0 must not wait for it


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
