"""Offline stand-ins of typed graphs for `pyg_examples_verbatim.py`: heterogeneous graphs
(``DBLP``, ``IMDB``, ``MovieLens``, ``OGB_MAG``) and a multi-relational one (``Entities``),
synthetic, of the real sets' node types, edge types, feature widths and classes, smaller.
`verbatim_datasets` installs them.

Every class is planted: a node's class is uniform, its features carry a weak signal of it (too
weak alone: its neighbours tell more) and each typed edge joins nodes of one class with a
stated probability, otherwise any two nodes. So the scripts learn something, and a runtime
that broke message passing would show it in the printed accuracies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch_geometric.data import Data, HeteroData

__all__ = ["dblp_like", "entities_like", "imdb_like", "mag_like", "movielens_like",
           "same_class_picks"]


def same_class_picks(labels: torch.Tensor, wanted: torch.Tensor,
                     gen: torch.Generator) -> torch.Tensor:
    """For each class in `wanted`, a uniformly drawn index i with labels[i] equal to it (every
    wanted class must occur in `labels`)."""
    import torch

    classes = int(labels.max()) + 1
    by_class = labels.argsort()
    starts = torch.searchsorted(labels[by_class], torch.arange(classes))
    sizes = torch.bincount(labels, minlength=classes)
    offsets = (torch.rand(wanted.numel(), generator=gen) * sizes[wanted]).long()
    return by_class[starts[wanted] + offsets]


def _typed_edges(src_labels: torch.Tensor, dst_labels: torch.Tensor, per_src: int,
                 same: float, gen: torch.Generator) -> torch.Tensor:
    """`per_src` edges from every source node: with probability `same` to a destination of
    the source's class, otherwise to any destination; distinct, sorted, contiguous."""
    import torch

    src = torch.arange(src_labels.numel()).repeat_interleave(per_src)
    within = same_class_picks(dst_labels, src_labels[src], gen)
    anywhere = torch.randint(0, dst_labels.numel(), (src.numel(), ), generator=gen)
    dst = torch.where(torch.rand(src.numel(), generator=gen) < same, within, anywhere)
    return torch.stack([src, dst]).unique(dim=1).contiguous()


def _words(labels: torch.Tensor, words: int, base: float, signal: float,
           gen: torch.Generator) -> torch.Tensor:
    """Binary bag-of-words rows: each word on with probability `base`, and the words of a
    row's own class's block (words / classes of them) also with probability `signal`."""
    import torch

    classes = int(labels.max()) + 1
    block = words // classes
    on = torch.rand(labels.numel(), words, generator=gen) < base
    in_block = (torch.arange(words)[None, :] // block) == labels[:, None]
    on |= in_block & (torch.rand(labels.numel(), words, generator=gen) < signal)
    return on.float()


def _split_masks(n: int, train: float, val: float, gen: torch.Generator) -> list:
    """Train / val / test masks over n nodes: the first `train` of a random order, the next
    `val`, the rest."""
    import torch

    order = torch.randperm(n, generator=gen)
    ends = (int(train * n), int(train * n) + int(val * n))
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    for mask, part in zip(masks, (order[:ends[0]], order[ends[0]:ends[1]], order[ends[1]:])):
        mask[part] = True
    return masks


def _both_ways(data: HeteroData, src: str, dst: str, edges: torch.Tensor) -> None:
    """Store `edges` as (src, 'to', dst) and their reverse as (dst, 'to', src), as PyG's DBLP
    and IMDB read both halves of one symmetric adjacency matrix."""
    data[src, "to", dst].edge_index = edges
    data[dst, "to", src].edge_index = edges.flip(0).unique(dim=1).contiguous()


def dblp_like(seed: int = 0) -> HeteroData:
    """DBLP's types (real: 4,057 authors of 4 classes with 334 features, 14,328 papers with
    4,231, 7,723 terms with 50, 20 conferences without features): 1,200 authors, 2,400 papers,
    600 terms, 20 conferences. An author writes 4 papers (80 % of its class), a paper has 6
    terms (70 %) and one conference (80 %; conference c has class c mod 4). Authors' masks
    10 / 10 / 80 %."""
    import torch
    from torch_geometric.data import HeteroData

    gen = torch.Generator().manual_seed(seed)
    labels = {"author": torch.randint(0, 4, (1200, ), generator=gen),
              "paper": torch.randint(0, 4, (2400, ), generator=gen),
              "term": torch.randint(0, 4, (600, ), generator=gen),
              "conference": torch.arange(20) % 4}
    data = HeteroData()
    data["author"].x = _words(labels["author"], 334, 0.02, 0.03, gen)
    data["paper"].x = _words(labels["paper"], 4231, 0.003, 0.006, gen)
    centroids = torch.randn(4, 50, generator=gen)
    data["term"].x = 0.5 * centroids[labels["term"]] + torch.randn(600, 50, generator=gen)
    data["conference"].num_nodes = 20
    data["author"].y = labels["author"]
    for name, mask in zip(("train", "val", "test"), _split_masks(1200, 0.1, 0.1, gen)):
        data["author"][f"{name}_mask"] = mask
    _both_ways(data, "author", "paper",
               _typed_edges(labels["author"], labels["paper"], 4, 0.8, gen))
    _both_ways(data, "paper", "term", _typed_edges(labels["paper"], labels["term"], 6, 0.7, gen))
    _both_ways(data, "paper", "conference",
               _typed_edges(labels["paper"], labels["conference"], 1, 0.8, gen))
    return data


def imdb_like(seed: int = 0) -> HeteroData:
    """IMDB's types (real: 4,278 movies of 3 classes, 2,081 directors, 5,257 actors, all with
    3,066 features): 1,000 movies, 400 directors, 1,200 actors of 3,066 features. A movie has
    one director (75 % of its class) and 3 actors (60 %). Movies' masks 10 / 10 / 80 %."""
    import torch
    from torch_geometric.data import HeteroData

    gen = torch.Generator().manual_seed(seed)
    sizes = {"movie": 1000, "director": 400, "actor": 1200}
    labels = {t: torch.randint(0, 3, (n, ), generator=gen) for t, n in sizes.items()}
    data = HeteroData()
    for node_type, node_labels in labels.items():
        data[node_type].x = _words(node_labels, 3066, 0.004, 0.004, gen)
    data["movie"].y = labels["movie"]
    for name, mask in zip(("train", "val", "test"), _split_masks(1000, 0.1, 0.1, gen)):
        data["movie"][f"{name}_mask"] = mask
    _both_ways(data, "movie", "director",
               _typed_edges(labels["movie"], labels["director"], 1, 0.75, gen))
    _both_ways(data, "movie", "actor",
               _typed_edges(labels["movie"], labels["actor"], 3, 0.6, gen))
    return data


def movielens_like(seed: int = 0) -> HeteroData:
    """MovieLens's types (real: 610 users, 9,742 movies with 404 features (a 384-wide title
    embedding and 20 genres), 100,836 ratings 0-5 with timestamps): 610 users, 1,500 movies,
    30 ratings a user. A user's taste u and a movie's profile m (a fixed projection of its
    features) are 8-wide; rating = clamp(round(3.5 + 1.5 tanh(u . m) + noise / 2), 0, 5)."""
    import torch
    from torch_geometric.data import HeteroData

    gen = torch.Generator().manual_seed(seed)
    users, movies, per_user = 610, 1500, 30
    embedding = torch.randn(movies, 384, generator=gen)
    genres = (torch.rand(movies, 20, generator=gen) < 0.15).float()
    x = torch.cat([embedding, genres], dim=1)
    profile = x @ torch.randn(404, 8, generator=gen) / 404 ** 0.5
    taste = torch.randn(users, 8, generator=gen)
    src = torch.arange(users).repeat_interleave(per_user)
    dst = torch.stack([torch.randperm(movies, generator=gen)[:per_user]
                       for _ in range(users)]).flatten()
    score = (taste[src] * profile[dst]).sum(dim=1)
    noise = torch.randn(src.numel(), generator=gen)
    rating = (3.5 + 1.5 * score.tanh() + 0.5 * noise).round().clamp(0, 5).long()
    data = HeteroData()
    data["movie"].x = x
    data["user"].num_nodes = users
    data["user", "rates", "movie"].edge_index = torch.stack([src, dst])
    data["user", "rates", "movie"].edge_label = rating
    data["user", "rates", "movie"].time = torch.randint(
        828_124_615, 1_537_799_250, (src.numel(), ), generator=gen)
    return data


def mag_like(embedded: bool, seed: int = 0) -> HeteroData:
    """ogbn-mag's types (real: 736,389 papers with 128 features, a year and 349 venues as
    classes, 1,134,649 authors, 8,740 institutions, 59,965 fields of study; with a
    ``preprocess``ed embedding every type has 128 features): 20,000 papers, 12,000 authors,
    400 institutions, 2,000 fields, 349 classes. Features are 0.3 times the class's centroid
    plus unit noise (for every type when `embedded`, else papers only). A paper has 2 authors
    (70 % of its class), cites 5 papers (60 %) and has 4 fields (70 %); an author is
    affiliated with one institution (50 %). Split by year as ogbn-mag is: papers before 2018
    train, of 2018 validate, of 2019 test."""
    import torch
    from torch_geometric.data import HeteroData

    gen = torch.Generator().manual_seed(seed)
    classes, features = 349, 128
    sizes = {"paper": 20_000, "author": 12_000, "institution": 400, "field_of_study": 2_000}
    labels = {t: torch.randint(0, classes, (n, ), generator=gen) for t, n in sizes.items()}
    centroids = torch.randn(classes, features, generator=gen)
    data = HeteroData()
    for node_type, node_labels in labels.items():
        if embedded or node_type == "paper":
            data[node_type].x = (0.3 * centroids[node_labels]
                                 + torch.randn(node_labels.numel(), features, generator=gen))
        else:
            data[node_type].num_nodes = sizes[node_type]
    year = torch.randint(2010, 2020, (sizes["paper"], ), generator=gen)
    data["paper"].year = year
    data["paper"].y = labels["paper"]
    data["author", "affiliated_with", "institution"].edge_index = _typed_edges(
        labels["author"], labels["institution"], 1, 0.5, gen)
    data["author", "writes", "paper"].edge_index = _typed_edges(
        labels["paper"], labels["author"], 2, 0.7, gen).flip(0).unique(dim=1).contiguous()
    data["paper", "cites", "paper"].edge_index = _typed_edges(
        labels["paper"], labels["paper"], 5, 0.6, gen)
    data["paper", "has_topic", "field_of_study"].edge_index = _typed_edges(
        labels["paper"], labels["field_of_study"], 4, 0.7, gen)
    data["paper"].train_mask = year < 2018
    data["paper"].val_mask = year == 2018
    data["paper"].test_mask = year == 2019
    return data


def entities_like(seed: int = 0) -> Data:
    """AIFB's shape (real: 8,285 nodes, 29,043 triples of 45 relations, so 90 edge types with
    the reverses, 4 classes, 140 training and 36 test people): 2,500 nodes, 45 relations.
    Each of 176 labelled people has 3 triples of its class's relation (class c: relation c)
    to nodes 1,000-1,199, with 30 % of them another of relations 0-3; 6,000 random triples of
    relations 4-44 join any nodes. A triple (s, rel, o) gives edges s -> o of type 2 rel and o
    -> s of type 2 rel + 1, sorted by (source, destination, type) as PyG's ``Entities``
    sorts them."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    nodes, relations, people = 2500, 45, 176
    person = torch.randperm(1000, generator=gen)[:people]
    y = torch.randint(0, 4, (people, ), generator=gen)
    rel = y.repeat_interleave(3)
    other = torch.rand(rel.numel(), generator=gen) < 0.3
    rel = torch.where(other, torch.randint(0, 4, (rel.numel(), ), generator=gen), rel)
    subj = torch.cat([person.repeat_interleave(3), torch.randint(0, nodes, (6000, ),
                                                                 generator=gen)])
    obj = torch.cat([1000 + torch.randint(0, 200, (rel.numel(), ), generator=gen),
                     torch.randint(0, nodes, (6000, ), generator=gen)])
    rel = torch.cat([rel, torch.randint(4, relations, (6000, ), generator=gen)])
    kept = subj != obj
    subj, obj, rel = subj[kept], obj[kept], rel[kept]
    edge = torch.cat([torch.stack([subj, obj, 2 * rel]), torch.stack([obj, subj, 2 * rel + 1])],
                     dim=1)
    types = 2 * relations
    edge = edge.unique(dim=1)
    edge = edge[:, (nodes * types * edge[0] + types * edge[1] + edge[2]).argsort()]
    order = torch.randperm(people, generator=gen)
    train, test = order[:140], order[140:]
    return Data(edge_index=edge[:2].contiguous(), edge_type=edge[2].contiguous(),
                train_idx=person[train], train_y=y[train], test_idx=person[test],
                test_y=y[test], num_nodes=nodes)
