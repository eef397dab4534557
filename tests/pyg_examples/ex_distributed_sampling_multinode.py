# Adapted from PyTorch Geometric, examples/multi_gpu/distributed_sampling_multinode.py at
# 5c6461b2305ad068a6d61165b3c55852a11aaa41 (master). MIT licence, PyTorch Geometric authors.
#
# The multi-node variant of distributed_sampling.py, written for a launcher (srun / torchrun):
# world size, rank and local rank are read from the environment (`WORLD_SIZE` / `RANK` /
# `LOCAL_RANK`, else SLURM's variables) by the `__main__` block and handed to `run`, which calls
# `init_process_group` with them (MASTER_ADDR / MASTER_PORT from the environment too). What it
# exercises beyond distributed_sampling: the training seeds split by world size by the function,
# a training NeighborLoader with `drop_last=True` and persistent workers, `dist.barrier()` calls
# around every epoch, and an evaluation loader built on rank 0 only: a `[-1]` NeighborLoader over
# every node on `copy.copy(data)`, whose data is then edited through the loader
# (`del subgraph_loader.data.x, subgraph_loader.data.y`, `subgraph_loader.data.node_id =
# torch.arange(N)` added after the loader exists), read by the model's layer-wise `inference`
# as `x_all[batch.node_id]`; `torch.manual_seed(12345)` before the model, DDP.
#
# Changes: Reddit('data/Reddit') (a download, read twice around barriers) -> a synthetic
# power-law graph (gnnorch.datasets.power_law_graph) behind the same `dataset` interface
# (OfflineDataset), passed to `run` (the two rank-dependent Reddit(...) reads and their
# barriers are dropped); CUDA -> CPU: backend 'nccl' -> 'gloo', `.to(local_rank)` -> `.to(device)`
# with device 'cpu', DistributedDataParallel without device_ids; the `__main__` block is `train`:
# it reads WORLD_SIZE / RANK / LOCAL_RANK exactly as the script does, after filling in, only for
# the duration of the call and only where the environment lacks them, what a launcher of one
# process would set (MASTER_ADDR 'localhost', MASTER_PORT a free port chosen by the caller,
# WORLD_SIZE 1, RANK 0, LOCAL_RANK 0: the script itself fails without them); sizes:
# batch_size 1024 -> 256, num_workers 4 -> 2 (persistent kept), hidden 256 -> 64, epochs 20 ->
# `epochs` (10; evaluation every 5 epochs kept: twice); `run` returns the last
# loss and rank 0's last accuracies (floats) besides printing them. SAGE (its `inference`
# included), the index split, the loaders, the seed, DDP, the loop, the loss and the
# evaluation are the script's.
import copy
import os
from math import ceil

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import SAGEConv

from corpus import PYG_REV, Case, OfflineDataset, acc, free_port, loss

device = torch.device('cpu')


class SAGE(torch.nn.Module):
    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_layers: int = 2,
    ):
        super().__init__()
        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        for _ in range(num_layers - 2):
            self.convs.append(SAGEConv(hidden_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu_()
                x = F.dropout(x, p=0.5, training=self.training)
        return x

    @torch.no_grad()
    def inference(
        self,
        x_all: Tensor,
        device: torch.device,
        subgraph_loader: NeighborLoader,
    ) -> Tensor:
        pbar = tqdm(total=len(subgraph_loader) * len(self.convs))
        pbar.set_description('Evaluating')

        # Compute representations of nodes layer by layer, using *all*
        # available edges. This leads to faster computation in contrast to
        # immediately computing the final representations of each batch:
        for i, conv in enumerate(self.convs):
            xs = []
            for batch in subgraph_loader:
                x = x_all[batch.node_id.to(x_all.device)].to(device)
                x = conv(x, batch.edge_index.to(device))
                x = x[:batch.batch_size]
                if i < len(self.convs) - 1:
                    x = x.relu_()
                xs.append(x.cpu())
                pbar.update(1)
            x_all = torch.cat(xs, dim=0)

        pbar.close()
        return x_all


def run(world_size: int, rank: int, local_rank: int, dataset, epochs: int) -> dict:
    # Will query the runtime environment for `MASTER_ADDR` and `MASTER_PORT`.
    # Make sure, those are set!
    dist.init_process_group('gloo', world_size=world_size, rank=rank)

    data = dataset[0]

    # Move to device for faster feature fetch.
    data = data.to(device, 'x', 'y')

    # Split training indices into `world_size` many chunks:
    train_idx = data.train_mask.nonzero(as_tuple=False).view(-1)
    train_idx = train_idx.split(ceil(train_idx.size(0) / world_size))[rank]

    kwargs = dict(batch_size=256, num_workers=2, persistent_workers=True)
    train_loader = NeighborLoader(
        data,
        input_nodes=train_idx,
        num_neighbors=[25, 10],
        shuffle=True,
        drop_last=True,
        **kwargs,
    )

    if rank == 0:  # Create single-hop evaluation neighbor loader:
        subgraph_loader = NeighborLoader(
            copy.copy(data),
            num_neighbors=[-1],
            shuffle=False,
            **kwargs,
        )
        # No need to maintain these features during evaluation:
        del subgraph_loader.data.x, subgraph_loader.data.y
        # Add global node index information:
        subgraph_loader.data.node_id = torch.arange(data.num_nodes)

    torch.manual_seed(12345)
    model = SAGE(dataset.num_features, 64, dataset.num_classes).to(device)
    model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)

    result = {}
    for epoch in range(1, epochs + 1):
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            out = model(batch.x,
                        batch.edge_index.to(device))[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()

        dist.barrier()

        if rank == 0:
            print(f'Epoch: {epoch:02d}, Loss: {loss:.4f}')

        if rank == 0 and epoch % 5 == 0:  # We evaluate on a single GPU for now
            model.eval()
            with torch.no_grad():
                out = model.module.inference(
                    data.x,
                    device,
                    subgraph_loader,
                )
            res = out.argmax(dim=-1) == data.y.to(out.device)
            acc1 = int(res[data.train_mask].sum()) / int(data.train_mask.sum())
            acc2 = int(res[data.val_mask].sum()) / int(data.val_mask.sum())
            acc3 = int(res[data.test_mask].sum()) / int(data.test_mask.sum())
            print(f'Train: {acc1:.4f}, Val: {acc2:.4f}, Test: {acc3:.4f}')
            result = dict(train_acc=acc1, val_acc=acc2, test_acc=acc3,
                          num_evaluated=int(out.size(0)))

        dist.barrier()

    dist.destroy_process_group()
    return dict(loss=float(loss), **result)


#: what a launcher of a world of one process sets (MASTER_PORT: the caller's free port)
_LAUNCHER_ENV = {'MASTER_ADDR': 'localhost', 'WORLD_SIZE': '1', 'RANK': '0', 'LOCAL_RANK': '0'}


def train(data, epochs, port):
    """The script's `__main__` block, in the environment a launcher of one process sets (filled
    in only where it is missing, and restored afterwards)."""
    env = {**_LAUNCHER_ENV, 'MASTER_PORT': str(port)}
    saved = {key: os.environ.get(key) for key in env}
    for key, value in env.items():
        os.environ.setdefault(key, value)
    try:
        # Get the world size from the WORLD_SIZE variable or directly from SLURM:
        world_size = int(
            os.environ.get('WORLD_SIZE', os.environ.get('SLURM_NTASKS')))
        # Likewise for RANK and LOCAL_RANK:
        rank = int(os.environ.get('RANK', os.environ.get('SLURM_PROCID')))
        local_rank = int(
            os.environ.get('LOCAL_RANK', os.environ.get('SLURM_LOCALID')))
        return run(world_size, rank, local_rank, OfflineDataset(data), epochs)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def make_args(seed):
    from gnnorch.datasets import power_law_graph

    data = power_law_graph(num_nodes=2000, avg_degree=10.0, num_features=32, num_classes=8,
                           train_ratio=0.6, val_ratio=0.2, test_ratio=0.2, seed=seed)
    return (data,), dict(epochs=10, port=free_port())


CASE = Case(
    name="distributed_sampling_multinode",
    source=(f"examples/multi_gpu/distributed_sampling_multinode.py @ {PYG_REV} "
            "(CPU, gloo, world 1 from the environment)"),
    train=train,
    make_args=make_args,
    metrics={"test_acc": acc(0.0302), "val_acc": acc(0.0313), "loss": loss(0.0915)},
    exact=("num_evaluated", ),
    slow=True,
    doc=("Vanilla over seeds 0-9 (measure_noise.py --seeds 10, mean +- sd): test_acc 0.707 +- "
         "0.030, val_acc 0.704 +- 0.031, loss 1.274 +- 0.092, num_evaluated 2000 (exact; "
         "10 epochs, 2 s a run on an idle machine). World size / rank from the environment, "
         "its own gloo group, DDP, a drop_last NeighborLoader with 2 persistent workers, "
         "barriers, a rank-0-only [-1] loader edited through loader.data for layer-wise "
         "inference."),
)
