"""gnnorch.device: data placement decisions and the prefetching pipeline (CPU-testable parts of
the GPU data path; CUDA runs are marked `gpu`)."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from gnnorch.device import Prefetcher, plan_data_placement
from gnnorch.device.placement import feature_bytes, structure_bytes

MIB = 1 << 20


def _node_tensors(n=1000, f=100):
    return {"x": torch.zeros(n, f), "y": torch.zeros(n, dtype=torch.long)}


# --------------------------------------------------------------------------- placement
def test_sizes():
    assert structure_bytes(10, 100) == 8 * 11 + 16 * 100
    assert feature_bytes(_node_tensors(1000, 100)) == 1000 * 100 * 4 + 1000 * 8


def test_everything_on_the_gpu_when_it_fits():
    tensors = _node_tensors()
    plan = plan_data_placement(1000, 20_000, tensors, budget_bytes=64 * MIB)
    assert plan.structure == "gpu" and plan.features == "gpu" and plan.samples_on_gpu
    assert len(plan.reasons) == 2 and "fits" in plan.reasons[0]


def test_features_spill_to_pinned_host_memory_first():
    tensors = _node_tensors()
    s = structure_bytes(1000, 20_000)
    plan = plan_data_placement(1000, 20_000, tensors, budget_bytes=s + 1000)
    assert plan.structure == "gpu" and plan.features == "pinned"
    assert "exceed" in plan.reasons[1]
    assert plan_data_placement(1000, 20_000, tensors, budget_bytes=s + 1000,
                               pin=False).features == "host"


def test_a_graph_too_large_samples_on_the_host():
    plan = plan_data_placement(1000, 20_000, _node_tensors(), budget_bytes=1000)
    assert plan.structure == "host" and plan.features == "pinned"
    assert plan.to_dict()["reasons"] == list(plan.reasons)


def test_budget_from_free_memory_and_errors():
    tensors = _node_tensors()
    need = structure_bytes(1000, 20_000) + feature_bytes(tensors)
    assert plan_data_placement(1000, 20_000, tensors, free_bytes=2 * need + 2,
                               budget_fraction=0.5).features == "gpu"
    assert plan_data_placement(1000, 20_000, tensors, free_bytes=2 * need - 100,
                               budget_fraction=0.5).features == "pinned"
    with pytest.raises(ValueError, match="free_bytes"):
        plan_data_placement(1, 1, {})
    with pytest.raises(ValueError, match="budget_fraction"):
        plan_data_placement(1, 1, {}, free_bytes=10, budget_fraction=0)


# --------------------------------------------------------------------------- pipeline
def test_order_kept_and_each_batch_once():
    out = list(Prefetcher(range(50), transfer=lambda b: b * 2, depth=3))
    assert out == [2 * i for i in range(50)]


def test_producer_stays_at_most_depth_ahead():
    drawn = []

    def source():
        for i in range(100):
            drawn.append(i)
            yield i

    pre = Prefetcher(source(), depth=2)
    assert next(pre) == 0
    time.sleep(0.3)
    # one consumed, `depth` queued, one more drawn and waiting to be queued
    assert len(drawn) <= 1 + 2 + 1
    pre.close()


def test_drawn_ahead_lists_the_batches_waiting_for_the_consumer_in_order():
    """`drawn_ahead()` is what the consumer's next `next()` calls will return first (the
    transferred items, before `ready`), without taking them; nothing once the source ended."""
    pre = Prefetcher(range(6), transfer=lambda b: ("moved", b), depth=3,
                     ready=lambda item: item[1])
    deadline = time.monotonic() + 10
    while len(pre.drawn_ahead()) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pre.drawn_ahead() == [("moved", 0), ("moved", 1), ("moved", 2)]
    assert next(pre) == 0
    while pre.drawn_ahead()[-1:] != [("moved", 3)] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pre.drawn_ahead() == [("moved", 1), ("moved", 2), ("moved", 3)]
    assert list(pre) == [1, 2, 3, 4, 5]
    assert pre.drawn_ahead() == []   # neither the end marker nor a failure is a batch


def test_break_stops_the_producer_and_joins_it():
    drawn = []

    def source():
        for i in range(10_000):
            drawn.append(i)
            yield i

    before = threading.active_count()
    pre = Prefetcher(source(), depth=2)
    for batch in pre:
        if batch == 5:
            break
    pre.close()
    assert threading.active_count() == before
    count = len(drawn)
    time.sleep(0.1)
    assert len(drawn) == count <= 5 + 1 + 2 + 1   # nothing drawn after close


def test_errors_arrive_in_place():
    def source():
        yield 1
        yield 2
        raise KeyError("broken batch")

    pre = Prefetcher(source(), depth=4)
    assert next(pre) == 1 and next(pre) == 2
    with pytest.raises(KeyError, match="broken batch"):
        next(pre)
    with pytest.raises(StopIteration):
        next(pre)

    def bad_transfer(batch):
        if batch == 3:
            raise RuntimeError("copy failed")
        return batch

    got = []
    with pytest.raises(RuntimeError, match="copy failed"):
        for batch in Prefetcher(range(10), transfer=bad_transfer):
            got.append(batch)
    assert got == [0, 1, 2]


def test_ready_runs_in_the_consumer_thread():
    threads = set()
    out = list(Prefetcher(range(5), ready=lambda b: (threads.add(threading.get_ident()), b)[1]))
    assert out == list(range(5)) and threads == {threading.get_ident()}


def test_producer_work_overlaps_the_consumer():
    def slow_source():
        for i in range(10):
            time.sleep(0.05)   # sampling / gathering
            yield i

    start = time.perf_counter()
    for _ in Prefetcher(slow_source(), depth=2):
        time.sleep(0.05)       # training step
    overlapped = time.perf_counter() - start
    assert overlapped < 0.9    # serial: 1.0 s; overlapped: ~0.55 s


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth"):
        Prefetcher([], depth=0)


# --------------------------------------------------------------------------- transfer
def test_transfer_is_the_identity_on_cpu():
    from torch_geometric.data import Data

    from gnnorch.device.transfer import DeviceTransfer

    move = DeviceTransfer("cpu")
    batch = Data(x=torch.ones(3, 2), edge_index=torch.zeros(2, 1, dtype=torch.long))
    out = list(Prefetcher([batch], transfer=move.transfer, ready=move.ready))
    assert out[0] is batch


@pytest.mark.gpu
def test_transfer_to_cuda_keeps_values_and_order():
    from torch_geometric.data import Data

    from gnnorch.device.transfer import DeviceTransfer

    move = DeviceTransfer("cuda")
    batches = [Data(x=torch.randn(100, 8), y=torch.arange(100), batch_size=10)
               for _ in range(6)]
    expected = [b.clone() for b in batches]   # the transfer moves a batch in place (PyG)
    out = list(Prefetcher(batches, transfer=move.transfer, ready=move.ready, depth=2))
    assert len(out) == 6
    for got, want in zip(out, expected):
        assert got.x.is_cuda and torch.equal(got.x.cpu(), want.x)
        assert torch.equal(got.y.cpu(), want.y) and got.batch_size == 10


# --------------------------------------------------------------------------- issue 21 parts
def test_features_host_and_host_sampling_override_the_budget():
    tensors = _node_tensors()
    plan = plan_data_placement(1000, 20_000, tensors, budget_bytes=64 * MIB,
                               features_host=True)
    assert plan.structure == "gpu" and plan.features == "pinned"
    assert "features='host'" in plan.reasons[1]
    plan = plan_data_placement(1000, 20_000, tensors, budget_bytes=64 * MIB,
                               host_sampling="no device sampler")
    assert plan.structure == "host" and plan.features == "gpu"
    assert "no device sampler" in plan.reasons[0]


def test_sampling_seeds_differ_per_rank_loader_epoch_and_repeat():
    from gnnorch.device.seeds import SamplingGenerator, sampling_seed

    seeds = {sampling_seed(s, r, l, e) for s in (0, 1) for r in (0, 1) for l in (0, 1)
             for e in (0, 1, 2)}
    assert len(seeds) == 24 and all(0 <= v < 2 ** 63 for v in seeds)
    a, b = SamplingGenerator("cpu", 3, 0, 1), SamplingGenerator("cpu", 3, 0, 1)
    epoch0 = a.next_epoch()
    first = torch.rand(4, generator=epoch0)
    torch.rand(100, generator=epoch0)               # drawn ahead, then dropped
    second = torch.rand(4, generator=a.next_epoch())
    torch.rand(7, generator=epoch0)                 # an older epoch still drawing: no effect
    assert torch.equal(first, torch.rand(4, generator=b.next_epoch()))
    assert torch.equal(second, torch.rand(4, generator=b.next_epoch()))
    assert not torch.equal(first, second)


def test_producer_context_and_wait_time():
    entered = []

    class Context:
        def __enter__(self):
            entered.append(threading.current_thread().name)

        def __exit__(self, *exc):
            entered.append("exit")

    def slow():
        for i in range(4):
            time.sleep(0.05)
            yield i

    pre = Prefetcher(slow(), depth=1, produce_in=Context, name="ctx-test")
    assert list(pre) == [0, 1, 2, 3]
    assert entered == ["ctx-test", "exit"]
    assert 0.1 < pre.wait_s < 1.0 and pre.produced == 4


def test_transfer_keeps_host_fields_on_cpu():
    from torch_geometric.data import Data

    from gnnorch.device.transfer import DeviceTransfer

    move = DeviceTransfer("cpu", host_fields=("n_id",))
    batch = Data(x=torch.ones(3, 2), n_id=torch.arange(3))
    with move.producing():
        out = move.ready(move.transfer(batch))
    assert out is batch and out.n_id.device.type == "cpu"


@pytest.mark.gpu
def test_transfer_skips_host_fields_and_runs_on_its_stream():
    from torch_geometric.data import Data

    from gnnorch.device.transfer import DeviceTransfer

    move = DeviceTransfer("cuda", host_fields=("n_id",))
    with move.producing():
        assert torch.cuda.current_stream() == move.stream
    assert torch.cuda.current_stream() != move.stream
    batches = [Data(x=torch.randn(50, 4), n_id=torch.arange(50)) for _ in range(4)]
    expected = [b.clone() for b in batches]   # the transfer moves a batch in place (PyG)
    out = list(Prefetcher(batches, transfer=move.transfer, ready=move.ready,
                          produce_in=move.producing))
    for got, want in zip(out, expected):
        assert got.x.is_cuda and not got.n_id.is_cuda
        assert torch.equal(got.x.cpu(), want.x)


def test_to_device_moves_like_to_where_no_pinned_copy_applies():
    from gnnorch.device.transfer import to_device

    host = torch.arange(6)
    assert to_device(host, "cpu") is host                      # already there: torch's no-op
    moved = to_device(host, torch.device("meta"))
    assert moved.device.type == "meta" and moved.shape == host.shape


@pytest.mark.gpu
def test_to_device_copies_host_tensors_from_new_pinned_memory_asynchronously():
    """No pageable copy (it would synchronise the current stream), and the caller may write
    its tensor at once: the copy reads a pinned copy made at the call."""
    from gnnorch.device.transfer import to_device

    host = torch.arange(1 << 20)
    want = host.clone()
    side = torch.cuda.Stream()
    to_device(torch.arange(4), "cuda")          # the pinned allocator's first block
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)         # ~0.1 s busy: a pageable copy would wait
        start = time.perf_counter()
        moved = to_device(host, "cuda")
        took = time.perf_counter() - start
        host.zero_()                           # before the device copy has run
    assert took < 0.05, f"to_device waited {took:.3f} s for the busy stream"
    assert not host.is_pinned()
    torch.cuda.synchronize()
    assert moved.is_cuda and torch.equal(moved.cpu(), want)


# --------------------------------------------------------------------------- device twins
def test_a_twinned_host_tensor_moves_to_its_twin_and_is_plain_otherwise():
    """`device.twin`: ``.to(twin's device)`` returns the twin (no copy); every other use is a
    plain CPU tensor; pickling and deep copies give the plain tensor."""
    import copy
    import pickle

    from gnnorch.device.twin import DeviceTwinned, device_twin, twinned

    host = torch.arange(6)
    twin = torch.empty(6, dtype=torch.long, device="meta")
    ids = twinned(host, twin)
    assert isinstance(ids, DeviceTwinned) and device_twin(ids) is twin
    assert ids.to("meta") is twin and ids.to(torch.device("meta"), non_blocking=True) is twin
    assert ids.to("meta", dtype=torch.int32).dtype == torch.int32        # a conversion: copied
    assert ids.to("meta", copy=True) is not twin
    rows = torch.randn(10, 3)
    assert torch.equal(rows[ids], rows[host]) and type(rows[ids]) is torch.Tensor
    assert type(ids + 1) is torch.Tensor and ids.tolist() == host.tolist()
    assert (ids.numpy() == host.numpy()).all()
    for copied in (copy.deepcopy(ids), pickle.loads(pickle.dumps(ids))):
        assert type(copied) is torch.Tensor and torch.equal(copied, host)
    # nothing to twin: the host tensor comes back as it is
    assert twinned(host, torch.arange(6)) is host                        # a CPU "twin"
    assert twinned(host, torch.empty(5, dtype=torch.long, device="meta")) is host
    assert twinned(host, torch.empty(6, dtype=torch.int32, device="meta")) is host


def test_gathered_batches_carry_device_twins_of_their_ids():
    """On a device other than the CPU (here "meta") a batch's ``n_id`` / ``e_id`` /
    ``input_id`` stay on the host with their twins, and ``batch.to(device)`` takes the twins:
    the user's move copies no id."""
    from gnnorch.datasets.synthetic import power_law_graph
    from gnnorch.device.gather import GatherPlan, ResidentTensors
    from gnnorch.device.twin import device_twin
    from gnnorch.sampling.neighbor import FastNeighborSampler

    data = power_law_graph(num_nodes=300, avg_degree=6.0, num_features=4, num_classes=3,
                           seed=0)
    sampler = FastNeighborSampler(data, num_neighbors=[3, 2])
    out = sampler.sample_from_nodes(_node_input(torch.arange(16)))
    plan = GatherPlan(data, torch.device("meta"), "gpu", ResidentTensors())
    batch = plan.batch(out, sampler.perm)
    for key in ("n_id", "e_id", "input_id"):
        twin = device_twin(batch[key])
        assert batch[key].device.type == "cpu" and twin is not None, key
        assert twin.device.type == "meta" and twin.shape == batch[key].shape, key
    cpu = GatherPlan(data, torch.device("cpu"), "gpu", ResidentTensors()).batch(out, sampler.perm)
    assert type(cpu.n_id) is torch.Tensor and torch.equal(cpu.n_id, batch.n_id)
    twins = {key: device_twin(batch[key]) for key in ("n_id", "e_id", "input_id")}
    moved = batch.to("meta")      # PyG moves in place
    assert all(moved[key] is twin for key, twin in twins.items())
    assert moved.x.device.type == "meta" and moved.edge_index.device.type == "meta"


def test_concrete_device_names_the_index_torch_gives_tensors():
    from gnnorch.device.twin import concrete_device

    assert concrete_device("cpu") == torch.device("cpu")
    assert concrete_device(torch.device("meta")) == torch.device("meta")
    if torch.cuda.is_available():
        assert concrete_device("cuda") == torch.ones(1, device="cuda").device


@pytest.mark.gpu
@pytest.mark.parametrize("features", ["gpu", "pinned"])
def test_gather_plan_on_a_bare_cuda_device_gathers_from_its_device_copies(features):
    """A plan made with ``torch.device("cuda")`` (no index, as a user or a script names it)
    indexes its device-resident sources there: ``cuda`` is compared as ``cuda:0`` (session
    19's `profile` unit failed on ``cuda != cuda:0``, indexing a CUDA source with host ids)."""
    from gnnorch.datasets.synthetic import power_law_graph
    from gnnorch.device.gather import GatherPlan, ResidentTensors
    from gnnorch.sampling.neighbor import FastNeighborSampler

    data = power_law_graph(num_nodes=300, avg_degree=6.0, num_features=4, num_classes=3,
                           seed=0)
    sampler = FastNeighborSampler(data, num_neighbors=[3, 2])
    sampler.move_to(torch.device("cuda"))
    out = sampler.sample_from_nodes(_node_input(torch.arange(16)))   # host seeds
    batch = GatherPlan(data, torch.device("cuda"), features, ResidentTensors()).batch(
        out, sampler.perm)
    assert batch.x.is_cuda and torch.equal(batch.x.cpu(), data.x[batch.n_id])
    assert torch.equal(batch.y.cpu(), data.y[batch.n_id])


@pytest.mark.parametrize("features", ["gpu", "pinned"], ids=["resident", "pinned-rows"])
def test_id_attributes_of_the_users_data_stay_on_the_host(features):
    """PyG's examples give their data a global ``n_id`` (``data.n_id = torch.arange(N)``,
    reddit.py) and index host tensors with the batch's (``x_all[batch.n_id]``): a gathered
    attribute named like an id field stays on the host with its twin, whether the other
    attributes were gathered on the device or from pinned rows (found on an H200, where the
    resident copy's rows came back on CUDA)."""
    from gnnorch.datasets.synthetic import power_law_graph
    from gnnorch.device.gather import GatherPlan, ResidentTensors
    from gnnorch.device.twin import device_twin
    from gnnorch.sampling.neighbor import FastNeighborSampler

    data = power_law_graph(num_nodes=300, avg_degree=6.0, num_features=4, num_classes=3,
                           seed=0)
    data.n_id = torch.arange(data.num_nodes) + 1000
    data.e_id = torch.arange(data.num_edges) + 5000
    sampler = FastNeighborSampler(data, num_neighbors=[3, 2])
    out = sampler.sample_from_nodes(_node_input(torch.arange(16)))
    resident = ResidentTensors()
    batch = GatherPlan(data, torch.device("meta"), features, resident,
                       pin=False).batch(out, sampler.perm)
    want = GatherPlan(data, torch.device("cpu"), features, ResidentTensors()).batch(
        out, sampler.perm)
    for key in ("n_id", "e_id"):
        assert batch[key].device.type == "cpu", key
        assert torch.equal(batch[key], want[key]), key
        twin = device_twin(batch[key])
        assert twin is not None and twin.device.type == "meta", key
        assert not resident.has_on_device(data[key], torch.device("meta")), key
    assert torch.equal(want.n_id, out.node + 1000)
    assert batch.x.device.type == "meta" and batch.y.device.type == "meta"


def _node_input(seeds):
    from torch_geometric.sampler import NodeSamplerInput

    return NodeSamplerInput(input_id=seeds, node=seeds)



def test_bytes_already_on_the_device_need_no_budget():
    """Tensors already resident (another loader's copy, the user's own) cost no new memory."""
    tensors = _node_tensors()
    size = feature_bytes(tensors) + structure_bytes(1000, 20_000)
    tight = plan_data_placement(1000, 20_000, tensors, budget_bytes=size // 2)
    assert tight.features != "gpu"
    resident = plan_data_placement(1000, 20_000, tensors, budget_bytes=size // 2,
                                   resident_bytes=feature_bytes(tensors))
    assert resident.structure == "gpu" and resident.features == "gpu"


def test_ids_already_on_the_host_are_returned_as_they_are():
    from gnnorch.device.transfer import ids_on_host

    a, b = torch.arange(4), torch.arange(3, dtype=torch.int32)
    got = ids_on_host([a, None, b])
    assert got[0] is a and got[1] is None and got[2] is b


@pytest.mark.gpu
def test_device_ids_come_to_the_host_in_one_transfer_with_their_dtypes():
    from gnnorch.device.transfer import ids_on_host

    a = torch.arange(5, device="cuda")
    b = torch.arange(3, device="cuda") + 10
    c = torch.arange(2, dtype=torch.int32, device="cuda")
    h = torch.arange(4)
    got = ids_on_host([a, None, h, b, c, a[:0]])
    assert got[1] is None and got[2] is h
    assert all(t.device.type == "cpu" for t in got if t is not None)
    assert torch.equal(got[0], a.cpu()) and torch.equal(got[3], b.cpu())
    assert got[4].dtype == torch.int32 and torch.equal(got[4], c.cpu())
    assert got[5].numel() == 0 and got[5].dtype == torch.long
