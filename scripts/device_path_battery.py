"""NeighborLoader configurations through the GPU data path with the CPU as the device, against
the same configurations with the path off (issue 21).

For every configuration x input kind (boolean mask, index tensor, None), a function that
iterates two epochs of a shuffled NeighborLoader runs under ``gnnorch.Runtime(...,
data_path="host")`` and ``data_path="device"``. The two modes sample differently (the path
draws from its own generators), so batches are compared by what must hold in both: the same
number of batches, the same keys and dtypes, and every gathered field equal to the source data
at the batch's ids (``x``, ``y``, ``pos``, a float16 ``x``, ``time`` at ``n_id``; ``edge_attr``
at ``e_id`` where no transform rewrites edges). A configuration PyG cannot run here (e.g. it
needs pyg-lib) must fail alike in both modes.

    .venv/bin/python scripts/device_path_battery.py [NAME ...]   # ~8 min on 2 cores
"""
from __future__ import annotations

import argparse
import warnings

import torch

CONFIGS: dict[str, dict] = {
    "plain": dict(num_neighbors=[3, 2]),
    "disjoint": dict(num_neighbors=[3, 2], disjoint=True),
    "induced": dict(num_neighbors=[3, 2], subgraph_type="induced"),
    "bidirectional": dict(num_neighbors=[3, 2], subgraph_type="bidirectional"),
    "replace": dict(num_neighbors=[3, 2], replace=True),
    "temporal": dict(num_neighbors=[3, 2], time_attr="time"),
    "weighted": dict(num_neighbors=[3, 2], weight_attr="edge_weight"),
    "to_undirected": dict(num_neighbors=[3, 2], transform="ToUndirected"),
    "to_sparse_tensor": dict(num_neighbors=[3, 2], transform="ToSparseTensor"),
    "all_neighbours": dict(num_neighbors=[-1]),
    "batch_size_1": dict(num_neighbors=[2, 2], batch_size=1),
    "directed_false": dict(num_neighbors=[3, 2], directed=False),
    "filter_per_worker": dict(num_neighbors=[3, 2], filter_per_worker=True),
    "workers": dict(num_neighbors=[3, 2], num_workers=2),
    "persistent_workers": dict(num_neighbors=[3, 2], num_workers=2, persistent_workers=True),
}
INPUTS = ("mask", "index", "none")
CHECKED_NODE_FIELDS = ("x", "y", "pos", "x16", "time")


def make_data():
    from gnnorch.datasets import power_law_graph

    data = power_law_graph(num_nodes=600, avg_degree=6.0, num_features=5, num_classes=3, seed=1)
    edges = data.edge_index.size(1)
    gen = torch.Generator().manual_seed(0)
    data.edge_weight = torch.rand(edges, generator=gen)
    data.edge_attr = torch.randn(edges, 2, generator=gen)
    data.time = torch.arange(data.num_nodes)
    data.pos = torch.randn(data.num_nodes, 3, generator=gen)
    data.x16 = data.x.half()
    return data


def epochs_of(config: dict, inputs: str):
    """The user's function: two shuffled epochs of one NeighborLoader, every batch kept."""
    def train(data):
        import torch_geometric.transforms as T
        from torch_geometric.loader import NeighborLoader

        nodes = {"mask": data.train_mask, "index": data.train_mask.nonzero().view(-1),
                 "none": None}[inputs]
        kwargs = dict(config, batch_size=config.get("batch_size", 32))
        if isinstance(kwargs.get("transform"), str):
            kwargs["transform"] = getattr(T, kwargs["transform"])()
        loader = NeighborLoader(data, input_nodes=nodes, shuffle=True, **kwargs)
        return [batch for _ in range(2) for batch in loader]
    return train


def problems(host: list, device: list, data, name: str) -> list[str]:
    found = []
    if len(host) != len(device):
        found.append(f"batches {len(host)} vs {len(device)}")
    keys_h, keys_d = set(host[0].keys()), set(device[0].keys())
    if keys_h != keys_d:
        found.append(f"keys only host {sorted(keys_h - keys_d)}, only device "
                     f"{sorted(keys_d - keys_h)}")
    for key in keys_h & keys_d:
        a, b = host[0][key], device[0][key]
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype != b.dtype:
            found.append(f"{key} dtype {a.dtype} vs {b.dtype}")
        elif type(a) is not type(b) and not (isinstance(a, torch.Tensor)
                                             and isinstance(b, torch.Tensor)):
            found.append(f"{key} type {type(a).__name__} vs {type(b).__name__}")
    edges_kept = "transform" not in CONFIGS[name]   # ToUndirected sums e_id of merged edges
    for batch in device:
        n_id = batch.n_id.cpu()
        for key in CHECKED_NODE_FIELDS:
            if key in batch and torch.is_tensor(batch[key]) and batch[key].size(0) == n_id.numel():
                if not torch.equal(batch[key].cpu(), data[key][n_id]):
                    found.append(f"{key} != data.{key}[n_id]")
        if edges_kept and "e_id" in batch and "edge_attr" in batch:
            if not torch.equal(batch.edge_attr.cpu(), data.edge_attr[batch.e_id.cpu()]):
                found.append("edge_attr != data.edge_attr[e_id]")
        if found:
            break
    return found


def main() -> None:
    import gnnorch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"configurations (default: all of "
                                                 f"{', '.join(CONFIGS)})")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown configuration(s) {unknown}; choose from {sorted(CONFIGS)}")
    warnings.filterwarnings("ignore")
    print("| configuration | input | host | device | result |\n|---|---|---|---|---|")
    for name in args.names or CONFIGS:
        for inputs in INPUTS:
            data, out = make_data(), {}
            for mode in ("host", "device"):
                torch.manual_seed(0)
                try:
                    out[mode] = gnnorch.Runtime(epochs_of(CONFIGS[name], inputs), processes=1,
                                                autotune=False, verbose=False,
                                                data_path=mode)(data)
                except Exception as exc:  # noqa: BLE001 - reported, must match across modes
                    out[mode] = f"{type(exc).__name__}: {str(exc)[:90]}"
            host, device = out["host"], out["device"]
            if isinstance(host, str) or isinstance(device, str):
                same = isinstance(host, str) and host == device
                result = "same error in both modes" if same else "DIFFERS"
                shown = [v if isinstance(v, str) else f"{len(v)} batches" for v in (host, device)]
            else:
                found = problems(host, device, data, name)
                result = "ok" if not found else "DIFFERS: " + "; ".join(found)
                shown = [f"{len(host)} batches", f"{len(device)} batches"]
            print(f"| {name} | {inputs} | {shown[0]} | {shown[1]} | {result} |", flush=True)


if __name__ == "__main__":
    main()
