"""The cluster model of DGTP (Luo, Bao, Wu; section III-A): machines with resources and NICs.

A cluster has M nodes. Node m offers ``C[m, r]`` of each resource r in `RESOURCES` (logical
cores, memory in GB, GPUs) and a NIC with ``B_in[m]`` / ``B_out[m]`` bytes per second (given in
Gbit/s, 1 Gbit/s = 1.25e8 B/s). Optionally a pair matrix ``L[m, m']`` caps the throughput of
the traffic from m to m' (an oversubscribed uplink, a measured pairwise bandwidth); absent, the
switch is non-blocking and only the NICs limit a flow, as in DGTP. Traffic between two tasks
on the same node is free (DGTP's model), or, with ``local_gbps``, takes volume / local
bandwidth without contention (a memory-copy cost).

Invariants: every vector has length M >= 1; resources are >= 0; bandwidths are > 0 (inf is
allowed for L); `Cluster` is immutable, and its numpy views are computed once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from gnnorch.errors import GnnorchError
from gnnorch.options import check_int, check_number

__all__ = ["Cluster", "PlacementError", "RESOURCES", "GBPS"]

RESOURCES = ("cores", "memory_gb", "gpus")
GBPS = 1.25e8          # bytes per second in one Gbit/s


class PlacementError(GnnorchError, ValueError):
    """No placement satisfies the cluster's capacities, or the inputs do not describe one."""


def _vector(name: str, values: Sequence[float], n: int, positive: bool) -> tuple[float, ...]:
    values = tuple(float(v) for v in values)
    if len(values) != n:
        raise ValueError(f"{name} must have one value per node ({n}), got {len(values)}")
    for v in values:
        check_number(name, v, low=0.0, low_open=positive, lenient=True)
        if math.isinf(v):
            raise ValueError(f"{name} must be finite, got {v!r}")
    return values


@dataclass(frozen=True)
class Cluster:
    """M nodes: resources per node, NIC bandwidth per node, optional pair caps.

    ``cores`` are logical cores, ``memory_gb`` GB, ``gpus`` a count; ``nic_in_gbps`` /
    ``nic_out_gbps`` the NIC's ingress / egress Gbit/s; ``link_gbps`` (M x M, optional) the
    most the m -> m' traffic may use in total (inf: no cap; the diagonal is ignored);
    ``local_gbps`` the bandwidth of a co-located flow (None: instantaneous).
    """

    cores: tuple[float, ...]
    memory_gb: tuple[float, ...]
    gpus: tuple[float, ...]
    nic_in_gbps: tuple[float, ...]
    nic_out_gbps: tuple[float, ...]
    link_gbps: tuple[tuple[float, ...], ...] | None = None
    local_gbps: float | None = None
    _arrays: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.cores)
        check_int("number of nodes", n, 1)
        set_ = object.__setattr__
        set_(self, "cores", _vector("cores", self.cores, n, False))
        set_(self, "memory_gb", _vector("memory_gb", self.memory_gb, n, False))
        set_(self, "gpus", _vector("gpus", self.gpus, n, False))
        set_(self, "nic_in_gbps", _vector("nic_in_gbps", self.nic_in_gbps, n, True))
        set_(self, "nic_out_gbps", _vector("nic_out_gbps", self.nic_out_gbps, n, True))
        check_number("local_gbps", self.local_gbps, low=0.0, low_open=True, allow_none=True,
                     lenient=True)
        if self.link_gbps is not None:
            rows = tuple(tuple(float(v) for v in row) for row in self.link_gbps)
            if len(rows) != n or any(len(r) != n for r in rows):
                raise ValueError(f"link_gbps must be a {n} x {n} matrix")
            if any(not (v > 0) for r in rows for v in r):
                raise ValueError("link_gbps entries must be > 0 (inf: no cap)")
            set_(self, "link_gbps", rows)

    # -- constructors ------------------------------------------------------------------------
    @classmethod
    def homogeneous(cls, n: int, cores: float, memory_gb: float, gpus: float, gbps: float,
                    local_gbps: float | None = None) -> "Cluster":
        """n identical nodes with a symmetric NIC of `gbps`."""
        check_int("n", n, 1)
        return cls((cores,) * n, (memory_gb,) * n, (gpus,) * n, (gbps,) * n, (gbps,) * n,
                   local_gbps=local_gbps)

    @classmethod
    def from_bandwidth_matrix(cls, cores: Sequence[float], memory_gb: Sequence[float],
                              gpus: Sequence[float], matrix_gbps: Sequence[Sequence[float]],
                              local_gbps: float | None = None) -> "Cluster":
        """Nodes whose pairwise throughput was measured (one flow m -> m' alone: matrix[m][m']).

        A lone flow gets min(B_out[m], B_in[m'], L[m, m']); the NICs are taken as the largest
        throughput seen out of / into each node and L as the matrix itself, which reproduces
        every measured entry (diagonal ignored).
        """
        mat = np.array(matrix_gbps, dtype=float)
        n = len(cores)
        if mat.shape != (n, n):
            raise ValueError(f"matrix_gbps must be {n} x {n}, got {mat.shape}")
        off = mat.copy()
        np.fill_diagonal(off, 0.0)
        if n == 1:
            out = inn = np.array([float(mat[0, 0]) if mat[0, 0] > 0 else 1.0])
        else:
            out, inn = off.max(axis=1), off.max(axis=0)
        np.fill_diagonal(mat, np.inf)
        return cls(tuple(cores), tuple(memory_gb), tuple(gpus), tuple(inn), tuple(out),
                   link_gbps=tuple(map(tuple, mat)), local_gbps=local_gbps)

    # -- numpy views ---------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return len(self.cores)

    def _cached(self, key: str, make):
        if key not in self._arrays:
            self._arrays[key] = make()
        return self._arrays[key]

    @property
    def capacity(self) -> np.ndarray:
        """(M, 3) array: cores, memory GB, GPUs of each node (columns as in `RESOURCES`)."""
        return self._cached("cap", lambda: np.array([self.cores, self.memory_gb, self.gpus],
                                                    dtype=float).T.copy())

    @property
    def bytes_in(self) -> np.ndarray:
        """(M,) ingress bytes/s."""
        return self._cached("in", lambda: np.array(self.nic_in_gbps) * GBPS)

    @property
    def bytes_out(self) -> np.ndarray:
        """(M,) egress bytes/s."""
        return self._cached("out", lambda: np.array(self.nic_out_gbps) * GBPS)

    @property
    def link_bytes(self) -> np.ndarray | None:
        """(M, M) pair caps in bytes/s (inf: none), or None for a non-blocking switch."""
        if self.link_gbps is None:
            return None
        return self._cached("link", lambda: np.array(self.link_gbps) * GBPS)

    @property
    def local_bytes(self) -> float | None:
        """Bytes/s of a co-located flow, or None (co-located flows take no time)."""
        return None if self.local_gbps is None else self.local_gbps * GBPS

    def to_dict(self) -> dict:
        """JSON-serialisable description (inf pair caps written as None)."""
        out = {"cores": list(self.cores), "memory_gb": list(self.memory_gb),
               "gpus": list(self.gpus), "nic_in_gbps": list(self.nic_in_gbps),
               "nic_out_gbps": list(self.nic_out_gbps), "local_gbps": self.local_gbps}
        if self.link_gbps is not None:
            out["link_gbps"] = [[None if math.isinf(v) else v for v in r]
                                for r in self.link_gbps]
        return out
