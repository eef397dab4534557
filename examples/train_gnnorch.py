"""GraphSAGE on Cora with PyG's NeighborLoader: a plain PyTorch Geometric training script.

examples/train_gnnorch.py is this file plus exactly two lines.
"""
import gnnorch
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

from gnnorch.datasets import load_cora


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    correct = total = 0
    for batch in loader:
        pred = model(batch.x, batch.edge_index)[:batch.batch_size].argmax(dim=-1)
        correct += int((pred == batch.y[:batch.batch_size]).sum())
        total += batch.batch_size
    return correct / total


def train(data, epochs=20, batch_size=32, lr=0.01, seed=0):
    torch.manual_seed(seed)
    train_loader = NeighborLoader(data, num_neighbors=[10, 10], input_nodes=data.train_mask,
                                  batch_size=batch_size, shuffle=True)
    test_loader = NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=data.test_mask,
                                 batch_size=512)
    model = GraphSAGE(data.num_features, 64, num_layers=2, out_channels=int(data.y.max()) + 1,
                      dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=5e-4)
    for epoch in range(1, epochs + 1):
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
        if epoch % 5 == 0 or epoch == epochs:
            print(f"epoch {epoch:3d}  loss {loss.item():.4f}")
    accuracy = evaluate(model, test_loader)
    print(f"test accuracy: {accuracy:.4f}")
    return model


if __name__ == "__main__":
    data = load_cora()
    train = gnnorch.Runtime(train, processes=2)
    model = train(data, epochs=20)
