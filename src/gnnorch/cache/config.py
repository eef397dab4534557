"""`CacheConfig`: the historical-embedding cache's knobs (``Runtime(cache=...)``).

``Runtime(train, cache=True)`` is ``CacheConfig()``; ``cache=CacheConfig(staleness=2)`` and
``cache={"staleness": 2}`` set fields; ``False`` (default) is off. Every default lives in the
dataclass field below, nowhere else. A config is plain data: it round-trips through
`to_dict` / `from_dict` (JSON) so it reaches rank processes inside `RunOptions`. Validation
follows `gnnorch.options`: an unknown field name is a `TypeError`, a bad value a `ValueError`
naming the field and what it allows.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..options import (check_bool, check_choice, check_int, check_keys, check_number,
                       config_option)

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
        write_back: a hot vertex that a training batch reached at a hop shallower than L-1 has
            its bottom-layer row computed by that batch with the current weights; write it
            into the store (version = the step), so rows batches keep computing are not
            refreshed. Applies with a sampled refresh neighbourhood, ``store="output"`` and a
            bottom layer without dropout (`gnnorch.cache.writeback`); elsewhere the report
            says why not.
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
    write_back: bool = True

    def __post_init__(self) -> None:
        check_int("staleness", self.staleness, 0)
        if self.hot_ratio != "auto":
            if isinstance(self.hot_ratio, bool) or not isinstance(self.hot_ratio, (int, float)) \
                    or not 0.0 < float(self.hot_ratio) <= 1.0:
                raise ValueError(f'hot_ratio must be a number in (0, 1] or "auto", '
                                 f'got {self.hot_ratio!r}')
            object.__setattr__(self, "hot_ratio", float(self.hot_ratio))
        check_number("max_hot_ratio", self.max_hot_ratio, 0.0, 1.0, low_open=True)
        check_choice("hotness", self.hotness, HOTNESS)
        check_number("count_fraction", self.count_fraction, 0.0, 1.0, low_open=True)
        check_choice("refresh", self.refresh, REFRESH)
        check_number("full_factor", self.full_factor, 0.0)
        check_choice("overlap", self.overlap, OVERLAP)
        check_int("overlap_min_cores", self.overlap_min_cores, 1)
        check_bool("debug", self.debug)
        check_choice("store", self.store, STORE)
        check_choice("gradient", self.gradient, GRADIENT)
        check_int("chunk_rows", self.chunk_rows, 1)
        check_bool("write_back", self.write_back)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "CacheConfig":
        """The config of a dict of its fields (`TypeError` for an unknown name)."""
        check_keys("cache", values, [f.name for f in dataclasses.fields(cls)])
        return cls(**values)


def resolve_cache(cache: Any) -> CacheConfig | None:
    """The run's cache configuration from ``Runtime(cache=...)``, or None when the cache is off:
    False/None (off), True (defaults), a `CacheConfig` or a dict of its fields."""
    return config_option("cache", cache, CacheConfig, default=(True,), off=(None, False),
                         accepts="True, False")
