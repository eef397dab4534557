"""The report of one training loader's cache: what `LoaderCache` and its parts counted, as
`runtime.last_run.stats[rank]["cache"]["loaders"][i]` (the keys: src/gnnorch/cache/README.md)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .status import CacheStatus

if TYPE_CHECKING:
    from .loader import LoaderCache

__all__ = ["loader_report"]


def loader_report(lc: LoaderCache) -> dict:
    """The report of one loader's cache (`runtime.last_run.stats[rank]["cache"]["loaders"][i]`;
    the keys are listed in src/gnnorch/cache/README.md)."""
    stats = lc.stats
    c = dict(stats.counters)
    out: dict[str, Any] = {"loader": lc.index, "status": lc.status.value, "reason": lc.reason}
    store = lc.store
    if lc.status is CacheStatus.OFF and store is None:
        return out
    served = lc.served
    spec = lc.spec
    aggregate = served is not None and served.aggregate
    refreshers = [r for r in (served.trainer_refresher if served is not None else None,
                              lc.background.refresher if lc.background is not None else None)
                  if r]
    search = lc.hot.search if lc.hot is not None else None
    out.update({
        "layer": type(served.layer).__name__ if served is not None else None,
        "layers": served.layers if served is not None else None,
        "hops": spec.hops if spec is not None else None,
        "fanouts": spec.fanouts if spec is not None else None,
        "staleness_bound": lc.config.staleness,
        # aggregate rows do not depend on the weights: only their neighbour sample ages
        "max_staleness_seen": 0 if aggregate else stats.max_staleness,
        "max_sample_age_seen": stats.max_staleness,
        "hot_vertices": len(store) if store is not None else 0,
        "hit_rate": c["hits"] / c["lookups"] if c["lookups"] else 0.0,
        "hits": c["hits"], "lookups": c["lookups"], "forwards": c["forwards"],
        "batches": c["batches"],
        "sampled_vertices": c["sampled_nodes"], "sampled_edges": c["sampled_edges"],
        "gathered_vertices": c["sampled_nodes"],
        "pruned_batches": c["pruned_batches"],
        "pruned_vertices": c["pruned_vertices"],
        "edges_not_sampled": c["pruned_edges"],
        "sampled_edges_without_pruning": c["sampled_edges"] + c["pruned_edges"],
        "sampled_vertices_without_pruning_at_most": c["sampled_nodes"] + c["pruned_edges"],
        "refreshes": c["refreshes"], "refresh_rows": c["refresh_rows"],
        "refresh_seconds": stats.seconds["refresh"],
        "background_refreshes": c["background_refreshes"],
        "background_rows": c["background_rows"],
        "background_lookahead_jobs": c["lookahead_jobs"],
        "written_back_rows": c["written_back_rows"],
        "background_seconds": stats.seconds["background"],
        "background_wait_seconds": stats.seconds["wait"],
        "refresh_gathered_vertices": sum(r.gathered for r in refreshers),
        "refresh_edges": sum(r.edges for r in refreshers),
        "setup_seconds": stats.seconds["setup"],
        "hotness": lc.config.hotness, "hotness_seconds": stats.seconds["hotness"],
        "degree_correction": served is not None and served.degree_fix,
        "bottom_rows_computed": c["cold_rows"],
        "bottom_rows_not_computed": c["skipped_rows"],
    })
    out.update(stats.info)
    if search is not None:
        out["hot_ratio_search"] = {"done": search.done, "chosen": search.ratio,
                                   "trace": search.trace}
    return out
