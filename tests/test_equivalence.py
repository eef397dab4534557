"""p ranks train what one process trains: same parameters after steps, same accuracy."""
import statistics

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GraphSAGE

import gnnorch
from gnnorch.intercept.loader import ShardSampler

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
    data = cora()
    seed = 1234
    got = gnnorch.Runtime(sage_steps, processes=2, seed=seed)(data, 20, 3)
    # Single-process reference on the same seed order: the runtime's first training loader
    # permutes with seed derived from `seed`; rebuild it and feed the seeds in that order.
    from gnnorch.intercept.loader import _loader_seed
    from gnnorch.launch.context import RankContext
    from gnnorch.launch.plan import CorePlan

    ctx = RankContext(rank=0, world_size=2, plan=CorePlan(2, 0, 1), cores=None, seed=seed)
    sampler = ShardSampler(0, 2, _loader_seed(ctx, 0))
    train_idx = data.train_mask.nonzero().view(-1)
    sampler.num_items = train_idx.numel()
    order = train_idx[sampler.permutation(0)]
    ref = sage_steps(data, 20, 3, input_nodes=order, shuffle=False)
    for key, value in ref.items():
        assert torch.allclose(got[key], value, atol=1e-5, rtol=1e-4), key


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
