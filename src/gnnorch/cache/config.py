"""`CacheConfig`: the historical-embedding cache's knobs, and how Runtime options map onto it.

``Runtime(train, cache=True, staleness=4, hot_ratio=0.1)`` and
``Runtime(train, cache=CacheConfig(staleness=4, hot_ratio=0.1))`` mean the same; keyword
`staleness` / `hot_ratio` override a config's. A config is plain data: it round-trips through
`to_dict` / `from_dict` (JSON) so it reaches rank processes inside `Features`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

HOTNESS = ("estimate", "count")
STORE = ("auto", "output", "aggregate")
GRADIENT = ("auto", "none", "linear")
REFRESH = ("auto", "sample", "full")
OVERLAP = ("auto", "thread", "off")


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    """Knobs of the hotness-aware historical-embedding cache (``Runtime(cache=...)``).

    Attributes:
        staleness: the bound, in optimizer steps: a cached row used by a forward was computed
            with weights at most this many optimizer steps old (0: refreshed before every use).
        hot_ratio: fraction of the graph's vertices that are hot (float in (0, 1]), or
            ``"auto"``: searched during the first epoch(s) for the fastest step, at most
            `max_hot_ratio`; the search includes 0 (nothing hot: the exact fast path), so it
            turns the cache off where it does not pay.
        max_hot_ratio: upper bound of the ``"auto"`` search (the accuracy guard: ratios up to
            it were measured within 0.5 pt of exact training; see src/gnnorch/cache/README.md).
        hotness: ``"estimate"`` (expected appearances propagated over the graph with the
            loader's fanouts: one sparse pass per hop, no sampling) or ``"count"`` (count
            appearances in `count_fraction` of an epoch of pre-sampled batches).
        count_fraction: share of an epoch's batches pre-sampled by ``hotness="count"``.
        refresh: neighbourhood of a refresh: ``"sample"`` (the loader's bottom fanout, as the
            batch would sample it), ``"full"`` (every in-neighbour: the exact full-neighbourhood
            value) or ``"auto"`` (full when it costs at most `full_factor` times the sampled one).
        full_factor: see `refresh="auto"`.
        overlap: ``"thread"``: refresh the rows due next step in a background thread while the
            trainer works (needs staleness >= 1); ``"off"``: refresh on demand in the trainer,
            just before a forward would use rows older than the bound; ``"auto"``: "thread" when
            the rank has at least `overlap_min_cores` trainer cores, else "off".
        overlap_min_cores: see `overlap="auto"`.
        debug: a forward that would use a row older than the bound raises `StalenessError`
            instead of refreshing it first.
        store: what a row holds. ``"output"`` (NeutronOrch): the bottom layer's output,
            reused for up to `staleness` steps without gradient. ``"aggregate"`` (GCNConv
            only): the weight-independent normalised sum of the raw neighbour features; the
            row is finished with the *current* weights in every step, so it is never stale
            and the bottom layer gets its full gradient (the neighbour sample is reused for up
            to `staleness` steps). ``"auto"``: aggregate for GCNConv, output otherwise.
        gradient: ``store="output"`` rows of a bottom layer that is linear in its weights
            (SAGEConv with mean/sum aggregation and neither `project` nor `normalize`;
            GraphConv) can carry the exact weight gradient although their value is cached: the
            gradient of lin(a) w.r.t. lin's weights is g^T a, whatever the weights, so the
            store keeps the raw aggregate a next to the output and the backward pass computes
            g^T a (half of the row's work: the forward transform is still skipped).
            ``"linear"``: do so where the layer allows; ``"none"``: no gradient into cached rows
            (NeutronOrch); ``"auto"``: ``"linear"``.
        chunk_rows: refreshes are computed in chunks of at most this many hot vertices.
    """

    staleness: int = 4
    hot_ratio: float | str = 0.1
    max_hot_ratio: float = 0.3
    hotness: str = "estimate"
    count_fraction: float = 0.25
    refresh: str = "auto"
    full_factor: float = 1.5
    overlap: str = "auto"
    overlap_min_cores: int = 4
    debug: bool = False
    store: str = "auto"
    gradient: str = "auto"
    chunk_rows: int = 32768

    def __post_init__(self) -> None:
        _check(isinstance(self.staleness, int) and not isinstance(self.staleness, bool)
               and self.staleness >= 0, "staleness",
               "an integer >= 0 (optimizer steps)", self.staleness)
        ratio_ok = self.hot_ratio == "auto" or (
            isinstance(self.hot_ratio, (int, float)) and not isinstance(self.hot_ratio, bool)
            and 0.0 < float(self.hot_ratio) <= 1.0)
        _check(ratio_ok, "hot_ratio", 'a float in (0, 1] or "auto"', self.hot_ratio)
        if self.hot_ratio != "auto":
            object.__setattr__(self, "hot_ratio", float(self.hot_ratio))
        _check(isinstance(self.max_hot_ratio, (int, float)) and not isinstance(
            self.max_hot_ratio, bool) and 0.0 < self.max_hot_ratio <= 1.0, "max_hot_ratio",
            "a float in (0, 1]", self.max_hot_ratio)
        _check(self.hotness in HOTNESS, "hotness", f"one of {HOTNESS}", self.hotness)
        _check(isinstance(self.count_fraction, (int, float)) and 0 < self.count_fraction <= 1,
               "count_fraction", "a float in (0, 1]", self.count_fraction)
        _check(self.refresh in REFRESH, "refresh", f"one of {REFRESH}", self.refresh)
        _check(isinstance(self.full_factor, (int, float)) and self.full_factor >= 0,
               "full_factor", "a number >= 0", self.full_factor)
        _check(self.overlap in OVERLAP, "overlap", f"one of {OVERLAP}", self.overlap)
        _check(isinstance(self.overlap_min_cores, int) and self.overlap_min_cores >= 1,
               "overlap_min_cores", "an integer >= 1", self.overlap_min_cores)
        _check(isinstance(self.debug, bool), "debug", "True or False", self.debug)
        _check(self.store in STORE, "store", f"one of {STORE}", self.store)
        _check(self.gradient in GRADIENT, "gradient", f"one of {GRADIENT}", self.gradient)
        _check(isinstance(self.chunk_rows, int) and self.chunk_rows >= 1, "chunk_rows",
               "an integer >= 1", self.chunk_rows)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "CacheConfig":
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown cache option(s) {unknown}; valid: "
                             f"{', '.join(f.name for f in dataclasses.fields(cls))}")
        return cls(**values)


def _check(ok: bool, name: str, requirement: str, value: Any) -> None:
    if not ok:
        raise ValueError(f"{name} must be {requirement}, got {value!r}")


def resolve_cache(cache: Any, staleness: Any = None, hot_ratio: Any = None) -> CacheConfig | None:
    """The run's cache configuration from the Runtime options, or None when the cache is off.

    `cache`: False/None (off), True (defaults), a `CacheConfig` or a dict of its fields.
    `staleness` / `hot_ratio` override the config's; giving them with the cache off is an error
    (they would silently do nothing).
    """
    if cache is None or cache is False:
        given = [n for n, v in (("staleness", staleness), ("hot_ratio", hot_ratio))
                 if v is not None]
        if given:
            verb = "apply" if len(given) > 1 else "applies"
            raise ValueError(f"{' and '.join(given)} only {verb} to the historical-embedding "
                             f"cache; pass cache=True as well")
        return None
    if cache is True:
        config = CacheConfig()
    elif isinstance(cache, CacheConfig):
        config = cache
    elif isinstance(cache, dict):
        config = CacheConfig.from_dict(cache)
    else:
        raise ValueError(f"cache must be True, False, a gnnorch.CacheConfig or a dict of its "
                         f"fields, got {cache!r}")
    overrides = {n: v for n, v in (("staleness", staleness), ("hot_ratio", hot_ratio))
                 if v is not None}
    return dataclasses.replace(config, **overrides) if overrides else config
