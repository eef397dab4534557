"""User idioms around PyG training loops, under vanilla PyG and each runtime mode.

Each idiom is a short training function written the way PyG users write them (an LR schedule
sized by ``len(loader)``, gradient accumulation, ``torch.autocast``, learnt ``data.x``, an
Embedding looked up by ``batch.n_id``, ``torch.func.functional_call``, an ensemble or a sweep
of models on one loader, link prediction with binary / triplet negatives, a gradient penalty,
input saliency, ``torch.inference_mode()`` evaluation, ...), on the bundled Cora. The battery
runs each under vanilla PyG and under ``gnnorch.Runtime`` in each mode and prints one JSON line
per run plus a table of the runs that raised where vanilla did not. Metrics are single-seed:
compare them across modes by eye or with ``--seeds``; the corpus (`tests/pyg_examples`) holds
the measured tolerances. Every bug this battery found has a test of its own (CHANGELOG,
session 12: the cache with a cast ``batch.x``, learnt features, ``functional_call`` and two
models on one loader; the device path (on CUDA) with learnt features; rewrites under
autocast).

    .venv/bin/python scripts/idiom_battery.py            # every idiom, every mode (~11 min)
    .venv/bin/python scripts/idiom_battery.py functional sweep --modes vanilla cache
"""
from __future__ import annotations

import argparse
import json
import time
import traceback
import warnings

import torch
import torch.nn.functional as F

#: runtime options per mode (``vanilla``: the function called directly)
MODES = {"vanilla": None, "default": {}, "device": {"data_path": "device"},
         "p2": {"processes": 2}, "cache": {"cache": True},
         "device_cache": {"cache": True, "data_path": "device"}}


def cora():
    """The bundled Cora with PyG's NormalizeFeatures."""
    import torch_geometric.transforms as T

    from gnnorch.datasets import load_cora

    return T.NormalizeFeatures()(load_cora())


def _sage(cin, cout, hidden=64):
    from torch_geometric.nn import GraphSAGE
    return GraphSAGE(cin, hidden, 2, cout, dropout=0.3)


def _evaluate(model, data, loader_kwargs=None, use_embedding=None):
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=256,
                            input_nodes=data.test_mask, **(loader_kwargs or {}))
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in loader:
            x = batch.x if use_embedding is None else use_embedding(batch.n_id)
            out = model(x, batch.edge_index)[:batch.batch_size]
            correct += int((out.argmax(-1) == batch.y[:batch.batch_size]).sum())
            total += batch.batch_size
    return correct / total, total


def onecycle(data, epochs=8):
    """OneCycleLR sized by len(train_loader); tqdm(total=len(loader))."""
    from torch_geometric.loader import NeighborLoader
    from tqdm import tqdm
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01, epochs=epochs,
                                                steps_per_epoch=len(loader))
    for epoch in range(epochs):
        model.train()
        pbar = tqdm(total=len(loader), disable=True)
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
            sched.step()
            pbar.update(1)
        pbar.close()
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss), test_acc=acc, total=total)


def accumulate(data, epochs=8):
    """Gradient accumulation: step every 3 batches, and at the epoch's end."""
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=16,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        opt.zero_grad()
        for i, batch in enumerate(loader):
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size]) / 3
            loss.backward()
            if (i + 1) % 3 == 0:
                opt.step()
                opt.zero_grad()
        opt.step()
        opt.zero_grad()
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss) * 3, test_acc=acc, total=total)


def autocast_bf16(data, epochs=8):
    """torch.autocast on the CPU with bfloat16."""
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                loss = F.cross_entropy(out.float(), batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss), test_acc=acc, total=total)


def embedding_ids(data, epochs=8):
    """Featureless: a learnt Embedding looked up by batch.n_id (x never used)."""
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    emb = torch.nn.Embedding(data.num_nodes, 32)
    model = _sage(32, 7)
    opt = torch.optim.Adam(list(model.parameters()) + list(emb.parameters()), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(emb(batch.n_id), batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    acc, total = _evaluate(model, data, use_embedding=emb)
    return dict(loss=float(loss), test_acc=acc, total=total)


def input_id_labels(data, epochs=8):
    """Labels looked up from a separate tensor through batch.input_id; edge weights via e_id."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GCN
    train_idx = data.train_mask.nonzero().view(-1)
    labels = data.y[train_idx].clone()
    data2 = data.clone()
    del data2.y
    g = torch.Generator().manual_seed(3)
    weights = torch.rand(data.num_edges, generator=g)
    loader = NeighborLoader(data2, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=train_idx, shuffle=True)
    model = GCN(data.num_features, 64, 2, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    seen = 0
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            ew = weights[batch.e_id]
            out = model(batch.x, batch.edge_index, edge_weight=ew)[:batch.batch_size]
            loss = F.cross_entropy(out, labels[batch.input_id])
            loss.backward()
            opt.step()
            seen += batch.input_id.numel()
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index, edge_weight=weights).argmax(-1)
    acc = float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())
    return dict(loss=float(loss), test_acc=acc, seen=seen)


def compiled_sampled(data, epochs=6):
    """torch.compile(model, dynamic=True) trained on NeighborLoader batches."""
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=64,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7)
    cmodel = torch.compile(model, dynamic=True)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = cmodel(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss), test_acc=acc, total=total)


def double_precision(data, epochs=8):
    """model.double() and x.double() inside the loop."""
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7).double()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x.double(), batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    model.float()
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss), test_acc=acc, total=total)


def early_break(data, epochs=8):
    """Training stops after 3 batches in every epoch (a quick-debug idiom) and clip_grad_norm_."""
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=16,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    steps = 0
    for epoch in range(epochs):
        model.train()
        for i, batch in enumerate(loader):
            if i == 3:
                break
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            steps += 1
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss), test_acc=acc, total=total, steps=steps)


def state_dict_roundtrip(data, epochs=8):
    """Best-model checkpointing with state_dict / load_state_dict and a validation loop."""
    import copy
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    best, best_state = -1.0, None
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
        val, _ = _evaluate(model, data)
        if val > best:
            best, best_state = val, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss), test_acc=acc, total=total)


def sparse_tensor_batches(data, epochs=8):
    """NeighborLoader with transform=ToSparseTensor(): the model is fed batch.adj_t."""
    import torch_geometric.transforms as T
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True,
                            transform=T.ToSparseTensor())
    model = _sage(data.num_features, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.adj_t)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss), test_acc=acc, total=total)


def edge_index_type(data, epochs=8):
    """batch.edge_index turned into PyG's EdgeIndex and sorted by column before the model."""
    from torch_geometric import EdgeIndex
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            ei = EdgeIndex(batch.edge_index, sparse_size=(batch.num_nodes, batch.num_nodes))
            ei, _ = ei.sort_by('col')
            out = model(batch.x, ei)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss), test_acc=acc, total=total)


def loader_per_epoch(data, epochs=8):
    """A new NeighborLoader built at the start of every epoch."""
    from torch_geometric.loader import NeighborLoader
    model = _sage(data.num_features, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                                input_nodes=data.train_mask, shuffle=True)
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss), test_acc=acc, total=total)


def sweep(data, epochs=5, only=None):
    """A hyper-parameter sweep: three models trained one after the other on one loader."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GCN
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    res = {}
    for i, (kind, lr) in enumerate([("sage", 0.01), ("gcn", 0.01), ("sage3", 0.005)]):
        if only is not None and i != only:
            continue
        if kind == "sage":
            model = _sage(data.num_features, 7)
        elif kind == "gcn":
            model = GCN(data.num_features, 64, 2, 7)
        else:
            from torch_geometric.nn import GraphSAGE
            model = GraphSAGE(data.num_features, 32, 2, 7)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        for epoch in range(epochs):
            model.train()
            for batch in loader:
                opt.zero_grad()
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                loss.backward()
                opt.step()
        res[f"acc{i}"], _ = _evaluate(model, data)
        res[f"loss{i}"] = float(loss)
    return res


def featureless(data, epochs=8):
    """Data without x (num_nodes only); an Embedding by n_id; y looked up by n_id."""
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader
    d = Data(edge_index=data.edge_index, num_nodes=data.num_nodes)
    loader = NeighborLoader(d, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask.nonzero().view(-1), shuffle=True)
    emb = torch.nn.Embedding(data.num_nodes, 32)
    model = _sage(32, 7)
    opt = torch.optim.Adam(list(model.parameters()) + list(emb.parameters()), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(emb(batch.n_id), batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, data.y[batch.n_id[:batch.batch_size]])
            loss.backward()
            opt.step()
    return dict(loss=float(loss))


def learnable_x(data, epochs=8):
    """data.x is a Parameter trained with the model (PyG gathers it with autograd)."""
    from torch_geometric.loader import NeighborLoader
    d = data.clone()
    d.x = torch.nn.Parameter(torch.randn(data.num_nodes, 16) * 0.1)
    loader = NeighborLoader(d, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(16, 7)
    opt = torch.optim.Adam(list(model.parameters()) + [d.x], lr=0.01)
    before = d.x.detach().clone()
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    moved = float((d.x.detach() - before).abs().sum())
    return dict(loss=float(loss), x_moved=moved)


def half_features(data, epochs=8):
    """bfloat16 features in data.x and a bfloat16 model."""
    from torch_geometric.loader import NeighborLoader
    d = data.clone()
    d.x = d.x.to(torch.bfloat16)
    loader = NeighborLoader(d, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7).to(torch.bfloat16)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out.float(), batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    model.float()
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss), test_acc=acc)


def train_acc_on_train_loader(data, epochs=8):
    """Train accuracy measured over the *training* loader under torch.no_grad() / eval()."""
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for batch in loader:
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                correct += int((out.argmax(-1) == batch.y[:batch.batch_size]).sum())
                total += batch.batch_size
    acc, _ = _evaluate(model, data)
    return dict(loss=float(loss), train_acc=correct / total, train_total=total, test_acc=acc)


def _link_split(data):
    import torch_geometric.transforms as T
    t = T.RandomLinkSplit(num_val=0.05, num_test=0.1, is_undirected=True,
                          add_negative_train_samples=False)
    return t(data)


def link_binary(data, epochs=4, mode="binary"):
    """PyG's link_pred example with mini-batches: LinkNeighborLoader over RandomLinkSplit's
    train edges, binary negatives; AUC on the test split full-batch."""
    from sklearn.metrics import roc_auc_score
    from torch_geometric.loader import LinkNeighborLoader
    from torch_geometric.nn import GraphSAGE
    train_data, val_data, test_data = _link_split(data)
    if mode == "binary":
        loader = LinkNeighborLoader(train_data, num_neighbors=[10, 10], batch_size=64,
                                    edge_label_index=train_data.edge_label_index,
                                    edge_label=train_data.edge_label,
                                    neg_sampling=dict(mode="binary", amount=1), shuffle=True)
    else:
        loader = LinkNeighborLoader(train_data, num_neighbors=[10, 10], batch_size=64,
                                    edge_label_index=train_data.edge_label_index,
                                    neg_sampling=dict(mode="triplet", amount=1), shuffle=True)
    model = GraphSAGE(data.num_features, 64, 2, 64)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    n_ex = 0
    for epoch in range(epochs):
        model.train()
        ep_losses = []
        for batch in loader:
            opt.zero_grad()
            h = model(batch.x, batch.edge_index)
            if mode == "binary":
                src, dst = batch.edge_label_index
                pred = (h[src] * h[dst]).sum(-1)
                loss = F.binary_cross_entropy_with_logits(pred, batch.edge_label)
                n_ex += batch.edge_label.numel()
            else:
                hs, hd = h[batch.src_index], h[batch.dst_pos_index]
                hn = h[batch.dst_neg_index]
                pos = (hs * hd).sum(-1)
                neg = (hs * hn).sum(-1)
                loss = F.softplus(neg - pos).mean()
                n_ex += batch.src_index.numel()
            loss.backward()
            opt.step()
            ep_losses.append(float(loss))
    model.eval()
    with torch.no_grad():
        h = model(test_data.x, test_data.edge_index)
        src, dst = test_data.edge_label_index
        pred = (h[src] * h[dst]).sum(-1).sigmoid()
    auc = roc_auc_score(test_data.edge_label.numpy(), pred.numpy())
    return dict(loss=float(loss), epoch_loss=sum(ep_losses) / len(ep_losses), test_auc=auc,
                examples=n_ex)


def link_triplet(data, epochs=4):
    """`link_binary` with triplet negatives (src_index / dst_pos_index / dst_neg_index)."""
    return link_binary(data, epochs, mode="triplet")


def link_eval_loader(data, epochs=4):
    """Validation through a LinkNeighborLoader (shuffle=False) whose predictions are
    concatenated in order and scored against edge_label."""
    from sklearn.metrics import roc_auc_score
    from torch_geometric.loader import LinkNeighborLoader
    from torch_geometric.nn import GraphSAGE
    train_data, val_data, test_data = _link_split(data)
    loader = LinkNeighborLoader(train_data, num_neighbors=[10, 10], batch_size=64,
                                edge_label_index=train_data.edge_label_index,
                                edge_label=train_data.edge_label,
                                neg_sampling_ratio=1.0, shuffle=True)
    val_loader = LinkNeighborLoader(test_data, num_neighbors=[10, 10], batch_size=128,
                                    edge_label_index=test_data.edge_label_index,
                                    edge_label=test_data.edge_label, shuffle=False)
    model = GraphSAGE(data.num_features, 64, 2, 64)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            h = model(batch.x, batch.edge_index)
            src, dst = batch.edge_label_index
            loss = F.binary_cross_entropy_with_logits((h[src] * h[dst]).sum(-1),
                                                      batch.edge_label)
            loss.backward()
            opt.step()
    model.eval()
    preds, labels = [], []
    with torch.no_grad():
        for batch in val_loader:
            h = model(batch.x, batch.edge_index)
            src, dst = batch.edge_label_index
            preds.append((h[src] * h[dst]).sum(-1).sigmoid())
            labels.append(batch.edge_label)
    pred, label = torch.cat(preds), torch.cat(labels)
    same_order = bool(torch.equal(label, test_data.edge_label))
    return dict(loss=float(loss), test_auc=roc_auc_score(label.numpy(), pred.numpy()),
                n=label.numel(), same_order=same_order)


def seeded_inside(data, epochs=6):
    """torch.manual_seed(42) at the top of the function (common in scripts)."""
    torch.manual_seed(42)
    return onecycle(data, epochs)


def deterministic(data, epochs=6):
    torch.use_deterministic_algorithms(True)
    try:
        return onecycle(data, epochs)
    finally:
        torch.use_deterministic_algorithms(False)


def return_model(data, epochs=6):
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            opt.step()
    return model


def hetero_to_hetero(data, epochs=4):
    """A HeteroData NeighborLoader with a to_hetero SAGE model (PyG's to_hetero_mag shape)."""
    from torch_geometric.data import HeteroData
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import SAGEConv, to_hetero
    import torch_geometric.transforms as T
    h = HeteroData()
    n = data.num_nodes
    h['paper'].x = data.x
    h['paper'].y = data.y
    h['paper'].train_mask = data.train_mask
    h['paper'].test_mask = data.test_mask
    g = torch.Generator().manual_seed(0)
    h['author'].x = torch.randn(500, 16, generator=g)
    h['paper', 'cites', 'paper'].edge_index = data.edge_index
    writes = torch.stack([torch.randint(0, 500, (3000,), generator=g),
                          torch.randint(0, n, (3000,), generator=g)])
    h['author', 'writes', 'paper'].edge_index = writes
    h = T.ToUndirected()(h)

    class GNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = SAGEConv((-1, -1), 32)
            self.c2 = SAGEConv((-1, -1), 7)

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    model = to_hetero(GNN(), h.metadata(), aggr='sum')
    loader = NeighborLoader(h, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=('paper', h['paper'].train_mask), shuffle=True)
    with torch.no_grad():
        b = next(iter(loader))
        model(b.x_dict, b.edge_index_dict)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x_dict, batch.edge_index_dict)['paper'][:batch['paper'].batch_size]
            loss = F.cross_entropy(out, batch['paper'].y[:batch['paper'].batch_size])
            loss.backward()
            opt.step()
    test_loader = NeighborLoader(h, num_neighbors=[10, 10], batch_size=256,
                                 input_nodes=('paper', h['paper'].test_mask))
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in test_loader:
            bs = batch['paper'].batch_size
            out = model(batch.x_dict, batch.edge_index_dict)['paper'][:bs]
            correct += int((out.argmax(-1) == batch['paper'].y[:bs]).sum())
            total += bs
    return dict(loss=float(loss), test_acc=correct / total, total=total)


def grad_penalty(data, epochs=4):
    """A gradient penalty: torch.autograd.grad(create_graph=True) w.r.t. the input rows, then
    backward through it (double backward through the layers)."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GCN
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = GCN(data.num_features, 32, 2, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    pens = []
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            x = batch.x.clone().requires_grad_(True)
            out = model(x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            g, = torch.autograd.grad(loss, x, create_graph=True)
            pen = g.pow(2).sum()
            (loss + 0.1 * pen).backward()
            opt.step()
            pens.append(float(pen))
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss), pen=sum(pens) / len(pens), test_acc=acc)


def saliency(data, epochs=4):
    """Input-gradient saliency of the seeds at evaluation (Captum-style)."""
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            F.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size],
                            batch.y[:batch.batch_size]).backward()
            opt.step()
    model.eval()
    test_loader = NeighborLoader(data, num_neighbors=[-1, -1], batch_size=64,
                                 input_nodes=data.test_mask)
    batch = next(iter(test_loader))
    x = batch.x.clone().requires_grad_(True)
    out = model(x, batch.edge_index)[:batch.batch_size]
    out.gather(1, out.argmax(1, keepdim=True)).sum().backward()
    from torch_geometric.utils import k_hop_subgraph
    reach, _, _, _ = k_hop_subgraph(torch.arange(batch.batch_size), 2, batch.edge_index,
                                    num_nodes=batch.num_nodes)
    outside = torch.ones(batch.num_nodes, dtype=torch.bool)
    outside[reach] = False
    return dict(grad_rows=int((x.grad.abs().sum(1) > 0).sum()),
                reach=int(reach.numel()), outside_grad=float(x.grad[outside].abs().sum()))


def functional(data, epochs=4):
    """torch.func.functional_call with a parameter dict (meta-learning style)."""
    from torch.func import functional_call
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = _sage(data.num_features, 7)
    params = {k: v.detach().clone().requires_grad_(True) for k, v in model.named_parameters()}
    opt = torch.optim.Adam(params.values(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = functional_call(model, params, (batch.x, batch.edge_index))[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    model.load_state_dict({k: v.detach() for k, v in params.items()}, strict=False)
    acc, total = _evaluate(model, data)
    return dict(loss=float(loss), test_acc=acc)


def two_models_one_loader(data, epochs=8):
    """Two models (an ensemble) trained on the same batches of one loader."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GCN
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    a = _sage(data.num_features, 7)
    b = GCN(data.num_features, 64, 2, 7)
    opt = torch.optim.Adam(list(a.parameters()) + list(b.parameters()), lr=0.01)
    for epoch in range(epochs):
        a.train(); b.train()
        for batch in loader:
            opt.zero_grad()
            y = batch.y[:batch.batch_size]
            la = F.cross_entropy(a(batch.x, batch.edge_index)[:batch.batch_size], y)
            lb = F.cross_entropy(b(batch.x, batch.edge_index)[:batch.batch_size], y)
            (la + lb).backward()
            opt.step()
    acc_a, _ = _evaluate(a, data)
    acc_b, _ = _evaluate(b, data)
    return dict(loss_a=float(la), loss_b=float(lb), acc_a=acc_a, acc_b=acc_b)


def two_models_sequential_cache(data, epochs=8):
    """Model A trained for some epochs, then model B on the same loader."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GCN
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    res = {}
    models = (("a", _sage(data.num_features, 7)), ("b", GCN(data.num_features, 64, 2, 7)))
    for name, model in models:
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        for epoch in range(epochs):
            model.train()
            for batch in loader:
                opt.zero_grad()
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                loss = F.cross_entropy(out, batch.y[:batch.batch_size])
                loss.backward()
                opt.step()
        res[f"acc_{name}"], _ = _evaluate(model, data)
        res[f"loss_{name}"] = float(loss)
    return res


def inference_mode_eval(data, epochs=4):
    """Evaluation under torch.inference_mode() (newer scripts' idiom)."""
    from torch_geometric.loader import NeighborLoader
    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    test_loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=128,
                                 input_nodes=data.test_mask)
    model = _sage(data.num_features, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
        model.eval()
        correct = total = 0
        with torch.inference_mode():
            for batch in test_loader:
                out = model(batch.x, batch.edge_index)[:batch.batch_size]
                correct += int((out.argmax(-1) == batch.y[:batch.batch_size]).sum())
                total += batch.batch_size
    return dict(loss=float(loss), test_acc=correct / total)


def gat_attention(data, epochs=4):
    """GATConv returning attention weights in the forward (attention logging while training)."""
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GATConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = GATConv(data.num_features, 8, heads=4)
            self.c2 = GATConv(32, 7, heads=1)

        def forward(self, x, edge_index):
            x, (ei, att) = self.c1(x, edge_index, return_attention_weights=True)
            x = F.elu(x)
            return self.c2(x, edge_index), att

    loader = NeighborLoader(data, num_neighbors=[10, 10], batch_size=32,
                            input_nodes=data.train_mask, shuffle=True)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    att_sum = 0.0
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out, att = model(batch.x, batch.edge_index)
            loss = F.cross_entropy(out[:batch.batch_size], batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
            att_sum += float(att.sum()) / batch.num_nodes
    return dict(loss=float(loss), att_per_node=att_sum)


IDIOMS = {name: globals()[name] for name in (
    'onecycle', 'accumulate', 'autocast_bf16', 'embedding_ids', 'input_id_labels',
    'compiled_sampled', 'double_precision', 'early_break', 'state_dict_roundtrip',
    'sparse_tensor_batches', 'edge_index_type', 'loader_per_epoch', 'sweep', 'featureless',
    'learnable_x', 'half_features', 'train_acc_on_train_loader', 'link_binary',
    'link_triplet', 'link_eval_loader', 'seeded_inside', 'deterministic',
    'hetero_to_hetero', 'grad_penalty', 'saliency', 'functional', 'two_models_one_loader',
    'two_models_sequential_cache', 'inference_mode_eval', 'gat_attention',
)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*",
                        help="idioms, here and in idiom_knobs.py (default: all)")
    parser.add_argument("--modes", nargs="*", default=list(MODES), choices=list(MODES))
    parser.add_argument("--seeds", type=int, default=1)
    opts = parser.parse_args()
    import gnnorch
    from idiom_knobs import IDIOMS as KNOBS  # scripts/ is on sys.path when run as a script

    idioms = {**IDIOMS, **KNOBS}
    names = opts.names or list(idioms)
    unknown = [n for n in names if n not in idioms]
    if unknown:
        parser.error(f"unknown idiom(s) {unknown}; known: {sorted(idioms)}")
    raised = []
    for name in names:
        fn = idioms[name]
        for mode in opts.modes:
            for seed in range(opts.seeds):
                torch.manual_seed(seed)
                data = cora()
                start = time.perf_counter()
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        if MODES[mode] is None:
                            result = fn(data)
                        else:
                            result = gnnorch.Runtime(fn, **MODES[mode])(data)
                    out = {k: round(float(v), 4) for k, v in result.items()}
                except Exception as exc:  # noqa: BLE001 - reported, the battery goes on
                    traceback.print_exc()
                    out = f"{type(exc).__name__}: {exc}"
                    raised.append((name, mode, seed, out))
                print(json.dumps(dict(idiom=name, mode=mode, seed=seed,
                                      seconds=round(time.perf_counter() - start, 1),
                                      result=out)), flush=True)
    vanilla_failed = {(n, s) for n, m, s, _ in raised if m == "vanilla"}
    print("\n| idiom | mode | seed | raised (vanilla did not) |\n|---|---|---|---|")
    for name, mode, seed, why in raised:
        if mode != "vanilla" and (name, seed) not in vanilla_failed:
            print(f"| {name} | {mode} | {seed} | {why[:160]} |")


if __name__ == "__main__":
    main()
