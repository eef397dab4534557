"""Partitioned node features for torch.distributed worlds (issue 16, second part; ground
floor: plain torch, nothing of processes).

* `partitioner`: a cheap, deterministic locality partitioner (BFS blocks + balanced label
  propagation): ``owner = partition_graph(edge_index, N, parts)``; `edge_cut`.
* `hot`: which remote rows a rank replicates within its byte budget (`hot_scores`,
  `choose_hot`).
* `store`: `FeatureStore`, one rank's rows (its partition + hot rows) and the exact gather
  of a batch's rows through an exchange (`local_exchange` in one process; the collective one
  is `gnnorch.intercept.exchange`).
* `files`: `save_features` / `open_features`: a memory-mapped ``data.x``, so that a rank reads
  only its rows from disk.
* `config`: `PartitionConfig`, the ``Runtime(partition_features=...)`` option.

The runtime side (loader seam, collectives, statistics) is `gnnorch.intercept.features_fetch`.
"""
from .config import PartitionConfig, resolve_partition
from .files import open_features, save_features
from .hot import choose_hot, hot_scores
from .partitioner import edge_cut, partition_graph
from .store import FeatureStore, GatherPlan, local_exchange

__all__ = ["PartitionConfig", "resolve_partition", "partition_graph", "edge_cut",
           "hot_scores", "choose_hot", "FeatureStore", "GatherPlan", "local_exchange",
           "save_features", "open_features"]
