# Adapted from PyTorch Geometric, examples/reddit.py at
# 5c6461b2305ad068a6d61165b3c55852a11aaa41 (master). MIT licence, PyTorch Geometric authors.
#
# Changes: Reddit (a download) -> a synthetic power-law graph (gnnorch.datasets.power_law_graph)
# behind the same `dataset` interface (OfflineDataset); sizes: batch_size 1024 -> 256,
# num_workers 6 -> 2 (persistent_workers=True kept), hidden 256 -> 64, epochs 10 -> `epochs`;
# the module's top-level code is moved into `train(data, epochs)`, which returns the last
# epoch's metrics. Model (incl. layer-wise inference over the subgraph loader), loaders, loop,
# loss and metrics are the script's.
import copy
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import SAGEConv

from corpus import PYG_REV, Case, OfflineDataset, acc, loss

device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')


def make_args(seed):
    from gnnorch.datasets import power_law_graph

    data = power_law_graph(num_nodes=3000, avg_degree=15.0, num_features=32, num_classes=8,
                           train_ratio=0.6, val_ratio=0.1, test_ratio=0.3, seed=seed)
    return (data,), dict(epochs=3)


class SAGE(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.convs = torch.nn.ModuleList()
        self.convs.append(SAGEConv(in_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu_()
                x = F.dropout(x, p=0.5, training=self.training)
        return x

    @torch.no_grad()
    def inference(self, x_all, subgraph_loader):
        pbar = tqdm(total=len(subgraph_loader.dataset) * len(self.convs))
        pbar.set_description('Evaluating')

        # Compute representations of nodes layer by layer, using *all*
        # available edges. This leads to faster computation in contrast to
        # immediately computing the final representations of each batch:
        for i, conv in enumerate(self.convs):
            xs = []
            for batch in subgraph_loader:
                x = x_all[batch.n_id.to(x_all.device)].to(device)
                x = conv(x, batch.edge_index.to(device))
                if i < len(self.convs) - 1:
                    x = x.relu_()
                xs.append(x[:batch.batch_size].cpu())
                pbar.update(batch.batch_size)
            x_all = torch.cat(xs, dim=0)
        pbar.close()
        return x_all


def train(data, epochs):
    dataset = OfflineDataset(data)

    # Already send node features/labels to GPU for faster access during sampling:
    data = dataset[0].to(device, 'x', 'y')

    kwargs = {'batch_size': 256, 'num_workers': 2, 'persistent_workers': True}
    train_loader = NeighborLoader(data, input_nodes=data.train_mask,
                                  num_neighbors=[25, 10], shuffle=True, **kwargs)

    subgraph_loader = NeighborLoader(copy.copy(data), input_nodes=None,
                                     num_neighbors=[-1], shuffle=False, **kwargs)

    # No need to maintain these features during evaluation:
    del subgraph_loader.data.x, subgraph_loader.data.y
    # Add global node index information.
    subgraph_loader.data.num_nodes = data.num_nodes
    subgraph_loader.data.n_id = torch.arange(data.num_nodes)

    model = SAGE(dataset.num_features, 64, dataset.num_classes).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def train(epoch):
        model.train()

        pbar = tqdm(total=int(len(train_loader.dataset)))
        pbar.set_description(f'Epoch {epoch:02d}')

        total_loss = total_correct = total_examples = 0
        for batch in train_loader:
            optimizer.zero_grad()
            y = batch.y[:batch.batch_size]
            y_hat = model(batch.x, batch.edge_index.to(device))[:batch.batch_size]
            loss = F.cross_entropy(y_hat, y)
            loss.backward()
            optimizer.step()

            total_loss += float(loss) * batch.batch_size
            total_correct += int((y_hat.argmax(dim=-1) == y).sum())
            total_examples += batch.batch_size
            pbar.update(batch.batch_size)
        pbar.close()

        return total_loss / total_examples, total_correct / total_examples

    @torch.no_grad()
    def test():
        model.eval()
        y_hat = model.inference(data.x, subgraph_loader).argmax(dim=-1)
        y = data.y.to(y_hat.device)

        accs = []
        for mask in [data.train_mask, data.val_mask, data.test_mask]:
            accs.append(int((y_hat[mask] == y[mask]).sum()) / int(mask.sum()))
        return accs

    times = []
    for epoch in range(1, epochs + 1):
        start = time.time()
        loss, acc = train(epoch)
        print(f'Epoch {epoch:02d}, Loss: {loss:.4f}, Approx. Train: {acc:.4f}')
        train_acc, val_acc, test_acc = test()
        print(f'Epoch: {epoch:02d}, Train: {train_acc:.4f}, Val: {val_acc:.4f}, '
              f'Test: {test_acc:.4f}')
        times.append(time.time() - start)
    print(f"Median time per epoch: {torch.tensor(times).median():.4f}s")
    return dict(loss=loss, approx_train_acc=acc, train_acc=train_acc, val_acc=val_acc,
                test_acc=test_acc)


# Back in CI (issue 22): the p2 hang parked here (rank 1 blocked at the start of epoch 2) did not
# recur in 48 repeated p2 runs (docs/reliability.md); every gnnorch wait is now bounded and a
# deadline dumps every rank's and loader worker's stacks (test_corpus._dump_stacks).
CASE = Case(
    name="reddit",
    source=f"examples/reddit.py @ {PYG_REV}",
    train=train,
    make_args=make_args,
    metrics={"test_acc": acc(0.0111), "val_acc": acc(0.0103), "loss": loss(0.0394)},
    doc=("Vanilla over seeds 0-9 (measure_noise.py --seeds 10, mean +- sd): test_acc 0.944 +- "
         "0.011, val_acc 0.947 +- 0.010, loss 0.321 +- 0.039. SAGEConv stack + NeighborLoader "
         "(2 persistent workers) training; layer-wise inference over a [-1] subgraph loader "
         "with x/y deleted from its data."),
)
