"""A sharded loader's epoch deals PyG's own permutation, drawn from the function's generator as
PyG's loader draws it (`gnnorch.intercept.epoch_order`): p ranks over a kept-whole epoch print
one process's numbers exactly, a sharded epoch trains one process's global batches, and the
function's generator moves as in one process. Where the ranks' draws differ, the run seed's
permutation, as before."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import RandomSampler
from torch_geometric.datasets import FakeDataset
from torch_geometric.loader import DataLoader, ImbalancedSampler
from torch_geometric.nn import GINConv, global_add_pool

import gnnorch
from gnnorch.intercept.data_seed import generator_digest
from gnnorch.intercept.epoch_order import permutation_digest
from gnnorch.intercept.shard import ShardSampler

pytestmark = pytest.mark.usefixtures("no_leftover_children")


def graphs(n: int = 64) -> FakeDataset:
    torch.manual_seed(0)
    return FakeDataset(num_graphs=n, avg_num_nodes=10, num_channels=8, num_classes=2,
                       task="graph")


# -- the draw itself -----------------------------------------------------------------------
def test_a_shuffle_draws_randomsamplers_permutation_and_moves_the_generator_alike():
    torch.manual_seed(11)
    want = list(RandomSampler(range(50)))
    after = torch.get_rng_state()
    torch.manual_seed(11)
    shard = ShardSampler(0, 2, seed=0, batch_size=4)
    shard.num_items = 50
    assert shard.draw_as_pyg().tolist() == want
    assert torch.equal(torch.get_rng_state(), after)


def test_a_loaders_own_generator_is_drawn_on_as_randomsampler_draws_on_it():
    own = torch.Generator().manual_seed(5)
    want = list(RandomSampler(range(30), generator=own))   # with its run-out draw
    after = own.get_state()
    own.manual_seed(5)
    before = torch.get_rng_state()
    shard = ShardSampler(0, 2, seed=0, batch_size=4, generator=own)
    shard.num_items = 30
    assert shard.draw_as_pyg().tolist() == want
    assert torch.equal(own.get_state(), after)
    assert torch.equal(torch.get_rng_state(), before)       # the default one is not touched


def test_a_source_is_drawn_once_and_an_unshuffled_loader_draws_nothing():
    dataset = graphs(40)
    source = ImbalancedSampler(dataset)
    torch.manual_seed(2)
    want = list(source)
    torch.manual_seed(2)
    shard = ShardSampler(0, 2, seed=0, source=source, batch_size=4)
    assert shard.draw_as_pyg().tolist() == want
    plain = ShardSampler(0, 2, seed=0, shuffle=False, batch_size=4)
    plain.num_items = 40
    before = torch.get_rng_state()
    assert plain.draw_as_pyg() is None
    assert torch.equal(torch.get_rng_state(), before)


def test_a_taken_permutation_is_dealt_once_then_the_run_seeds_again():
    shard = ShardSampler(1, 2, seed=3, batch_size=4)
    shard.num_items = 10
    taken = torch.arange(9, -1, -1)
    shard.take(taken)
    assert list(shard) == [8, 6, 4, 2, 0]          # offsets 1 and 3 of each batch of 4
    assert list(shard) == shard.dealt(shard.permutation(1)).tolist()
    assert permutation_digest(taken) == permutation_digest(taken.clone())
    assert permutation_digest(taken) != permutation_digest(taken.flip(0))


# -- p ranks and one process ---------------------------------------------------------------
class NormGin(torch.nn.Module):
    """A BatchNorm (whole batches in every rank: `epoch_role.kept_whole`) and dropout (drawn
    from the function's generator in a whole batch's step)."""

    def __init__(self, norm: bool = True) -> None:
        super().__init__()
        self.conv = GINConv(torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16) if norm else torch.nn.Identity(),
            torch.nn.ReLU()))
        self.head = torch.nn.Linear(16, 2)

    def forward(self, x, edge_index, batch):
        h = F.dropout(self.conv(x, edge_index), p=0.5, training=self.training)
        return self.head(global_add_pool(h, batch))


def classify(dataset, epochs: int, num_workers: int = 0, own_generator: bool = False) -> dict:
    """PyG's graph classification loop (``mutag_gin.py``); every epoch's printed loss, the
    parameters, and the function's generator at the end."""
    torch.manual_seed(1)
    generator = torch.Generator().manual_seed(9) if own_generator else None
    loader = DataLoader(dataset, batch_size=16, shuffle=True, num_workers=num_workers,
                        generator=generator)
    model = NormGin()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(epochs):
        model.train()
        total = 0.0
        for batch in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(batch.x, batch.edge_index, batch.batch), batch.y)
            loss.backward()
            optimizer.step()
            total += loss.item() * batch.num_graphs
        losses.append(total / len(dataset))
    return {"losses": losses, "state": model.state_dict(), "rng": generator_digest()}


@pytest.mark.parametrize("num_workers, own_generator", [(0, False), (2, False), (0, True)])
def test_kept_whole_epochs_over_two_ranks_print_one_processs_numbers(num_workers,
                                                                      own_generator):
    # the same batches and the same draws (the function's generator ends in one state); the
    # numbers as equal as the ranks' thread counts let float sums be
    dataset = graphs()
    runtime = gnnorch.Runtime(classify, processes=2, verbose=False)
    got = runtime(dataset, 3, num_workers, own_generator)
    want = classify(dataset, 3, num_workers, own_generator)
    assert got["rng"] == want["rng"]
    assert got["losses"] == pytest.approx(want["losses"], rel=1e-5)
    for key, value in want["state"].items():
        torch.testing.assert_close(got["state"][key], value, atol=1e-5, rtol=1e-4)
    [record] = runtime.last_run.stats[0]["sampler"]["loaders"]
    assert "BatchNorm1d" in record["kept_whole"]
    assert record["order"].startswith("PyG's: drawn from the function's generator")


def drawing_by_rank(dataset) -> None:
    """An epoch of `NormGin` after a draw made by rank 1 only: the ranks' generators part."""
    torch.manual_seed(1)
    if dist.get_rank() == 1:
        torch.rand(1)
    model = NormGin()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for batch in DataLoader(dataset, batch_size=16, shuffle=True):
        optimizer.zero_grad()
        F.cross_entropy(model(batch.x, batch.edge_index, batch.batch), batch.y).backward()
        optimizer.step()


def test_ranks_that_draw_apart_deal_the_run_seeds_permutation_and_say_so():
    dataset = graphs()
    runtime = gnnorch.Runtime(drawing_by_rank, processes=2, verbose=False)
    with warnings.catch_warnings(record=True) as seen:   # rank 0's, relayed (`launch.relay`)
        warnings.simplefilter("always")
        runtime(dataset)
    for rank in (0, 1):
        [record] = runtime.last_run.stats[rank]["sampler"]["loaders"]
        assert record["order"].startswith("the run seed's: the ranks drew different"), record
    assert sum("the ranks drew different permutations" in str(w.message) for w in seen) == 1


def trainer_stream(dataset, epochs: int) -> list:
    """The function's generator (a digest) at every step and epoch end of `classify`'s loop
    without BatchNorm (its epochs sharded after their head; dropout drawn in each step)."""
    torch.manual_seed(1)
    loader = DataLoader(dataset, batch_size=16, shuffle=True)
    model = NormGin(norm=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    log = []
    for epoch in range(epochs):
        for batch in loader:
            log.append((epoch, generator_digest()))
            optimizer.zero_grad()
            F.cross_entropy(model(batch.x, batch.edge_index, batch.batch), batch.y).backward()
            optimizer.step()
        log.append((epoch, "end", generator_digest()))
    return log


def test_the_device_paths_draw_ahead_leaves_the_trainers_stream_alone():
    # PyG's graph batches drawn ahead in the pipeline's thread: the pass's swap of torch's
    # generator (`rank_streams.independent_draws`) stays in the trainer's thread, where it
    # crossed the steps' swap (`rank_steps`) before
    dataset = graphs()
    host = gnnorch.Runtime(trainer_stream, processes=2, verbose=False)(dataset, 3)
    device = gnnorch.Runtime(trainer_stream, processes=2, verbose=False,
                             data_path="device")(dataset, 3)
    assert device == host


# -- the comparison's round (`join.Kind.ORDER`, pure) ---------------------------------------
def test_an_order_round_compares_digests_and_waits_out_steps_joins_and_broadcasts():
    from gnnorch.intercept.join import Ask, Kind, decide

    order = [Ask(Kind.ORDER, numel=7, epoch=2), Ask(Kind.ORDER, numel=7, epoch=2)]
    decision = decide(tuple(order))
    assert decision.action == "order" and decision.same_order
    assert all(decision.released(r) for r in (0, 1))
    assert not decide((order[0], Ask(Kind.ORDER, numel=8, epoch=2))).same_order
    step = Ask(Kind.STEP, optimizer=0, tensors=4, numel=100, epoch=1, step=3)
    decision = decide((order[0], step))            # rank 1 still steps: rank 0 follows
    assert decision.action == "step" and decision.followers == [0]
    assert not decision.released(0)
    join = Ask(Kind.JOIN, epoch=2)
    decision = decide((order[0], join))            # rank 1 ended its epoch: it goes on,
    assert decision.released(1) and not decision.released(0)   # rank 0 asks again
    final = Ask(Kind.FINAL, epoch=2)
    decision = decide((order[0], final))           # rank 1 trains no more: nothing agreed
    assert decision.released(0) and not decision.same_order and not decision.released(1)
    decision = decide((order[0], Ask(Kind.BROADCAST, tensors=2, numel=10)))
    assert decision.action == "void" and not decision.released(0)
