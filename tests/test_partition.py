"""Partitioned features (issue 16, second part): the partitioner, the feature store and its
exchange, the loader seam under torchrun, and the option.

* the partitioner is deterministic, balanced within its tolerance, owns every vertex once and
  cuts fewer edges than a random balanced assignment (Cora, a power-law graph);
* gathered rows equal ``data.x[n_id]`` bit for bit, in one process (`local_exchange`) and in
  two gloo processes (local, replicated hot and fetched rows; unequal batch counts and loops
  left early drain instead of hanging);
* under torchrun (2 nodes x 1 rank, loopback) training with ``partition_features`` gives the
  replicated run's losses and validation accuracy (with and without loader workers), and the
  bytes fetched per epoch fall as the hot budget grows;
* the option is validated like every other one.
"""
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

import gnnorch
from gnnorch.datasets import power_law_graph
from gnnorch.run_options import RunOptions
from gnnorch.partition import (FeatureStore, PartitionConfig, choose_hot, edge_cut,
                               hot_scores, local_exchange, open_features, partition_graph,
                               save_features)
from gnnorch.partition.partitioner import capacity

from helpers import cora

pytestmark = pytest.mark.usefixtures("no_leftover_children")

SCRIPT = Path(__file__).resolve().parent / "torchrun_scripts" / "partition_train.py"
TWO_CORES = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable CPUs")


def random_cut(edge_index, num_nodes, parts, seed=0):
    """Edge cut of a random balanced assignment."""
    gen = torch.Generator().manual_seed(seed)
    owner = torch.empty(num_nodes, dtype=torch.long)
    owner[torch.randperm(num_nodes, generator=gen)] = torch.arange(num_nodes) % parts
    return edge_cut(edge_index, owner)


@pytest.fixture(scope="module")
def power_law():
    return power_law_graph(num_nodes=6000, avg_degree=10.0, num_features=16, num_classes=8,
                           seed=1)


# -- 1. the partitioner --------------------------------------------------------------------
@pytest.mark.parametrize("parts", [2, 3, 4])
def test_partition_is_deterministic_balanced_and_owns_every_vertex_once(power_law, parts):
    data = power_law
    n = data.num_nodes
    threads = torch.get_num_threads()
    owner = partition_graph(data.edge_index, n, parts)
    try:
        torch.set_num_threads(1)               # another thread count: the same partition
        again = partition_graph(data.edge_index, n, parts)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(owner, again)
    assert owner.shape == (n,) and owner.dtype == torch.long
    assert int(owner.min()) >= 0 and int(owner.max()) < parts
    sizes = torch.bincount(owner, minlength=parts)
    assert int(sizes.sum()) == n
    assert capacity(n, parts, 0.03) == max(-(-n // parts), 103 * n // (100 * parts))
    assert int(sizes.max()) <= capacity(n, parts, 0.03)
    assert int(sizes.min()) >= n - (parts - 1) * capacity(n, parts, 0.03)


@pytest.mark.parametrize("graph", ["cora", "power_law"])
@pytest.mark.parametrize("parts", [2, 4])
def test_partition_cuts_fewer_edges_than_a_random_assignment(power_law, graph, parts):
    data = cora() if graph == "cora" else power_law
    n = data.num_nodes
    ours = edge_cut(data.edge_index, partition_graph(data.edge_index, n, parts))
    blocks = edge_cut(data.edge_index, partition_graph(data.edge_index, n, parts, rounds=0))
    rand = random_cut(data.edge_index, n, parts)
    print(f"{graph}, {parts} parts: edge cut {ours:.3f} (BFS blocks {blocks:.3f}, "
          f"random {rand:.3f})")
    assert ours <= blocks + 1e-9
    assert ours < 0.85 * rand


def test_partition_edge_cases():
    ring = torch.stack([torch.arange(10), (torch.arange(10) + 1) % 10])
    assert partition_graph(ring, 10, 1).tolist() == [0] * 10
    owner = partition_graph(ring, 10, 2)
    assert torch.bincount(owner).tolist() == [5, 5] and edge_cut(ring, owner) == 0.2
    # isolated vertices only: blocks by id, nothing to refine
    empty = torch.empty(2, 0, dtype=torch.long)
    assert torch.bincount(partition_graph(empty, 7, 3)).tolist() == [3, 2, 2]
    with pytest.raises(ValueError, match="parts must be >= 1"):
        partition_graph(ring, 10, 0)


# -- 2. the store --------------------------------------------------------------------------
def test_gathered_rows_equal_x_in_one_process(power_law):
    data = power_law
    n = data.num_nodes
    owner = partition_graph(data.edge_index, n, 3)
    row_bytes = 16 * 4
    scores, kind = hot_scores("sampling", data.edge_index, n,
                              data.train_mask.nonzero().view(-1), [5, 5])
    assert kind == "sampling"
    stores = [FeatureStore.build(data.x, owner, r, 3,
                                 choose_hot(scores, owner, r, 200 * row_bytes, row_bytes))
              for r in range(3)]
    exchange = local_exchange(stores)
    for r, store in enumerate(stores):
        assert store.local_count == int((owner == r).sum()) and store.hot_count == 200
        assert store.held_bytes == (store.local_count + 200) * row_bytes
        n_id = torch.randperm(n, generator=torch.Generator().manual_seed(r))[:700]
        x, plan = store.gather(n_id, exchange)
        assert torch.equal(x, data.x[n_id])
        assert plan.local > 0 and plan.hot > 0 and plan.send_ids.numel() > 0
        assert plan.local + plan.hot + plan.send_ids.numel() == 700
        assert bool((owner[plan.send_ids] != r).all())
    with pytest.raises(RuntimeError, match="does not own"):
        stores[0].serve((owner == 1).nonzero().view(-1)[:3])
    with pytest.raises(ValueError, match="own partition"):
        FeatureStore.build(data.x, owner, 0, 3, (owner == 0).nonzero().view(-1)[:2])


def test_memory_mapped_features_round_trip_and_feed_the_store(power_law, tmp_path):
    data = power_law
    path = save_features(data.x, tmp_path / "x.bin")
    x = open_features(path)
    assert torch.equal(x, data.x) and x.dtype == data.x.dtype
    owner = partition_graph(data.edge_index, data.num_nodes, 2)
    store = FeatureStore.build(x, owner, 1, 2)
    assert store.rows.shape == (int((owner == 1).sum()), 16)
    mine = (owner == 1).nonzero().view(-1)
    assert torch.equal(store.rows, data.x[mine])
    half = torch.arange(6, dtype=torch.float16).view(3, 2)
    assert torch.equal(open_features(save_features(half, tmp_path / "h.bin")), half)


@TWO_CORES
def test_gathered_rows_equal_x_across_two_gloo_processes(tmp_path):
    environ = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK",
                 "LOCAL_WORLD_SIZE"):
        environ.pop(name, None)
    logs = [open(tmp_path / f"rank{r}.log", "wb") for r in range(2)]  # noqa: SIM115
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), "store", str(r),
                               str(tmp_path / "filestore"), str(tmp_path)],
                              stdout=logs[r], stderr=subprocess.STDOUT, env=environ)
             for r in range(2)]
    try:
        for proc in procs:
            proc.wait(timeout=120)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for log in logs:
            log.close()
    output = "\n".join((tmp_path / f"rank{r}.log").read_text(errors="replace")
                       for r in range(2))
    assert [p.returncode for p in procs] == [0, 0], output
    got = [torch.load(tmp_path / f"store{r}.pt") for r in range(2)]
    x = got[0]["x"]
    assert torch.equal(got[0]["owner"], got[1]["owner"])       # the same partition
    for rank, result in enumerate(got):
        assert result["held"] == result["local"] + 60 and not result["view_has_x"]
        assert set(result["hot"].tolist()).isdisjoint(
            (result["owner"] == rank).nonzero().view(-1).tolist())
        for step, g in enumerate(result["gathers"]):
            assert g["n_id"].numel() == 300 + 50 * rank + step
            assert torch.equal(g["x"], x[g["n_id"]])
            assert g["local"] > 0 and g["hot"] > 0 and g["remote"] > 0
        # unequal batch counts (5 and 3) and prefetching loops left after 1 and 2 batches
        assert len(result["fed"]) == 5 - 2 * rank and len(result["left"]) == 1 + rank
        for n_id, rows in result["fed"] + result["left"]:
            assert torch.equal(rows, x[n_id])
        epochs = result["stats"]["epochs"]
        assert [e["batches"] for e in epochs] == [5 - 2 * rank, 1 + rank]
        assert [e["prefetch"] for e in epochs] == [False, True]
        assert epochs[1]["rounds"] == 2 + rank         # one batch fetched ahead
        assert epochs[0]["drain_rounds"] == 1 + 2 * rank   # rank 1 serves rank 0's last two
        assert epochs[1]["drain_rounds"] == 2 - rank       # rank 0 serves rank 1's third
        assert result["stats"]["stores"][0]["parts"] == 2
    served = sum(e["rows_served"] for r in got for e in r["stats"]["epochs"])
    fetched = sum(e["rows_remote"] for r in got for e in r["stats"]["epochs"])
    assert served == fetched > 0


# -- 3. under torchrun ---------------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(out, *args, timeout=240):
    """partition_train.py as two torchrun nodes on loopback; their output. Fails on a hang
    or a process left behind (every process of the run is killed first)."""
    port = free_port()
    environ = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    procs, logs = [], []
    for node in range(2):
        logs.append(open(out / f"node{node}.log", "wb"))  # noqa: SIM115 - closed below
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}",
             "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--nproc-per-node=1",
             "--max-restarts=0", "--monitor-interval=0.1", str(SCRIPT), *args, str(out)],
            stdout=logs[node], stderr=subprocess.STDOUT, env=environ, start_new_session=True))
    seen, start = [], time.monotonic()
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() - start < timeout:
            for proc in procs:
                try:
                    seen += [c for c in psutil.Process(proc.pid).children(recursive=True)
                             if c not in seen]
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.1)
        hung = any(p.poll() is None for p in procs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        _, alive = psutil.wait_procs(seen, timeout=3)
        for proc in alive:
            proc.kill()
        for log in logs:
            log.close()
    output = "\n".join((out / f"node{i}.log").read_text(errors="replace") for i in range(2))
    assert not hung, f"torchrun still running after {timeout} s:\n{output}"
    assert not alive, f"processes left behind: {alive}"
    assert [p.returncode for p in procs] == [0, 0], output
    return output


@TWO_CORES
def test_two_torchrun_nodes_train_as_the_replicated_run_and_fetch_less_with_hot_rows(tmp_path):
    torchrun(tmp_path, "train")
    for rank in range(2):
        runs = json.loads((tmp_path / f"train{rank}.json").read_text())
        base, base_workers = runs["replicated"], runs["replicated_workers"]
        assert base["partition"] is None and len(base["losses"]) == 2 * 5   # 140 / 2 / 16
        for name, ref in [("budget_0", base), ("budget_small", base), ("budget_large", base),
                          ("budget_0_workers", base_workers)]:
            run = runs[name]
            assert run["accuracy"] == ref["accuracy"], name
            assert torch.allclose(torch.tensor(run["losses"]), torch.tensor(ref["losses"]),
                                  rtol=1e-6, atol=1e-7), name
        fetched, hot = [], []
        for name in ("budget_0", "budget_small", "budget_large"):
            stats = runs[name]["partition"]
            assert stats["enabled"] and stats["reason"] is None
            store = stats["stores"][0]
            assert sum(store["partition_sizes"]) == 2708 and store["parts"] == 2
            assert max(store["partition_sizes"]) <= capacity(2708, 2, 0.03)
            assert store["local_rows"] == store["partition_sizes"][rank]
            assert [e["partitioned"] for e in stats["loaders"]] == [True, True]
            train = [e for e in stats["epochs"] if e["training"]]
            evals = [e for e in stats["epochs"] if not e["training"]]
            assert [e["batches"] for e in train] == [5, 5]
            assert [e["batches"] for e in evals] == [4, 4]              # 500 / 128
            first = train[0]
            assert first["bytes_fetched"] == first["rows_remote"] * store["row_bytes"]
            assert first["rows_local"] > 0
            fetched.append(first["bytes_fetched"])
            hot.append(store["hot_rows"])
        print(f"rank {rank}: bytes fetched in the first epoch, hot budget 0 / 1 / 64 MiB: "
              f"{fetched} (hot rows {hot})")
        assert hot[0] == 0 < hot[1] < hot[2]
        assert fetched[0] > fetched[1] > fetched[2] == 0
        workers = runs["budget_0_workers"]["partition"]["epochs"]
        assert workers[0]["training"] and workers[0]["prefetch"] and \
            workers[0]["bytes_fetched"] > 0


def _sage_losses(data, epochs):
    import torch.nn.functional as F
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[10, 5], input_nodes=data.train_mask,
                            batch_size=256, shuffle=True)
    model = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=8, dropout=0.3)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


@TWO_CORES
def test_own_rank_processes_with_partitioned_features_train_as_replicated():
    """gnnorch's own processes=2 (not torchrun): the same losses, rows fetched."""
    data = power_law_graph(num_nodes=20_000, avg_degree=10.0, num_features=32, num_classes=8,
                           seed=2)
    runs = {}
    for name, option in [("replicated", False), ("partitioned", {"hot_budget_mb": 0.5})]:
        runtime = gnnorch.Runtime(_sage_losses, processes=2, launch={"threads": 1, "bind": False}, seed=5,
                                  sampler="gnnorch", rewrite=False, partition_features=option)
        runs[name] = (runtime(data, 2), runtime.last_run)
    (base, _), (losses, info) = runs["replicated"], runs["partitioned"]
    assert len(losses) == len(base) == 2 * 8                   # 2000 seeds / 2 ranks / 128
    assert torch.allclose(torch.tensor(losses), torch.tensor(base), rtol=1e-6, atol=1e-7)
    for rank in range(2):
        stats = info.stats[rank]["partition"]
        assert stats["enabled"] and stats["stores"][0]["hot_rows"] == 0.5 * 2 ** 20 // 128
        assert all(e["bytes_fetched"] > 0 and e["rows_hot"] > 0 for e in stats["epochs"])


# -- 4. the option -------------------------------------------------------------------------
def _train(data):
    from torch_geometric.loader import NeighborLoader

    loader = NeighborLoader(data, num_neighbors=[3], batch_size=512, shuffle=True)
    return [bool(torch.equal(b.x, data.x[b.n_id])) for b in loader]


def test_option_validation():
    for bad in ("yes", 1, None, 0.5, ["hot_budget_mb"]):
        with pytest.raises(ValueError, match="partition_features must be True, False, a gnnorch.PartitionConfig or a dict"):
            gnnorch.Runtime(_train, partition_features=bad)
    with pytest.raises(TypeError, match=r"partition_features got unexpected setting\(s\) "
                                        r"\['hot_budget'\]; valid settings are: hot_budget_mb"):
        gnnorch.Runtime(_train, partition_features={"hot_budget": 1})
    for field, value, allowed in [("hot_budget_mb", -1, ">= 0"), ("hot_budget_mb", "1", ">= 0"),
                                  ("hotness", "pagerank", "one of 'sampling', 'degree'"),
                                  ("imbalance", 2.0, r"in \[0, 1\]"),
                                  ("refine_rounds", -1, "integer in 0..1000"),
                                  ("prefetch", "no", "True or False")]:
        with pytest.raises(ValueError, match=rf"partition_features\['{field}'\] must be .*"
                                             rf"{allowed}"):
            gnnorch.Runtime(_train, partition_features={field: value})
    with pytest.raises(ValueError, match=r"partition_features\['hot_budget_mb'\]"):
        PartitionConfig(hot_budget_mb=float("nan"))
    runtime = gnnorch.Runtime(_train, partition_features={"hot_budget_mb": 2})
    assert runtime.run_options.partition_config == PartitionConfig(hot_budget_mb=2)
    features = RunOptions(partition_features=PartitionConfig(hot_budget_mb=3, hotness="degree"))
    assert RunOptions.from_dict(json.loads(json.dumps(features.to_dict()))) == features
    assert RunOptions(partition_features=True).partition_config == PartitionConfig()
    assert RunOptions().partition_config is None


def test_one_rank_is_a_no_op_that_says_so():
    data = cora()
    runtime = gnnorch.Runtime(_train, processes=1, autotune=False, partition_features=True)
    assert runtime(data) == [True] * 6                      # the loader keeps its x
    stats = runtime.last_run.stats[0]["partition"]
    assert stats["enabled"] is False and stats["reason"].startswith("one rank")
    assert stats["loaders"] == [{"role": "train", "index": 0, "partitioned": False,
                                 "reason": "one rank: nothing to partition"}]
