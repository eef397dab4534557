"""Offline stand-ins of user-item interaction sets for `pyg_examples_verbatim.py`: a JODIE
temporal event stream (``JODIEDataset(root, 'wikipedia')``), a bipartite rating graph
(``AmazonBook(root)``) and a shopping log (``Taobao(root)``), of the real sets' layouts and
widths, smaller. `verbatim_datasets` installs them.

Both plant the same taste: users and items fall into clusters, and a user mostly picks items
of its own cluster, so a model that remembers (TGN's memory) or embeds (LightGCN) who picked
what predicts the next pick. A runtime that lost events or broke message passing would show it
in the printed AP / AUC and precision / recall.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch_geometric.data import HeteroData, TemporalData

__all__ = ["amazon_book_like", "jodie_like", "taobao_like"]


def _picks(users: int, items: int, count: int, clusters: int, loyalty: float,
           gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` (user, item) picks: users drawn by a heavy-tailed activity; with probability
    `loyalty` the item is drawn from the user's cluster (user u and item i belong to cluster
    u % clusters and i % clusters), otherwise uniformly."""
    import torch

    activity = torch.rand(users, generator=gen) ** -0.5
    user = torch.multinomial(activity, count, replacement=True, generator=gen)
    per_cluster = items // clusters
    own = user % clusters + clusters * torch.randint(per_cluster, (count, ), generator=gen)
    anywhere = torch.randint(items, (count, ), generator=gen)
    loyal = torch.rand(count, generator=gen) < loyalty
    return user, torch.where(loyal, own, anywhere)


def jodie_like(users: int = 1000, items: int = 200, events: int = 12_000, msg_dim: int = 172,
               seed: int = 0) -> TemporalData:
    """A JODIE-like event stream (real 'wikipedia': 157,474 edits by 8,227 users of 1,000
    pages over a month, ``msg`` 172 LIWC features, ``y`` 1 for the 217 edits after which the
    user was banned): `events` picks (`_picks`, 20 clusters, loyalty 0.7) in time order, ``t``
    increasing integer seconds, ``dst`` numbered after the users as PyG's processing does, a
    message whose mean follows the item's cluster, and ``y`` 1 with probability 0.002."""
    import torch
    from torch_geometric.data import TemporalData

    gen = torch.Generator().manual_seed(seed)
    src, item = _picks(users, items, events, 20, 0.7, gen)
    t = torch.randint(0, 2_600_000, (events, ), generator=gen).sort().values
    centres = torch.randn(20, msg_dim, generator=gen)
    msg = centres[item % 20] + torch.randn(events, msg_dim, generator=gen)
    y = (torch.rand(events, generator=gen) < 0.002).long()
    return TemporalData(src=src, dst=item + users, t=t, msg=msg, y=y)


def amazon_book_like(users: int = 2000, books: int = 3000, train: int = 40_000,
                     test: int = 10_000, seed: int = 0) -> HeteroData:
    """An AmazonBook-like rating graph (real: 52,643 users, 91,599 books, 2,380,730 training
    and 603,378 test ratings, no features): distinct picks (`_picks`, 30 clusters, loyalty
    0.8), the first `train` in ``('user', 'rates', 'book').edge_index`` (and flipped in
    ``('book', 'rated_by', 'user')``), the next `test` in its ``edge_label_index``."""
    import torch
    from torch_geometric.data import HeteroData

    gen = torch.Generator().manual_seed(seed)
    user, book = _picks(users, books, 2 * (train + test), 30, 0.8, gen)
    key = user * books + book
    unique, inverse = key.unique(return_inverse=True)
    first = torch.full((unique.numel(), ), key.numel()).scatter_reduce(
        0, inverse, torch.arange(key.numel()), "amin").sort().values[:train + test]
    pairs = torch.stack([user[first], book[first]])
    data = HeteroData()
    data["user"].num_nodes, data["book"].num_nodes = users, books
    data["user", "rates", "book"].edge_index = pairs[:, :train]
    data["user", "rates", "book"].edge_label_index = pairs[:, train:]
    data["book", "rated_by", "user"].edge_index = pairs[:, :train].flip([0])
    return data


def taobao_like(users: int = 3000, items: int = 2000, categories: int = 40,
                events: int = 60_000, seed: int = 0) -> HeteroData:
    """A Taobao-like shopping log as PyG's processing leaves it (real: 987,994 users, 4,162,024
    items, 9,439 categories, about 100M behaviours over nine days): ``user`` / ``item`` /
    ``category`` node counts, ``('user', 'to', 'item')`` with one edge per behaviour (a user
    may view an item many times), its ``time`` (Unix seconds in the real window) and
    ``behavior`` (0 view, 1 cart, 2 buy, 3 favourite, in the real shares), and distinct
    ``('item', 'to', 'category')`` pairs, one category an item. Picks by `_picks` (30
    clusters, loyalty 0.8); an item's category follows its cluster."""
    import torch
    from torch_geometric.data import HeteroData

    gen = torch.Generator().manual_seed(seed)
    user, item = _picks(users, items, events, 30, 0.8, gen)
    time = torch.randint(1511539200, 1512316800, (events, ), generator=gen)
    behavior = torch.multinomial(torch.tensor([0.895, 0.055, 0.02, 0.03]), events,
                                 replacement=True, generator=gen)
    order = time.argsort()
    data = HeteroData()
    data["user"].num_nodes, data["item"].num_nodes = users, items
    data["category"].num_nodes = categories
    data["user", "to", "item"].edge_index = torch.stack([user[order], item[order]])
    data["user", "to", "item"].time = time[order]
    data["user", "to", "item"].behavior = behavior[order]
    category = (torch.arange(items) % 30) % categories
    data["item", "to", "category"].edge_index = torch.stack([torch.arange(items), category])
    return data
