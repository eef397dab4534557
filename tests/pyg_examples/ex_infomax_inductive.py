# Adapted from PyTorch Geometric, examples/infomax_inductive.py at
# 5c6461b2305ad068a6d61165b3c55852a11aaa41 (master). MIT licence, PyTorch Geometric authors.
#
# Changes: Reddit (a download) -> a synthetic power-law graph (gnnorch.datasets.power_law_graph)
# behind the same `dataset` interface (OfflineDataset); sizes: num_workers 12 -> 0, hidden
# channels 512 -> 64, epochs 30 -> `epochs`, model.test's max_iter 10000 -> 1000; the module's
# top-level code is moved into `train(data, epochs)`, which returns the last loss and the test
# accuracy. Encoder, corruption, DeepGraphInfomax, loaders, loop and loss are the script's.
import torch
from tqdm import tqdm

from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import DeepGraphInfomax, SAGEConv

from corpus import PYG_REV, Case, OfflineDataset, acc, loss

device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')


def make_args(seed):
    from gnnorch.datasets import power_law_graph

    data = power_law_graph(num_nodes=2000, avg_degree=10.0, num_features=32, num_classes=8,
                           train_ratio=0.5, val_ratio=0.1, test_ratio=0.4, seed=seed)
    return (data,), dict(epochs=3)


class Encoder(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels):
        super().__init__()
        self.convs = torch.nn.ModuleList([
            SAGEConv(in_channels, hidden_channels),
            SAGEConv(hidden_channels, hidden_channels),
            SAGEConv(hidden_channels, hidden_channels)
        ])

        self.activations = torch.nn.ModuleList()
        self.activations.extend([
            torch.nn.PReLU(hidden_channels),
            torch.nn.PReLU(hidden_channels),
            torch.nn.PReLU(hidden_channels)
        ])

    def forward(self, x, edge_index, batch_size):
        for conv, act in zip(self.convs, self.activations):
            x = conv(x, edge_index)
            x = act(x)
        return x[:batch_size]


def corruption(x, edge_index, batch_size):
    return x[torch.randperm(x.size(0))], edge_index, batch_size


def train(data, epochs):
    dataset = OfflineDataset(data)
    data = dataset[0].to(device, 'x', 'edge_index')

    train_loader = NeighborLoader(data, num_neighbors=[10, 10, 25], batch_size=256,
                                  shuffle=True, num_workers=0)
    test_loader = NeighborLoader(data, num_neighbors=[10, 10, 25], batch_size=256,
                                 num_workers=0)

    model = DeepGraphInfomax(
        hidden_channels=64, encoder=Encoder(dataset.num_features, 64),
        summary=lambda z, *args, **kwargs: torch.sigmoid(z.mean(dim=0)),
        corruption=corruption).to(device)

    model = model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0001)

    def train(epoch):
        model.train()

        total_loss = total_examples = 0
        for batch in tqdm(train_loader, desc=f'Epoch {epoch:02d}'):
            optimizer.zero_grad()
            pos_z, neg_z, summary = model(batch.x, batch.edge_index,
                                          batch.batch_size)
            loss = model.loss(pos_z, neg_z, summary)
            loss.backward()
            optimizer.step()
            total_loss += float(loss) * pos_z.size(0)
            total_examples += pos_z.size(0)

        return total_loss / total_examples

    @torch.no_grad()
    def test():
        model.eval()

        zs = []
        for batch in tqdm(test_loader, desc='Evaluating'):
            pos_z, _, _ = model(batch.x, batch.edge_index, batch.batch_size)
            zs.append(pos_z.cpu())
        z = torch.cat(zs, dim=0)
        train_val_mask = data.train_mask | data.val_mask
        acc = model.test(z[train_val_mask], data.y[train_val_mask],
                         z[data.test_mask], data.y[data.test_mask], max_iter=1000)
        return acc

    for epoch in range(1, epochs + 1):
        loss = train(epoch)
        print(f'Epoch {epoch:02d}, Loss: {loss:.4f}')

    test_acc = test()
    print(f'Test Accuracy: {test_acc:.4f}')
    return dict(loss=loss, test_acc=test_acc)


CASE = Case(
    name="infomax_inductive",
    source=f"examples/infomax_inductive.py @ {PYG_REV}",
    train=train,
    make_args=make_args,
    metrics={"test_acc": acc(0.0172), "loss": loss(0.0457)},
    doc=("Vanilla over seeds 0-9 (measure_noise.py --seeds 10, mean +- sd): test_acc 0.751 +- "
         "0.017, loss 1.436 +- 0.046. DeepGraphInfomax over a 3-layer SAGE encoder that slices "
         "x[:batch_size] itself; corruption permutes the sampled rows; evaluation over a "
         "shuffle=False loader of all nodes."),
)
