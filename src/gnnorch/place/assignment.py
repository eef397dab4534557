"""Where every sampler and trainer runs, and what that costs each node's resources.

Stores are pinned: store g (partition g) runs on node g (DGTP constraint (3)), so a profile
with P partitions needs a cluster with M >= P nodes. An `Assignment` holds the node of every
sampler and trainer; resource usage is

    U[m, r] = sum over tasks j on m of w_j^r        (w: the task kind's `TaskDemand`)

A placement is feasible when U <= C everywhere (DGTP (2)); its *overload* is DGTP's penalty
sum_{m, r} max((U[m, r] - C[m, r]) / C[m, r], 0), with a zero capacity counting a violation of
U itself (there is nothing to scale by).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gnnorch.place.cluster import Cluster, PlacementError
from gnnorch.place.profile import Profile

__all__ = ["Assignment", "demands", "store_usage", "usage", "overload", "feasible",
           "check_fits"]

_EPS = 1e-9


@dataclass
class Assignment:
    """Node of every sampler (S,) and trainer (W,); stores are on nodes 0..P-1."""

    trainer_node: np.ndarray
    sampler_node: np.ndarray

    def __post_init__(self) -> None:
        self.trainer_node = np.asarray(self.trainer_node, dtype=np.int64).copy()
        self.sampler_node = np.asarray(self.sampler_node, dtype=np.int64).copy()

    def copy(self) -> "Assignment":
        return Assignment(self.trainer_node, self.sampler_node)

    def key(self) -> bytes:
        """Hashable identity (for memoising scores)."""
        return self.trainer_node.tobytes() + b"|" + self.sampler_node.tobytes()

    def entity_nodes(self, profile: Profile) -> np.ndarray:
        """(P + S + W,) node per entity in `tasks.TaskGraph` order."""
        return np.concatenate([np.arange(profile.n_partitions), self.sampler_node,
                               self.trainer_node]).astype(np.int64)

    def validate(self, cluster: Cluster, profile: Profile) -> None:
        if self.trainer_node.shape != (profile.n_trainers,) or \
                self.sampler_node.shape != (profile.n_samplers,):
            raise ValueError("assignment sizes do not match the profile")
        for arr in (self.trainer_node, self.sampler_node):
            if arr.size and (arr.min() < 0 or arr.max() >= cluster.n_nodes):
                raise ValueError(f"assignment names nodes outside 0..{cluster.n_nodes - 1}")


def demands(profile: Profile) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(store, sampler, trainer) demand vectors."""
    return (profile.store_demand.vector(), profile.sampler_demand.vector(),
            profile.trainer_demand.vector())


def check_fits(cluster: Cluster, profile: Profile) -> None:
    """Raise `PlacementError` unless the stores alone fit their pinned nodes."""
    if profile.n_partitions > cluster.n_nodes:
        raise PlacementError(f"{profile.n_partitions} partitions need at least as many nodes "
                             f"(stores are pinned one per node), the cluster has "
                             f"{cluster.n_nodes}")
    free = cluster.capacity - store_usage(cluster, profile)
    if np.any(free < -_EPS):
        raise PlacementError("a graph store does not fit its node")


def store_usage(cluster: Cluster, profile: Profile) -> np.ndarray:
    """(M, 3) resources the pinned stores take."""
    use = np.zeros((cluster.n_nodes, 3))
    use[:profile.n_partitions] += profile.store_demand.vector()
    return use


def usage(cluster: Cluster, profile: Profile, a: Assignment) -> np.ndarray:
    """(M, 3) U[m, r] of the stores, samplers and trainers (module docstring)."""
    _, ds, dw = demands(profile)
    m = cluster.n_nodes
    use = store_usage(cluster, profile)
    use += np.bincount(a.sampler_node, minlength=m)[:, None] * ds
    use += np.bincount(a.trainer_node, minlength=m)[:, None] * dw
    return use


def overload(cluster: Cluster, use: np.ndarray) -> float:
    """DGTP's violation penalty of a usage matrix (0 exactly when feasible)."""
    cap = cluster.capacity
    excess = np.maximum(use - cap - _EPS, 0.0)
    scaled = np.where(cap > 0, excess / np.where(cap > 0, cap, 1.0), excess)
    return float(scaled.sum())


def feasible(cluster: Cluster, profile: Profile, a: Assignment) -> bool:
    return overload(cluster, usage(cluster, profile, a)) == 0.0
