# Adapted from PyTorch Geometric, examples/pna.py at
# 5c6461b2305ad068a6d61165b3c55852a11aaa41 (master; last changed in cd36c863d, 2024-06-24).
# MIT licence, PyTorch Geometric authors.
#
# PNA graph regression: the in-degree histogram of the training graphs (`degree` over every
# graph of the dataset, iterated before any loader runs) is passed to four `PNAConv` layers
# (mean / min / max / std aggregators, identity / amplification / attenuation scalers, edge
# features, 5 towers), each followed by PyG's `BatchNorm`; atoms and bonds are embedded,
# `global_add_pool` reads the graphs out, an MLP regresses one value; L1 loss, Adam and
# `ReduceLROnPlateau` stepped on the validation MAE; plain PyG `DataLoader`s of whole graphs.
#
# Changes: ZINC(path, subset=True, split=...) (a download) -> `ZincLike(seed, split)`, small
# synthetic in-memory molecule datasets of ZINC-subset's format (x: one atom type in [0, 21)
# per node, [N, 1], as the script's Embedding(21, 75) expects; edge_attr: one bond type in
# [1, 4) per edge; y: one float per graph; see `zinc_like`); sizes: 256 / 64 / 64 graphs of
# 8-16 atoms instead of 10000 / 1000 / 1000 of about 23 (PNA's towers make every edge and node
# row 5 wide: about 3 s an epoch on 2 cores already), epochs 300 -> `epochs` (4); the module's
# top-level code (the degree histogram, DataLoaders, Net -- it reads `deg` as a free name --,
# model, optimizer, scheduler) is moved into `train(train_dataset, val_dataset, test_dataset,
# epochs)`, which returns the last loss and MAEs. The degree histogram, Net, the DataLoaders
# (batch_size 128), Adam + ReduceLROnPlateau, the loop, the L1 loss and the MAE are the
# script's.
import torch
import torch.nn.functional as F
from torch.nn import Embedding, Linear, ModuleList, ReLU, Sequential
from torch.optim.lr_scheduler import ReduceLROnPlateau

import torch_geometric
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.loader import DataLoader
from torch_geometric.nn import BatchNorm, PNAConv, global_add_pool
from torch_geometric.utils import degree

from corpus import PYG_REV, Case, loss

NUM_ATOM_TYPES = 21   # ZINC subset's atom types, the script's Embedding(21, 75)


class ZincLike(InMemoryDataset):
    """A split of `zinc_like` graphs collated in memory (no files)."""

    def __init__(self, seed, split):
        super().__init__(None)
        offset = {'train': 0, 'val': 1, 'test': 2}[split]
        num = {'train': 256, 'val': 64, 'test': 64}[split]
        self.data, self.slices = self.collate(zinc_like(1000 * seed + offset, num))


#: per-atom-type contribution to y (fixed across seeds: one "chemistry")
_ATOM_W = torch.linspace(-1.0, 1.0, NUM_ATOM_TYPES)[
    torch.randperm(NUM_ATOM_TYPES, generator=torch.Generator().manual_seed(1234))]


def zinc_like(seed, num_graphs):
    """Random molecules (the generator of ex_graph_gps.py with ZINC-subset's 21 atom types): a
    random tree of 8-16 atoms plus 0-3 ring-closing bonds; atom types drawn with a skewed
    law, bond types in {1, 2, 3} (1 most often); y = a sum of per-atom-type contributions
    weighted by degree, minus 0.8 per ring-closing bond, divided by 3."""
    gen = torch.Generator().manual_seed(seed)
    rest = NUM_ATOM_TYPES - 4
    atom_p = torch.tensor([0.4, 0.2, 0.15, 0.1] + [0.15 / rest] * rest)
    graphs = []
    for _ in range(num_graphs):
        n = int(torch.randint(8, 17, (1, ), generator=gen))
        src = list(range(1, n))
        dst = [int(torch.randint(max(0, k - 3), k, (1, ), generator=gen)) for k in range(1, n)]
        num_rings = int(torch.randint(0, 4, (1, ), generator=gen))
        for _ in range(num_rings):
            a, b = torch.randperm(n, generator=gen)[:2].tolist()
            src.append(a)
            dst.append(b)
        edge_index = torch.tensor([src, dst])
        bond = torch.multinomial(torch.tensor([0.7, 0.2, 0.1]), edge_index.size(1),
                                 replacement=True, generator=gen) + 1
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
        edge_attr = torch.cat([bond, bond])
        atoms = torch.multinomial(atom_p, n, replacement=True, generator=gen)
        deg = torch.bincount(edge_index[0], minlength=n).float()
        y = ((_ATOM_W[atoms] * deg / 2).sum() - 0.8 * num_rings) / 3.0
        graphs.append(Data(x=atoms.view(-1, 1), edge_index=edge_index, edge_attr=edge_attr,
                           y=y.view(1)))
    return graphs


def make_args(seed):
    train_dataset = ZincLike(seed, split='train')
    val_dataset = ZincLike(seed, split='val')
    test_dataset = ZincLike(seed, split='test')
    return (train_dataset, val_dataset, test_dataset), dict(epochs=4)


def train(train_dataset, val_dataset, test_dataset, epochs):
    train_loader = DataLoader(train_dataset, batch_size=128, shuffle=True)
    val_loader = DataLoader(val_dataset, batch_size=128)
    test_loader = DataLoader(test_dataset, batch_size=128)

    # Compute the maximum in-degree in the training data.
    max_degree = -1
    for data in train_dataset:
        d = degree(data.edge_index[1], num_nodes=data.num_nodes, dtype=torch.long)
        max_degree = max(max_degree, int(d.max()))

    # Compute the in-degree histogram tensor
    deg = torch.zeros(max_degree + 1, dtype=torch.long)
    for data in train_dataset:
        d = degree(data.edge_index[1], num_nodes=data.num_nodes, dtype=torch.long)
        deg += torch.bincount(d, minlength=deg.numel())

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()

            self.node_emb = Embedding(21, 75)
            self.edge_emb = Embedding(4, 50)

            aggregators = ['mean', 'min', 'max', 'std']
            scalers = ['identity', 'amplification', 'attenuation']

            self.convs = ModuleList()
            self.batch_norms = ModuleList()
            for _ in range(4):
                conv = PNAConv(in_channels=75, out_channels=75,
                               aggregators=aggregators, scalers=scalers, deg=deg,
                               edge_dim=50, towers=5, pre_layers=1, post_layers=1,
                               divide_input=False)
                self.convs.append(conv)
                self.batch_norms.append(BatchNorm(75))

            self.mlp = Sequential(Linear(75, 50), ReLU(), Linear(50, 25), ReLU(),
                                  Linear(25, 1))

        def forward(self, x, edge_index, edge_attr, batch):
            x = self.node_emb(x.squeeze())
            edge_attr = self.edge_emb(edge_attr)

            for conv, batch_norm in zip(self.convs, self.batch_norms):
                x = F.relu(batch_norm(conv(x, edge_index, edge_attr)))

            x = global_add_pool(x, batch)
            return self.mlp(x)

    if torch.cuda.is_available():
        device = torch.device('cuda')
    elif torch_geometric.is_xpu_available():
        device = torch.device('xpu')
    else:
        device = torch.device('cpu')
    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    scheduler = ReduceLROnPlateau(optimizer, mode='min', factor=0.5, patience=20,
                                  min_lr=0.00001)

    def train(epoch):
        model.train()

        total_loss = 0
        for data in train_loader:
            data = data.to(device)
            optimizer.zero_grad()
            out = model(data.x, data.edge_index, data.edge_attr, data.batch)
            loss = (out.squeeze() - data.y).abs().mean()
            loss.backward()
            total_loss += loss.item() * data.num_graphs
            optimizer.step()
        return total_loss / len(train_loader.dataset)

    @torch.no_grad()
    def test(loader):
        model.eval()

        total_error = 0
        for data in loader:
            data = data.to(device)
            out = model(data.x, data.edge_index, data.edge_attr, data.batch)
            total_error += (out.squeeze() - data.y).abs().sum().item()
        return total_error / len(loader.dataset)

    for epoch in range(1, epochs + 1):
        loss = train(epoch)
        val_mae = test(val_loader)
        test_mae = test(test_loader)
        scheduler.step(val_mae)
        print(f'Epoch: {epoch:02d}, Loss: {loss:.4f}, Val: {val_mae:.4f}, '
              f'Test: {test_mae:.4f}')
    return dict(loss=loss, val_mae=val_mae, test_mae=test_mae)


CASE = Case(
    name="pna",
    source=f"examples/pna.py @ {PYG_REV}",
    train=train,
    make_args=make_args,
    metrics={"test_mae": loss(0.0589), "val_mae": loss(0.0526), "loss": loss(0.0390)},
    slow=True,
    doc=("Vanilla over seeds 0-9 (measure_noise.py --seeds 10, mean +- sd): test_mae 0.554 +- "
         "0.059, val_mae 0.540 +- 0.053, loss 0.237 +- 0.039 (4 epochs, about 13 s a run). "
         "PNAConv (degree histogram computed from the training graphs before the model "
         "exists, 4 aggregators x 3 scalers, edge features, towers) + BatchNorm, "
         "ReduceLROnPlateau, graph-level DataLoader."),
)
