"""Hop-aware trimming of HeteroData batches (`gnnorch.trim.hetero`): the per-type bounds, and
`to_hetero` / `HeteroConv` models trained under the runtime with trimming on and off giving
the same losses and gradients (forward and backward), on node and link loaders, on the host
and on the device path; outputs read beyond the seed rows recomputed exactly; what is not
trimmed says why."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
from torch_geometric.nn import (GATConv, GCNConv, GraphConv, HeteroConv, HGTConv, Linear,
                                SAGEConv, to_hetero)
from torch_geometric.utils import trim_to_layer

import gnnorch
from gnnorch.errors import TrimmingWarning
from gnnorch.trim.hetero import HeteroHopLayout, hetero_layout
from gnnorch.trim.hops import LayerBounds

from helpers import (WRITES, SageStack as Sage, assert_same_training, small_hetero_graph,
                     train_steps, trimmed_and_untrimmed)

pytestmark = pytest.mark.usefixtures("one_thread")

DATA = small_hetero_graph(topic=False, papers=300, authors=200)
CITES = ("paper", "cites", "paper")
SEED = 5


# --------------------------------------------------------------------------- bounds
def test_bounds_follow_each_types_hop_counts():
    layout = HeteroHopLayout(
        nodes={"paper": (4, 10, 30), "author": (0, 6, 20)},
        edges={WRITES: (12, 40), CITES: (8, 25), ("paper", "rev", "author"): (5, 9)})
    assert layout.num_hops == 2
    # the top layer of two: destination rows of hop 0, sources within one hop
    assert layout.bounds(WRITES, 1, 2) == LayerBounds(num_src=6, num_dst=4, num_edges=12)
    assert layout.bounds(CITES, 1, 2) == LayerBounds(num_src=14, num_dst=4, num_edges=8)
    assert layout.bounds(("paper", "rev", "author"), 1, 2) == LayerBounds(14, 0, 5)
    # the bottom layer: destinations within one hop, sources within two
    assert layout.bounds(WRITES, 0, 2) == LayerBounds(num_src=26, num_dst=14, num_edges=52)
    # a model deeper than the sample: its bottom layer runs untrimmed
    assert layout.bounds(WRITES, 0, 3) is None
    with pytest.raises(ValueError):
        layout.bounds(WRITES, 2, 2)


def test_layouts_that_do_not_add_up_are_refused():
    nodes, edges = {"paper": [2, 3]}, {CITES: [4]}
    layout, why = hetero_layout(nodes, edges, {"paper": 5}, {CITES: 4})
    assert layout is not None and why is None
    # a transform added edges after sampling
    assert hetero_layout(nodes, edges, {"paper": 5}, {CITES: 6})[0] is None
    # a node type without counts but with vertices
    layout, why = hetero_layout(nodes, edges, {"paper": 5, "author": 2}, {CITES: 4})
    assert layout is None and "author" in why
    # one without vertices counts as none at every hop
    layout, _ = hetero_layout(nodes, edges, {"paper": 5, "author": 0}, {CITES: 4})
    assert layout.nodes["author"] == (0, 0)
    with pytest.raises(ValueError):
        HeteroHopLayout({"paper": (1, 2)}, {CITES: (1, 2)})


# --------------------------------------------------------------------------- models
class Gat(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GATConv((-1, -1), 8, heads=2, add_self_loops=False)
        self.lin = Linear(-1, 16)
        self.conv2 = GraphConv((-1, -1), 3)

    def forward(self, x, edge_index):
        x = F.elu(self.conv1(x, edge_index)) + self.lin(x)
        return self.conv2(x, edge_index)


def _hetero_convs(out, gcn=False):
    convs = {WRITES: SAGEConv((-1, -1), out), ("paper", "rev_writes", "author"): SAGEConv(
        (-1, -1), out), ("venue", "hosts", "paper"): GraphConv((-1, -1), out),
        ("paper", "in", "venue"): SAGEConv((-1, -1), out),
        CITES: GCNConv(-1, out) if gcn else SAGEConv(-1, out)}
    return HeteroConv(convs, aggr="sum")


class Hetero(torch.nn.Module):
    """HeteroConv layers; the output a dict (`head` False) or one tensor of paper rows."""

    def __init__(self, gcn=False, head=False, trims_itself=False):
        super().__init__()
        self.conv1, self.conv2 = _hetero_convs(16, gcn), _hetero_convs(8)
        self.head = Linear(-1, 3) if head else None
        self.trims_itself = trims_itself

    def forward(self, x_dict, edge_index_dict, nodes=None, edges=None):
        for i, conv in enumerate((self.conv1, self.conv2)):
            if self.trims_itself:
                x_dict, edge_index_dict, _ = trim_to_layer(i, nodes, edges, x_dict,
                                                           edge_index_dict)
            x_dict = {k: v.relu() for k, v in conv(x_dict, edge_index_dict).items()}
        if self.head is not None:
            return self.head(x_dict["paper"])
        return x_dict


def _paper_logits(model, batch):
    out = model(batch.x_dict, batch.edge_index_dict)
    return out["paper"] if isinstance(out, dict) else out


class GinCat(torch.nn.Module):
    """`HeteroConv` of bipartite `GINConv`s concatenated per destination type (aggr "cat"),
    per-type `HeteroDictLinear` between the layers."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GINConv, HeteroDictLinear

        def gin(out):
            return HeteroConv({e: GINConv(torch.nn.Sequential(Linear(-1, out), torch.nn.ReLU()))
                               for e in DATA.edge_types}, aggr="cat")

        self.conv1, self.conv2 = gin(8), gin(3)
        self.lin = HeteroDictLinear(-1, 8, types=DATA.node_types)

    def forward(self, x_dict, edge_index_dict):
        x_dict = self.lin({k: v.relu() for k, v in self.conv1(x_dict, edge_index_dict).items()})
        return self.conv2(x_dict, edge_index_dict)


MODELS = {
    "to_hetero-sage": lambda: to_hetero(Sage(), DATA.metadata(), aggr="sum"),
    "to_hetero-sage-3-layers": lambda: to_hetero(Sage(3), DATA.metadata(), aggr="mean"),
    "to_hetero-gat-residual": lambda: to_hetero(Gat(), DATA.metadata(), aggr="sum"),
    "heteroconv-gcn": lambda: Hetero(gcn=True),
    "heteroconv-tensor-out": lambda: Hetero(head=True),
    "heteroconv-gin-cat-dictlinear": GinCat,
}


def _train_nodes(make, hops=2, transform=None, read_authors=False):
    """A node-classification training function: the losses of 2 epochs and the gradients of
    the last step (and, `read_authors`, the author rows of the third batch's output, summed
    over rows: a read beyond the seeds' type)."""

    def train(data):
        loader = NeighborLoader(data, num_neighbors=[4] * hops, batch_size=24, shuffle=True,
                                input_nodes=("paper", data["paper"].train_mask),
                                transform=transform)
        torch.manual_seed(0)
        model = make()
        first = next(iter(loader))
        with torch.no_grad():
            model(first.x_dict, first.edge_index_dict)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        losses, authors = [], None
        for _ in range(2):
            for batch in loader:
                if read_authors and len(losses) == 2:   # a second forward, read whole
                    with torch.no_grad():
                        authors = model(batch.x_dict, batch.edge_index_dict)["author"].sum(0)
                opt.zero_grad()
                size = batch["paper"].batch_size
                out = _paper_logits(model, batch)[:size, :3]
                loss = F.cross_entropy(out, batch["paper"].y[:size])
                loss.backward()
                grads = {n: p.grad.clone() for n, p in model.named_parameters()
                         if p.grad is not None}
                opt.step()
                losses.append(loss.item())
        return losses, grads, authors
    return train


def _runs(train, **options):
    """(trimmed, untrimmed) results of `train` under the runtime, and the trimmed run's trim
    statistics."""
    trimmed, untrimmed, runtime = trimmed_and_untrimmed(train, DATA, SEED, **options)
    return trimmed, untrimmed, runtime.last_run.stats[0]["trim"]


@pytest.mark.parametrize("name", list(MODELS))
def test_trimmed_training_equals_untrimmed(name):
    trimmed, untrimmed, stats = _runs(_train_nodes(MODELS[name]))
    assert_same_training(trimmed, untrimmed)
    model = stats["models"][0]
    assert model["trimmed"] and model["trimmed_forwards"] > 0, model
    assert model["verified_by"] == "the one-off check"
    assert 0 < stats["rows_computed"] < stats["rows_untrimmed"]


@pytest.mark.parametrize("hops", [1, 3])
def test_a_model_shallower_or_deeper_than_the_sample(hops):
    """Two layers on a 1-hop sample (the bottom layer runs untrimmed) or a 3-hop one."""
    trimmed, untrimmed, stats = _runs(_train_nodes(MODELS["to_hetero-sage"], hops=hops))
    assert_same_training(trimmed, untrimmed)
    assert stats["models"][0]["trimmed"]


def test_other_types_rows_read_are_recomputed_untrimmed():
    """Only the seeds' rows are exact: reading the author rows of a trimmed output recomputes
    the forward untrimmed, with a warning, and trimming stops for the model."""
    train = _train_nodes(MODELS["to_hetero-sage"], read_authors=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trimmed, untrimmed, stats = _runs(train)
    assert_same_training(trimmed, untrimmed)
    torch.testing.assert_close(trimmed[2], untrimmed[2])
    assert any(issubclass(w.category, TrimmingWarning) for w in caught)
    model = stats["models"][0]
    assert model["materialized"] == 1 and not model["trimmed"]
    assert "beyond the seed rows" in model["reason"]


def test_a_model_that_trims_itself_is_left_to_pyg():
    def train(data):
        loader = NeighborLoader(data, num_neighbors=[4, 4], batch_size=24, shuffle=True,
                                input_nodes=("paper", data["paper"].train_mask))
        torch.manual_seed(0)
        model = Hetero(trims_itself=True)
        opt, losses = None, []
        for batch in loader:
            nodes = {t: batch[t].num_sampled_nodes for t in batch.node_types}
            edges = {e: batch[e].num_sampled_edges for e in batch.edge_types}
            out = model(batch.x_dict, batch.edge_index_dict, nodes, edges)["paper"]
            opt = opt or torch.optim.Adam(model.parameters(), lr=0.01)  # lazy layers built
            size = batch["paper"].batch_size
            loss = F.cross_entropy(out[:size, :3], batch["paper"].y[:size])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    runtime = gnnorch.Runtime(train, processes=1, seed=SEED)
    losses = runtime(DATA)
    plain = gnnorch.Runtime(train, processes=1, seed=SEED, trim=False)(DATA)
    torch.testing.assert_close(losses, plain)
    model = runtime.last_run.stats[0]["trim"]["models"][0]
    assert not model["trimmed"] and "trims its own layers" in model["reason"]


def test_dict_level_layers_are_left_whole_and_uneven_layers_trimmed_by_data_flow():
    class Hgt(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = HGTConv(-1, 8, DATA.metadata(), heads=2)

        def forward(self, x_dict, edge_index_dict):
            return self.conv(x_dict, edge_index_dict)

    class Uneven(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = _hetero_convs(16)
            self.conv2 = HeteroConv({WRITES: SAGEConv((-1, -1), 8),
                                     CITES: SAGEConv(-1, 8)})

        def forward(self, x_dict, edge_index_dict):
            x_dict = {k: v.relu() for k, v in self.conv1(x_dict, edge_index_dict).items()}
            return self.conv2(x_dict, edge_index_dict)

    trimmed, untrimmed, stats = _runs(_train_nodes(Hgt))
    assert_same_training(trimmed, untrimmed)
    model = stats["models"][0]
    assert not model["trimmed"] and "no MessagePassing layer ran" in model["reason"], model

    # layers calling different edge types get their layers from the data flow
    # (`gnnorch.intercept.dataflow`): the second layer calls `writes` and `cites` only, so the
    # first layer's call into the venues (unused by the output) runs untrimmed
    trimmed, untrimmed, stats = _runs(_train_nodes(Uneven))
    assert_same_training(trimmed, untrimmed)
    model = stats["models"][0]
    assert model["trimmed"] and model["layer_plan"] == [0, 0, 0, None, 0, 1, 1], model
    assert 0 < stats["rows_computed"] < stats["rows_untrimmed"]


class Asymmetric(torch.nn.Module):
    """Encoders of different depths over the same edge types (PyG's `bipartite_sage_unsup`):
    two `cites` layers for the papers, one `rev_writes` layer for the authors, joined by a
    `writes` layer into the paper rows. Per edge type: `cites` 2 calls, the others 1."""

    def __init__(self):
        super().__init__()
        self.cites1, self.cites2 = SAGEConv(-1, 16), SAGEConv(16, 3)
        self.to_author = SAGEConv((-1, -1), 16)
        self.to_paper = SAGEConv((16, -1), 3)

    def forward(self, x_dict, edge_index_dict):
        paper = self.cites1(x_dict["paper"], edge_index_dict[CITES]).relu()
        paper = self.cites2(paper, edge_index_dict[CITES])
        author = self.to_author((x_dict["paper"], x_dict["author"]),
                                edge_index_dict["paper", "rev_writes", "author"]).relu()
        return paper + self.to_paper((author, x_dict["paper"]), edge_index_dict[WRITES])


def test_encoders_of_different_depths_are_trimmed_by_data_flow():
    trimmed, untrimmed, stats = _runs(_train_nodes(Asymmetric))
    assert_same_training(trimmed, untrimmed)
    model = stats["models"][0]
    # depths: cites1 1, cites2 0, to_author 1, to_paper 0 -> layers 0, 1, 0, 1 of K = 2
    assert model["trimmed"] and model["layer_plan"] == [0, 1, 0, 1], model
    assert model["layers"] == 2 and 0 < stats["rows_computed"] < stats["rows_untrimmed"]


class Mutating(Asymmetric):
    """Replaces an entry of the ``x_dict`` it is given, as PyG's `bipartite_sage_unsup` does."""

    def forward(self, x_dict, edge_index_dict):
        x_dict["paper"] = torch.cat([x_dict["paper"], x_dict["paper"]], dim=-1)
        return super().forward(x_dict, edge_index_dict)


class MutatingToHetero(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gnn = MODELS["to_hetero-sage"]()

    def forward(self, x_dict, edge_index_dict):
        x_dict["paper"] = torch.cat([x_dict["paper"], x_dict["paper"]], dim=-1)
        return self.gnn(x_dict, edge_index_dict)


@pytest.mark.parametrize("make", [Mutating, MutatingToHetero])
def test_a_forward_that_replaces_entries_of_its_argument_dicts_is_trimmed(make):
    """The check runs the forward again, and a recomputation would too, on the arguments as
    they were entered (their dicts copied at the model's entry), not on the replaced ones."""
    trimmed, untrimmed, stats = _runs(_train_nodes(make))
    assert_same_training(trimmed, untrimmed)
    model = stats["models"][0]
    assert model["trimmed"] and model["trimmed_forwards"] > 0, model


def test_a_forward_that_cannot_run_again_is_left_whole_not_broken():
    """A forward that changes the batch object itself (``batch["paper"].x = ...``): run again
    by the check, it raises. The user's program must not: the model is left whole, saying
    why."""

    class MutatingBatch(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gnn = MODELS["to_hetero-sage"]()

        def forward(self, batch):
            batch["paper"].x = torch.cat([batch["paper"].x, batch["paper"].x], dim=-1)
            return self.gnn(batch.x_dict, batch.edge_index_dict)

    def train(data):
        loader = NeighborLoader(data, num_neighbors=[4, 4], batch_size=24, shuffle=True,
                                input_nodes=("paper", data["paper"].train_mask))
        torch.manual_seed(0)
        model = MutatingBatch()
        with torch.no_grad():
            model(next(iter(loader)))

        def loss_of(model, batch):
            size = batch["paper"].batch_size
            return F.cross_entropy(model(batch)["paper"][:size, :3], batch["paper"].y[:size])

        return (*train_steps(model, loader, loss_of), None)

    trimmed, untrimmed, stats = _runs(train)
    assert_same_training(trimmed, untrimmed)
    model = stats["models"][0]
    assert not model["trimmed"], model
    assert "could not run its forward again" in model["reason"], model


def test_a_forward_off_its_data_flow_plan_is_recomputed_untrimmed():
    """A later forward calls its edge types in another order than the plan: recomputed
    untrimmed (exact), and trimming stops for the model, saying why."""

    class Swapping(Asymmetric):
        forwards = 0

        def forward(self, x_dict, edge_index_dict):
            Swapping.forwards += 1
            if Swapping.forwards < 8:
                return super().forward(x_dict, edge_index_dict)
            author = self.to_author((x_dict["paper"], x_dict["author"]),
                                    edge_index_dict["paper", "rev_writes", "author"]).relu()
            paper = self.cites1(x_dict["paper"], edge_index_dict[CITES]).relu()
            paper = self.cites2(paper, edge_index_dict[CITES])
            return paper + self.to_paper((author, x_dict["paper"]), edge_index_dict[WRITES])

    def make():
        Swapping.forwards = 0
        return Swapping()

    trimmed, untrimmed, stats = _runs(_train_nodes(make))
    assert_same_training(trimmed, untrimmed)
    model = stats["models"][0]
    assert not model["trimmed"] and "data-flow plan" in model["reason"], model
    assert model["trimmed_forwards"] > 0


def test_a_loader_transform_stops_trimming_saying_why():
    trimmed, untrimmed, stats = _runs(
        _train_nodes(MODELS["to_hetero-sage"], transform=T.NormalizeFeatures()))
    assert_same_training(trimmed, untrimmed)
    model = stats["models"][0]
    assert not model["trimmed"] and "transforms its batches" in model["reason"]


def test_the_device_path_serves_trimmed_batches():
    """CPU as the device: the path's batches (sampled ahead, gathered by `HeteroGatherPlan`)
    carry the hop counts trimming needs, with the same losses as untrimmed."""
    trimmed, untrimmed, stats = _runs(_train_nodes(MODELS["to_hetero-sage"]),
                                      data_path={"mode": "device", "prefetch": 2})
    assert_same_training(trimmed, untrimmed)
    assert stats["models"][0]["trimmed"]


def test_two_ranks_trimmed_equal_two_ranks_untrimmed():
    runs = {}
    for trim in (True, False):
        runtime = gnnorch.Runtime(_train_nodes(MODELS["to_hetero-sage"]), processes=2,
                                  seed=SEED, trim=trim)
        runs[trim] = runtime(DATA)
        if trim:
            assert all(runtime.last_run.stats[r]["trim"]["models"][0]["trimmed"]
                       for r in (0, 1))
    assert_same_training(runs[True], runs[False])


# --------------------------------------------------------------------------- link loaders
def _train_links(data):
    """Link prediction on `writes`: a to_hetero encoder, a dot-product decoder reading the
    rows at ``edge_label_index`` (the first hop's rows of each end's type)."""
    loader = LinkNeighborLoader(data, num_neighbors=[4, 4], batch_size=32, shuffle=True,
                                edge_label_index=(WRITES, data[WRITES].edge_index),
                                neg_sampling_ratio=1.0)
    torch.manual_seed(0)
    model = to_hetero(Sage(out=8), data.metadata(), aggr="sum")
    first = next(iter(loader))
    with torch.no_grad():
        model(first.x_dict, first.edge_index_dict)

    def loss_of(model, batch):
        z = model(batch.x_dict, batch.edge_index_dict)
        src, dst = batch[WRITES].edge_label_index
        score = (z["author"][src] * z["paper"][dst]).sum(-1)
        return F.binary_cross_entropy_with_logits(score, batch[WRITES].edge_label)

    return train_steps(model, loader, loss_of)


def test_link_batches_are_trimmed_to_both_ends_first_hop():
    trimmed, untrimmed, stats = _runs(_train_links)
    assert_same_training(trimmed, untrimmed)
    model = stats["models"][0]
    assert model["trimmed"] and model["materialized"] == 0, model


def test_pygs_own_sampler_is_trimmed_with_its_hop_counts():
    """`sampler="pyg"`: pyg-lib gives per-type hop counts (trimmed, same results);
    torch_sparse gives none (left whole, saying so)."""
    import torch_geometric.typing as pyg_typing

    trimmed, untrimmed, stats = _runs(_train_nodes(MODELS["to_hetero-sage"]), sampler="pyg")
    assert_same_training(trimmed, untrimmed)
    model = stats["models"][0]
    if pyg_typing.WITH_PYG_LIB:
        assert model["trimmed"], model
    else:
        assert not model["trimmed"] and "no hop counts" in model["reason"], model


def test_evaluation_loaders_are_trimmed_with_the_same_predictions():
    """A validation loop (eval mode, no gradients, an unshuffled loader over other seeds)."""

    def train(data):
        make = MODELS["to_hetero-sage"]
        losses, _, _ = _train_nodes(make)(data)
        torch.manual_seed(1)
        model = make()
        loader = NeighborLoader(data, num_neighbors=[4, 4], batch_size=32,
                                input_nodes=("paper", ~data["paper"].train_mask))
        model.eval()
        predictions = []
        with torch.no_grad():
            for batch in loader:
                size = batch["paper"].batch_size
                out = model(batch.x_dict, batch.edge_index_dict)["paper"][:size]
                predictions.append(out.log_softmax(-1))
        return losses, {"predictions": torch.cat(predictions)}, None

    trimmed, untrimmed, stats = _runs(train)
    assert_same_training(trimmed, untrimmed)
    assert all(m["trimmed"] for m in stats["models"]), stats["models"]
