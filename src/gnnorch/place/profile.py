"""The profile of one distributed GNN training iteration: per-task times, per-flow volumes.

Tasks (DGTP section III-A, with DistDGL's data path and all-reduce instead of a PS):

* P graph stores, store g holding feature / structure partition g (pinned: store g on node g);
  it spends ``store_s[g]`` seconds per iteration serving sampling requests;
* S samplers, sampler s feeding trainer ``sampler_trainer[s]``; ``sampler_s[s]`` seconds to
  build its part of the mini-batch once the sampled structure from every store has arrived;
* W trainers (data-parallel ranks, one GPU each); ``trainer_s[w]`` seconds of forward and
  backward once their batch structure and the features of its input nodes have arrived.

Flows per iteration (bytes, means): ``structure_bytes[g, s]`` store g -> sampler s (sampled
neighbourhoods), ``batch_bytes[s]`` sampler s -> its trainer (the mini-batch blocks),
``feature_bytes[g, w]`` store g -> trainer w (input-node features that live on partition g),
and a ring all-reduce of ``grad_bytes`` over the trainers in rank order (trainer k sends
2 (W - 1) / W * grad_bytes to trainer k + 1 mod W).

Variation: a drawn time is mean * X, a drawn volume mean * Y, with X, Y log-normal of mean 1
and coefficient of variation ``time_cv`` / ``volume_cv`` (DGTP draws both from profiled
distributions; its peak-to-mean ratio of store -> sampler flows is 1.16 on products and 1.08
on papers100M, i.e. a cv of a few percent).

Resource demands are per task kind (DGTP: tasks of one kind demand the same), as
`TaskDemand` (cores, memory GB, GPUs). Invariants checked on construction: shapes agree with
``(P, S, W)``, every time and volume is finite and >= 0, ``sampler_trainer`` names trainers
0..W-1 and every trainer has at least one sampler.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gnnorch.options import check_int, check_number

__all__ = ["TaskDemand", "Profile"]


@dataclass(frozen=True)
class TaskDemand:
    """What one task occupies on its node: logical cores, memory GB, GPUs."""

    cores: float = 1.0
    memory_gb: float = 0.0
    gpus: float = 0.0

    def __post_init__(self) -> None:
        for name in ("cores", "memory_gb", "gpus"):
            check_number(f"TaskDemand.{name}", getattr(self, name), low=0.0, lenient=True)

    def vector(self) -> np.ndarray:
        """(3,) array in `cluster.RESOURCES` order."""
        return np.array([self.cores, self.memory_gb, self.gpus], dtype=float)


def _array(name: str, value, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be finite and >= 0")
    return arr


@dataclass
class Profile:
    """Mean per-task seconds and per-flow bytes of one iteration, their spread, and demands.

    Fill it from a real run with `from_measurements` (per-step samples of the first steps) or
    build a documented synthetic workload with `synthetic`.
    """

    sampler_trainer: np.ndarray          # (S,) int: the trainer each sampler feeds
    store_s: np.ndarray                  # (P,) seconds per iteration
    sampler_s: np.ndarray                # (S,)
    trainer_s: np.ndarray                # (W,)
    structure_bytes: np.ndarray          # (P, S)
    batch_bytes: np.ndarray              # (S,)
    feature_bytes: np.ndarray            # (P, W)
    grad_bytes: float = 0.0
    time_cv: float = 0.1
    volume_cv: float = 0.05
    store_demand: TaskDemand = field(default_factory=lambda: TaskDemand(1, 0, 0))
    sampler_demand: TaskDemand = field(default_factory=lambda: TaskDemand(1, 0, 0))
    trainer_demand: TaskDemand = field(default_factory=lambda: TaskDemand(1, 0, 1))
    name: str = ""

    def __post_init__(self) -> None:
        st = np.asarray(self.sampler_trainer)
        if st.ndim != 1 or st.size == 0 or not np.issubdtype(st.dtype, np.integer):
            raise ValueError("sampler_trainer must be a non-empty 1-D integer array")
        self.sampler_trainer = st.astype(np.int64)
        p, s = np.asarray(self.structure_bytes).shape if np.ndim(self.structure_bytes) == 2 \
            else (-1, -1)
        if p < 1 or s != st.size:
            raise ValueError("structure_bytes must have shape (partitions, samplers)")
        w = int(np.asarray(self.trainer_s).size)
        check_int("number of trainers", w, 1)
        if st.min() < 0 or st.max() >= w or np.unique(st).size != w:
            raise ValueError("sampler_trainer must map samplers onto trainers 0..W-1, each "
                             "trainer with at least one sampler")
        self.store_s = _array("store_s", self.store_s, (p,))
        self.sampler_s = _array("sampler_s", self.sampler_s, (s,))
        self.trainer_s = _array("trainer_s", self.trainer_s, (w,))
        self.structure_bytes = _array("structure_bytes", self.structure_bytes, (p, s))
        self.batch_bytes = _array("batch_bytes", self.batch_bytes, (s,))
        self.feature_bytes = _array("feature_bytes", self.feature_bytes, (p, w))
        check_number("grad_bytes", self.grad_bytes, low=0.0, lenient=True)
        check_number("time_cv", self.time_cv, low=0.0, lenient=True)
        check_number("volume_cv", self.volume_cv, low=0.0, lenient=True)

    # -- sizes ---------------------------------------------------------------------------------
    @property
    def n_partitions(self) -> int:
        return self.store_s.size

    @property
    def n_samplers(self) -> int:
        return self.sampler_s.size

    @property
    def n_trainers(self) -> int:
        return self.trainer_s.size

    def samplers_of(self, w: int) -> np.ndarray:
        return np.flatnonzero(self.sampler_trainer == w)

    def home_partition(self) -> np.ndarray:
        """(W,) the partition holding most of each trainer's input features (its seeds' home,
        where DistDGL would run it)."""
        return self.feature_bytes.argmax(axis=0)

    # -- constructors --------------------------------------------------------------------------
    @classmethod
    def synthetic(cls, *, n_partitions: int, n_trainers: int, samplers_per_trainer: int,
                  store_s: float, sampler_s: float, trainer_s: float,
                  structure_bytes: float, batch_bytes: float, feature_bytes: float,
                  grad_bytes: float, locality: float, spread: float = 0.0,
                  time_cv: float = 0.1, volume_cv: float = 0.05,
                  store_demand: TaskDemand | None = None,
                  sampler_demand: TaskDemand | None = None,
                  trainer_demand: TaskDemand | None = None,
                  seed: int = 0, name: str = "") -> "Profile":
        """A METIS-like workload: trainer w's seeds live on partition h(w) = w mod P.

        A share ``locality`` of every sampler's structure bytes and of every trainer's feature
        bytes comes from the home partition h, the rest from the other P - 1 partitions in
        proportions ``q[h, g]`` (even when ``spread`` = 0; otherwise Gamma weights with
        coefficient of variation ``spread``, drawn once from `seed`: some partition pairs share
        more boundary than others). ``structure_bytes`` / ``batch_bytes`` are per sampler,
        ``feature_bytes`` per trainer. Store g's time is ``store_s`` scaled by the structure
        bytes it serves relative to the mean store (a store serving more samples works more).
        """
        check_int("n_partitions", n_partitions, 1)
        check_int("n_trainers", n_trainers, 1)
        check_int("samplers_per_trainer", samplers_per_trainer, 1)
        check_number("locality", locality, 0.0, 1.0, lenient=True)
        check_number("spread", spread, low=0.0, lenient=True)
        p, w = n_partitions, n_trainers
        rng = np.random.default_rng(seed)
        share = np.zeros((p, p))                 # share[h, g]: fraction of home h's data on g
        for h in range(p):
            others = [g for g in range(p) if g != h]
            if not others:
                share[h, h] = 1.0
                continue
            weights = (rng.gamma(1.0 / spread ** 2, spread ** 2, len(others)) if spread > 0
                       else np.ones(len(others)))
            share[h, others] = (1.0 - locality) * weights / weights.sum()
            share[h, h] = locality
        home = np.arange(w) % p
        sampler_trainer = np.repeat(np.arange(w), samplers_per_trainer)
        struct = structure_bytes * share[home[sampler_trainer]].T          # (P, S)
        load = struct.sum(axis=1)
        stores = store_s * load / load.mean() if load.mean() > 0 else np.full(p, store_s)
        s = sampler_trainer.size
        return cls(sampler_trainer=sampler_trainer, store_s=stores,
                   sampler_s=np.full(s, sampler_s), trainer_s=np.full(w, trainer_s),
                   structure_bytes=struct, batch_bytes=np.full(s, batch_bytes),
                   feature_bytes=feature_bytes * share[home].T, grad_bytes=grad_bytes,
                   time_cv=time_cv, volume_cv=volume_cv,
                   store_demand=store_demand or TaskDemand(1, 0, 0),
                   sampler_demand=sampler_demand or TaskDemand(1, 0, 0),
                   trainer_demand=trainer_demand or TaskDemand(1, 0, 1), name=name)

    @classmethod
    def from_measurements(cls, *, sampler_trainer, store_s, sampler_s, trainer_s,
                          structure_bytes, batch_bytes, feature_bytes, grad_bytes: float,
                          store_demand: TaskDemand, sampler_demand: TaskDemand,
                          trainer_demand: TaskDemand, skip: int = 0,
                          name: str = "measured") -> "Profile":
        """A profile from the first steps of a real run (DGTP profiles 50 iterations).

        Every per-task argument is an array with one row per measured step: ``store_s``
        (steps, P), ``sampler_s`` (steps, S), ``trainer_s`` (steps, W), ``structure_bytes``
        (steps, P, S), ``batch_bytes`` (steps, S), ``feature_bytes`` (steps, P, W). The first
        ``skip`` steps (warm-up) are dropped. Means become the profile; the cvs are the mean
        over tasks (flows) of std / mean, over those with a positive mean.
        """
        check_int("skip", skip, 0)
        rows = [np.asarray(a, dtype=float)[skip:] for a in
                (store_s, sampler_s, trainer_s, structure_bytes, batch_bytes, feature_bytes)]
        if any(r.shape[0] < 1 for r in rows):
            raise ValueError("from_measurements needs at least one step after `skip`")

        def cv(samples: list[np.ndarray]) -> float:
            flat = np.concatenate([s.reshape(s.shape[0], -1) for s in samples], axis=1)
            mean = flat.mean(axis=0)
            keep = mean > 0
            return float((flat.std(axis=0)[keep] / mean[keep]).mean()) if keep.any() else 0.0

        return cls(sampler_trainer=np.asarray(sampler_trainer), store_s=rows[0].mean(0),
                   sampler_s=rows[1].mean(0), trainer_s=rows[2].mean(0),
                   structure_bytes=rows[3].mean(0), batch_bytes=rows[4].mean(0),
                   feature_bytes=rows[5].mean(0), grad_bytes=float(grad_bytes),
                   time_cv=cv(rows[:3]), volume_cv=cv(rows[3:]), store_demand=store_demand,
                   sampler_demand=sampler_demand, trainer_demand=trainer_demand, name=name)

    def to_dict(self) -> dict:
        """A small JSON summary (sizes, totals, cvs, demands), not the full matrices."""
        return {"name": self.name, "partitions": self.n_partitions,
                "samplers": self.n_samplers, "trainers": self.n_trainers,
                "structure_bytes_per_iter": float(self.structure_bytes.sum()),
                "feature_bytes_per_iter": float(self.feature_bytes.sum()),
                "grad_bytes": float(self.grad_bytes), "time_cv": self.time_cv,
                "volume_cv": self.volume_cv,
                "demands": {k: vars(getattr(self, f"{k}_demand"))
                            for k in ("store", "sampler", "trainer")}}
