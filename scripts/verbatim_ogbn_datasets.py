"""Offline stand-ins for two more ogb node sets, which `verbatim_more_examples_datasets.ogb_modules`
serves by name through its ``PygNodePropPredDataset``: 'ogbn-products' (`products_like`, for
``correct_and_smooth.py`` and ``rev_gnn.py``) and 'ogbn-proteins' (`proteins_like`, for
``ogbn_proteins_deepgcn.py``). Each has the real set's field names, dtypes, widths, tasks and
kind of split, smaller.

Real ogbn-products: 2,449,029 Amazon products, 61,859,140 co-purchase pairs stored in both
directions, ``x`` 100 float features (PCA of bag-of-words), ``y`` [N, 1] long, one of 47
categories, unevenly used; split by sales rank: the top 8 % train (196,615), the next 1.6 %
valid (39,323), the rest test (2,213,091).

Real ogbn-proteins: 132,534 proteins of 8 species, 39,561,252 directed edges (each
association both ways, only between proteins of one species), ``edge_attr`` [E, 8] float in
[0, 1] (the association's evidence channels), no ``x``, ``node_species`` [N, 1] long (a
taxonomy id), ``y`` [N, 112] long 0/1 (protein functions), split by species: train
86,619, valid 21,236, test 24,679.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["PROTEIN_SPECIES", "products_like", "proteins_like"]

#: The stand-in's species: (NCBI taxonomy id, share of the proteins, part of the split);
#: the real set's training species are the larger ones.
PROTEIN_SPECIES = ((3702, 0.20, "train"), (4932, 0.16, "train"), (6239, 0.12, "train"),
                   (7227, 0.10, "train"), (10090, 0.08, "train"), (511145, 0.04, "train"),
                   (9606, 0.14, "valid"), (7955, 0.16, "test"))


def _symmetric(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    """The distinct pairs ``src -> dst`` without self-loops, stored in both directions,
    sorted (as ogb's undirected sets are stored)."""
    import torch

    keep = src != dst
    src, dst = src[keep], dst[keep]
    return torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1).unique(dim=1)


def products_like(nodes: int = 10_000, degree: int = 12, homophily: float = 0.8,
                  seed: int = 0) -> tuple:
    """An ogbn-products-like co-purchase graph and its split (module docstring): `nodes`
    products, `degree` co-purchases each on average (real about 50), a `homophily` share of
    them within the product's category (the real graph's edge homophily is about 0.81).
    Returns the ``Data`` and the split (``train`` / ``valid`` / ``test``, ascending).

    Planted: categories drawn with Zipf-like weights; features unit noise plus 0.3 times a
    fixed centroid of the category (an MLP tells the category about half the time, as on the
    real set); a product's popularity is log-normal, and both how many pairs it is in and its
    sales rank follow it (the training products are the most popular, as the real split's
    are): so label propagation from the training products reaches most of the graph."""
    import math

    import torch
    from torch_geometric.data import Data

    from verbatim_typed_datasets import same_class_picks

    gen = torch.Generator().manual_seed(seed)
    classes = 47
    weights = 1.0 / torch.arange(1, classes + 1).double() ** 0.9
    y = torch.multinomial(weights, nodes, replacement=True, generator=gen)
    x = 0.3 * torch.randn(classes, 100, generator=gen)[y] + torch.randn(nodes, 100,
                                                                        generator=gen)
    popularity = torch.randn(nodes, generator=gen)
    counts = (popularity * 0.8 + math.log(degree / 2) - 0.32).exp().long().clamp(1, 200)
    src = torch.arange(nodes).repeat_interleave(counts)
    within = same_class_picks(y, y[src], gen)
    anywhere = torch.randint(0, nodes, (src.numel(), ), generator=gen)
    dst = torch.where(torch.rand(src.numel(), generator=gen) < homophily, within, anywhere)
    data = Data(x=x, edge_index=_symmetric(src, dst), y=y.view(-1, 1), num_nodes=nodes)
    rank = (popularity + 0.5 * torch.randn(nodes, generator=gen)).argsort(descending=True)
    train, valid = int(nodes * 0.08), int(nodes * 0.016)
    split = {"train": rank[:train].sort().values,
             "valid": rank[train:train + valid].sort().values,
             "test": rank[train + valid:].sort().values}
    return data, split


def proteins_like(nodes: int = 4_000, degree: int = 30, tasks: int = 112,
                  seed: int = 0) -> tuple:
    """An ogbn-proteins-like association graph and its split (module docstring): `nodes`
    proteins of the species in `PROTEIN_SPECIES`, `degree` associations each on average (real
    about 600), each with 8 evidence channels, `tasks` binary functions. Returns the ``Data``
    (``edge_index``, ``edge_attr``, ``node_species``, ``y``; no ``x``) and the split by
    species.

    Planted: every protein has 8 hidden traits; an association links two proteins of one
    species, more likely when their traits agree, and its evidence channels are the sigmoid
    of the two proteins' traits summed plus noise, so that the sum of a protein's evidence
    (which the example makes its features) tells its traits; each function is a random
    linear rule over the traits, thresholded to 5-40 % positives."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    shares = torch.tensor([share for _, share, _ in PROTEIN_SPECIES], dtype=torch.double)
    species = torch.multinomial(shares, nodes, replacement=True, generator=gen).sort().values
    traits = torch.randn(nodes, 8, generator=gen)
    # Candidate partners within the species (species are contiguous after the sort), kept
    # with a probability that grows with the agreement of the traits.
    starts = torch.searchsorted(species, torch.arange(len(PROTEIN_SPECIES)))
    sizes = torch.bincount(species, minlength=len(PROTEIN_SPECIES))
    src = torch.arange(nodes).repeat_interleave(2 * degree)
    offsets = (torch.rand(src.numel(), generator=gen) * sizes[species[src]]).long()
    dst = starts[species[src]] + offsets
    agreement = torch.nn.functional.cosine_similarity(traits[src], traits[dst])
    keep = torch.rand(src.numel(), generator=gen) < (0.5 + 0.5 * agreement) / 2
    src, dst = src[keep], dst[keep]
    pairs = torch.stack([torch.minimum(src, dst), torch.maximum(src, dst)])
    row, col = pairs[:, pairs[0] != pairs[1]].unique(dim=1)   # an association once
    evidence = traits[row] + traits[col] + torch.randn(row.numel(), 8, generator=gen)
    evidence = torch.sigmoid(evidence) * (torch.rand(row.numel(), 8, generator=gen) < 0.6)
    # Both directions with one evidence, sorted as ogb stores them.
    edge_index = torch.cat([torch.stack([row, col]), torch.stack([col, row])], 1)
    order = (edge_index[0] * nodes + edge_index[1]).argsort()
    edge_index, edge_attr = edge_index[:, order], torch.cat([evidence, evidence])[order]
    rules = torch.randn(8, tasks, generator=gen)
    score = traits @ rules + 0.5 * torch.randn(nodes, tasks, generator=gen)
    positives = 0.05 + 0.35 * torch.rand(tasks, generator=gen)
    y = (score > score.quantile(1 - positives.float(), dim=0).diagonal()).long()
    taxonomy = torch.tensor([taxon for taxon, _, _ in PROTEIN_SPECIES])
    data = Data(edge_index=edge_index, edge_attr=edge_attr,
                node_species=taxonomy[species].view(-1, 1), y=y, num_nodes=nodes)
    split = {part: torch.cat([(species == s).nonzero().flatten()
                              for s, (_, _, p) in enumerate(PROTEIN_SPECIES) if p == part])
             for part in ("train", "valid", "test")}
    return data, split
