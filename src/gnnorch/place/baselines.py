"""Baseline placements: DistDGL-style co-location and uniformly random feasible placement.

Co-location (DistDGL; DGTP's testbed baseline "maximally colocates each worker with its
associated samplers within one server"): every node holds its store partition; a trainer runs
on the node of its home partition (where its seeds and most of its features live) and its
samplers beside it. When a node is too small, what does not fit spills:

1. trainers in rank order: on the home node if the trainer fits there, reserving room for as
   many of its samplers as fit beside it;
2. trainers that did not fit: on the node where the trainer and all its samplers fit with the
   most free cores, else the node where the trainer alone fits with the most free GPUs (ties:
   lowest node id);
3. remaining samplers: beside their trainer, else on their trainer's home node, else on the
   node with the most free cores where they fit.

DistDGL runs this placement with its default first-in-first-out sending (policy "fifo").

Random: trainers, then samplers, each on a uniformly random node that still has room (a dead
end restarts, up to ``tries`` times) -- the placement any scheduler could stumble into.
"""
from __future__ import annotations

import numpy as np

from gnnorch.options import check_int
from gnnorch.place.assignment import Assignment, check_fits, demands, store_usage
from gnnorch.place.cluster import Cluster, PlacementError
from gnnorch.place.profile import Profile

__all__ = ["colocation", "random_placement"]

_EPS = 1e-9


def _fits(free: np.ndarray, need: np.ndarray) -> np.ndarray:
    """(M,) bool: nodes where `need` fits into `free`."""
    return np.all(free - need >= -_EPS, axis=1)


def _best(mask: np.ndarray, score: np.ndarray) -> int | None:
    """Lowest-index node among `mask` with the highest `score`, or None."""
    if not mask.any():
        return None
    masked = np.where(mask, score, -np.inf)
    return int(np.flatnonzero(masked == masked.max())[0])


def colocation(cluster: Cluster, profile: Profile) -> Assignment:
    """DistDGL-style co-location (module docstring); `PlacementError` if it cannot fit."""
    check_fits(cluster, profile)
    _, ds, dw = demands(profile)
    free = cluster.capacity - store_usage(cluster, profile)
    home = profile.home_partition()
    w_total = profile.n_trainers
    trainer_node = np.full(w_total, -1, dtype=np.int64)
    sampler_node = np.full(profile.n_samplers, -1, dtype=np.int64)

    def put_samplers(w: int, node: int) -> None:
        for s in profile.samplers_of(w):
            if sampler_node[s] < 0 and np.all(free[node] - ds >= -_EPS):
                sampler_node[s] = node
                free[node] -= ds

    for w in range(w_total):                                   # 1. at home
        h = int(home[w])
        if np.all(free[h] - dw >= -_EPS):
            trainer_node[w] = h
            free[h] -= dw
            put_samplers(w, h)
    for w in np.flatnonzero(trainer_node < 0):                 # 2. spilled trainers
        group = dw + ds * profile.samplers_of(w).size
        node = _best(_fits(free, group), free[:, 0])
        if node is None:
            node = _best(_fits(free, dw), free[:, 2])
        if node is None:
            raise PlacementError(f"co-location: no node has room for trainer {w}")
        trainer_node[w] = node
        free[node] -= dw
        put_samplers(w, node)
    for s in np.flatnonzero(sampler_node < 0):                 # 3. spilled samplers
        w = profile.sampler_trainer[s]
        ok = _fits(free, ds)
        node = next((int(m) for m in (trainer_node[w], home[w]) if ok[m]), None)
        if node is None:
            node = _best(ok, free[:, 0])
        if node is None:
            raise PlacementError(f"co-location: no node has room for sampler {s}")
        sampler_node[s] = node
        free[node] -= ds
    return Assignment(trainer_node, sampler_node)


def random_placement(cluster: Cluster, profile: Profile, rng: np.random.Generator,
                     tries: int = 200) -> Assignment:
    """A uniformly random feasible placement (module docstring)."""
    check_int("tries", tries, 1)
    check_fits(cluster, profile)
    _, ds, dw = demands(profile)
    base = cluster.capacity - store_usage(cluster, profile)
    for _ in range(tries):
        free = base.copy()
        trainer_node = np.empty(profile.n_trainers, dtype=np.int64)
        sampler_node = np.empty(profile.n_samplers, dtype=np.int64)
        ok = True
        for nodes, need in ((trainer_node, dw), (sampler_node, ds)):
            for i in rng.permutation(nodes.size):
                room = np.flatnonzero(_fits(free, need))
                if room.size == 0:
                    ok = False
                    break
                nodes[i] = rng.choice(room)
                free[nodes[i]] -= need
            if not ok:
                break
        if ok:
            return Assignment(trainer_node, sampler_node)
    raise PlacementError(f"no random feasible placement found in {tries} tries")
