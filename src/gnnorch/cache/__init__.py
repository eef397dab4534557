"""The hotness-aware historical-embedding cache (NeutronOrch's idea, for unchanged PyG code).

``Runtime(train, cache={"staleness": 4, "hot_ratio": 0.1})``: the bottom layer's output rows of
the most frequently sampled ("hot") vertices are computed with recent weights and reused for at
most `staleness` optimizer steps; hot vertices reached at the last sampled hop are not expanded
(their neighbours are neither sampled nor gathered). See src/gnnorch/cache/README.md.

Components (no knowledge of processes or seams):

* `config`: `CacheConfig` and the mapping of ``Runtime(cache=...)`` onto it.
* `hotness`: expected appearances per epoch (estimate or count) and the hot set.
* `store`: rows plus per-row optimizer-step versions; the staleness check.
* `refresh`: recomputing rows on a refresh graph with a weight snapshot of the layer.
* `auto`: the hot-ratio search (`hot_ratio="auto"`).

The cache of a run, one class per job:

* `manager`: `CacheManager`, the rank's cache as the rest of gnnorch sees it (loaders, the
  layer seam's hook, optimizer steps, the report).
* `loader`: `LoaderCache`, one training loader's lifecycle (`status`: `CacheStatus`), and
  the loader's report.
* `batches`: what the cache reads of a batch: `BatchInfo` (its hot rows), the mask that
  pruned it, the hot rows of the batches drawn ahead of the trainer.
* `admission`: the one-off inspection of the first forward (admit, or off with a reason).
* `hotset`: hotness, the hot set, its store, the sampler's pruning mask, the ratio search.
* `swap`: the bottom layer's call on each training batch (stored rows in, stale rows
  refreshed first).
* `background`: the background refresher (`overlap="thread"`).
* `stats`: counters (the per-loader report is `report.loader_report`).
"""
from ..errors import StalenessError
from .config import CacheConfig, resolve_cache
from .status import CacheStatus, CacheWarning
from .store import EmbeddingStore

__all__ = ["CacheConfig", "CacheStatus", "CacheWarning", "EmbeddingStore", "StalenessError",
           "resolve_cache"]
