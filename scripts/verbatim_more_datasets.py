"""More offline stand-ins for `pyg_examples_verbatim.py`: the synthetic TU sets of Knyazev et
al. (``COLORS-3``, ``TRIANGLES``), a social one (``IMDB-BINARY``), a signed temporal graph
(``BitcoinOTC``), two non-homophilous ones (``LINKXDataset('Penn94')``, and
``WikipediaNetwork('chameleon')``, directed) and a knowledge graph
(``RelLinkPredDataset('FB15k-237')``), of the real sets' layouts, splits and feature widths,
most of them smaller. `verbatim_datasets` installs them.

Each label is planted so that a GNN can learn it (counts of coloured nodes or of triangles, a
class that shapes a graph's cliques, a rating sign that follows a node's standing, a class that
shows in features and neighbours, or in where a node's links go, a relation that pairs clusters
of entities off): a runtime that broke message passing would show it in the printed metrics.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch_geometric.data import Data

from verbatim_typed_datasets import same_class_picks

__all__ = ["bitcoin_otc_like", "chameleon_like", "colors_like", "fb15k_like", "imdb_binary_like",
           "penn94_like", "triangles_like"]


def _random_graphs(n: int, count: int, gen: torch.Generator) -> torch.Tensor:
    """`count` random graphs of `n` nodes as a [count, n, n] symmetric boolean adjacency: each
    pair joined with probability m / (n (n - 1) / 2), m = (1 + u) n for u uniform in [0, 1)
    (Knyazev et al. draw COLORS and TRIANGLES graphs as G(n, m), with m so drawn)."""
    import torch

    pairs = torch.triu_indices(n, n, 1)
    share = (1 + torch.rand(count, 1, generator=gen)) * n / pairs.size(1)
    adj = torch.zeros(count, n, n, dtype=torch.bool)
    adj[:, pairs[0], pairs[1]] = torch.rand(count, pairs.size(1), generator=gen) < share
    return adj | adj.transpose(1, 2)


def _edge_indices(adj: torch.Tensor) -> list:
    """The ``edge_index`` of each graph of a [count, n, n] adjacency, sorted."""
    at = adj.nonzero()
    return list(at[:, 1:].t().split(adj.sum(dim=(1, 2)).tolist(), dim=1))


def _first(scores: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Per row of `scores` (distinct values), a mask of its `k[row]` smallest."""
    cut = scores.sort(dim=1).values.gather(1, (k - 1).clamp(min=0)[:, None])
    return (scores <= cut) & (k[:, None] > 0)


def _sizes(parts: tuple, gen: torch.Generator) -> torch.Tensor:
    """The node count of every graph: for each part (graphs, fewest, most nodes), that many
    uniform draws, parts one after the other."""
    import torch

    return torch.cat([torch.randint(low, high + 1, (count, ), generator=gen)
                      for count, low, high in parts])


COLORS_PARTS = ((5500, 4, 25), (2500, 26, 100), (2500, 26, 100))   # the last: 4 colours


def colors_like(use_node_attr: bool = True, parts: tuple = COLORS_PARTS, seed: int = 0) -> list:
    """COLORS-3-like graphs (real: 10,500 G(n, m) graphs in the order train 500, val 2,500 and
    three tests of 2,500: like the training graphs (4-25 nodes), larger (26-200 nodes), larger
    with a fourth colour; node attributes: an unnormalised attention, 1 on green nodes, then 4
    colour columns; ``y`` the number of green nodes, 0-10, a float): the same 10,500 graphs (the
    script slices them by index) of `_random_graphs`, the larger ones of 26-100 nodes. As many
    nodes as the graph's label, 0-10, are green (column 2), the others one-hot red or blue
    (columns 1, 3); in the last part a non-green node's 4 colour columns are random bits with
    green off. Without `use_node_attr`, ``x`` is empty, as PyG's TUDataset drops the
    attributes. `parts`: (graphs, fewest, most nodes) of each part, the last with four
    colours."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    sizes = _sizes(parts, gen)
    graphs: list = [None] * sizes.numel()
    last_part = sizes.numel() - parts[-1][0]
    for n in sizes.unique().tolist():
        where = (sizes == n).nonzero().flatten()
        count = where.numel()
        adj = _random_graphs(n, count, gen)
        green = (torch.rand(count, generator=gen) * (min(10, n) + 1)).long()
        colour = 2 * torch.randint(0, 2, (count, n), generator=gen)   # red 0 or blue 2
        colour[_first(torch.rand(count, n, generator=gen), green)] = 1
        x = torch.nn.functional.one_hot(colour, 4).float()
        bits = torch.randint(0, 2, (count, n, 4), generator=gen).float()
        bits[:, :, 1] = 0
        new_colours = (where >= last_part)[:, None, None] & (colour != 1)[:, :, None]
        x = torch.cat([(colour == 1).float()[:, :, None], torch.where(new_colours, bits, x)],
                      dim=2)
        x = x if use_node_attr else x[:, :, :0]
        for i, x_i, edges, y in zip(where.tolist(), x, _edge_indices(adj), green.float()):
            graphs[i] = Data(x=x_i, edge_index=edges.contiguous(), y=y.view(1))
    return graphs


TRIANGLES_PARTS = ((40_000, 4, 25), (5000, 26, 100))


def triangles_like(use_node_attr: bool = True, parts: tuple = TRIANGLES_PARTS,
                   seed: int = 0) -> list:
    """TRIANGLES-like graphs (real: 45,000 G(n, m) graphs in the order train 30,000, val 5,000,
    test 5,000 of 4-25 nodes and test 5,000 of 26-100 nodes; 1 to 10 triangles, balanced, as
    labels 0-9; the node attribute: how many triangles a node is in; degrees at most 14): the
    same 45,000 graphs (the script slices them by index), drawn by `_random_graphs` and kept
    when they have 1-10 triangles and no degree over 14, unbalanced: 1-4 triangles are the
    most common (about 15 % each), 10 the rarest (4 %). ``y`` = triangles - 1. Without
    `use_node_attr`, ``x`` is empty. `parts`: (graphs, fewest, most nodes) of each part."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    sizes = _sizes(parts, gen)
    graphs: list = [None] * sizes.numel()
    for n in sizes.unique().tolist():
        where = (sizes == n).nonzero().flatten().tolist()
        while where:
            adj = _random_graphs(n, 2 * len(where), gen)
            a = adj.float()
            per_node = ((a @ a) * a).sum(dim=-1) / 2
            total = (per_node.sum(dim=-1) / 3).round().long()
            kept = (total >= 1) & (total <= 10) & (adj.sum(dim=-1).amax(dim=-1) <= 14)
            x = per_node[kept][:, :, None]
            x = x if use_node_attr else x[:, :, :0]
            for i, x_i, edges, y in zip(where, x, _edge_indices(adj[kept]), total[kept] - 1):
                graphs[i] = Data(x=x_i, edge_index=edges.contiguous(), y=y.view(1))
            where = where[int(kept.sum()):]
    return graphs


def imdb_binary_like(num_graphs: int = 1000, seed: int = 0) -> list:
    """IMDB-BINARY-like ego networks (real: 1,000 graphs of 12-136 actors, 500 a class, no
    node features; an edge joins actors who played in one movie, so a graph is a union of
    cliques around its ego): an ego joined to 11-40 others, and 2-8 casts, each a clique of the
    ego and 3-10 of them. Class 1 has fewer, larger casts among fewer actors (2-5 casts of 5-10
    out of 11-30), class 0 more, smaller ones (4-8 of 3-7 out of 16-40); the ranges overlap."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    ranges = {0: ((16, 40), (4, 8), (3, 7)), 1: ((11, 30), (2, 5), (5, 10))}

    def draw(bounds: tuple) -> int:
        return int(torch.randint(bounds[0], bounds[1] + 1, (1, ), generator=gen))

    graphs = []
    for i in range(num_graphs):
        y = i % 2
        others, casts, cast = ranges[y]
        n = 1 + draw(others)
        edges = [torch.stack([torch.zeros(n - 1, dtype=torch.long), torch.arange(1, n)])]
        for _ in range(draw(casts)):
            members = torch.cat([torch.zeros(1, dtype=torch.long),
                                 1 + torch.randperm(n - 1, generator=gen)[:draw(cast)]])
            edges.append(torch.combinations(members).t())
        edges = torch.cat(edges, dim=1)
        edges = torch.cat([edges, edges.flip(0)], dim=1).unique(dim=1).contiguous()
        graphs.append(Data(edge_index=edges, y=torch.tensor([y]), num_nodes=n))
    return graphs


BITCOIN_STEPS = 138


def bitcoin_otc_like(edge_window_size: int = 10, seed: int = 0) -> list:
    """BitcoinOTC-like snapshots (real: 35,592 ratings -10..10 (none 0, 89 % positive) among
    5,881 of 6,005 user ids over 138 windows of 13.8 days; snapshot i holds the ratings of
    windows i - `edge_window_size` + 1 .. i, ``edge_attr`` the rating, a long): 1,200 users,
    9,000 distinct ratings in time order, 138 equal windows. Users rate and are rated by
    activity (a heavy-tailed weight, the largest at the last id, so that every split holds
    it); 20 % of users are fraudsters: a rating of a fraudster is negative with probability
    0.85, unless it comes from another fraudster (then 0.2), any other with probability 0.05
    (so about 80 % are positive); its size 1-10, small ones likelier."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    users, ratings = 1200, 9000
    activity = (torch.rand(users, generator=gen) ** -0.7).sort().values
    fraud = torch.rand(users, generator=gen) < 0.2
    src = torch.multinomial(activity, 2 * ratings, replacement=True, generator=gen)
    dst = torch.multinomial(activity, 2 * ratings, replacement=True, generator=gen)
    key = src * users + dst
    unique, inverse = key.unique(return_inverse=True)
    first = torch.full((unique.numel(), ), key.numel()).scatter_reduce(
        0, inverse, torch.arange(key.numel()), "amin")
    first = first[(src[first] != dst[first])].sort().values[:ratings]
    src, dst = src[first], dst[first]
    negative = torch.where(fraud[dst], torch.where(fraud[src], 0.2, 0.85), 0.05)
    sign = 1 - 2 * (torch.rand(ratings, generator=gen) < negative).long()
    size = 1 + torch.multinomial(1 / torch.arange(1.0, 11.0), ratings, replacement=True,
                                 generator=gen)
    edge_index, edge_attr = torch.stack([src, dst]), sign * size
    window = torch.arange(ratings) * BITCOIN_STEPS // ratings
    snapshots = []
    for i in range(BITCOIN_STEPS):
        mask = (window > i - edge_window_size) & (window <= i)
        snapshots.append(Data(edge_index=edge_index[:, mask], edge_attr=edge_attr[mask],
                              num_nodes=users))
    return snapshots


PENN94_COLUMNS = (6, 120, 120, 40, 12, 600)   # status, major, minor, dorm, year, high school


def penn94_like(seed: int = 0) -> Data:
    """Penn94-like (real: 41,554 students, 1,362,229 friendships stored both ways; ``x`` the
    one-hot of 6 metadata columns (status, major, second major, dorm, year, high school), 4,814
    wide; ``y`` the gender 0 / 1, -1 where unknown; masks [nodes, 5]: five random 50 / 25 / 25
    % splits of the labelled students): 5,000 students, columns of 6 / 120 / 120 / 40 / 12 / 600
    values one-hot (about 900 wide), 3 % of genders unknown, the same masks. A major is drawn
    from the student's gender's half of them with probability 0.5 (a minor 0.3), else from
    any; each student befriends 8 of its dorm and 8 of anyone, a quarter of the latter of the
    other gender (the set's weak heterophily)."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    n = 5000
    gender = torch.randint(0, 2, (n, ), generator=gen)
    columns = [torch.randint(0, size, (n, ), generator=gen) for size in PENN94_COLUMNS]
    for column, share in ((1, 0.5), (2, 0.3)):
        half = PENN94_COLUMNS[column] // 2
        own = gender * half + torch.randint(0, half, (n, ), generator=gen)
        columns[column] = torch.where(torch.rand(n, generator=gen) < share, own,
                                      columns[column])
    x = torch.cat([torch.nn.functional.one_hot(c.unique(return_inverse=True)[1]).float()
                   for c in columns], dim=1)
    src = torch.arange(n).repeat_interleave(8)
    dorm = columns[3]
    near = same_class_picks(dorm, dorm[src], gen)
    other = same_class_picks(gender, 1 - gender[src], gen)
    anyone = torch.randint(0, n, (src.numel(), ), generator=gen)
    far = torch.where(torch.rand(src.numel(), generator=gen) < 0.25, other, anyone)
    src, dst = torch.cat([src, src]), torch.cat([near, far])
    edges = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    edges = edges[:, edges[0] != edges[1]].unique(dim=1).contiguous()
    y = torch.where(torch.rand(n, generator=gen) < 0.03, -1, gender)
    labelled = (y >= 0).nonzero().flatten()
    masks = {name: torch.zeros(n, 5, dtype=torch.bool) for name in ("train", "val", "test")}
    for split in range(5):
        order = labelled[torch.randperm(labelled.numel(), generator=gen)]
        ends = (order.numel() // 2, order.numel() * 3 // 4)
        masks["train"][order[:ends[0]], split] = True
        masks["val"][order[ends[0]:ends[1]], split] = True
        masks["test"][order[ends[1]:], split] = True
    return Data(x=x, edge_index=edges, y=y, train_mask=masks["train"], val_mask=masks["val"],
                test_mask=masks["test"])


CHAMELEON_SPLIT = (1092, 729, 456)   # each geom-gcn split: train / val / test nodes


def chameleon_like(seed: int = 0) -> Data:
    """Chameleon-like, as ``WikipediaNetwork(root, 'chameleon', geom_gcn_preprocess=True)``
    (real: 2,277 Wikipedia pages, 36,101 directed links, coalesced; ``x`` 2,325 binary noun
    features, float; ``y`` the page's monthly traffic in 5 classes, long; masks [nodes, 10] of
    the ten geom-gcn splits, each 1,092 / 729 / 456 pages): the same sizes and layout, classes
    uniform. Every word is on with probability 0.01, and each of the page's class's block of
    465 also with probability 0.02 (about 32 on, 14 of them its class's); pages link out by
    a heavy-tailed activity, with probability 0.5 to a page of the next class ((c + 1) mod 5),
    else to any page by a heavy-tailed popularity: heterophilous (few links join a class),
    but a page's out-links tell its class, which DirGNN's default (alpha 1: out-links only)
    reads."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    n, links, words, classes = 2277, 36_101, 2325, 5
    y = torch.randint(0, classes, (n, ), generator=gen)
    block = words // classes
    own = (torch.arange(words)[None, :] // block) == y[:, None]
    x = ((torch.rand(n, words, generator=gen) < 0.01)
         | (own & (torch.rand(n, words, generator=gen) < 0.02))).float()
    activity = torch.rand(n, generator=gen) ** -0.6
    popularity = torch.rand(n, generator=gen) ** -0.8
    draws = 2 * links
    src = torch.multinomial(activity, draws, replacement=True, generator=gen)
    next_class = same_class_picks(y, (y[src] + 1) % classes, gen)
    anywhere = torch.multinomial(popularity, draws, replacement=True, generator=gen)
    dst = torch.where(torch.rand(draws, generator=gen) < 0.5, next_class, anywhere)
    key = src * n + dst
    unique, inverse = key.unique(return_inverse=True)
    first = torch.full((unique.numel(), ), draws).scatter_reduce(
        0, inverse, torch.arange(draws), "amin")
    first = first[src[first] != dst[first]].sort().values[:links]   # the first distinct links
    order = (src[first] * n + dst[first]).argsort()   # coalesced: sorted by (row, col)
    edge_index = torch.stack([src[first][order], dst[first][order]])
    masks = {name: torch.zeros(n, 10, dtype=torch.bool) for name in ("train", "val", "test")}
    for split in range(10):
        parts = torch.randperm(n, generator=gen).split(list(CHAMELEON_SPLIT))
        for name, part in zip(masks, parts):
            masks[name][part, split] = True
    return Data(x=x, edge_index=edge_index, y=y, train_mask=masks["train"],
                val_mask=masks["val"], test_mask=masks["test"])


def fb15k_like(entities: int = 1000, relations: int = 4, clusters: int = 50,
               split: tuple[int, int, int] = (12_000, 50, 50), seed: int = 0) -> Data:
    """FB15k-237-like triples (real: 14,541 entities, 237 relations, 272,115 / 17,535 / 20,466
    train / valid / test triples; ``edge_index`` and ``edge_type`` the training triples and
    their reverses, of types r + 237, for message passing): 1,000 entities in 50 clusters of
    20, 4 relations, 12,000 / 50 / 50 distinct triples, the same layout. Relation r pairs the
    clusters off at random: a triple (s, r, o) has s uniform and o uniform in the cluster
    paired with s's by r (10 % of them: o anywhere). (With 12 relations, the script's RGCN
    blew up in its third step and never recovered in 30 epochs.)"""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    cluster = torch.randperm(entities, generator=gen) % clusters
    image = torch.empty(relations, clusters, dtype=torch.long)
    for r in range(relations):   # a random pairing of the clusters: o's cluster <-> s's
        pairs = torch.randperm(clusters, generator=gen).view(-1, 2)
        image[r, pairs[:, 0]], image[r, pairs[:, 1]] = pairs[:, 1], pairs[:, 0]
    total = 2 * sum(split)
    src = torch.randint(0, entities, (total, ), generator=gen)
    rel = torch.randint(0, relations, (total, ), generator=gen)
    same_cluster = same_class_picks(cluster, image[rel, cluster[src]], gen)
    anywhere = torch.randint(0, entities, (total, ), generator=gen)
    dst = torch.where(torch.rand(total, generator=gen) < 0.1, anywhere, same_cluster)
    key = (src * relations + rel) * entities + dst
    unique, inverse = key.unique(return_inverse=True)
    first = torch.full((unique.numel(), ), total).scatter_reduce(
        0, inverse, torch.arange(total), "amin")
    first = first[src[first] != dst[first]].sort().values
    kept = first[torch.randperm(first.numel(), generator=gen)[:sum(split)]]
    parts = dict(zip(("train", "valid", "test"), kept.split(list(split))))
    triples = {f"{name}_edge_index": torch.stack([src[idx], dst[idx]])
               for name, idx in parts.items()}
    triples.update({f"{name}_edge_type": rel[idx] for name, idx in parts.items()})
    row, col = triples["train_edge_index"]
    edge_type = triples["train_edge_type"]
    return Data(num_nodes=entities, edge_index=torch.stack([torch.cat([row, col]),
                                                            torch.cat([col, row])]),
                edge_type=torch.cat([edge_type, edge_type + relations]), **triples)
