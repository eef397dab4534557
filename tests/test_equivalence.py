"""p ranks train what one process trains: same parameters after steps, same accuracy."""
import statistics

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch

from helpers import cora, load_example, test_accuracy

pytestmark = pytest.mark.usefixtures("no_leftover_children")


def sage_steps(data, batch_size, steps, input_nodes=None, shuffle=True):
    """Deterministic sampling (full neighbourhoods), no dropout: only the seeds differ."""
    torch.manual_seed(0)
    loader = NeighborLoader(data, num_neighbors=[-1, -1],
                            input_nodes=data.train_mask if input_nodes is None else input_nodes,
                            batch_size=batch_size, shuffle=shuffle)
    model = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=7)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    done = 0
    for batch in loader:
        optimizer.zero_grad()
        out = model(batch.x, batch.edge_index)[:batch.batch_size]
        F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
        optimizer.step()
        done += 1
        if done == steps:
            break
    return model.state_dict()


def test_two_ranks_equal_one_process_over_three_steps():
    # the sharded epoch deals the permutation the function's own generator gives one process
    # (`intercept.epoch_order`): the reference is the plain call, not a rebuilt order
    data = cora()
    got = gnnorch.Runtime(sage_steps, processes=2, seed=1234)(data, 20, 3)
    ref = sage_steps(data, 20, 3)
    for key, value in ref.items():
        assert torch.allclose(got[key], value, atol=1e-5, rtol=1e-4), key


def sage_epochs(data, batch_size, epochs, clip=None, drop_last=False):
    """Full epochs of `sage_steps`' model (deterministic sampling, no dropout), optionally
    clipping."""
    torch.manual_seed(0)
    model = GraphSAGE(data.num_features, 32, num_layers=2, out_channels=7)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loader = NeighborLoader(data, num_neighbors=[-1, -1], input_nodes=data.train_mask,
                            batch_size=batch_size, shuffle=True, drop_last=drop_last)
    for _ in range(epochs):
        for batch in loader:
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            F.cross_entropy(out, batch.y[:batch.batch_size]).backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
    return model.state_dict()


@pytest.mark.parametrize("p, batch_size, epochs, clip, drop_last, data_path", [
    (2, 21, 2, None, False, None),     # 11 + 10 seeds a step; the last batch of 14: 7 + 7
    (2, 25, 1, 0.5, False, None),      # clipped by the weighted average's norm; last: 8 + 7
    (2, 30, 1, None, True, None),      # the last batch of 20 dropped, as one process drops it
    (2, 139, 2, None, False, None),    # 70 + 69; the last batch's one seed: rank 1 pads
    (2, 139, 2, None, False, "device"),   # the same, batches built by the device path
])
def test_ranks_whose_batches_differ_train_what_one_process_trains(p, batch_size, epochs, clip,
                                                                   drop_last, data_path):
    data = cora()
    seed = 99
    runtime = gnnorch.Runtime(sage_epochs, processes=p, seed=seed, autotune=False,
                              launch={"threads": 1}, data_path=data_path)
    got = runtime(data, batch_size, epochs, clip=clip, drop_last=drop_last)
    ref = sage_epochs(data, batch_size, epochs, clip=clip, drop_last=drop_last)   # plain
    for key, value in ref.items():
        torch.testing.assert_close(got[key], value, atol=1e-5, rtol=1e-4)
    (record,) = runtime.last_run.stats[0]["sampler"]["loaders"]
    if batch_size % p:
        assert "gradients weighted by each rank's seeds" in record["uneven_batch"]
    steps = -(-140 // batch_size) if not drop_last else 140 // batch_size
    assert runtime.last_run.stats[0]["gradsync"]["steps"] == steps * epochs
    seeds = sum(e["seeds"] for r in range(p) for e in runtime.last_run.epochs[r])
    assert seeds == (140 if not drop_last else 140 // batch_size * batch_size) * epochs


def test_one_step_full_batch_equals_vanilla():
    data = cora()
    got = gnnorch.Runtime(sage_steps, processes=2)(data, 140, 1)
    ref = sage_steps(data, 140, 1)
    for key, value in ref.items():
        assert torch.allclose(got[key], value, atol=1e-5, rtol=1e-4), key


def test_cora_accuracy_two_ranks_within_1_5_points_of_vanilla():
    example = load_example("train_vanilla")
    data = cora()
    vanilla, runtime = [], []
    for seed in (0, 1, 2):
        vanilla.append(test_accuracy(example.train(data, epochs=20, seed=seed), data))
        model = gnnorch.Runtime(example.train, processes=2)(data, epochs=20, seed=seed)
        runtime.append(test_accuracy(model, data))
    gap = abs(statistics.mean(vanilla) - statistics.mean(runtime))
    print(f"vanilla {vanilla} runtime {runtime} gap {gap:.4f}")
    assert statistics.mean(vanilla) > 0.7
    assert gap <= 0.015
