"""GraphSAGE on Cora written the way PyG users write for a GPU, under gnnorch.

`train` is a plain PyG function: it picks CUDA when there is one, moves its model there, and
moves every batch with ``batch.to(device)``. Nothing in it knows gnnorch. Under
``gnnorch.Runtime(train, device="auto")`` on a machine with a GPU, the runtime's GPU data path
serves its training loader: the graph and the features go to the GPU when they fit a budget,
the batches are sampled and gathered there by a thread that draws batch k+1 while batch k
trains, and ``batch.to(device)`` of such a batch copies nothing. The summary printed at the end
says what went where (and why), as does ``runtime.last_run.stats[0]["device"]``.

    python examples/train_gpu.py                      # the GPU when one is visible, else the CPU
    python examples/train_gpu.py --data-path device   # no GPU: the same data path, the CPU as
                                                      # its device (what the test suite runs)
"""
import argparse

import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch.datasets import load_cora


@torch.no_grad()
def evaluate(model, loader, device):
    model.eval()
    correct = total = 0
    for batch in loader:
        batch = batch.to(device)
        pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(dim=-1)
        correct += int((pred == batch.y[:batch.batch_size]).sum())
        total += batch.batch_size
    return correct / total


def train(data, epochs=20, batch_size=64, lr=0.01, seed=0):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    train_loader = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=data.train_mask,
                                  batch_size=batch_size, shuffle=True)
    test_loader = NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=data.test_mask,
                                 batch_size=512)
    model = GraphSAGE(data.num_features, 64, num_layers=2, out_channels=int(data.y.max()) + 1,
                      dropout=0.5).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=5e-4)
    for epoch in range(1, epochs + 1):
        model.train()
        for batch in train_loader:
            batch = batch.to(device)
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
        if epoch % 5 == 0 or epoch == epochs:
            print(f"epoch {epoch:3d}  loss {loss.item():.4f}")
    accuracy = evaluate(model, test_loader, device)
    print(f"test accuracy: {accuracy:.4f}")
    return accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--data-path", default="auto", choices=("auto", "device", "host"),
                        help="gnnorch's data_path: 'auto' serves CUDA runs; 'device' runs the "
                             "same path with the CPU as its device when there is no GPU")
    args = parser.parse_args()
    runtime = gnnorch.Runtime(train, device="auto", data_path=args.data_path)
    runtime(load_cora(), epochs=args.epochs)
    for loader in runtime.last_run.stats[0]["device"]["loaders"]:
        if not loader["served"]:
            print(f"loader {loader['key']} ({loader['role']}): left to PyG: {loader['reason']}")
            continue
        features = {"gpu": f"on {loader['device']}", "pinned": "in pinned host memory",
                    "split": f"hottest rows on {loader['device']}, the rest on the host"}
        print(f"loader {loader['key']} ({loader['role']}): sampled on "
              f"{loader['device'] if loader['samples_on_device'] else 'the host'}, features "
              f"{features.get(loader['features'], 'on the host')}")


if __name__ == "__main__":
    main()
