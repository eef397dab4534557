# Adapted from PyTorch Geometric, examples/multi_gpu/distributed_sampling.py at
# 5c6461b2305ad068a6d61165b3c55852a11aaa41 (master). MIT licence, PyTorch Geometric authors.
#
# A CPU run of the script's `run(rank, world_size, dataset)` as one process (rank 0, world size
# 1) that initialises and destroys its own process group. Changes: Reddit (a download) -> a
# synthetic power-law graph (gnnorch.datasets.power_law_graph) behind the same `dataset`
# interface (OfflineDataset); CUDA -> CPU: backend 'nccl' -> 'gloo', `.to(rank)` -> `.to(device)`
# with device 'cpu', DistributedDataParallel without device_ids; MASTER_PORT '12355' -> a free
# port chosen by the caller (argument `port`; the function still sets MASTER_ADDR/MASTER_PORT
# itself); sizes: batch_size 1024 -> 256, num_workers 4 -> 0 (so persistent_workers, which needs
# workers, is dropped), epochs 20 -> `epochs`; `run` returns the last loss and accuracies (as
# floats) instead of only printing them; the `__main__` block's mp.spawn is not used. Model,
# index splitting by world size, loaders, torch.manual_seed(12345), DDP, loop, loss and the
# evaluation (incl. its test_idx taken from val_mask) are the script's.
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
    ) -> None:
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
                x = x.relu()
                x = F.dropout(x, p=0.5, training=self.training)
        return x


@torch.no_grad()
def test(
    loader: NeighborLoader,
    model: DistributedDataParallel,
    rank: int,
) -> Tensor:
    model.eval()
    total_correct = torch.tensor(0, dtype=torch.long, device=device)
    total_examples = 0
    for batch in loader:
        out = model(batch.x, batch.edge_index.to(device))
        pred = out[:batch.batch_size].argmax(dim=-1)
        y = batch.y[:batch.batch_size].to(device)
        total_correct += (pred == y).sum()
        total_examples += batch.batch_size

    return total_correct / total_examples


def run(rank: int, world_size: int, dataset, epochs: int, port: int) -> dict:
    os.environ['MASTER_ADDR'] = 'localhost'
    os.environ['MASTER_PORT'] = str(port)
    dist.init_process_group('gloo', rank=rank, world_size=world_size)

    data = dataset[0]
    data = data.to(device, 'x', 'y')  # Move to device for faster feature fetch.

    # Split indices into `world_size` many chunks:
    train_idx = data.train_mask.nonzero(as_tuple=False).view(-1)
    train_idx = train_idx.split(ceil(train_idx.size(0) / world_size))[rank]
    val_idx = data.val_mask.nonzero(as_tuple=False).view(-1)
    val_idx = val_idx.split(ceil(val_idx.size(0) / world_size))[rank]
    test_idx = data.val_mask.nonzero(as_tuple=False).view(-1)
    test_idx = test_idx.split(ceil(test_idx.size(0) / world_size))[rank]

    kwargs = dict(
        data=data,
        batch_size=256,
        num_neighbors=[25, 10],
        drop_last=True,
        num_workers=0,
    )
    train_loader = NeighborLoader(
        input_nodes=train_idx,
        shuffle=True,
        **kwargs,
    )
    val_loader = NeighborLoader(
        input_nodes=val_idx,
        shuffle=False,
        **kwargs,
    )
    test_loader = NeighborLoader(
        input_nodes=test_idx,
        shuffle=False,
        **kwargs,
    )

    torch.manual_seed(12345)
    model = SAGE(dataset.num_features, 256, dataset.num_classes).to(device)
    model = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)

    for epoch in range(1, epochs + 1):
        model.train()
        for batch in tqdm(
                train_loader,
                desc=f'Epoch {epoch:02d}',
                disable=rank != 0,
        ):
            out = model(batch.x, batch.edge_index.to(device))[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

        if rank == 0:
            print(f'Epoch {epoch:02d}: Train loss: {loss:.4f}')

        if epoch % 5 == 0:
            train_acc = test(train_loader, model, rank)
            val_acc = test(val_loader, model, rank)
            test_acc = test(test_loader, model, rank)

            if world_size > 1:
                dist.all_reduce(train_acc, op=dist.ReduceOp.AVG)
                dist.all_reduce(val_acc, op=dist.ReduceOp.AVG)
                dist.all_reduce(test_acc, op=dist.ReduceOp.AVG)

            if rank == 0:
                print(f'Train acc: {train_acc:.4f}, '
                      f'Val acc: {val_acc:.4f}, '
                      f'Test acc: {test_acc:.4f}')

    dist.destroy_process_group()
    return dict(loss=float(loss), train_acc=float(train_acc), val_acc=float(val_acc),
                test_acc=float(test_acc))


def train(data, epochs, port):
    """The script's `run` as rank 0 of a world of one."""
    return run(0, 1, OfflineDataset(data), epochs, port)


def make_args(seed):
    from gnnorch.datasets import power_law_graph

    data = power_law_graph(num_nodes=3000, avg_degree=15.0, num_features=32, num_classes=8,
                           train_ratio=0.6, val_ratio=0.2, test_ratio=0.2, seed=seed)
    return (data,), dict(epochs=5, port=free_port())


CASE = Case(
    name="distributed_sampling",
    source=f"examples/multi_gpu/distributed_sampling.py @ {PYG_REV} (CPU, gloo, world 1)",
    train=train,
    make_args=make_args,
    metrics={"test_acc": acc(0.0204), "val_acc": acc(0.0202), "loss": loss(0.0809)},
    doc=('Vanilla over seeds 0-9 (measure_noise.py --seeds 10, mean +- sd): test_acc 0.913 +- '
         '0.020, val_acc 0.911 +- 0.020, loss 0.526 +- 0.081. The function calls '
         "dist.init_process_group('gloo') itself (world size 1, its own MASTER_ADDR/PORT), "
         'wraps the model in DistributedDataParallel and calls destroy_process_group(); '
         'SAGEConv stack + NeighborLoader with drop_last=True.'),
)
