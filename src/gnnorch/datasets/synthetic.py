"""Synthetic scale graphs modelled on ogbn-products: Chung--Lu power-law degrees, class
homophily, noisy class-centroid features, random splits (see the package docstring)."""
from __future__ import annotations

import math
from typing import Any

import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

#: Default std of the feature noise, in units of the (unit-variance) class centroids. Tuned
#: so that on the default shape (100 features, 47 classes) a logistic regression on ``x``
#: alone reaches ~55% test accuracy while one on ``[x, mean of neighbours' x]`` reaches ~99%
#: (5 classes / 32 features: ~65% vs ~90%).
DEFAULT_FEATURE_NOISE = 3.5

# Oversampling factor applied to a pool's deficit when drawing candidate edges, and the
# most rounds the top-up loop runs before giving up on the last few edges.
_OVERSAMPLE = 1.15
_MAX_ROUNDS = 30


def _check(ok: bool, argument: str, requirement: str, value: object) -> None:
    """Raise ``ValueError`` naming ``argument`` and its allowed range unless ``ok``."""
    if not ok:
        raise ValueError(f"{argument} must be {requirement}, got {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _validate(
    num_nodes: int,
    avg_degree: float,
    num_features: int,
    num_classes: int,
    homophily: float,
    exponent: float,
    feature_noise: float,
    ratios: tuple[float, float, float],
    seed: int,
) -> None:
    """Check every ``power_law_graph`` argument; see its docstring for the ranges."""
    _check(_is_int(num_nodes) and num_nodes >= 2, "num_nodes", "an int >= 2", num_nodes)
    _check(_is_int(num_classes) and 2 <= num_classes <= num_nodes, "num_classes",
           f"an int in [2, num_nodes={num_nodes}]", num_classes)
    _check(_is_int(num_features) and num_features >= 1, "num_features", "an int >= 1",
           num_features)
    _check(_is_real(homophily) and 0.0 <= homophily <= 1.0, "homophily", "in [0, 1]",
           homophily)
    _check(_is_real(exponent) and exponent > 2.0, "exponent",
           "a finite number > 2 (finite mean degree)", exponent)
    _check(_is_real(feature_noise) and feature_noise >= 0.0, "feature_noise",
           "a finite number >= 0", feature_noise)
    _check(_is_int(seed), "seed", "an int", seed)
    for arg, ratio in zip(("train_ratio", "val_ratio", "test_ratio"), ratios):
        _check(_is_real(ratio) and 0.0 <= ratio <= 1.0, arg, "in [0, 1]", ratio)
    _check(sum(ratios) <= 1.0 + 1e-9, "train_ratio + val_ratio + test_ratio", "<= 1",
           sum(ratios))
    # Keep both edge pools far from saturation: the same-class pool of the smallest class
    # and the cross-class pool must each have room for twice the edges they must hold.
    smallest, largest = num_nodes // num_classes, -(-num_nodes // num_classes)
    bound_same = (smallest - 1) / 2 / homophily if homophily > 0 else math.inf
    bound_cross = (num_nodes - largest) / 2 / (1 - homophily) if homophily < 1 else math.inf
    bound = min(bound_same, bound_cross)
    _check(_is_real(avg_degree) and 0.0 < avg_degree <= bound, "avg_degree",
           f"in (0, {bound:.6g}] for these num_nodes, num_classes and homophily", avg_degree)


def _balanced_labels(num_nodes: int, num_classes: int, gen: torch.Generator) -> torch.Tensor:
    """Random labels with class sizes differing by at most one (every class non-empty)."""
    labels = torch.arange(num_nodes, dtype=torch.long) % num_classes
    return labels[torch.randperm(num_nodes, generator=gen)]


def _degree_weights(
    num_nodes: int, avg_degree: float, exponent: float, gen: torch.Generator
) -> torch.Tensor:
    """Expected degrees (float64, mean == ``avg_degree``) with a power-law tail.

    Pareto draws with shape ``exponent - 1`` (so the degree density falls like
    k^-exponent) are scaled and capped at twice the Chung--Lu structural cut-off
    ``sqrt(num_nodes * avg_degree)`` (and at ``num_nodes - 1``) -- far beyond it a node's
    edges would mostly be duplicates -- with the scale solved by bisection so that the
    capped mean is ``avg_degree``.
    """
    shape = exponent - 1.0
    u = torch.rand(num_nodes, generator=gen, dtype=torch.float64)
    raw = (1.0 - u).pow(-1.0 / shape)  # Pareto(x_min=1, shape), heavy tailed
    cap = min(float(num_nodes - 1), 2.0 * math.sqrt(num_nodes * avg_degree))
    cap = max(cap, avg_degree)
    lo, hi = 0.0, avg_degree  # mean(raw) >= 1, so scale <= avg_degree
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if float((raw * mid).clamp_(max=cap).mean()) < avg_degree:
            lo = mid
        else:
            hi = mid
    return (raw * hi).clamp_(max=cap)


class _WeightedSampler:
    """Draws nodes in proportion to their weights, optionally within or outside a class.

    Nodes are laid out sorted by class; a draw maps a uniform number onto the cumulative
    weight of that layout, so a class (or its complement) is a contiguous interval.
    """

    def __init__(self, weights: torch.Tensor, labels: torch.Tensor, num_classes: int) -> None:
        self.order = torch.argsort(labels, stable=True)
        self.cum = torch.cumsum(weights[self.order], dim=0)
        self.total = float(self.cum[-1])
        counts = torch.bincount(labels, minlength=num_classes)
        ends = torch.cumsum(counts, dim=0)
        self.first = ends - counts  # first slot of each class in the layout
        self.last = ends - 1
        class_weight = torch.zeros(num_classes, dtype=torch.float64)
        class_weight.index_add_(0, labels, weights)
        self.class_weight = class_weight
        self.class_start = torch.cumsum(class_weight, dim=0) - class_weight

    def _locate(self, value: torch.Tensor) -> torch.Tensor:
        slot = torch.searchsorted(self.cum, value, right=True)
        return slot.clamp_(max=self.cum.numel() - 1)

    def any(self, n: int, gen: torch.Generator) -> torch.Tensor:
        """``n`` nodes drawn by weight among all nodes."""
        u = torch.rand(n, generator=gen, dtype=torch.float64)
        return self.order[self._locate(u * self.total)]

    def same_class(self, cls: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """One node per entry of ``cls``, drawn by weight within that class."""
        u = torch.rand(cls.numel(), generator=gen, dtype=torch.float64)
        value = self.class_start[cls] + u * self.class_weight[cls]
        slot = torch.maximum(torch.minimum(self._locate(value), self.last[cls]), self.first[cls])
        return self.order[slot]

    def other_class(self, cls: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """One node per entry of ``cls``, drawn by weight among nodes of other classes.

        (A draw landing in ``cls`` through float rounding is possible; callers filter.)
        """
        u = torch.rand(cls.numel(), generator=gen, dtype=torch.float64)
        value = u * (self.total - self.class_weight[cls])
        start = self.class_start[cls]
        value = torch.where(value >= start, value + self.class_weight[cls], value)
        return self.order[self._locate(value)]


def _candidate_keys(
    sampler: _WeightedSampler,
    labels: torch.Tensor,
    count: int,
    same: bool,
    gen: torch.Generator,
) -> torch.Tensor:
    """Unique keys ``min*N + max`` of up to ``count`` random undirected pairs.

    The source is drawn by weight; the target by weight within the source's class
    (``same``) or outside it. Self-loops and pairs of the wrong kind are dropped.
    """
    num_nodes = labels.numel()
    src = sampler.any(count, gen)
    cls = labels[src]
    dst = sampler.same_class(cls, gen) if same else sampler.other_class(cls, gen)
    keep = (src != dst) & ((labels[dst] == cls) if same else (labels[dst] != cls))
    src, dst = src[keep], dst[keep]
    keys = torch.minimum(src, dst) * num_nodes + torch.maximum(src, dst)
    return torch.unique(keys)


def _fill_pool(
    sampler: _WeightedSampler,
    labels: torch.Tensor,
    target: int,
    same: bool,
    gen: torch.Generator,
) -> torch.Tensor:
    """Sorted unique keys of ``target`` undirected pairs of one kind (same/cross class).

    Draws candidates, keeps the new ones, and tops up until ``target`` pairs are held; the
    last round keeps a random subset so the pool ends exactly at ``target``.
    """
    pool = torch.empty(0, dtype=torch.long)
    accept = 1.0
    for _ in range(_MAX_ROUNDS):
        deficit = target - pool.numel()
        if deficit <= 0:
            break
        draws = int(math.ceil(deficit * _OVERSAMPLE / max(accept, 0.05))) + 16
        cand = _candidate_keys(sampler, labels, draws, same, gen)
        if pool.numel():
            pos = torch.searchsorted(pool, cand).clamp_(max=pool.numel() - 1)
            cand = cand[pool[pos] != cand]
        accept = max(cand.numel() / draws, 1e-3)
        if cand.numel() > deficit:
            cand = cand[torch.randperm(cand.numel(), generator=gen)[:deficit]]
        pool = torch.sort(torch.cat([pool, cand])).values
    return pool


def _split_masks(
    num_nodes: int, ratios: tuple[float, float, float], gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Disjoint random boolean masks with ``round(ratio * num_nodes)`` nodes each."""
    perm = torch.randperm(num_nodes, generator=gen)
    masks = []
    start = 0
    for ratio in ratios:
        size = min(int(round(ratio * num_nodes)), num_nodes - start)
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[perm[start:start + size]] = True
        masks.append(mask)
        start += size
    return masks[0], masks[1], masks[2]


def _class_features(
    labels: torch.Tensor, num_classes: int, num_features: int, noise: float,
    gen: torch.Generator,
) -> torch.Tensor:
    """``x = centroid[y] + noise * eps`` with centroids and ``eps`` standard Gaussian."""
    centroids = torch.randn(num_classes, num_features, generator=gen)
    eps = torch.randn(labels.numel(), num_features, generator=gen)
    return centroids[labels].add_(eps, alpha=noise)


def power_law_graph(
    num_nodes: int = 200_000,
    avg_degree: float = 25.0,
    num_features: int = 100,
    num_classes: int = 47,
    homophily: float = 0.7,
    exponent: float = 2.2,
    feature_noise: float = DEFAULT_FEATURE_NOISE,
    train_ratio: float = 0.1,
    val_ratio: float = 0.05,
    test_ratio: float = 0.1,
    seed: int = 0,
) -> Data:
    """A random heavy-tailed, homophilous node-classification graph.

    Model (see the module docstring): balanced random labels; Chung--Lu expected degrees
    from a Pareto law with tail ``exponent`` (> 2), capped at ``2*sqrt(N*avg_degree)``;
    ``round(homophily * M)`` same-class and the rest cross-class undirected edges, with
    ``M = round(num_nodes * avg_degree / 2)``, endpoints drawn by weight; features
    ``centroid[y] + feature_noise * N(0, I)`` with ``N(0, I)`` centroids.

    Returns ``Data(x, edge_index, y, train_mask, val_mask, test_mask)`` where:

    * ``edge_index`` (int64, ``[2, 2M]``) is undirected (both directions), coalesced (sorted
      by source then target), without self-loops or duplicates, so the mean degree is
      ``avg_degree`` up to rounding and the edge homophily is ``homophily`` up to rounding;
    * ``x`` is float32 ``[N, num_features]``, ``y`` int64 ``[N]`` in ``[0, num_classes)``;
    * the masks are disjoint, random, with ``round(ratio * N)`` nodes each.

    Deterministic in ``seed`` (a local ``torch.Generator``; the global RNG is untouched).
    Raises ``ValueError`` naming the argument when one is out of range; ``avg_degree`` is
    bounded so each edge pool stays at most half full.
    """
    ratios = (train_ratio, val_ratio, test_ratio)
    _validate(num_nodes, avg_degree, num_features, num_classes, homophily, exponent,
              feature_noise, ratios, seed)
    gen = torch.Generator().manual_seed(seed)

    labels = _balanced_labels(num_nodes, num_classes, gen)
    weights = _degree_weights(num_nodes, float(avg_degree), float(exponent), gen)
    sampler = _WeightedSampler(weights, labels, num_classes)

    num_edges = int(round(num_nodes * avg_degree / 2))
    num_same = int(round(homophily * num_edges))
    keys = torch.cat([
        _fill_pool(sampler, labels, num_same, True, gen),
        _fill_pool(sampler, labels, num_edges - num_same, False, gen),
    ])
    pairs = torch.stack([keys // num_nodes, keys % num_nodes])
    edge_index = to_undirected(pairs, num_nodes=num_nodes)

    x = _class_features(labels, num_classes, num_features, float(feature_noise), gen)
    train_mask, val_mask, test_mask = _split_masks(num_nodes, ratios, gen)
    return Data(x=x, edge_index=edge_index, y=labels, train_mask=train_mask,
                val_mask=val_mask, test_mask=test_mask)


def products_like(num_nodes: int = 200_000, seed: int = 0, **overrides: Any) -> Data:
    """:func:`power_law_graph` with ogbn-products' shape: mean degree 25, 100 features,
    47 classes (homophily 0.7, degree exponent 2.2). ``overrides`` replace any of them."""
    params: dict[str, Any] = dict(avg_degree=25.0, num_features=100, num_classes=47)
    params.update(overrides)
    return power_law_graph(num_nodes=num_nodes, seed=seed, **params)
