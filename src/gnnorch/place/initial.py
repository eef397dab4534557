"""IFS: DGTP's initial feasible placement by dynamic programming over task counts (Alg. 2).

Tasks of one kind demand the same resources, so a placement is feasible exactly when the
*counts* (q_s samplers, q_w trainers) put on each node fit what the pinned store leaves free,
C'[m] = C[m] - w_store. Machines are taken in a random (seeded) order m_1..m_M and

    Omega(i) = {(q_s, q_w) : some counts on m_1..m_i that fit sum to (q_s, q_w)}
    Omega(0) = {(0, 0)},  Omega(i) = Omega(i-1) (+) {(q_s', q_w') that fit m_i}

The first i with (S, W) in Omega(i) gives a complete solution (DGTP returns the first one);
backtracking recovers the counts per machine (largest trainer count, then largest sampler
count first, so the first machines are packed full as in the paper). The paper has a parameter
server kind too; with all-reduce there is none, so the states are 2-D.

Because more samplers never help a node fit, the q_s' that fit m_i with q_w' trainers form an
interval 0..s_max(q_w'), and each step is a shift along q_w and a sliding-window OR along q_s
(a cumulative sum): O(M * W_max * S * W) numpy work instead of the paper's
O(M |J_s| |J_w| eta_s eta_w) loop.

Which concrete sampler / trainer takes a counted slot is free; we fill slots with locality in
mind: a trainer goes to its home partition's node when that node has a trainer slot left, a
sampler to its trainer's node, then to the node its largest structure flow comes from, and
otherwise to the first machine (in the DP's order) with a slot left.
"""
from __future__ import annotations

import numpy as np

from gnnorch.place.assignment import Assignment, check_fits, demands, store_usage
from gnnorch.place.cluster import Cluster, PlacementError
from gnnorch.place.profile import Profile

__all__ = ["initial_placement", "slot_limits"]

_EPS = 1e-9


def slot_limits(free: np.ndarray, ds: np.ndarray, dw: np.ndarray, n_samplers: int,
                n_trainers: int) -> np.ndarray:
    """s_max[q_w] for q_w = 0..n_trainers on a node with `free` resources (-1: q_w does not fit
    even without samplers)."""
    out = np.full(n_trainers + 1, -1, dtype=np.int64)
    for qw in range(n_trainers + 1):
        rest = free - qw * dw
        if np.any(rest < -_EPS):
            break
        lim = n_samplers
        for r in range(rest.size):
            if ds[r] > 0:
                lim = min(lim, int(np.floor((rest[r] + _EPS) / ds[r])))
        out[qw] = lim
    return out


def _step(prev: np.ndarray, limits: np.ndarray) -> np.ndarray:
    """Omega(i) from Omega(i-1) (boolean (S+1, W+1) grids) and m_i's s_max."""
    s1, w1 = prev.shape
    new = np.zeros_like(prev)
    for qw, smax in enumerate(limits.tolist()):
        if smax < 0 or qw >= w1:
            continue
        shifted = np.zeros_like(prev)
        shifted[:, qw:] = prev[:, :w1 - qw]
        c = np.cumsum(shifted, axis=0, dtype=np.int64)
        window = c.copy()
        if smax + 1 < s1:
            window[smax + 1:] -= c[:s1 - smax - 1]
        new |= window > 0
    return new


def initial_placement(cluster: Cluster, profile: Profile,
                      rng: np.random.Generator) -> Assignment:
    """A feasible placement by IFS (module docstring); `PlacementError` when none exists."""
    check_fits(cluster, profile)
    _, ds, dw = demands(profile)
    s_total, w_total = profile.n_samplers, profile.n_trainers
    free = cluster.capacity - store_usage(cluster, profile)
    order = rng.permutation(cluster.n_nodes)
    limits = [slot_limits(free[m], ds, dw, s_total, w_total) for m in order]
    grids = [np.zeros((s_total + 1, w_total + 1), bool)]
    grids[0][0, 0] = True
    for i in range(cluster.n_nodes):
        grids.append(_step(grids[-1], limits[i]))
        if grids[-1][s_total, w_total]:
            break
    else:
        raise PlacementError(f"no placement of {s_total} samplers and {w_total} trainers fits "
                             f"the cluster's capacities")
    counts = np.zeros((cluster.n_nodes, 2), dtype=np.int64)   # per node: samplers, trainers
    qs, qw = s_total, w_total
    for i in range(len(grids) - 1, 0, -1):
        prev, lim = grids[i - 1], limits[i - 1]
        found = None
        for tw in range(min(qw, lim.size - 1), -1, -1):
            if lim[tw] < 0:
                continue
            for ts in range(min(qs, int(lim[tw])), -1, -1):
                if prev[qs - ts, qw - tw]:
                    found = (ts, tw)
                    break
            if found:
                break
        assert found is not None, "IFS backtracking lost its path"
        counts[order[i - 1]] = found
        qs, qw = qs - found[0], qw - found[1]
    return _fill(profile, counts, order)


def _fill(profile: Profile, counts: np.ndarray, order: np.ndarray) -> Assignment:
    """Concrete tasks for the counted slots, locality first (module docstring)."""
    left = counts.copy()
    home = profile.home_partition()
    trainer_node = np.empty(profile.n_trainers, dtype=np.int64)
    for w in range(profile.n_trainers):
        prefs = [int(home[w])] + order.tolist()
        node = next(m for m in prefs if left[m, 1] > 0)
        trainer_node[w] = node
        left[node, 1] -= 1
    sampler_node = np.empty(profile.n_samplers, dtype=np.int64)
    big = profile.structure_bytes.argmax(axis=0)
    for s in range(profile.n_samplers):
        prefs = [int(trainer_node[profile.sampler_trainer[s]]), int(big[s])] + order.tolist()
        node = next(m for m in prefs if left[m, 0] > 0)
        sampler_node[s] = node
        left[node, 0] -= 1
    return Assignment(trainer_node, sampler_node)
