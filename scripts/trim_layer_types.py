"""Trimming across PyG layer types: seed outputs and gradients, trimmed against untrimmed.

For each layer type, a two-layer model (or a one-call model for layers that propagate K hops in
one call: APPNP, GatedGraphConv) trains one epoch of Cora with SGD at lr 0 (the weights stay
put, every batch's gradient is recorded) on a NeighborLoader with fanout ``--fanout``. Two runs
under ``gnnorch.Runtime`` (gnnorch's sampler, the same seed, so the same batches; rewrites off)
differ only in ``trim``. Printed per layer type: the largest absolute difference of the seed
outputs, the largest relative difference of the gradients, and whether the runtime trimmed the
model (else its reason: the one-off check leaves models whose trimmed outputs differ
untrimmed).

    .venv/bin/python scripts/trim_layer_types.py                 # every type, fanout 4,3 (~1 min)
    .venv/bin/python scripts/trim_layer_types.py --fanout -1,-1 pna gine
"""
from __future__ import annotations

import argparse
import warnings

import torch
import torch.nn.functional as F

HIDDEN = 16
EDGE_DIM = 3
#: layer types whose calls take the batch's edge features
WITH_EDGES = ("gatv2e", "gate", "gine", "transformer", "general")


def _conv(kind: str, cin: int, cout: int) -> torch.nn.Module:
    import torch_geometric.nn as gnn

    makers = {
        "sg": lambda: gnn.SGConv(cin, cout, K=1),
        "tag": lambda: gnn.TAGConv(cin, cout, K=1),
        "cheb": lambda: gnn.ChebConv(cin, cout, K=2),
        "gatv2e": lambda: gnn.GATv2Conv(cin, cout, heads=2, concat=False, edge_dim=EDGE_DIM),
        "gate": lambda: gnn.GATConv(cin, cout, heads=2, concat=False, edge_dim=EDGE_DIM),
        "gine": lambda: gnn.GINEConv(torch.nn.Linear(cin, cout), edge_dim=EDGE_DIM),
        "transformer": lambda: gnn.TransformerConv(cin, cout, heads=2, concat=False,
                                                   edge_dim=EDGE_DIM),
        "general": lambda: gnn.GeneralConv(cin, cout, in_edge_channels=EDGE_DIM),
        "resgated": lambda: gnn.ResGatedGraphConv(cin, cout),
        "graphconv_max": lambda: gnn.GraphConv(cin, cout, aggr="max"),
        "cluster": lambda: gnn.ClusterGCNConv(cin, cout),
        "le": lambda: gnn.LEConv(cin, cout),
        "mf": lambda: gnn.MFConv(cin, cout),
        "arma": lambda: gnn.ARMAConv(cin, cout, num_stacks=1, num_layers=2),
        "film": lambda: gnn.FiLMConv(cin, cout),
        "eg": lambda: gnn.EGConv(cin, HIDDEN),
        "ssg": lambda: gnn.SSGConv(cin, cout, alpha=0.1, K=2),
        "pna": lambda: gnn.PNAConv(cin, cout, aggregators=["mean", "max", "std"],
                                   scalers=["identity", "amplification"],
                                   deg=torch.tensor([0, 10, 20, 10, 5, 2, 1])),
        "sage_multi": lambda: gnn.SAGEConv(cin, cout, aggr=["mean", "max"]),
        "gcn_noselfloop": lambda: gnn.GCNConv(cin, cout, add_self_loops=False),
        "edgeconv": lambda: gnn.EdgeConv(torch.nn.Linear(2 * cin, cout)),
        "gen_softmax": lambda: gnn.GENConv(cin, cout, aggr="softmax", learn_t=True,
                                           norm="layer", num_layers=2),
    }
    return makers[kind]()


TWO_LAYER = ("sg", "tag", "cheb", "gatv2e", "gate", "gine", "transformer", "general",
             "resgated", "graphconv_max", "cluster", "le", "mf", "arma", "film", "eg", "ssg",
             "pna", "sage_multi", "gcn_noselfloop", "edgeconv", "gen_softmax")
KINDS = ("appnp", "gated") + TWO_LAYER


class TwoLayers(torch.nn.Module):
    def __init__(self, kind: str, cin: int, cout: int) -> None:
        super().__init__()
        self.edges = kind in WITH_EDGES
        self.c1 = _conv(kind, cin, HIDDEN)
        # EGConv's output width is its own: a linear head maps it to the classes
        self.c2 = _conv(kind, HIDDEN, HIDDEN if kind == "eg" else cout)
        self.out = torch.nn.Linear(HIDDEN, cout) if kind == "eg" else torch.nn.Identity()

    def forward(self, x, edge_index, edge_attr=None):
        extra = (edge_attr,) if self.edges else ()
        x = self.c1(x, edge_index, *extra).relu()
        return self.out(self.c2(x, edge_index, *extra))


class OneCall(torch.nn.Module):
    """A linear map, then one layer call that propagates K hops itself."""

    def __init__(self, kind: str, cin: int, cout: int) -> None:
        super().__init__()
        import torch_geometric.nn as gnn

        width = cout if kind == "appnp" else HIDDEN
        self.lin = torch.nn.Linear(cin, width)
        self.prop = (gnn.APPNP(K=2, alpha=0.1) if kind == "appnp"
                     else gnn.GatedGraphConv(HIDDEN, num_layers=2))
        self.out = torch.nn.Identity() if kind == "appnp" else torch.nn.Linear(HIDDEN, cout)

    def forward(self, x, edge_index, edge_attr=None):
        return self.out(self.prop(self.lin(x), edge_index))


def epoch(data, kind: str, fanout: list[int]):
    """The user's function: seed outputs and per-batch gradients of one epoch."""
    from torch_geometric.loader import NeighborLoader

    torch.manual_seed(0)
    cls = OneCall if kind in ("appnp", "gated") else TwoLayers
    model = cls(kind, data.num_features, 7)
    loader = NeighborLoader(data, num_neighbors=fanout, batch_size=64,
                            input_nodes=data.train_mask, shuffle=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    outs, grads = [], []
    for batch in loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index, batch.edge_attr)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()
        outs.append(out.detach())
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()
                                if p.grad is not None]))
    return outs, grads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kinds", nargs="*",
                        help=f"layer types (default: all): {', '.join(KINDS)}")
    parser.add_argument("--fanout", default="4,3", help="comma-separated, e.g. -1,-1")
    opts = parser.parse_args()
    unknown = [k for k in opts.kinds if k not in KINDS]
    if unknown:
        parser.error(f"unknown layer type(s) {unknown}; known: {', '.join(KINDS)}")
    import torch_geometric.transforms as T

    import gnnorch
    from gnnorch.datasets import load_cora

    warnings.simplefilter("ignore")
    fanout = [int(v) for v in opts.fanout.split(",")]
    data = T.NormalizeFeatures()(load_cora())
    data.edge_attr = torch.randn(data.num_edges, EDGE_DIM,
                                 generator=torch.Generator().manual_seed(1))
    options = dict(processes=1, rewrite=False, sampler="gnnorch", seed=3)
    print(f"| layer type | seed output max abs diff | gradient max rel diff | trimmed |\n"
          f"|---|---|---|---|")
    for kind in opts.kinds or KINDS:
        plain = gnnorch.Runtime(epoch, trim=False, **options)(data, kind, fanout)
        runtime = gnnorch.Runtime(epoch, **options)
        trimmed = runtime(data, kind, fanout)
        model = runtime.last_run.stats[0]["trim"]["models"][0]
        out = max(float((a - b).abs().max()) for a, b in zip(trimmed[0], plain[0]))
        grad = max(float(((a - b).abs() / (b.abs() + 1e-3)).max())
                   for a, b in zip(trimmed[1], plain[1]))
        verdict = "yes" if model["trimmed"] else f"no: {model['reason'][:60]}"
        print(f"| {kind} | {out:.2e} | {grad:.2e} | {verdict} |", flush=True)


if __name__ == "__main__":
    main()
