"""The hotness-aware historical-embedding cache (NeutronOrch's idea, for unchanged PyG code).

``Runtime(train, cache=True, staleness=4, hot_ratio=0.1)``: the bottom layer's output rows of
the most frequently sampled ("hot") vertices are computed with recent weights and reused for at
most `staleness` optimizer steps; hot vertices reached at the last sampled hop are not expanded
(their neighbours are neither sampled nor gathered). See src/gnnorch/cache/README.md.

* `config`: `CacheConfig` and the mapping of Runtime options onto it.
* `hotness`: expected appearances per epoch (estimate or count) and the hot set.
* `store`: rows plus per-row optimizer-step versions; the staleness check.
* `refresh`: recomputing rows on a refresh graph with a weight snapshot of the layer.
* `degree`: GCN normalisation that keeps pruned vertices' degrees.
* `auto`: the hot-ratio search (`hot_ratio="auto"`).
* `manager`: the glue with loaders, the layer seam and optimizer steps.
"""
from .config import CacheConfig, resolve_cache
from .store import EmbeddingStore, StalenessError

__all__ = ["CacheConfig", "EmbeddingStore", "StalenessError", "resolve_cache"]
