"""Loader and model knobs for `idiom_battery.py`: the less common settings PyG users turn.

Each idiom changes one thing the runtime intercepts, on the bundled Cora: the loader's knobs
(``replace=True``, a ``sampler=`` such as ``ImbalancedSampler``, ``drop_last``, the forms of
``input_nodes``, ``subgraph_type``, ``disjoint=True``, batch ``transform``s, persistent workers,
temporal and weighted sampling, the legacy ``NeighborSampler``, GraphSAINT), how the loader is
iterated (``itertools.islice``, two loaders zipped, one batch overfitted, a reset per fold),
the model (BatchNorm, ``jk='cat'``, GIN, PNA, GATv2 with edge features, RGCN, a user-written
``MessagePassing``, a ``HeteroConv``, a frozen first layer, two optimizers), the loss (over
every sampled node, multi-label, label reuse as input) and the data (messy edges, ``adj_t``,
in-place edits of ``batch.x``, the user's own edits of ``batch.edge_index``), lazy layers
initialised by a forward over one batch, and ``clip_grad_norm_``. Metrics that show
whether the knob was honoured (the class balance of the seeds drawn, the batch and seed counts,
attributes gathered with the edges, ``data.x`` left unchanged) are returned beside the loss and
accuracy. ``disjoint_trees``, ``temporal_sampling`` and ``weighted_sampling`` need pyg-lib
(vanilla PyG raises without it).
"""
from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import Tensor


def _sage(cin, cout, hidden=64, **kwargs):
    from torch_geometric.nn import GraphSAGE
    return GraphSAGE(cin, hidden, 2, cout, dropout=0.3, **kwargs)


def _loader(data, **kwargs):
    from torch_geometric.loader import NeighborLoader
    kwargs.setdefault("num_neighbors", [10, 10])
    kwargs.setdefault("batch_size", 32)
    kwargs.setdefault("input_nodes", data.train_mask)
    if "sampler" not in kwargs:
        kwargs.setdefault("shuffle", True)
    return NeighborLoader(data, **kwargs)


def _fit(model, loader, epochs, forward=None, on_batch=None, on_epoch=None, train_mode=True):
    """The plain loop: cross-entropy on the seeds' rows, Adam, every batch of every epoch;
    `on_epoch(e)` before epoch e; `train_mode=False`: model.train() is never called."""
    forward = forward or (lambda m, b: m(b.x, b.edge_index))
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.01)
    loss = torch.tensor(float("nan"))
    for epoch in range(epochs):
        if on_epoch is not None:
            on_epoch(epoch)
        if train_mode:
            model.train()
        for batch in loader:
            if on_batch is not None:
                on_batch(batch)
            opt.zero_grad()
            out = forward(model, batch)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    return float(loss)


def _test_acc(model, data, forward=None, **loader_kwargs):
    forward = forward or (lambda m, b: m(b.x, b.edge_index))
    loader = _loader(data, batch_size=256, input_nodes=data.test_mask, shuffle=False,
                     **loader_kwargs)
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for batch in loader:
            out = forward(model, batch)[:batch.batch_size]
            correct += int((out.argmax(-1) == batch.y[:batch.batch_size]).sum())
            total += batch.batch_size
    return correct / total


def _sage_run(data, epochs=6, model=None, fanout=(10, 10), forward=None, test_kwargs=None,
              **loader_kwargs):
    model = model or _sage(data.num_features, 7)
    loss = _fit(model, _loader(data, num_neighbors=list(fanout), **loader_kwargs), epochs,
                forward)
    return dict(loss=loss, test_acc=_test_acc(model, data, forward, num_neighbors=list(fanout),
                                              **(test_kwargs or {})))


# --- loader knobs -----------------------------------------------------------------------------

def replace_true(data):
    """NeighborLoader(replace=True): neighbours drawn with replacement."""
    return _sage_run(data, replace=True)


def imbalanced_sampler(data, epochs=4):
    """sampler=ImbalancedSampler over an imbalanced seed set: the seeds drawn are class-balanced.

    ``balance`` is the rarest class's share of the seeds drawn over the most common one's:
    near 1 when the sampler is honoured, about 0.23 when the seeds are drawn uniformly."""
    from torch_geometric.loader import ImbalancedSampler
    seeds = (~data.test_mask).nonzero().view(-1)
    sampler = ImbalancedSampler(data, input_nodes=seeds)
    counts = torch.zeros(7)

    def count(batch):
        counts.add_(torch.bincount(batch.y[:batch.batch_size], minlength=7).float())

    model = _sage(data.num_features, 7)
    loader = _loader(data, input_nodes=seeds, sampler=sampler, batch_size=64)
    loss = _fit(model, loader, epochs, on_batch=count)
    return dict(loss=loss, test_acc=_test_acc(model, data),
                balance=float(counts.min() / counts.max()), seeds=float(counts.sum()))


def drop_last(data, epochs=4):
    """drop_last=True with a batch size that does not divide the 140 seeds."""
    batches = []
    model = _sage(data.num_features, 7)
    loader = _loader(data, batch_size=50, drop_last=True)
    loss = _fit(model, loader, epochs, on_batch=lambda b: batches.append(b.batch_size))
    return dict(loss=loss, test_acc=_test_acc(model, data), batches=len(batches),
                seeds=sum(batches), len_loader=len(loader))


def index_input_nodes(data):
    """input_nodes as an index tensor, in a fixed order (shuffle=False)."""
    return _sage_run(data, input_nodes=data.train_mask.nonzero().view(-1), shuffle=False)


def induced_subgraph(data):
    """subgraph_type='induced': every edge among the sampled nodes."""
    return _sage_run(data, subgraph_type="induced")


def disjoint_trees(data, epochs=4):
    """disjoint=True: one tree per seed; batch.batch says which seed each node belongs to."""
    from torch_geometric.nn import global_mean_pool
    from torch_geometric.nn import GCNConv

    class TreeNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GCNConv(data.num_features, 64), GCNConv(64, 64)
            self.head = torch.nn.Linear(128, 7)

        def forward(self, x, edge_index, tree, size):
            h = self.c2(self.c1(x, edge_index).relu(), edge_index).relu()
            return self.head(torch.cat([h[:size], global_mean_pool(h, tree, size)], -1))

    def forward(m, b):
        return m(b.x, b.edge_index, b.batch, b.batch_size)

    return _sage_run(data, epochs, model=TreeNet(), forward=forward, disjoint=True,
                     test_kwargs=dict(disjoint=True))


def batch_transform(data):
    """A transform on every batch: T.AddSelfLoops() (a new edge set the layers see)."""
    import torch_geometric.transforms as T
    return _sage_run(data, transform=T.AddSelfLoops())


def batch_virtual_node(data):
    """transform=T.VirtualNode(): one more node, wired to and from every node of the batch
    (edges that cross every hop)."""
    import torch_geometric.transforms as T
    return _sage_run(data, transform=T.VirtualNode())


def persistent_workers(data, epochs=3):
    """num_workers=2 with persistent_workers=True."""
    return _sage_run(data, epochs, num_workers=2, persistent_workers=True)


# --- how the loader is iterated ---------------------------------------------------------------

def islice_epochs(data, epochs=6):
    """Each epoch takes only the first three batches, through itertools.islice."""
    model = _sage(data.num_features, 7)
    loader = _loader(data, batch_size=16)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    steps = 0
    for epoch in range(epochs):
        model.train()
        for batch in itertools.islice(loader, 3):
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
            steps += 1
    return dict(loss=float(loss), test_acc=_test_acc(model, data), steps=steps)


def zipped_loaders(data, epochs=5):
    """Two loaders zipped: labelled seeds and an unlabelled set with a smoothness penalty."""
    model = _sage(data.num_features, 7)
    labelled = _loader(data, batch_size=16)
    unlabelled = _loader(data, batch_size=64, input_nodes=data.test_mask)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for a, b in zip(labelled, unlabelled):
            opt.zero_grad()
            out = model(a.x, a.edge_index)[:a.batch_size]
            ent = model(b.x, b.edge_index)[:b.batch_size].softmax(-1)
            loss = F.cross_entropy(out, a.y[:a.batch_size]) \
                - 0.1 * (ent * ent.clamp_min(1e-9).log()).sum(-1).mean()
            loss.backward()
            opt.step()
    return dict(loss=float(loss), test_acc=_test_acc(model, data))


def overfit_one_batch(data, steps=60):
    """The debugging idiom: next(iter(loader)) once, then many steps on that one batch."""
    model = _sage(data.num_features, 7)
    batch = next(iter(_loader(data, batch_size=64)))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        loss = F.cross_entropy(out, batch.y[:batch.batch_size])
        loss.backward()
        opt.step()
    return dict(loss=float(loss), test_acc=_test_acc(model, data))


# --- models and losses ------------------------------------------------------------------------

def batch_norm(data):
    """GraphSAGE(norm='batch_norm'): statistics over every row the layer sees."""
    return _sage_run(data, model=_sage(data.num_features, 7, norm="batch_norm"))


def jk_cat(data):
    """GraphSAGE(jk='cat'): the last layer reads every layer's output."""
    return _sage_run(data, model=_sage(data.num_features, 7, jk="cat"))


def gin_three_hops(data):
    """BasicGNN GIN, three layers on a [10, 5, 5] fanout."""
    from torch_geometric.nn import GIN
    return _sage_run(data, model=GIN(data.num_features, 64, 3, 7), fanout=(10, 5, 5))


def pna(data, epochs=4):
    """BasicGNN PNA with the degree histogram PyG's example computes."""
    from torch_geometric.nn import PNA
    from torch_geometric.utils import degree
    d = degree(data.edge_index[1], data.num_nodes, dtype=torch.long)
    deg = torch.bincount(d)
    model = PNA(data.num_features, 32, 2, 7, aggregators=["mean", "min", "max", "std"],
                scalers=["identity", "amplification", "attenuation"], deg=deg)
    return _sage_run(data, epochs, model=model)


def gatv2_edge_attr(data, epochs=5):
    """GATv2Conv with edge_dim: batch.edge_attr gathered with the sampled edges."""
    from torch_geometric.nn import GATv2Conv
    data = data.clone()
    data.edge_attr = torch.rand(data.num_edges, 4, generator=torch.Generator().manual_seed(1))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = GATv2Conv(data.num_features, 16, heads=4, edge_dim=4)
            self.c2 = GATv2Conv(64, 7, heads=1, edge_dim=4)

        def forward(self, x, edge_index, edge_attr):
            return self.c2(self.c1(x, edge_index, edge_attr).relu(), edge_index, edge_attr)

    return _sage_run(data, epochs, model=Net(),
                     forward=lambda m, b: m(b.x, b.edge_index, b.edge_attr))


def custom_message_passing(data):
    """A GCN layer written from scratch (PyG's 'Creating Message Passing Networks' tutorial):
    self-loops and degree normalisation computed inside forward over x.size(0) nodes."""
    from torch_geometric.nn import MessagePassing
    from torch_geometric.utils import add_self_loops, degree

    class ScratchGCN(MessagePassing):
        def __init__(self, cin, cout):
            super().__init__(aggr="add")
            self.lin = torch.nn.Linear(cin, cout, bias=False)
            self.bias = torch.nn.Parameter(torch.zeros(cout))

        def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
            edge_index, _ = add_self_loops(edge_index, num_nodes=x.size(0))
            x = self.lin(x)
            row, col = edge_index
            deg = degree(col, x.size(0), dtype=x.dtype)
            inv = deg.pow(-0.5)
            inv[inv == float("inf")] = 0
            norm = inv[row] * inv[col]
            return self.propagate(edge_index, x=x, norm=norm) + self.bias

        def message(self, x_j: Tensor, norm: Tensor) -> Tensor:
            return norm.view(-1, 1) * x_j

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = ScratchGCN(data.num_features, 64), ScratchGCN(64, 7)

        def forward(self, x, edge_index):
            return self.c2(F.dropout(self.c1(x, edge_index).relu(), 0.3, self.training),
                           edge_index)

    return _sage_run(data, model=Net())


def loss_on_every_node(data, epochs=6):
    """The loss over every sampled node with a label in the training mask (not only the
    seeds): rows the seeds do not need feed the loss."""
    model = _sage(data.num_features, 7)
    loader = _loader(data)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)
            mask = batch.train_mask
            loss = F.cross_entropy(out[mask], batch.y[mask])
            loss.backward()
            opt.step()
    return dict(loss=float(loss), test_acc=_test_acc(model, data))


def label_reuse(data, epochs=6):
    """OGB's label trick: the training labels of non-seed nodes, one-hot, appended to x."""
    data = data.clone()
    data.y_in = torch.where(data.train_mask, data.y, torch.full_like(data.y, 7))

    def forward(m, b):
        y_in = b.y_in.clone()
        y_in[:b.batch_size] = 7
        return m(torch.cat([b.x, F.one_hot(y_in, 8).float()], -1), b.edge_index)

    return _sage_run(data, epochs, model=_sage(data.num_features + 8, 7), forward=forward)


def frozen_first_layer(data, epochs=6):
    """Fine-tuning: after two epochs the first layer is frozen (requires_grad_(False))."""
    model = _sage(data.num_features, 7)

    def freeze(epoch):
        if epoch == 2:
            model.convs[0].requires_grad_(False)

    loss = _fit(model, _loader(data), epochs, on_epoch=freeze)
    return dict(loss=loss, test_acc=_test_acc(model, data))


def dropout_edge_on_batch(data):
    """torch_geometric.utils.dropout_edge on every training batch's edge_index."""
    from torch_geometric.utils import dropout_edge

    def forward(m, b):
        ei = dropout_edge(b.edge_index, p=0.3, training=m.training)[0]
        return m(b.x, ei)

    return _sage_run(data, forward=forward)


def skip_to_raw_features(data):
    """A head over the GNN output concatenated with the seeds' raw features."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gnn = _sage(data.num_features, 64)
            self.head = torch.nn.Linear(64 + data.num_features, 7)

        def forward(self, x, edge_index, size):
            return self.head(torch.cat([self.gnn(x, edge_index)[:size], x[:size]], -1))

    return _sage_run(data, model=Net(), forward=lambda m, b: m(b.x, b.edge_index, b.batch_size))


def two_optimizers(data, epochs=6):
    """Two optimizers: SGD for the convolutions, Adam for the rest (none in GraphSAGE: the
    last conv gets Adam), stepped in the same iteration."""
    model = _sage(data.num_features, 7)
    loader = _loader(data)
    sgd = torch.optim.SGD(model.convs[0].parameters(), lr=0.1, momentum=0.9)
    adam = torch.optim.Adam(model.convs[1].parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            sgd.zero_grad()
            adam.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            sgd.step()
            adam.step()
    return dict(loss=float(loss), test_acc=_test_acc(model, data))


def never_train_mode(data):
    """model.train() never called and the model left in eval() (dropout off throughout)."""
    model = _sage(data.num_features, 7).eval()
    loss = _fit(model, _loader(data), 6, train_mode=False)
    return dict(loss=loss, test_acc=_test_acc(model, data))


# --- data shapes, and batches the user edits ---------------------------------------------------

def all_nodes_input(data, epochs=3):
    """input_nodes=None: every node is a seed; the loss masked to the training seeds."""
    model = _sage(data.num_features, 7)
    loader = _loader(data, input_nodes=None, batch_size=256)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    seen = 0
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            mask = batch.train_mask[:batch.batch_size]
            loss = F.cross_entropy(out[mask], batch.y[:batch.batch_size][mask])
            loss.backward()
            opt.step()
            seen += batch.batch_size
    return dict(loss=float(loss), test_acc=_test_acc(model, data), seen=seen)


def full_neighbourhood(data):
    """num_neighbors=[-1, -1]: every neighbour on both hops."""
    return _sage_run(data, fanout=(-1, -1))


def batch_size_one(data, epochs=2):
    """batch_size=1: one seed per step (the degenerate end of the batch size)."""
    return _sage_run(data, epochs, batch_size=1)


def isolated_and_duplicate_edges(data):
    """A graph whose edges come shuffled, with duplicates, self-loops and isolated seeds."""
    g = torch.Generator().manual_seed(4)
    ei = data.edge_index
    keep = torch.rand(ei.size(1), generator=g) > 0.3       # some nodes lose every edge
    ei = ei[:, keep]
    dup = ei[:, torch.randint(0, ei.size(1), (500,), generator=g)]
    loops = torch.arange(0, data.num_nodes, 7).repeat(2, 1)
    ei = torch.cat([ei, dup, loops], 1)
    ei = ei[:, torch.randperm(ei.size(1), generator=g)]
    data = data.clone()
    data.edge_index = ei
    return _sage_run(data)


def multilabel_bce(data, epochs=6):
    """Multi-label targets (PPI / Yelp style): float labels and BCEWithLogitsLoss."""
    data = data.clone()
    g = torch.Generator().manual_seed(2)
    data.y = torch.stack([F.one_hot(data.y, 7).float(),
                          (torch.rand(data.num_nodes, 7, generator=g) < 0.1).float()]).amax(0)
    model = _sage(data.num_features, 7)
    loader = _loader(data)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    crit = torch.nn.BCEWithLogitsLoss()
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = crit(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        top = model(data.x, data.edge_index)[data.test_mask].argmax(-1, keepdim=True)
    hit = float(data.y[data.test_mask].gather(1, top).mean())   # top label among the true
    return dict(loss=float(loss), test_hit_at_1=hit)


def reset_between_folds(data, folds=3, epochs=3):
    """k-fold style: model.reset_parameters() and a new optimizer per fold, one loader per fold."""
    model = _sage(data.num_features, 7)
    train_idx = data.train_mask.nonzero().view(-1)
    accs = []
    for fold in range(folds):
        model.reset_parameters()
        idx = train_idx[train_idx % folds != fold]
        loss = _fit(model, _loader(data, input_nodes=idx), epochs)
        accs.append(_test_acc(model, data))
    return dict(loss=loss, test_acc=sum(accs) / folds)


def inplace_feature_noise(data, epochs=6):
    """Feature noise added in place to batch.x before the forward (augmentation); data.x must
    not change."""
    before = data.x.clone()
    model = _sage(data.num_features, 7)

    def noisy(batch):
        batch.x.add_(0.01 * torch.randn_like(batch.x))

    loss = _fit(model, _loader(data), epochs, on_batch=noisy)
    return dict(loss=loss, test_acc=_test_acc(model, data),
                data_x_unchanged=float(torch.equal(before, data.x)))


def user_edge_edit(data):
    """The user rewrites batch.edge_index (to_undirected + add_self_loops) before the forward."""
    from torch_geometric.utils import add_self_loops, to_undirected

    def forward(m, b):
        ei = add_self_loops(to_undirected(b.edge_index, num_nodes=b.num_nodes),
                            num_nodes=b.num_nodes)[0]
        return m(b.x, ei)

    return _sage_run(data, forward=forward)


def bidirectional_subgraph(data):
    """subgraph_type='bidirectional': sampled edges made both ways."""
    return _sage_run(data, subgraph_type="bidirectional")


def threads_set_inside(data):
    """torch.set_num_threads(1) at the top of the function (a common CPU-contention fix)."""
    torch.set_num_threads(1)
    return _sage_run(data)


def hetero_conv_dict(data, epochs=4):
    """A HeteroConv model written by hand (no to_hetero), per-edge-type fanouts as a dict."""
    from torch_geometric.data import HeteroData
    from torch_geometric.nn import HeteroConv, SAGEConv
    from torch_geometric.loader import NeighborLoader
    import torch_geometric.transforms as T
    g = torch.Generator().manual_seed(0)
    h = HeteroData()
    h['paper'].x, h['paper'].y = data.x, data.y
    h['paper'].train_mask, h['paper'].test_mask = data.train_mask, data.test_mask
    h['author'].x = torch.randn(400, 16, generator=g)
    h['paper', 'cites', 'paper'].edge_index = data.edge_index
    h['author', 'writes', 'paper'].edge_index = torch.stack([
        torch.randint(0, 400, (3000,), generator=g),
        torch.randint(0, data.num_nodes, (3000,), generator=g)])
    h = T.ToUndirected()(h)
    fanouts = {et: [10, 5] if et[1] == 'cites' else [4, 2] for et in h.edge_types}

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = HeteroConv({et: SAGEConv((-1, -1), 32) for et in h.edge_types})
            self.c2 = HeteroConv({et: SAGEConv((-1, -1), 7) for et in h.edge_types})

        def forward(self, x_dict, ei_dict):
            x_dict = {k: v.relu() for k, v in self.c1(x_dict, ei_dict).items()}
            return self.c2(x_dict, ei_dict)['paper']

    model = Net()
    loader = NeighborLoader(h, num_neighbors=fanouts, batch_size=32, shuffle=True,
                            input_nodes=('paper', h['paper'].train_mask))
    with torch.no_grad():
        b = next(iter(loader))
        model(b.x_dict, b.edge_index_dict)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch in loader:
            bs = batch['paper'].batch_size
            opt.zero_grad()
            out = model(batch.x_dict, batch.edge_index_dict)[:bs]
            loss = F.cross_entropy(out, batch['paper'].y[:bs])
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        out = model(h.x_dict, h.edge_index_dict)
    mask = h['paper'].test_mask
    acc = float((out[mask].argmax(-1) == h['paper'].y[mask]).float().mean())
    return dict(loss=float(loss), test_acc=acc)


def link_labels_only(data, epochs=4):
    """LinkNeighborLoader with given edge_label (positives and the user's own negatives), no
    neg_sampling; the labels are the user's."""
    from torch_geometric.loader import LinkNeighborLoader
    from torch_geometric.utils import negative_sampling
    g = torch.Generator().manual_seed(5)
    pos = data.edge_index[:, torch.randperm(data.num_edges, generator=g)[:1000]]
    torch.manual_seed(5)
    neg = negative_sampling(data.edge_index, data.num_nodes, 1000)
    label_index = torch.cat([pos, neg], 1)
    label = torch.cat([torch.ones(1000), torch.zeros(neg.size(1))])
    loader = LinkNeighborLoader(data, num_neighbors=[10, 5], batch_size=64, shuffle=True,
                                edge_label_index=label_index, edge_label=label)
    model = _sage(data.num_features, 32)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    labels_seen = 0.0
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
            labels_seen += float(batch.edge_label.sum())
    return dict(loss=float(loss), positives_seen=labels_seen)


def _link_model(data, in_batch_negatives: bool):
    """PyG's link-prediction tutorial shape: a GraphSAGE encoder and a decoder in one model,
    its output a score per pair. ``in_batch_negatives``: the model also scores as many random
    pairs of the whole batch (rows beyond the seeds) as negatives, as some programs do."""
    from torch_geometric.nn import GraphSAGE

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 1)

        def forward(self, z, pairs):
            return self.lin(torch.cat([z[pairs[0]], z[pairs[1]]], -1)).view(-1)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = GraphSAGE(data.num_features, 32, 2)
            self.decoder = Decoder()

        def forward(self, x, edge_index, edge_label_index):
            z = self.encoder(x, edge_index)
            if in_batch_negatives:
                rand = torch.randint(0, z.size(0), edge_label_index.shape)
                edge_label_index = torch.cat([edge_label_index, rand], 1)
            return self.decoder(z, edge_label_index)

    return Model()


def _link_fit(data, epochs, in_batch_negatives):
    from torch_geometric.loader import LinkNeighborLoader
    loader = LinkNeighborLoader(data, num_neighbors=[10, 5], batch_size=64, shuffle=True,
                                neg_sampling_ratio=0.0 if in_batch_negatives else 1.0)
    model = _link_model(data, in_batch_negatives)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            score = model(batch.x, batch.edge_index, batch.edge_label_index)
            if in_batch_negatives:    # the loader's edges are all positives
                ones = torch.ones(batch.edge_label_index.size(1))
                label = torch.cat([ones, torch.zeros_like(ones)])
            else:
                label = batch.edge_label
            loss = F.binary_cross_entropy_with_logits(score, label)
            loss.backward()
            opt.step()
    return dict(loss=float(loss))


def link_encoder_decoder(data, epochs=2):
    """A model = GraphSAGE encoder + MLP decoder at edge_label_index (its output a score per
    supervision edge), binary negatives from the loader: trimmed at its encoder."""
    return _link_fit(data, epochs, in_batch_negatives=False)


def link_in_batch_negatives(data, epochs=2):
    """The same model drawing its negatives among all of the batch's rows inside its forward:
    its decoder reads beyond the seed rows, so it must stay exact (left whole)."""
    return _link_fit(data, epochs, in_batch_negatives=True)


def data_adj_t(data, epochs=6):
    """T.ToSparseTensor() on the whole graph before the loader (OGB examples' idiom): data
    holds adj_t and no edge_index; the batches carry adj_t."""
    import torch_geometric.transforms as T
    data = T.ToSparseTensor()(data.clone())
    model = _sage(data.num_features, 7)
    loss = _fit(model, _loader(data), epochs, forward=lambda m, b: m(b.x, b.adj_t))
    return dict(loss=loss, test_acc=_test_acc(model, data, forward=lambda m, b: m(b.x, b.adj_t)))


def rgcn_edge_types(data, epochs=5):
    """RGCNConv on edge types stored per edge (data.edge_type), plus node attributes of other
    shapes and kinds (pos, a long node type) riding along in every batch."""
    from torch_geometric.nn import RGCNConv
    g = torch.Generator().manual_seed(6)
    data = data.clone()
    data.edge_type = torch.randint(0, 3, (data.num_edges,), generator=g)
    data.pos = torch.randn(data.num_nodes, 2, generator=g)
    data.node_type = torch.randint(0, 4, (data.num_nodes,), generator=g)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = RGCNConv(data.num_features, 32, 3)
            self.c2 = RGCNConv(32, 7, 3)

        def forward(self, x, edge_index, edge_type):
            return self.c2(self.c1(x, edge_index, edge_type).relu(), edge_index, edge_type)

    checked = []

    def check(batch):
        checked.append(torch.equal(batch.pos, data.pos[batch.n_id])
                       and torch.equal(batch.edge_type, data.edge_type[batch.e_id]))

    model = Net()
    loader = _loader(data)
    forward = lambda m, b: m(b.x, b.edge_index, b.edge_type)  # noqa: E731
    loss = _fit(model, loader, epochs, forward=forward, on_batch=check)
    return dict(loss=loss, test_acc=_test_acc(model, data, forward=forward),
                attributes_match=float(all(checked)))


def temporal_sampling(data, epochs=4):
    """time_attr='time' with input_time: only neighbours no later than their seed's time
    (needs pyg-lib in PyG). ``future_edges`` counts sampled edges from a later node."""
    data = data.clone()
    data.time = torch.randint(0, 100, (data.num_nodes,),
                              generator=torch.Generator().manual_seed(7))
    seeds = data.train_mask.nonzero().view(-1)
    future = []

    def count(batch):
        t = data.time[batch.n_id]
        src, dst = batch.edge_index
        future.append(int((t[src] > t[dst]).sum()))

    model = _sage(data.num_features, 7)
    loader = _loader(data, input_nodes=seeds, input_time=data.time[seeds], time_attr="time")
    loss = _fit(model, loader, epochs, on_batch=count)
    return dict(loss=loss, test_acc=_test_acc(model, data), future_edges=sum(future))


def weighted_sampling(data, epochs=4):
    """weight_attr='edge_weight': neighbours drawn in proportion to an edge weight (needs
    pyg-lib). Half the edges weigh 0: ``zero_weight_edges`` counts those sampled (a vertex
    with fewer in-edges than the fanout keeps them all)."""
    data = data.clone()
    w = (torch.rand(data.num_edges, generator=torch.Generator().manual_seed(8)) < 0.5).float()
    data.edge_weight = w
    zero = []

    def count(batch):
        zero.append(int((w[batch.e_id] == 0).sum()))

    model = _sage(data.num_features, 7)
    loader = _loader(data, weight_attr="edge_weight")
    loss = _fit(model, loader, epochs, on_batch=count)
    return dict(loss=loss, test_acc=_test_acc(model, data), zero_weight_edges=sum(zero))


def legacy_neighbor_sampler(data, epochs=4):
    """PyG's legacy loader.NeighborSampler (older ogbn-products / reddit scripts): batches of
    (batch_size, n_id, adjs) and a model that walks the per-hop bipartite adjacencies."""
    from torch_geometric.loader import NeighborSampler
    from torch_geometric.nn import SAGEConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList([SAGEConv(data.num_features, 64),
                                              SAGEConv(64, 7)])

        def forward(self, x, adjs):
            for i, (edge_index, _, size) in enumerate(adjs):
                x_target = x[:size[1]]
                x = self.convs[i]((x, x_target), edge_index)
                if i == 0:
                    x = F.dropout(x.relu(), 0.3, self.training)
            return x

    loader = NeighborSampler(data.edge_index, node_idx=data.train_mask, sizes=[10, 10],
                             batch_size=32, shuffle=True)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for batch_size, n_id, adjs in loader:
            opt.zero_grad()
            out = model(data.x[n_id], adjs)
            loss = F.cross_entropy(out, data.y[n_id[:batch_size]])
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        out = model(data.x, [(data.edge_index, None, (data.num_nodes, data.num_nodes))] * 2)
    acc = float((out[data.test_mask].argmax(-1) == data.y[data.test_mask]).float().mean())
    return dict(loss=float(loss), test_acc=acc)


def graph_saint(data, epochs=4):
    """GraphSAINTRandomWalkSampler with PyG's sample_coverage normalisation (examples/
    graph_saint.py): GraphConv with edge_norm weights, node_norm-weighted loss."""
    from torch_geometric.loader import GraphSAINTRandomWalkSampler
    from torch_geometric.nn import GraphConv
    data = data.clone()
    row, col = data.edge_index
    data.edge_weight = 1. / torch.bincount(col, minlength=data.num_nodes)[col].float()
    loader = GraphSAINTRandomWalkSampler(data, batch_size=200, walk_length=2, num_steps=5,
                                         sample_coverage=20)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GraphConv(data.num_features, 64), GraphConv(64, 7)
            self.c1.aggr = self.c2.aggr = "add"

        def forward(self, x, edge_index, w):
            return self.c2(F.dropout(self.c1(x, edge_index, w).relu(), 0.2, self.training),
                           edge_index, w)

    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        model.train()
        for b in loader:
            opt.zero_grad()
            out = model(b.x, b.edge_index, b.edge_norm * b.edge_weight)
            loss = (F.cross_entropy(out, b.y, reduction="none") * b.node_norm)[b.train_mask]
            loss = loss.sum()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        out = model(data.x, data.edge_index, data.edge_weight)
    acc = float((out[data.test_mask].argmax(-1) == data.y[data.test_mask]).float().mean())
    return dict(loss=float(loss), test_acc=acc)


def score_on_train_loader(data, epochs=6):
    """Train accuracy scored over the training loader itself under no_grad() / eval(), each
    epoch, with full neighbourhoods ([-1, -1]): the seeds' logits must equal the full-graph
    model's. ``max_gap`` is the largest difference over all epochs (vanilla: float rounding)."""
    model = _sage(data.num_features, 7)
    loader = _loader(data, num_neighbors=[-1, -1], batch_size=16)
    gaps = []

    def score(epoch):
        if epoch == 0:
            return
        model.eval()
        with torch.no_grad():
            full = model(data.x, data.edge_index)
            gaps.append(max(float((model(b.x, b.edge_index)[:b.batch_size]
                                   - full[b.n_id[:b.batch_size]]).abs().max())
                            for b in loader))

    loss = _fit(model, loader, epochs + 1, on_epoch=score)
    return dict(loss=loss, test_acc=_test_acc(model, data), max_gap=max(gaps))


def lazy_init_break(data, epochs=6):
    """Lazy layers (``in_channels=-1``) initialised by one forward over the training loader's
    first batch, left with ``break``, before the optimizer exists (PyG's
    examples/multi_gpu/taobao.py)."""
    model = _sage(-1, 7)
    loader = _loader(data)
    for batch in loader:
        model(batch.x, batch.edge_index)
        break
    loss = _fit(model, loader, epochs)
    return dict(loss=loss, test_acc=_test_acc(model, data))


def clip_grad_norm(data, epochs=6):
    """``clip_grad_norm_(max_norm=0.5)`` between backward and step, its returned norm logged:
    ``mean_norm`` is the mean of the norms it returned (one process: the norm of the batch's
    gradient, which the clipping scales by)."""
    model = _sage(data.num_features, 7)
    loader = _loader(data)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    norms = []
    for _ in range(epochs):
        model.train()
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)))
            opt.step()
    return dict(loss=float(loss), test_acc=_test_acc(model, data),
                mean_norm=sum(norms) / len(norms), first_norm=norms[0])


IDIOMS = {fn.__name__: fn for fn in (
    replace_true, imbalanced_sampler, drop_last, index_input_nodes, induced_subgraph,
    disjoint_trees, batch_transform, batch_virtual_node, persistent_workers, islice_epochs,
    zipped_loaders,
    overfit_one_batch, batch_norm, jk_cat, gin_three_hops, pna, gatv2_edge_attr,
    custom_message_passing, loss_on_every_node, label_reuse, frozen_first_layer,
    dropout_edge_on_batch, skip_to_raw_features, two_optimizers, never_train_mode,
    all_nodes_input, full_neighbourhood, batch_size_one, isolated_and_duplicate_edges,
    multilabel_bce, reset_between_folds, inplace_feature_noise, user_edge_edit,
    bidirectional_subgraph, threads_set_inside, hetero_conv_dict, link_labels_only,
    data_adj_t, rgcn_edge_types, temporal_sampling, weighted_sampling,
    legacy_neighbor_sampler, graph_saint, score_on_train_loader, lazy_init_break,
    clip_grad_norm, link_encoder_decoder, link_in_batch_negatives,
)}
