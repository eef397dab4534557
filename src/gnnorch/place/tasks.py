"""The task / flow graph of N training iterations (DGTP's (j, n) tasks and their flows).

Entities (what a placement puts on nodes) have global ids: stores 0..P-1, samplers P..P+S-1,
trainers P+S..P+S+W-1. Tasks are (entity, iteration) executions plus three zero-time virtual
tasks per iteration that only express dependencies: ``batch(w, n)`` (trainer w holds the
structure of its mini-batch), ``sync(n)`` (every trainer has its gradients) and
``synced(n)`` (the all-reduce is complete). For iteration n:

    store(g, n)        after store(g, n-1)
    struct g -> s      ready when store(g, n) ends              (structure_bytes[g, s])
    sampler(s, n)      after every struct * -> s of n and sampler(s, n-1)
    batch s -> w       ready when sampler(s, n) ends            (batch_bytes[s])
    batch(w, n)        after every batch s -> w of n
    feature g -> w     ready when batch(w, n) ends              (feature_bytes[g, w])
    trainer(w, n)      after every feature * -> w of n, synced(n-1) and trainer(w, n-1)
    sync(n)            after every trainer(*, n)
    ring k -> k+1      ready when sync(n) ends                  (2 (W-1)/W grad_bytes)
    synced(n)          after sync(n) and every ring flow of n

Every virtual task also waits for its own previous iteration, and a flow of iteration n may
start only after the same flow of iteration n-1 has finished (DGTP's inter-iteration
dependencies (10), (11): at most one flow per task pair in flight). Flows of zero mean volume
are left out (they carry nothing and order nothing that their endpoints do not).
"""
from __future__ import annotations

import numpy as np

from gnnorch.options import check_int
from gnnorch.place.profile import Profile

__all__ = ["TaskGraph", "TASK_KINDS", "FLOW_KINDS"]

TASK_KINDS = ("store", "sampler", "batch", "trainer", "sync", "synced")
FLOW_KINDS = ("structure", "batch", "feature", "allreduce")


class TaskGraph:
    """Static structure of N iterations of a profile; placements only change entity nodes.

    Arrays (numpy unless said): ``task_kind``, ``task_entity`` (global entity id, -1 for
    sync / synced), ``task_iter``, ``task_mean`` (seconds); Python lists ``dependents[j]``
    (tasks that wait for task j), ``gates[j]`` (flows that become ready when j ends),
    ``n_prereq[j]`` (tasks + flows task j waits for); ``flow_kind``, ``flow_src`` /
    ``flow_dst`` (entity ids of the endpoints), ``flow_gate`` (task), ``flow_target`` (task
    that waits for the flow), ``flow_prev`` / ``flow_next`` (same flow in iteration n -+ 1,
    -1 if none), ``flow_mean`` (bytes).
    """

    def __init__(self, profile: Profile, n_iterations: int = 2) -> None:
        check_int("n_iterations", n_iterations, 1)
        self.profile = profile
        self.n_iterations = n_iterations
        p, s, w = profile.n_partitions, profile.n_samplers, profile.n_trainers
        self.n_entities = p + s + w
        self._sampler0, self._trainer0 = p, p + s
        kinds, ents, iters, means = [], [], [], []
        fkind, fsrc, fdst, fgate, ftarget, fmean, fkey = [], [], [], [], [], [], []
        deps: list[tuple[int, int]] = []           # (before, after) task pairs

        def task(kind: int, entity: int, n: int, mean: float) -> int:
            kinds.append(kind), ents.append(entity), iters.append(n), means.append(mean)
            return len(kinds) - 1

        def flow(kind, src, dst, gate, target, mean, key) -> None:
            if mean > 0:
                fkind.append(kind), fsrc.append(src), fdst.append(dst), fgate.append(gate)
                ftarget.append(target), fmean.append(float(mean)), fkey.append(key)

        ring = 2.0 * (w - 1) / w * profile.grad_bytes if w > 1 else 0.0
        prev: dict[tuple, int] = {}
        for n in range(n_iterations):
            cur: dict[tuple, int] = {}
            for g in range(p):
                cur["store", g] = task(0, g, n, profile.store_s[g])
            for j in range(s):
                cur["sampler", j] = task(1, p + j, n, profile.sampler_s[j])
            for k in range(w):
                cur["batch", k] = task(2, p + s + k, n, 0.0)
                cur["trainer", k] = task(3, p + s + k, n, profile.trainer_s[k])
            cur["sync"] = task(4, -1, n, 0.0)
            cur["synced"] = task(5, -1, n, 0.0)
            for key, j in cur.items():                     # inter-iteration: (j, n-1) first
                if key in prev:
                    deps.append((prev[key], j))
            for k in range(w):
                deps.append((cur["trainer", k], cur["sync"]))
                if "synced" in prev:
                    deps.append((prev["synced"], cur["trainer", k]))
            deps.append((cur["sync"], cur["synced"]))
            for g in range(p):
                for j in range(s):
                    flow(0, g, p + j, cur["store", g], cur["sampler", j],
                         profile.structure_bytes[g, j], ("st", g, j))
            for j in range(s):
                k = int(profile.sampler_trainer[j])
                flow(1, p + j, p + s + k, cur["sampler", j], cur["batch", k],
                     profile.batch_bytes[j], ("ba", j))
            for g in range(p):
                for k in range(w):
                    flow(2, g, p + s + k, cur["batch", k], cur["trainer", k],
                         profile.feature_bytes[g, k], ("fe", g, k))
            for k in range(w if w > 1 else 0):
                flow(3, p + s + k, p + s + (k + 1) % w, cur["sync"], cur["synced"], ring,
                     ("ar", k))
            prev = cur

        self.n_tasks, self.n_flows = len(kinds), len(fkind)
        self.task_kind = np.array(kinds, dtype=np.int8)
        self.task_entity = np.array(ents, dtype=np.int64)
        self.task_iter = np.array(iters, dtype=np.int64)
        self.task_mean = np.array(means, dtype=float)
        self.flow_kind = np.array(fkind, dtype=np.int8)
        self.flow_src = np.array(fsrc, dtype=np.int64)
        self.flow_dst = np.array(fdst, dtype=np.int64)
        self.flow_gate = np.array(fgate, dtype=np.int64)
        self.flow_target = np.array(ftarget, dtype=np.int64)
        self.flow_mean = np.array(fmean, dtype=float)
        self.flow_prev = np.full(self.n_flows, -1, dtype=np.int64)
        self.flow_next = np.full(self.n_flows, -1, dtype=np.int64)
        last: dict[tuple, int] = {}
        for f, key in enumerate(fkey):
            if key in last:
                self.flow_prev[f], self.flow_next[last[key]] = last[key], f
            last[key] = f
        self.dependents: list[list[int]] = [[] for _ in range(self.n_tasks)]
        self.gates: list[list[int]] = [[] for _ in range(self.n_tasks)]
        self.n_prereq = [0] * self.n_tasks
        for a, b in deps:
            self.dependents[a].append(b)
            self.n_prereq[b] += 1
        for f in range(self.n_flows):
            self.gates[int(self.flow_gate[f])].append(f)
            self.n_prereq[int(self.flow_target[f])] += 1
        self.flow_target_list = self.flow_target.tolist()
        self.flow_prev_list = self.flow_prev.tolist()
        self.flow_next_list = self.flow_next.tolist()

    # -- entities ------------------------------------------------------------------------------
    def entity_nodes(self, store_node, sampler_node, trainer_node) -> np.ndarray:
        """(E,) node of every entity, in global-id order."""
        return np.concatenate([np.asarray(store_node), np.asarray(sampler_node),
                               np.asarray(trainer_node)]).astype(np.int64)

    # -- draws ---------------------------------------------------------------------------------
    def means(self) -> tuple[np.ndarray, np.ndarray]:
        """(task seconds, flow bytes) at their profiled means."""
        return self.task_mean.copy(), self.flow_mean.copy()

    def draw(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One random draw: every mean times a mean-one log-normal factor with the profile's
        coefficient of variation (sigma^2 = log(1 + cv^2), mu = -sigma^2 / 2)."""
        def factor(cv: float, n: int) -> np.ndarray:
            if cv <= 0:
                return np.ones(n)
            sigma = np.sqrt(np.log1p(cv * cv))
            return rng.lognormal(-sigma * sigma / 2, sigma, n)

        return (self.task_mean * factor(self.profile.time_cv, self.n_tasks),
                self.flow_mean * factor(self.profile.volume_cv, self.n_flows))
