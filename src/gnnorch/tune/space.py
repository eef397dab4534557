"""The search space: ranks p, sampler cores s and trainer threads t per rank, on the measured
topology, with ``p * (s + t) <= usable cores``; room for more dimensions (cache hot ratio,
staleness, ...) through `SearchSpace.add`.

Feasibility is part of the space, not a penalty: skopt's `Optimizer` gets the space's
`constraint` (``space_constraint``), so its random initial points and the candidates over which
it optimises the acquisition are drawn from feasible points only (rejection sampling), and the
tuner never asks for, runs or reports an infeasible point. Points are plain dicts
``{"processes": p, "sampler_cores": s, "threads": t, ...}``.

Priors: p and t are searched on a log scale (their effect on throughput is roughly
multiplicative: doubling threads or ranks matters about equally at any size), s uniformly (it
can be 0).
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Callable, Iterator

from ..launch.plan import CorePlan
from ..launch.topology import Topology

PLAN_DIMS = ("processes", "sampler_cores", "threads")
_ENUMERATE_LIMIT = 200_000


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One searched knob: integer or real, bounds inclusive, uniform or log-uniform prior."""

    name: str
    low: float
    high: float
    kind: str = "int"                  # "int" or "real"
    prior: str = "uniform"             # "uniform" or "log-uniform"

    def __post_init__(self) -> None:
        if self.kind not in ("int", "real"):
            raise ValueError(f"dimension kind must be 'int' or 'real', got {self.kind!r}")
        if self.prior not in ("uniform", "log-uniform"):
            raise ValueError(f"dimension prior must be 'uniform' or 'log-uniform', "
                             f"got {self.prior!r}")
        if not self.low < self.high:
            raise ValueError(f"dimension {self.name!r}: low {self.low} must be < high {self.high}")
        if self.prior == "log-uniform" and self.low <= 0:
            raise ValueError(f"dimension {self.name!r}: a log-uniform prior needs low > 0")

    def skopt(self):  # noqa: ANN201 - skopt dimension
        from skopt.space import Integer, Real

        if self.kind == "int":
            return Integer(int(self.low), int(self.high), prior=self.prior, name=self.name)
        return Real(float(self.low), float(self.high), prior=self.prior, name=self.name)

    def values(self) -> range | None:
        return range(int(self.low), int(self.high) + 1) if self.kind == "int" else None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class SearchSpace:
    """Searched dimensions, fixed values and feasibility on `usable` cores."""

    def __init__(self, usable: int, dimensions: list[Dimension],
                 fixed: dict[str, Any] | None = None,
                 constraints: list[tuple[str, Callable[[dict], bool]]] | None = None) -> None:
        self.usable = int(usable)
        self.dimensions = list(dimensions)
        self.fixed = dict(fixed or {})
        self.constraints: list[tuple[str, Callable[[dict], bool]]] = [
            (f"processes*(sampler_cores+threads) <= {self.usable}", self._fits_cores)]
        self.constraints += list(constraints or [])
        names = [d.name for d in self.dimensions] + list(self.fixed)
        if len(set(names)) != len(names):
            raise ValueError(f"dimension names must be unique, got {names}")
        missing = [n for n in PLAN_DIMS if n not in names]
        if missing:
            raise ValueError(f"the space needs {missing} searched or fixed")
        self._size: int | None = None
        self._points: list[dict] | None = None

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_topology(cls, topology: Topology, *, max_processes: int = 8,
                      max_sampler_cores: int = 4,
                      fixed: dict[str, int] | None = None) -> "SearchSpace":
        """The (p, s, t) space of a machine: p in 1..min(n, max_processes), s in
        0..min(n-1, max_sampler_cores), t in 1..n, with p*(s+t) <= n usable cores. Keys of
        `fixed` (user-given values) are not searched; a dimension whose range is a single value
        is fixed too."""
        return cls.for_cores(topology.num_usable, max_processes=max_processes,
                             max_sampler_cores=max_sampler_cores, fixed=fixed)

    @classmethod
    def for_cores(cls, usable: int, *, max_processes: int = 8, max_sampler_cores: int = 4,
                  fixed: dict[str, int] | None = None) -> "SearchSpace":
        fixed = {k: int(v) for k, v in (fixed or {}).items() if v is not None}
        n = int(usable)
        p_hi = fixed.get("processes", min(n, max_processes))
        p_lo = fixed.get("processes", 1)
        per_rank = n // p_lo
        s_hi = fixed.get("sampler_cores", min(per_rank - 1, max_sampler_cores))
        s_lo = fixed.get("sampler_cores", 0)
        t_hi = fixed.get("threads", per_rank - s_lo)
        t_lo = fixed.get("threads", 1)
        bounds = {"processes": (p_lo, p_hi, "log-uniform"),
                  "sampler_cores": (s_lo, max(s_lo, s_hi), "uniform"),
                  "threads": (t_lo, max(t_lo, t_hi), "log-uniform")}
        dims = []
        for name in PLAN_DIMS:
            lo, hi, prior = bounds[name]
            if name in fixed or lo == hi:
                fixed[name] = lo
            else:
                dims.append(Dimension(name, lo, hi, "int", prior))
        return cls(n, dims, fixed)

    def add(self, dimension: Dimension,
            constraint: tuple[str, Callable[[dict], bool]] | None = None) -> "SearchSpace":
        """A new space with one more dimension (and optionally a constraint on points)."""
        return SearchSpace(self.usable, self.dimensions + [dimension], self.fixed,
                           self.constraints[1:] + ([constraint] if constraint else []))

    # -- feasibility ----------------------------------------------------------------------
    def _fits_cores(self, point: dict) -> bool:
        p, s, t = (int(point[n]) for n in PLAN_DIMS)
        return p >= 1 and s >= 0 and t >= 1 and p * (s + t) <= self.usable

    def feasible(self, point: dict) -> bool:
        """Within bounds and every constraint."""
        for d in self.dimensions:
            v = point.get(d.name)
            if v is None or not d.low <= v <= d.high:
                return False
        return all(check(point) for _, check in self.constraints)

    def constraint(self, x: list) -> bool:
        """skopt's `space_constraint`: feasibility of a point given as a list of searched
        values."""
        return self.feasible(self.to_point(x))

    # -- conversions ----------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [d.name for d in self.dimensions]

    def to_point(self, x: list) -> dict:
        point = dict(self.fixed)
        for d, v in zip(self.dimensions, x):
            point[d.name] = int(v) if d.kind == "int" else float(v)
        return point

    def to_x(self, point: dict) -> list:
        return [int(point[d.name]) if d.kind == "int" else float(point[d.name])
                for d in self.dimensions]

    @staticmethod
    def plan(point: dict) -> CorePlan:
        return CorePlan(*(int(point[n]) for n in PLAN_DIMS))

    @staticmethod
    def key(point: dict) -> tuple:
        return tuple(sorted(point.items()))

    def skopt_dimensions(self) -> list:
        return [d.skopt() for d in self.dimensions]

    # -- enumeration ----------------------------------------------------------------------
    @property
    def finite(self) -> bool:
        return all(d.kind == "int" for d in self.dimensions)

    def _iter_points(self) -> Iterator[dict]:
        for values in itertools.product(*(d.values() for d in self.dimensions)):
            point = self.to_point(list(values))
            if self.feasible(point):
                yield point

    def points(self) -> list[dict] | None:
        """Every feasible point (None when a dimension is real or the box is too large)."""
        if self._points is None and self.finite and self.box_size <= _ENUMERATE_LIMIT:
            self._points = list(self._iter_points())
        return self._points

    @property
    def box_size(self) -> float:
        return math.prod((d.high - d.low + 1) if d.kind == "int" else math.inf
                         for d in self.dimensions)

    @property
    def size(self) -> int | None:
        """Number of feasible points (None when not enumerable)."""
        if self._size is None:
            pts = self.points()
            self._size = len(pts) if pts is not None else None
        return self._size

    def to_dict(self) -> dict[str, Any]:
        return {
            "dimensions": [d.to_dict() for d in self.dimensions],
            "fixed": dict(self.fixed),
            "constraints": [text for text, _ in self.constraints],
            "usable_cores": self.usable,
            "size": self.size,
        }

    def __repr__(self) -> str:
        dims = ", ".join(f"{d.name}={d.low:g}..{d.high:g}" for d in self.dimensions)
        fixed = ", ".join(f"{k}={v}" for k, v in self.fixed.items())
        return f"SearchSpace({dims}{'; fixed ' + fixed if fixed else ''}; size={self.size})"
