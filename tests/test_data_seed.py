"""The run's data seed (`gnnorch.intercept.data_seed`): fixed where the function builds its
first loader, so a function that seeds torch itself repeats its data order under the runtime
(two ranks' shard order, the device path's sampling) as it repeats its initialisation; the
ranks agree on it; ``Runtime(seed=)`` still decides when given."""
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch.errors import GnnorchWarning
from gnnorch.intercept.data_seed import generator_digest

from helpers import cora

pytestmark = pytest.mark.usefixtures("no_leftover_children")


def test_the_digest_reads_the_generator_without_advancing_it():
    torch.manual_seed(3)
    first = generator_digest()
    assert generator_digest() == first                      # read, not advanced
    after = torch.rand(1)
    torch.manual_seed(3)
    assert torch.equal(torch.rand(1), after)                # the digest drew nothing
    assert generator_digest() != first                      # the state moved on: another digest
    torch.manual_seed(4)
    assert generator_digest() != first
    assert 0 <= first < 2 ** 31


def seeded_inside(data, epochs, seed=7, rank_seeds=False):
    """Seeds torch itself (optionally per rank), then trains a shuffled, sampled loader and
    records the seed ids of every training batch."""
    torch.manual_seed(seed + (dist.get_rank() if rank_seeds else 0))
    loader = NeighborLoader(data, num_neighbors=[5, 5], input_nodes=data.train_mask,
                            batch_size=20, shuffle=True)
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    seen, losses = [], []
    for _ in range(epochs):
        model.train()
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            optimizer.step()
            seen.append(batch.n_id[:batch.batch_size].tolist())
            losses.append(float(loss))
    return {"seen": seen, "losses": losses}


def _call(runtime, caller_seed, *args, **kwargs):
    torch.manual_seed(caller_seed)          # the caller's state differs between the calls
    return runtime(*args, **kwargs)


def test_two_ranks_repeat_a_function_that_seeds_itself():
    data = cora()
    runtime = gnnorch.Runtime(seeded_inside, processes=2, autotune=False)
    first = _call(runtime, 100, data, 2)
    sources = {runtime.last_run.stats[r]["data_seed"]["source"] for r in range(2)}
    seeds = {runtime.last_run.stats[r]["data_seed"]["seed"] for r in range(2)}
    second = _call(runtime, 200, data, 2)
    assert first == second                     # the same shard order, draws and losses
    assert sources == {"torch's generator where the first loader was built"}
    assert len(seeds) == 1                     # one seed for both ranks
    other = runtime(data, 2, seed=8)           # the function's own seed changes the order
    assert other["seen"] != first["seen"]


def test_the_shard_order_follows_the_function_and_the_runtime_seed_the_ranks_sampling():
    # a sharded epoch deals the permutation the function's own generator draws, as one
    # process's epoch is (`intercept.epoch_order`); Runtime(seed=) seeds the ranks' own
    # streams (the neighbours each rank samples), not that order
    data = cora()
    runtime = gnnorch.Runtime(seeded_inside, processes=2, autotune=False, seed=5)
    first = runtime(data, 1, seed=7)
    assert {runtime.last_run.stats[r]["data_seed"]["source"] for r in range(2)} == \
        {"Runtime(seed=)"}
    assert runtime.last_run.stats[0]["data_seed"]["seed"] == 5
    record = runtime.last_run.stats[0]["sampler"]["loaders"][0]
    assert record["order"].startswith("PyG's: drawn from the function's generator"), record
    assert runtime(data, 1, seed=7) == first                 # everything repeats
    other_model = runtime(data, 1, seed=8)                   # another order, as in one process
    assert [sorted(s) for s in other_model["seen"]] != [sorted(s) for s in first["seen"]]
    other_run = gnnorch.Runtime(seeded_inside, processes=2, autotune=False, seed=6)(data, 1,
                                                                                    seed=7)
    assert other_run["seen"] == first["seen"]                # the order: the function's
    assert other_run["losses"] != first["losses"]            # its sampling: the run seed's


def gathered(data, rank_seeds=False):
    """Every rank's training seeds of one sharded epoch, gathered over the ranks: sorted."""
    out = seeded_inside(data, 1, rank_seeds=rank_seeds)
    mine = torch.tensor(sorted(s for batch in out["seen"] for s in batch), dtype=torch.long)
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([mine.numel()]))
    parts = [torch.zeros(int(n), dtype=torch.long) for n in sizes]
    dist.all_gather(parts, mine)
    return torch.cat(parts).sort().values.tolist()


def test_two_ranks_deal_out_one_permutation():
    data = cora()
    runtime = gnnorch.Runtime(gathered, processes=2, autotune=False)
    got = _call(runtime, 3, data)
    assert got == data.train_mask.nonzero().view(-1).tolist()   # each seed once


def test_ranks_seeded_apart_take_the_run_seed_and_still_deal_out_one_permutation():
    data = cora()
    runtime = gnnorch.Runtime(gathered, processes=2, autotune=False)
    # rank 0's warning reaches the caller's `warnings.showwarning` (`launch.relay`)
    with pytest.warns(GnnorchWarning, match="the ranks' torch generators differ"):
        got = _call(runtime, 11, data, rank_seeds=True)
    assert got == data.train_mask.nonzero().view(-1).tolist()   # each seed once
    for rank in range(2):
        record = runtime.last_run.stats[rank]["data_seed"]
        assert record["source"] == "torch's generator where the first loader was built"
        assert record["shard_source"].startswith("the run's seed"), record
        assert record["shard_seed"] == 11           # torch.initial_seed() of the caller


def test_one_process_on_the_device_path_repeats_a_function_that_seeds_itself():
    # the device path samples from generators of its own, seeded from the data seed
    data = cora()
    runtime = gnnorch.Runtime(seeded_inside, processes=1, autotune=False, data_path="device")
    first = _call(runtime, 100, data, 2)
    record = runtime.last_run.stats[0]["data_seed"]
    assert record["source"] == "torch's generator where the first loader was built"
    second = _call(runtime, 200, data, 2)
    assert first == second
    assert runtime(data, 2, seed=8)["losses"] != first["losses"]


def a_loader_on_rank_zero_only(data, train):
    """Rank 0 alone builds a loader, and evaluates it or trains on it."""
    if dist.get_rank() == 0:
        loader = NeighborLoader(data, num_neighbors=[5], input_nodes=data.train_mask,
                                batch_size=16, shuffle=True)
        model = GraphSAGE(data.num_features, 8, num_layers=1, out_channels=7)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with torch.set_grad_enabled(train):
            for batch in loader:
                loss = F.cross_entropy(model(batch.x, batch.edge_index)[:batch.batch_size],
                                       batch.y[:batch.batch_size])
                if train:
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
    return 1


def test_a_loader_of_some_ranks_only_runs_unless_they_train_on_it():
    from gnnorch.errors import CollectiveError

    runtime = gnnorch.Runtime(a_loader_on_rank_zero_only, processes=2, autotune=False,
                              launch={"threads": 1, "collective_timeout": 8})
    assert runtime(cora(), False) == 1          # built and evaluated on rank 0: no comparison
    with pytest.raises(CollectiveError, match="data seeds"):
        runtime(cora(), True)                   # trained there alone: it cannot be sharded
