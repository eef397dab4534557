"""OES: DGTP's online execution scheduling, as an event simulation (Luo et al., Alg. 1).

Given where every entity runs, simulate the task graph of `tasks.TaskGraph`:

* a task starts the moment its prerequisites (tasks and incoming flows) are done and runs for
  its drawn duration (no CPU / GPU sharing between tasks: the placement's capacity constraints
  give every task its own cores and GPU);
* a flow becomes *ready* when its gate task ends; it starts when it is ready and the same flow
  of the previous iteration has finished (DGTP's F_pend);
* a flow whose endpoints are on the same node takes no time (DGTP), or volume / local
  bandwidth without contention when the cluster has ``local_gbps``;
* network flows share bandwidth by the *policy*. Between two events every rate is constant;
  the next event is the earliest task end, local-flow end or flow completion (remaining / rate).

Policies (which started network flows transmit, and at what rate):

``"oes"`` (DGTP): every started flow is active. A flow m -> m' gets
    rate = min(B_out[m] / D_out[m], B_in[m'] / D_in[m'] [, L[m, m'] / D[m, m']])
    where D_out[m] / D_in[m'] count the active flows leaving m / entering m' (and D[m, m'] those
    on the pair when the cluster has pair caps). Invariant: no NIC (or pair) is oversubscribed,
    since each of the D_out[m] flows leaving m gets at most B_out[m] / D_out[m] (the rule
    is not work-conserving: a NIC may stay partly idle when its flows are limited elsewhere).
``"fifo"`` (DistDGL's default, as DGTP models it): each node sends its started flows one at a
    time in the order they started (one FIFO queue per sending NIC); the head flow gets the
    same formula with D_out = 1, sharing only the receiver's NIC.
``"mrtf"`` (DGTP's MRTF baseline): like FIFO, but each sender transmits the queued flow with
    the minimum remaining time (remaining bytes / min(B_out, B_in)), re-chosen at every event.

Flows that become ready at the same instant (the gated flows of one task) join a sender's
queue in rotation order, (destination node - source node) mod M: the classic contention-free
order of an all-to-all, so that FIFO is not penalised by every sender picking the same
receiver first. (The order does not matter to ``"oes"``.)

The makespan is the end of the last task of the last iteration; ``iteration_s`` is makespan /
N (it includes the pipeline's fill, which weighs less as N grows). The result also holds every
task's and flow's start and end times and the end of each iteration.
"""
from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from gnnorch.options import check_choice
from gnnorch.place.cluster import Cluster
from gnnorch.place.network import FairShare, Queued
from gnnorch.place.tasks import FLOW_KINDS, TaskGraph

__all__ = ["POLICIES", "SimResult", "simulate"]

POLICIES = ("oes", "fifo", "mrtf")
_TASK_DONE, _FLOW_READY, _FLOW_DONE = 0, 1, 2


@dataclass
class SimResult:
    """One simulated run: makespan and every task's / flow's start and end (seconds)."""

    makespan: float
    n_iterations: int
    task_start: np.ndarray
    task_end: np.ndarray
    flow_start: np.ndarray
    flow_end: np.ndarray
    flow_kind: np.ndarray
    flow_local: np.ndarray
    events: int
    iteration_end: np.ndarray | None = None      # (N,) when each iteration's all-reduce ended

    @property
    def iteration_s(self) -> float:
        """Makespan / N: DGTP's objective (the makespan of N iterations) per iteration.

        Not (end of iteration N - end of iteration 1) / (N - 1): stores and samplers may run
        ahead, so in a short run later iterations' flows can delay iteration 1 and make that
        difference look faster than any steady state; the makespan cannot be gamed."""
        return self.makespan / self.n_iterations

    def flow_seconds(self, kind: str | None = None, remote_only: bool = False) -> np.ndarray:
        """Transfer times (end - start) of the flows of one kind (a name in FLOW_KINDS)."""
        keep = np.ones(self.flow_kind.size, bool)
        if kind is not None:
            check_choice("kind", kind, FLOW_KINDS)
            keep &= self.flow_kind == FLOW_KINDS.index(kind)
        if remote_only:
            keep &= ~self.flow_local
        return (self.flow_end - self.flow_start)[keep]


def simulate(graph: TaskGraph, nodes, cluster: Cluster, durations: np.ndarray | None = None,
             volumes: np.ndarray | None = None, policy: str = "oes") -> SimResult:
    """Simulate `graph` with entity e on node ``nodes[e]`` (see the module docstring).

    ``durations`` / ``volumes``: per task seconds / per flow bytes (default: the means).
    """
    check_choice("policy", policy, POLICIES)
    nodes = np.asarray(nodes, dtype=np.int64)
    m = cluster.n_nodes
    if nodes.shape != (graph.n_entities,) or nodes.min() < 0 or nodes.max() >= m:
        raise ValueError(f"nodes must give each of the {graph.n_entities} entities a node "
                         f"in 0..{m - 1}")
    if durations is None or volumes is None:
        mean_d, mean_v = graph.means()
        durations = mean_d if durations is None else durations
        volumes = mean_v if volumes is None else volumes
    src, dst = nodes[graph.flow_src], nodes[graph.flow_dst]
    local = src == dst
    bout, bin_ = cluster.bytes_out[src], cluster.bytes_in[dst]
    link = pair = None
    if cluster.link_bytes is not None:
        pair = src * m + dst
        link = cluster.link_bytes.ravel()[pair]
    local_bw = cluster.local_bytes

    n_tasks, n_flows = graph.n_tasks, graph.n_flows
    vol = np.asarray(volumes, dtype=float).tolist()
    dur = np.asarray(durations, dtype=float).tolist()
    if policy == "oes":
        net = FairShare(src, dst, bout, bin_, m, pair, link)
    else:
        net = Queued(src, dst, bout, bin_, m, pair, link, order=policy)
    pending = list(graph.n_prereq)
    t_start, t_end = [math.nan] * n_tasks, [math.nan] * n_tasks
    f_start, f_end = [math.nan] * n_flows, [math.nan] * n_flows
    ready, done = [False] * n_flows, [False] * n_flows
    local_l, src_l, dst_l = local.tolist(), src.tolist(), dst.tolist()
    prev_l, next_l, target_l = graph.flow_prev_list, graph.flow_next_list, graph.flow_target_list
    dependents, gates = graph.dependents, graph.gates
    heap: list[tuple[float, int, int]] = []      # (time, seq, task j >= 0 | local flow -f-1)
    work: deque = deque()
    now, seq = 0.0, 0

    def release(j: int) -> None:
        nonlocal seq
        pending[j] -= 1
        if pending[j] == 0:
            t_start[j] = now
            if dur[j] > 0:
                seq += 1
                heapq.heappush(heap, (now + dur[j], seq, j))
            else:
                work.append((_TASK_DONE, j))

    def start_flow(f: int) -> None:
        nonlocal seq
        f_start[f] = now
        if vol[f] <= 0 or (local_l[f] and local_bw is None):
            work.append((_FLOW_DONE, f))
        elif local_l[f]:
            seq += 1
            heapq.heappush(heap, (now + vol[f] / local_bw, seq, -f - 1))
        else:
            net.add(f, vol[f])

    def drain() -> None:
        while work:
            op, x = work.popleft()
            if op == _TASK_DONE:
                t_end[x] = now
                for j in dependents[x]:
                    release(j)
                for f in (gates[x] if policy == "oes" or len(gates[x]) < 2 else
                          sorted(gates[x], key=lambda f: ((dst_l[f] - src_l[f]) % m, f))):
                    work.append((_FLOW_READY, f))
            elif op == _FLOW_READY:
                ready[x] = True
                if prev_l[x] < 0 or done[prev_l[x]]:
                    start_flow(x)
            else:
                done[x] = True
                f_end[x] = now
                release(target_l[x])
                nxt = next_l[x]
                if nxt >= 0 and ready[nxt] and f_start[nxt] != f_start[nxt]:   # NaN: unstarted
                    start_flow(nxt)

    for j in range(n_tasks):
        if pending[j] == 0:
            pending[j] = 1
            release(j)
    drain()
    events = 0
    while net.busy or heap:
        t_heap = heap[0][0] if heap else math.inf
        t_next = min(now + net.next_finish(), t_heap)
        for f in net.advance(t_next - now):
            work.append((_FLOW_DONE, f))
        now = t_next
        while heap and heap[0][0] <= now * (1 + 1e-12):
            _, _, code = heapq.heappop(heap)
            work.append((_TASK_DONE, code) if code >= 0 else (_FLOW_DONE, -code - 1))
        drain()
        events += 1
    if any(e != e for e in t_end):
        raise RuntimeError("simulation stalled: some tasks never became ready (a cycle?)")
    return SimResult(makespan=max(t_end), n_iterations=graph.n_iterations,
                     task_start=np.array(t_start), task_end=np.array(t_end),
                     flow_start=np.array(f_start), flow_end=np.array(f_end),
                     flow_kind=graph.flow_kind, flow_local=local, events=events,
                     iteration_end=np.array(t_end)[graph.task_kind == 5])
