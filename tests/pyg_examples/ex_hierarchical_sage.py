# Adapted from PyTorch Geometric, examples/hetero/hierarchical_sage.py at
# 5c6461b2305ad068a6d61165b3c55852a11aaa41 (master). MIT licence, PyTorch Geometric authors.
#
# Changes: OGB_MAG (a download; preprocess='metapath2vec') -> `mag_like(seed)` of
# ex_to_hetero_mag.py (a small synthetic HeteroData with MAG's node and edge types), transformed
# by the script's own T.ToUndirected(merge=True); argparse's --use-sparse-tensor -> argument
# `use_sparse_tensor` (False: ToSparseTensor needs torch_sparse); `dataset.num_classes` -> the
# synthetic papers' class count; batch_size 1024 -> 128; epochs 5 -> `epochs`; tqdm dropped;
# the module's top-level code is moved into `train(data, epochs, use_sparse_tensor)`, which
# returns the last loss and validation accuracy. Model (HeteroConv of SAGEConv with PyG's
# hetero `trim_to_layer` per layer), loaders, loop, loss and metric are the script's.
import torch
import torch.nn.functional as F

import torch_geometric
import torch_geometric.transforms as T
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import HeteroConv, Linear, SAGEConv
from torch_geometric.utils import trim_to_layer

from corpus import PYG_REV, Case, acc, loss
from ex_to_hetero_mag import NUM_CLASSES, mag_like


def make_args(seed):
    return (mag_like(seed), ), dict(epochs=3, use_sparse_tensor=False)


class HierarchicalHeteroGraphSage(torch.nn.Module):
    def __init__(self, edge_types, hidden_channels, out_channels, num_layers):
        super().__init__()

        self.convs = torch.nn.ModuleList()
        for _ in range(num_layers):
            conv = HeteroConv(
                {
                    edge_type: SAGEConv((-1, -1), hidden_channels)
                    for edge_type in edge_types
                }, aggr='sum')
            self.convs.append(conv)

        self.lin = Linear(hidden_channels, out_channels)

    def forward(self, x_dict, edge_index_dict, num_sampled_edges_dict,
                num_sampled_nodes_dict):

        for i, conv in enumerate(self.convs):
            x_dict, edge_index_dict, _ = trim_to_layer(
                layer=i,
                num_sampled_nodes_per_hop=num_sampled_nodes_dict,
                num_sampled_edges_per_hop=num_sampled_edges_dict,
                x=x_dict,
                edge_index=edge_index_dict,
            )

            x_dict = conv(x_dict, edge_index_dict)
            x_dict = {key: x.relu() for key, x in x_dict.items()}

        return self.lin(x_dict['paper'])


def train(data, epochs, use_sparse_tensor):
    if torch.cuda.is_available():
        device = torch.device('cuda')
    elif torch_geometric.is_xpu_available():
        device = torch.device('xpu')
    else:
        device = torch.device('cpu')

    transforms = [T.ToUndirected(merge=True)]
    if use_sparse_tensor:
        transforms.append(T.ToSparseTensor())
    data = T.Compose(transforms)(data)
    data = data.to(device, 'x', 'y')

    model = HierarchicalHeteroGraphSage(
        edge_types=data.edge_types,
        hidden_channels=64,
        out_channels=NUM_CLASSES,
        num_layers=2,
    ).to(device)

    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    kwargs = {'batch_size': 128, 'num_workers': 0}
    train_loader = NeighborLoader(
        data,
        num_neighbors=[10] * 2,
        shuffle=True,
        input_nodes=('paper', data['paper'].train_mask),
        **kwargs,
    )

    val_loader = NeighborLoader(
        data,
        num_neighbors=[10] * 2,
        shuffle=False,
        input_nodes=('paper', data['paper'].val_mask),
        **kwargs,
    )

    def train():
        model.train()

        total_examples = total_loss = 0
        for batch in train_loader:
            batch = batch.to(device)
            optimizer.zero_grad()

            out = model(
                batch.x_dict,
                batch.adj_t_dict
                if use_sparse_tensor else batch.edge_index_dict,
                num_sampled_nodes_dict=batch.num_sampled_nodes_dict,
                num_sampled_edges_dict=batch.num_sampled_edges_dict,
            )

            batch_size = batch['paper'].batch_size
            loss = F.cross_entropy(out[:batch_size], batch['paper'].y[:batch_size])
            loss.backward()
            optimizer.step()

            total_examples += batch_size
            total_loss += float(loss) * batch_size

        return total_loss / total_examples

    @torch.no_grad()
    def test(loader):
        model.eval()

        total_examples = total_correct = 0
        for batch in loader:
            batch = batch.to(device)
            out = model(
                batch.x_dict,
                batch.adj_t_dict
                if use_sparse_tensor else batch.edge_index_dict,
                num_sampled_nodes_dict=batch.num_sampled_nodes_dict,
                num_sampled_edges_dict=batch.num_sampled_edges_dict,
            )

            batch_size = batch['paper'].batch_size
            pred = out[:batch_size].argmax(dim=-1)
            total_examples += batch_size
            total_correct += int((pred == batch['paper'].y[:batch_size]).sum())

        return total_correct / total_examples

    for epoch in range(1, epochs + 1):
        loss = train()
        val_acc = test(val_loader)
        print(f'Epoch: {epoch:02d}, Loss: {loss:.4f}, Val: {val_acc:.4f}')
    return dict(loss=loss, val_acc=val_acc)


CASE = Case(
    name="hierarchical_sage",
    source=f"examples/hetero/hierarchical_sage.py @ {PYG_REV}",
    train=train,
    make_args=make_args,
    metrics={"val_acc": acc(0.0123), "loss": loss(0.0332)},
    needs=("pyg_lib",),   # PyG samples hetero per-hop counts with pyg-lib only
    doc=("Vanilla over seeds 0-9 (measure_noise.py --seeds 10, with pyg-lib, mean +- sd): "
         "val_acc 0.959 +- 0.012, loss 0.072 +- 0.033. A hand-written hetero model that trims "
         "itself with PyG's hetero trim_to_layer (dicts of per-hop counts) on a HeteroData "
         "NeighborLoader whose batches carry num_sampled_nodes_dict / num_sampled_edges_dict "
         "(PyG fills them with pyg-lib only)."),
)
