"""The end-of-call summary (`gnnorch.execute.summary.render_summary`, `Runtime.summary()`): one
short text per call on stderr, on a real run and on synthetic statistics (missing or odd keys
leave their part out, never raise)."""
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch import CacheConfig, RunOptions
from gnnorch.execute import RunInfo
from gnnorch.execute.summary import render_summary
from gnnorch.launch.plan import CorePlan, RankCores

from helpers import cora


def sage_train(data, epochs=2):
    torch.manual_seed(0)
    train_loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                                  batch_size=35, shuffle=True)
    eval_loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.val_mask,
                                 batch_size=250)
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(epochs):
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        for batch in eval_loader:
            model(batch.x, batch.edge_index)[:batch.batch_size].argmax(dim=-1)
    return "done"


def test_a_real_call_prints_one_summary_and_keeps_it(capsys):
    runtime = gnnorch.Runtime(sage_train, processes=1, sampler="gnnorch",
                              launch={"threads": 1})
    assert runtime.summary() is None
    assert runtime(cora(), epochs=2) == "done"
    err = capsys.readouterr().err
    text = runtime.summary()
    lines = text.splitlines()
    assert err.count("gnnorch: 1 rank on cpu") == 1 and text in err
    assert lines[0].startswith("gnnorch: 1 rank on cpu (0 sampler cores + 1 thread; bound to")
    body = "\n".join(lines[1:])
    assert "epochs (2, rank 0): " in body                    # 2 epochs of 140 seeds / 35
    assert "sampler: train gnnorch, eval gnnorch" in body
    assert "trim: GraphSAGE trimmed (verified: " in body
    assert "rewrite: " in body
    assert "cache: off; partition: off; data path: host" in body
    assert len(lines) <= 8                                    # short: nothing per batch
    assert err.count("\n") <= len(lines) + 2


def test_verbose_false_prints_nothing_but_keeps_the_summary(capsys):
    runtime = gnnorch.Runtime(sage_train, processes=1, verbose=False, trim=False,
                              rewrite=False, launch={"threads": 1})
    runtime(cora(), epochs=1)
    assert "gnnorch" not in capsys.readouterr().err
    text = runtime.summary()
    assert "trim: off (trim=False)" in text and "rewrite: off (rewrite=False)" in text
    assert text == render_summary(runtime.last_run)        # the same pure function


def _info(stats: dict, options: RunOptions = RunOptions(), epochs=None) -> RunInfo:
    plan = CorePlan(processes=2, sampler_cores=1, threads=2)
    cores = [RankCores(0, (0, 1), (2,)), RankCores(1, (3, 4), (5,))]
    epochs = epochs if epochs is not None else {0: [
        {"loader": 0, "epoch": e, "batches": 4, "seeds": 140, "seconds": s}
        for e, s in enumerate([1.5, 1.25, 1.0])]}
    return RunInfo(plan, cores, "cpu", None, 4.5, epochs, options, {0: stats, 1: stats})


FULL = {
    "sampler": {"loaders": [
        {"role": "train", "index": 0, "backend": "gnnorch", "num_workers": "plan"},
        {"role": "eval", "index": None, "backend": "pyg", "num_workers": "user (2)"},
        {"role": "eval", "index": None, "backend": "pyg", "num_workers": "user (2)"}]},
    "trim": {"enabled": True, "models": [
        {"model": "GraphSAGE", "trimmed": True, "verified_by": "trusted"},
        {"model": "Net", "trimmed": False, "reason": "BatchNorm over vertices"}]},
    "rewrite": {"mode": True, "layers": [
        {"name": "convs.0", "type": "GCNConv", "rewritten_order": "aggregate-first",
         "calls": 10, "rewritten_calls": 8},
        {"name": "convs.1", "type": "GCNConv", "rewritten_order": "aggregate-first",
         "calls": 10, "rewritten_calls": 0}]},
    "cache": {"enabled": True, "status": "active", "staleness_bound": 2,
              "max_staleness_seen": 1, "hot_vertices": 270, "hit_rate": 0.25},
}


def test_synthetic_run_renders_every_part():
    text = render_summary(_info(FULL, RunOptions(cache=CacheConfig(staleness=2))),
                          tuning="tuned in 3.0 s (5 probes; ...)")
    assert text.splitlines() == [
        "gnnorch: 2 ranks on cpu (1 sampler core + 2 threads per rank; bound to cpus 0-5); "
        "4.50 s in all",
        "  autotune: tuned in 3.0 s (5 probes; ...)",
        "  epochs (3, rank 0): 1.50, 1.25, 1.00 s (mean 1.25 s)",
        "  sampler: train gnnorch, 2x eval pyg [num_workers user (2)]",
        "  trim: GraphSAGE trimmed (verified: trusted), Net not trimmed (BatchNorm over "
        "vertices)",
        "  rewrite: convs.0 aggregate-first (8/10 calls)",
        "  cache: active, staleness <= 2 (max seen 1), 270 hot vertices, hit rate 25%; "
        "partition: off; data path: host",
    ]


def test_data_path_says_where_loaders_sample_or_why_not():
    served = {"device": {"active": True, "device": "cuda:0", "loaders": [
        {"role": "train", "served": True, "structure": "gpu", "features": "pinned"},
        {"role": "eval", "served": False, "structure": "host", "features": "host"}]}}
    text = render_summary(_info(served, RunOptions(data_path="device")))
    assert "data path: cuda:0: train sampled on cuda:0, features on pinned host" in text
    off = {"device": {"active": False, "reason": "no GPU visible"}}
    assert "data path: host (no GPU visible)" in render_summary(
        _info(off, RunOptions(data_path="device")))
    assert render_summary(_info(off)).endswith("data path: host")


def test_long_runs_fold_epochs_and_unbound_runs_say_so():
    epochs = {0: [{"loader": 0, "epoch": e, "seconds": 1.0} for e in range(20)]}
    info = _info({}, epochs=epochs)
    info.cores = None
    text = render_summary(info)
    assert "not bound" in text
    assert "epochs (20, rank 0): 1.00, 1.00, 1.00, ..., 1.00, 1.00 s (mean 1.00 s)" in text


def test_missing_or_odd_statistics_are_skipped_not_errors():
    assert render_summary(_info({}, epochs={})).splitlines()[1:] == [
        "  epochs: no training epoch of a NeighborLoader was seen; no loader was sharded, so "
        "unless the function splits its data over ranks itself (torch.distributed), each of "
        "the 2 ranks ran every batch",
        "  cache: off; partition: off; data path: host"]
    alone = _info({}, epochs={})
    alone.plan = CorePlan(processes=1, sampler_cores=0, threads=2)
    assert "  epochs: no training epoch of a NeighborLoader was seen" in \
        render_summary(alone).splitlines()
    odd = {"sampler": {"loaders": [1, None, "x"]}, "trim": "weird", "rewrite": {"layers": "x"},
           "cache": 5, "partition": [], "allocator": None}
    text = render_summary(_info(odd, RunOptions(cache=True, partition_features=True)),
                          tuning=None)
    assert "sampler:" not in text and "trim:" not in text
    assert "rewrite: no layer with a rewrite rule ran" in text
    assert "cache:" not in text and "partition:" not in text
    info = _info(FULL)
    info.stats = {}                                  # no rank reported statistics
    assert render_summary(info).startswith("gnnorch: 2 ranks on cpu")


def test_fork_guard_line_only_when_a_stuck_child_was_killed():
    quiet = {"fork_guard": {"forks": 8, "stuck_killed": 0, "waited_seconds": 0.01}}
    assert "fork guard" not in render_summary(_info(quiet))
    info = _info(quiet)
    info.stats = {0: quiet, 1: {"fork_guard": {"forks": 8, "stuck_killed": 1}}}
    assert ("fork guard: 1 forked child stuck in CPython's after-fork (gh-112275) killed and "
            "forked again") in render_summary(info)
    info.stats = {0: {"fork_guard": {"stuck_killed": "x"}}, 1: {"fork_guard": None}}
    assert "fork guard" not in render_summary(info)


def test_trim_says_no_model_ran_on_a_batch_whatever_the_graph():
    hetero = {"sampler": {"loaders": [{"role": "train", "backend": "pyg", "graph": "HeteroData"}]},
              "trim": {"enabled": True, "models": []}}
    assert "trim: no MessagePassing model ran on a NeighborLoader batch" in \
        render_summary(_info(hetero))
    hetero["trim"]["models"] = [{"model": "GraphModule", "trimmed": True,
                                 "verified_by": "the one-off check"}]
    assert "trim: GraphModule trimmed (verified: the one-off check)" in \
        render_summary(_info(hetero))
    plain = {"sampler": {"loaders": [{"role": "train", "backend": "gnnorch", "graph": "Data"}]},
             "trim": {"enabled": True, "models": []}}
    assert "trim: no MessagePassing model ran on a NeighborLoader batch" in \
        render_summary(_info(plain))
    odd = {"sampler": "?", "trim": {"enabled": True, "models": []}}   # never raises
    assert "trim: no MessagePassing model ran" in render_summary(_info(odd))


def test_trim_names_the_encoder_and_layers_from_data_flow():
    stats = {"trim": {"enabled": True, "models": [
        {"model": "Model", "trimmed": True, "encoder": "encoder",
         "verified_by": "the one-off check"},
        {"model": "Asym", "trimmed": True, "layer_plan": [0, 1, 0, 1],
         "verified_by": "the one-off check"}]}}
    text = render_summary(_info(stats))
    assert "Model trimmed at its encoder encoder (verified: the one-off check)" in text
    assert "Asym trimmed with layers from data flow (verified: the one-off check)" in text


def test_rewrite_none_taken_counts_its_layers():
    def text(n):
        layers = [{"name": f"convs.{i}", "calls": 3, "rewritten_calls": 0} for i in range(n)]
        return render_summary(_info({"rewrite": {"mode": True, "layers": layers}}))

    assert "rewrite: none taken (1 layer kept its order)" in text(1)
    assert "rewrite: none taken (3 layers kept their order)" in text(3)
