"""The exact fast path under the runtime: gnnorch's sampler behind the user's NeighborLoader and
hop-aware trimming of the user's model, transparent and exact for what the user reads."""
import contextlib

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.typing as pyg_typing
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GCN, GraphSAGE

import gnnorch

from helpers import cora


def train_losses(data, epochs=2, norm=None, model_cls="sage", fanout=(5, 5), read_all=False,
                 dropout=0.5):
    """A plain PyG training loop; returns per-step losses and the last output."""
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=list(fanout), input_nodes=data.train_mask,
                            batch_size=35, shuffle=True)
    cls = GraphSAGE if model_cls == "sage" else GCN
    model = cls(data.num_features, 32, len(fanout), 7, dropout=dropout, norm=norm)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses, out = [], None
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)
            rows = out if read_all else out[:batch.batch_size]
            loss = F.cross_entropy(rows, batch.y[:rows.size(0)])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return {"losses": losses, "out": out.detach(), "batch_size": batch.batch_size}


@contextlib.contextmanager
def jumping_knowledge(mode):
    """Make BasicGNN models built inside the block use JumpingKnowledge `mode`."""
    from torch_geometric.nn.models.basic_gnn import BasicGNN

    original = BasicGNN.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **{**kwargs, "jk": mode})

    if mode is not None:
        BasicGNN.__init__ = init
    try:
        yield
    finally:
        BasicGNN.__init__ = original


def run(fn, *args, **options):
    runtime = gnnorch.Runtime(fn, processes=1, **options)
    value = runtime(*args)
    return value, runtime.last_run.stats[0]


@pytest.mark.parametrize("model_cls, jk", [("sage", None), ("gcn", None), ("sage", "cat")])
def test_trimming_keeps_the_loss_curve(model_cls, jk):
    """Compact BasicGNNs draw dropout masks for fewer rows, so the RNG streams differ: compare
    without dropout. A JumpingKnowledge model is padded: same RNG stream, dropout on."""
    data = cora()
    dropout = 0.5 if jk else 0.0
    args = (data, 2, None, model_cls, (5, 5), False, dropout)
    with jumping_knowledge(jk):
        plain, _ = run(train_losses, *args, sampler="gnnorch", trim=False)
        trimmed, stats = run(train_losses, *args, sampler="gnnorch", trim=True)
    (model,) = stats["trim"]["models"]
    assert model["trimmed"] and model["trimmed_forwards"] == len(trimmed["losses"])  # all
    assert model["compact"] == (jk is None)
    assert stats["trim"]["rows_computed"] < stats["trim"]["rows_untrimmed"]
    torch.testing.assert_close(torch.tensor(trimmed["losses"]), torch.tensor(plain["losses"]),
                               rtol=1e-4, atol=1e-5)


def test_default_runtime_uses_gnnorch_sampler_and_trims():
    data = cora()
    value, stats = run(train_losses, data, 1)
    loaders = stats["sampler"]["loaders"]
    # sampler="auto": gnnorch's, unless pyg-lib is installed and timed faster on this graph
    assert [entry["backend"] for entry in loaders] == ["gnnorch"] or (
        pyg_typing.WITH_PYG_LIB and [entry["backend"] for entry in loaders] == ["pyg-lib"])
    assert stats["trim"]["models"][0]["trimmed"]
    bs = value["batch_size"]
    assert stats["trim"]["models"][0]["materialized"] == 0
    assert torch.isfinite(value["out"][:bs]).all()
    # the last output, read after the last optimizer step beyond its seed rows: recomputed
    # untrimmed with the parameters of that forward (exact values, never placeholders)
    with pytest.warns(gnnorch.errors.TrimmingWarning, match="recomputed"):
        rest = value["out"][bs:].clone()
    assert torch.isfinite(rest).all() and rest.abs().sum() > 0


def test_reading_non_seed_rows_recomputes_exactly():
    """A loss over every row (not only the seeds) trains exactly as untrimmed: the first
    trimmed forward is recomputed untrimmed and trimming switches itself off, with a warning."""
    args = (cora(), 1, None, "sage", (5, 5), True, 0.0)
    plain, _ = run(train_losses, *args, trim=False)
    with pytest.warns(gnnorch.errors.TrimmingWarning, match="out\\[:batch.batch_size\\]"):
        value, stats = run(train_losses, *args)
    assert all(torch.isfinite(torch.tensor(value["losses"])))
    torch.testing.assert_close(torch.tensor(value["losses"]), torch.tensor(plain["losses"]),
                               rtol=1e-4, atol=1e-5)
    (model,) = stats["trim"]["models"]
    assert not model["trimmed"] and model["materialized"] == 1
    assert "read beyond the seed rows" in model["reason"]


def test_batchnorm_model_is_left_untrimmed_with_reason():
    value, stats = run(train_losses, cora(), 1, "batch_norm")
    (model,) = stats["trim"]["models"]
    assert not model["trimmed"] and "BatchNorm" in model["reason"]
    assert type(value["out"]) is torch.Tensor and not torch.isnan(value["out"]).any()


def test_trim_false_and_pyg_sampler_are_respected():
    pytest.importorskip("torch_sparse")
    _, stats = run(train_losses, cora(), 1, sampler="pyg", trim=False)
    assert stats["sampler"]["loaders"][0]["backend"] in ("torch_sparse", "pyg-lib")
    assert not stats["trim"]["enabled"] and not stats["trim"]["models"]


def test_pyg_sampler_is_trimmed_from_recovered_hops():
    pytest.importorskip("torch_sparse")
    data = cora()
    _, stats = run(train_losses, data, 1, sampler="pyg")
    assert stats["trim"]["models"][0]["trimmed"], stats["trim"]


def test_bad_feature_values_name_the_option():
    with pytest.raises(ValueError, match="sampler"):
        gnnorch.Runtime(train_losses, sampler="fast")
    with pytest.raises(ValueError, match="trim"):
        gnnorch.Runtime(train_losses, trim="yes")


@pytest.mark.usefixtures("no_leftover_children")
def test_two_ranks_trim_too():
    runtime = gnnorch.Runtime(train_losses, processes=2)
    value = runtime(cora(), 1)
    for rank in (0, 1):
        assert runtime.last_run.stats[rank]["trim"]["models"][0]["trimmed"]
    assert all(torch.isfinite(torch.tensor(value["losses"])))
