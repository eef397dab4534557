"""Graphs for gnnorch's tests, demo and benchmarks.

Two kinds of data:

* **Real citation graphs** (:func:`load_planetoid`, :func:`load_cora`, :func:`load_citeseer`).
  The raw Planetoid files of Cora and CiteSeer (Yang et al., 2016, MIT licence) ship inside
  the package and are read through PyG's own :class:`torch_geometric.datasets.Planetoid`, so
  the result is exactly what PyG users get -- but offline: the raw files are copied into a
  writable root before ``Planetoid`` is built, and ``Planetoid`` only downloads when a raw
  file is missing.

* **Synthetic scale graphs** (:func:`power_law_graph`, :func:`products_like`). They model a
  large, sparse, homophilous node-classification graph such as ogbn-products:

  - *degrees* follow a Chung--Lu model: each node gets a Pareto weight whose tail has the
    given power-law ``exponent`` (P(k) ~ k^-exponent), capped at a structural cut-off, and
    edge endpoints are drawn in proportion to the weights, so expected degree ~ weight;
  - *homophily*: a fraction ``homophily`` of the undirected edges join two nodes of the same
    class (the endpoint pairs are drawn class-restricted, by weight), the rest join two
    nodes of different classes;
  - *features* are a class centroid plus Gaussian noise, noisy enough that features alone
    are only moderately predictive, so averaging neighbours' features (what a GNN does)
    clearly helps;
  - *splits* are random disjoint train/val/test masks of the requested ratios.
"""
from .planetoid import (PLANETOID_NAMES, bundled_data_dir, default_data_root, load_citeseer,
                        load_cora, load_planetoid)
from .synthetic import DEFAULT_FEATURE_NOISE, power_law_graph, products_like

__all__ = [
    "PLANETOID_NAMES",
    "bundled_data_dir",
    "default_data_root",
    "load_planetoid",
    "load_cora",
    "load_citeseer",
    "power_law_graph",
    "products_like",
    "DEFAULT_FEATURE_NOISE",
]
