"""Offline stand-ins for the datasets PyG's example scripts download, for
`pyg_examples_verbatim.py`: each replaces the class in ``torch_geometric.datasets`` for the
child process that runs one example, takes the class's own arguments (``root``, ``name`` /
``split``, ``transform``, ``pre_transform``, ``pre_filter``) and builds its graphs through PyG's
``InMemoryDataset``, so that the script's transforms and loaders run on them as on the real
data. Nothing is read from ``root``.

* ``Planetoid(root, name)``: the Cora / CiteSeer raw files bundled with gnnorch, processed by
  PyG's own class under another root (real data).
* ``TUDataset(root, 'PROTEINS' | 'PROTEINS_full', use_node_attr=...)``: `proteins_like`, 600
  synthetic graphs of two overlapping classes; ``PROTEINS_full`` with ``use_node_attr`` puts 29
  continuous node attributes before the 3 one-hot node labels, as PyG's TUDataset does.
* ``PPI(root, split)``: `ppi_like`, 20 / 2 / 2 graphs (train / val / test) of 80-240 nodes, 50
  features and 121 binary labels per node that depend on a node's and its neighbours'
  features (the real PPI: 20 / 2 / 2 graphs of about 2,400 nodes, 50 features, 121 labels).
* ``Reddit(root)`` and ``Flickr(root)``: `communities_like`, one graph of communities with the
  real set's features and classes (Reddit: 20,000 nodes instead of 232,965, 602 features, 41
  classes; Flickr: 10,000 instead of 89,250, 500 features, 7 classes) and its split masks.
* ``TUDataset(root, 'MUTAG')``: `mutag_like`, 188 molecule-like graphs with atom and bond
  labels one-hot; ``ZINC(root, subset=True, split)``: `zinc_like`, 2,000 / 200 / 200
  molecule-like graphs with atom and bond types and a regression target.
* ``DBLP(root)``, ``IMDB(root)``, ``MovieLens(root, model_name=...)``, ``OGB_MAG(root,
  preprocess=...)`` (heterogeneous) and ``Entities(root, 'AIFB')`` (typed edges):
  `verbatim_typed_datasets`, smaller graphs of the real types, feature widths and classes.
* ``TUDataset(root, 'COLORS-3' | 'TRIANGLES' | 'IMDB-BINARY')``, ``BitcoinOTC(root,
  edge_window_size)``, ``LINKXDataset(root, 'Penn94')`` and ``RelLinkPredDataset(root,
  'FB15k-237')``: `verbatim_more_datasets`, the real layouts and splits (COLORS-3 and
  TRIANGLES with the real numbers of graphs, which the scripts slice by index), the others
  smaller.
* ``JODIEDataset(root, 'wikipedia')`` (a ``TemporalData`` event stream) and
  ``AmazonBook(root)`` (a bipartite rating graph): `verbatim_interaction_datasets`, smaller,
  with a taste planted in who picks what.
* ``WikipediaNetwork(root, 'chameleon')`` (geom-gcn's preprocessing: directed links, ten
  split masks): `verbatim_more_datasets`, of the real size.
* ``QM9(root)`` (molecules with positions and 19 targets) and ``UPFD(root, name, feature,
  split)`` (news propagation trees, 'politifact' or 'gossipcop', any of the four features):
  `verbatim_molecule_datasets`, QM9 with 22,000 smaller molecules (the script slices off
  20,000 for test and validation), politifact of the real size, gossipcop smaller.
* ``AMiner(root)`` (authors, papers and venues, areas of the labelled authors),
  ``TUDataset(root, 'ENZYMES', use_node_attr=...)`` (600 graphs of 6 classes, 3 one-hot node
  labels, after 18 attributes with ``use_node_attr``), ``GDELT(root, split)`` and
  ``ICEWS18(root, split)`` (events of a temporal knowledge graph) and
  ``GraphLandDataset(root, 'tolokers-2', split)``: `verbatim_more_examples_datasets`. The
  event sets and GraphLand are PyG's own classes with only their raw data made up, so their
  processing runs as on the real files (the events' pre-transform, e.g.
  ``RENet.pre_transform``, over the whole stream once a process, as under one real root);
  AMiner and ENZYMES are built as PyG's processing leaves them; AMiner, the events and
  tolokers-2's edges smaller.
* ``FB15k_237(root, split)`` (Freebase triples for knowledge-graph embeddings):
  `verbatim_kg_datasets`, PyG's own class over made-up raw files, smaller.

An offline ``ogb`` package (the 'ogbn-arxiv' and 'ogbg-molhiv' sets, ogb's evaluators and
encoders) is not installed here but by `pyg_examples_verbatim`'s child process
(`verbatim_more_examples_datasets.install_ogb`): it goes into ``sys.modules``.
"""
from __future__ import annotations

import itertools
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch_geometric.data import Data

from verbatim_interaction_datasets import amazon_book_like, jodie_like, taobao_like
from verbatim_molecule_datasets import qm9_like, upfd_like
from verbatim_more_examples_datasets import (ENZYMES_ATTRIBUTES, EVENT_SETS, aminer_like,
                                             enzymes_like, events_like, tolokers_like)
from verbatim_more_datasets import (bitcoin_otc_like, chameleon_like, colors_like, fb15k_like,
                                    imdb_binary_like, penn94_like, triangles_like)
from verbatim_typed_datasets import (dblp_like, entities_like, imdb_like, mag_like,
                                     movielens_like, same_class_picks)

__all__ = ["communities_like", "install_stand_ins", "mutag_like", "ppi_like", "proteins_like",
           "zinc_like"]

PROTEINS_ATTRIBUTES = 29   # PROTEINS_full's continuous node attributes
PPI_GRAPHS = {"train": 20, "val": 2, "test": 2}


def _ring_with_chords(n: int, chords: int, gen: torch.Generator) -> torch.Tensor:
    """Undirected edges of a ring of `n` nodes with `chords` random chords, both directions,
    no self-loops, no duplicates."""
    import torch

    ring = torch.arange(n)
    extra = torch.randint(0, n, (2, chords), generator=gen)
    edges = torch.cat([torch.stack([ring, (ring + 1) % n]), extra], dim=1)
    edges = torch.cat([edges, edges.flip(0)], dim=1)
    return _contiguous_unique(edges[:, edges[0] != edges[1]])


def _contiguous_unique(edges: torch.Tensor) -> torch.Tensor:
    """Distinct columns of `edges`, sorted, contiguous as a dataset's ``edge_index`` is
    (``unique(dim=1)`` returns a transposed view; pyg-lib's sampler refuses one)."""
    return edges.unique(dim=1).contiguous()


def proteins_like(num_graphs: int = 600, seed: int = 0, attributes: int = 0) -> list:
    """PROTEINS-like graphs: 10-40 nodes, a ring with random chords (class 1: twice as many),
    three node labels one-hot (class 1 draws label 2 more often). The classes overlap. With
    `attributes`, that many continuous node attributes first (class 1 shifted by 0.3)."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    graphs = []
    for i in range(num_graphs):
        y = i % 2
        n = int(torch.randint(10, 41, (1, ), generator=gen))
        edges = _ring_with_chords(n, n // 5 * (1 + y), gen)
        probs = torch.tensor([0.4, 0.25, 0.35] if y else [0.4, 0.35, 0.25])
        labels = torch.multinomial(probs, n, replacement=True, generator=gen)
        x = torch.nn.functional.one_hot(labels, 3).float()
        if attributes:
            attrs = torch.randn(n, attributes, generator=gen) + 0.3 * y
            x = torch.cat([attrs, x], dim=1)
        graphs.append(Data(x=x, edge_index=edges, y=torch.tensor([y])))
    return graphs


def ppi_like(split: str, seed: int = 0) -> list:
    """PPI-like graphs of `split`: 80-240 nodes each, a ring with about 4 chords a node; 50
    binary features (each on with probability 0.2); label j of a node is on when its score
    s_j = (x + mean of its neighbours' x) @ W[:, j] exceeds the 70th percentile of s_j over the
    split's first graph (W one fixed Gaussian matrix for all splits), so about 30 % of labels
    are on and a GNN can learn them."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.utils import scatter

    if split not in PPI_GRAPHS:
        raise ValueError(f"PPI split must be one of {sorted(PPI_GRAPHS)}, got {split!r}")
    weights = torch.randn(50, 121, generator=torch.Generator().manual_seed(seed))
    gen = torch.Generator().manual_seed(seed + 1 + sorted(PPI_GRAPHS).index(split))
    graphs, cut = [], None
    for _ in range(PPI_GRAPHS[split]):
        n = int(torch.randint(80, 241, (1, ), generator=gen))
        edges = _ring_with_chords(n, 4 * n, gen)
        x = (torch.rand(n, 50, generator=gen) < 0.2).float()
        score = (x + scatter(x[edges[0]], edges[1], 0, dim_size=n, reduce="mean")) @ weights
        if cut is None:
            cut = score.quantile(0.7, dim=0)
        graphs.append(Data(x=x, edge_index=edges, y=(score > cut).float()))
    return graphs


def mutag_like(num_graphs: int = 188, seed: int = 0) -> list:
    """MUTAG-like graphs (real: 188 molecules of 10-28 atoms, 7 atom labels one-hot, 4 bond
    labels one-hot on both directions of a bond, 125 of class 1): a ring with n // 6 chords
    (class 1: twice as many), class 1 drawing atom label 2 and bond label 1 more often."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    graphs = []
    for i in range(num_graphs):
        y = int(i % 3 != 0)
        n = int(torch.randint(10, 29, (1, ), generator=gen))
        edges = _ring_with_chords(n, n // 6 * (1 + y), gen)
        atoms = torch.tensor([0.5, 0.15, 0.1 + 0.15 * y, 0.1, 0.05, 0.05, 0.05])
        bonds = torch.tensor([0.6, 0.1 + 0.2 * y, 0.2, 0.1])
        x = torch.nn.functional.one_hot(
            torch.multinomial(atoms, n, replacement=True, generator=gen), 7).float()
        per_pair = torch.multinomial(bonds, n * n, replacement=True, generator=gen)
        pair = torch.minimum(edges[0], edges[1]) * n + torch.maximum(edges[0], edges[1])
        edge_attr = torch.nn.functional.one_hot(per_pair[pair], 4).float()
        graphs.append(Data(x=x, edge_index=edges, edge_attr=edge_attr, y=torch.tensor([y])))
    return graphs


ZINC_GRAPHS = {"train": 2000, "val": 200, "test": 200}


def zinc_like(split: str, seed: int = 0) -> list:
    """ZINC-subset-like molecules of `split` (real: 10,000 / 1,000 / 1,000 graphs of 9-37
    atoms; ``x`` one atom type in 0-20 as a [n, 1] long column, ``edge_attr`` a bond type in
    1-3 on both directions of a bond, ``y`` a float): 2,000 / 200 / 200 graphs of 10-30 atoms,
    a ring with n // 8 random chords, y = (#type 0 - #type 2) / 5 + #chords / 2 + #bonds of
    type 3 / 10 + noise / 4."""
    import torch
    from torch_geometric.data import Data

    if split not in ZINC_GRAPHS:
        raise ValueError(f"ZINC split must be one of {sorted(ZINC_GRAPHS)}, got {split!r}")
    gen = torch.Generator().manual_seed(seed + 1 + sorted(ZINC_GRAPHS).index(split))
    atoms = torch.tensor([0.4, 0.15, 0.15] + [0.3 / 18] * 18)
    graphs = []
    for _ in range(ZINC_GRAPHS[split]):
        n = int(torch.randint(10, 31, (1, ), generator=gen))
        chords = int(torch.randint(0, n // 8 + 1, (1, ), generator=gen))
        edges = _ring_with_chords(n, chords, gen)
        x = torch.multinomial(atoms, n, replacement=True, generator=gen)
        per_pair = 1 + torch.multinomial(torch.tensor([0.6, 0.3, 0.1]), n * n,
                                         replacement=True, generator=gen)
        bond = per_pair[torch.minimum(edges[0], edges[1]) * n
                        + torch.maximum(edges[0], edges[1])]
        y = (float((x == 0).sum() - (x == 2).sum()) / 5 + (edges.size(1) / 2 - n) / 2
             + float((bond == 3).sum()) / 20 + float(torch.randn(1, generator=gen)) / 4)
        graphs.append(Data(x=x.view(-1, 1), edge_index=edges, edge_attr=bond,
                           y=torch.tensor([y])))
    return graphs


def communities_like(num_nodes: int, features: int, classes: int, degree: int,
                     split: tuple[float, float], seed: int = 0) -> Data:
    """One graph of `classes` communities: a node's class uniform, its features its class's
    Gaussian centroid times 0.05 plus unit noise (too little for its own features to tell the
    class apart: its neighbours' tell more); each node sends `degree` / 2 edges, 50 % to a
    node of its own class, the rest to any node, made undirected. Masks: the first `split[0]`
    of a random order trains, the next `split[1]` validates, the rest tests."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (num_nodes, ), generator=gen)
    centroids = torch.randn(classes, features, generator=gen)
    x = 0.05 * centroids[y] + torch.randn(num_nodes, features, generator=gen)
    src = torch.arange(num_nodes).repeat_interleave(degree // 2)
    within = same_class_picks(y, y[src], gen)
    anywhere = torch.randint(0, num_nodes, (src.numel(), ), generator=gen)
    dst = torch.where(torch.rand(src.numel(), generator=gen) < 0.5, within, anywhere)
    edges = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    edges = _contiguous_unique(edges[:, edges[0] != edges[1]])
    order = torch.randperm(num_nodes, generator=gen)
    train_end = int(split[0] * num_nodes)
    val_end = train_end + int(split[1] * num_nodes)
    masks = [torch.zeros(num_nodes, dtype=torch.bool) for _ in range(3)]
    for mask, part in zip(masks, (order[:train_end], order[train_end:val_end],
                                  order[val_end:])):
        mask[part] = True
    return Data(x=x, edge_index=edges, y=y, train_mask=masks[0], val_mask=masks[1],
                test_mask=masks[2])


def install_stand_ins(data_root: Path) -> None:
    """Replace `Planetoid`, `TUDataset`, `PPI`, `ZINC`, `Reddit`, `Flickr`, `DBLP`, `IMDB`,
    `MovieLens`, `OGB_MAG`, `Entities`, `BitcoinOTC`, `LINKXDataset`, `RelLinkPredDataset`,
    `JODIEDataset`, `AmazonBook`, `Taobao`, `WikipediaNetwork`, `QM9`, `UPFD`, `AMiner`,
    `GDELT`, `ICEWS18`, `GraphLandDataset` and `FB15k_237` in `torch_geometric.datasets` for this
    process (the module docstring says with what), and `ModelNet`, `MNISTSuperpixels` and
    `FAUST` (`verbatim_geometry_datasets.install_geometry`)."""
    import torch_geometric.datasets as datasets
    from torch_geometric.data import InMemoryDataset
    from torch_geometric.datasets.gdelt import GDELT as RealGDELT
    from torch_geometric.datasets.graphland import GraphLandDataset as RealGraphLand
    from torch_geometric.datasets.freebase import FB15k_237 as RealFB15k237
    from torch_geometric.datasets.icews import ICEWS18 as RealICEWS18

    from verbatim_geometry_datasets import install_geometry
    from verbatim_kg_datasets import freebase_like_lines

    from gnnorch.datasets import load_planetoid

    def bundled_planetoid(root, name, **kwargs):
        return load_planetoid(name, root=data_root, **kwargs)

    class Synthetic(InMemoryDataset):
        """Graphs built in memory, then filtered and pre-transformed as PyG's processing
        does. Its root is a directory of this process's own under `data_root` with an
        empty ``processed`` directory, where a sampler may save what it computes
        (``GraphSAINTSampler(save_dir=dataset.processed_dir)``): no run finds another's."""

        def __init__(self, graphs: list, transform=None, pre_transform=None,
                     pre_filter=None) -> None:
            root = data_root / "stand-ins" / f"{type(self).__name__}-{os.getpid()}"
            (root / "processed").mkdir(parents=True, exist_ok=True)
            super().__init__(str(root), transform)
            if pre_filter is not None:
                graphs = [g for g in graphs if pre_filter(g)]
            if pre_transform is not None:
                graphs = [pre_transform(g) for g in graphs]
            self.data, self.slices = self.collate(graphs)

    class TUDatasetLike(Synthetic):
        def __init__(self, root, name, transform=None, pre_transform=None, pre_filter=None,
                      use_node_attr=False, **kwargs):
            if name == "MUTAG":
                graphs = mutag_like()
            elif name in ("PROTEINS", "PROTEINS_full"):
                attributes = (PROTEINS_ATTRIBUTES if name == "PROTEINS_full" and use_node_attr
                              else 0)
                graphs = proteins_like(attributes=attributes)
            elif name in ("COLORS-3", "TRIANGLES"):
                make = colors_like if name == "COLORS-3" else triangles_like
                graphs = make(use_node_attr=use_node_attr)
            elif name == "IMDB-BINARY":
                graphs = imdb_binary_like()
            elif name == "ENZYMES":
                graphs = enzymes_like(attributes=ENZYMES_ATTRIBUTES if use_node_attr else 0)
            else:
                raise ValueError(f"no stand-in for TUDataset {name!r} (only 'MUTAG', "
                                 f"'PROTEINS', 'PROTEINS_full', 'COLORS-3', 'TRIANGLES', "
                                 f"'IMDB-BINARY', 'ENZYMES')")
            super().__init__(graphs, transform, pre_transform, pre_filter)

    class ZINCLike(Synthetic):
        def __init__(self, root, subset=False, split="train", transform=None,
                     pre_transform=None, pre_filter=None, **kwargs):
            if not subset:
                raise ValueError("no stand-in for the full ZINC (only subset=True)")
            super().__init__(zinc_like(split), transform, pre_transform, pre_filter)

    class PPILike(Synthetic):
        def __init__(self, root, split="train", transform=None, pre_transform=None,
                     pre_filter=None, **kwargs):
            super().__init__(ppi_like(split), transform, pre_transform, pre_filter)

    class RedditLike(Synthetic):
        def __init__(self, root, transform=None, pre_transform=None, **kwargs):
            graph = communities_like(20_000, 602, 41, 30, (0.66, 0.10))
            super().__init__([graph], transform, pre_transform)

    class FlickrLike(Synthetic):
        def __init__(self, root, transform=None, pre_transform=None, **kwargs):
            graph = communities_like(10_000, 500, 7, 10, (0.50, 0.25), seed=1)
            super().__init__([graph], transform, pre_transform)

    class EntitiesLike(Synthetic):
        def __init__(self, root, name, hetero=False, transform=None, pre_transform=None,
                     **kwargs):
            if name.lower() != "aifb" or hetero:
                raise ValueError(f"no stand-in for Entities {name!r} with hetero={hetero} "
                                 f"(only 'AIFB', homogeneous)")
            super().__init__([entities_like()], transform, pre_transform)

        @property
        def num_relations(self) -> int:
            return int(self._data.edge_type.max()) + 1

        @property
        def num_classes(self) -> int:
            return int(self._data.train_y.max()) + 1

    def typed(name: str, build):
        def __init__(self, root, transform=None, pre_transform=None, **kwargs):
            Synthetic.__init__(self, [build()], transform, pre_transform)

        return type(name, (Synthetic, ), {"__init__": __init__})

    def named(real: str, only: str, build):
        """A stand-in for `real`(root, name), whose only name (any case) is `only`."""
        def __init__(self, root, name, transform=None, pre_transform=None, **kwargs):
            if name.lower() != only.lower():
                raise ValueError(f"no stand-in for {real} {name!r} (only {only!r})")
            Synthetic.__init__(self, [build()], transform, pre_transform)

        return type(f"{real}Like", (Synthetic, ), {"__init__": __init__})

    class MagLike(Synthetic):
        def __init__(self, root, preprocess=None, transform=None, pre_transform=None,
                     **kwargs):
            if preprocess not in (None, "metapath2vec", "transe"):
                raise ValueError(f"OGB_MAG preprocess must be None, 'metapath2vec' or "
                                 f"'transe', got {preprocess!r}")
            super().__init__([mag_like(embedded=preprocess is not None)], transform,
                             pre_transform)

        @property
        def num_classes(self) -> int:   # as PyG's OGB_MAG: the papers' venues
            return int(self._data["paper"].y.max()) + 1

    class BitcoinOTCLike(Synthetic):
        def __init__(self, root, edge_window_size=10, transform=None, pre_transform=None,
                     **kwargs):
            super().__init__(bitcoin_otc_like(edge_window_size), transform, pre_transform)

        @property
        def num_nodes(self) -> int:   # as PyG's BitcoinOTC
            return int(self._data.edge_index.max()) + 1

    class RelLinkPredLike(Synthetic):
        def __init__(self, root, name, transform=None, pre_transform=None, **kwargs):
            if name != "FB15k-237":
                raise ValueError(f"no stand-in for RelLinkPredDataset {name!r} (only "
                                 f"'FB15k-237')")
            super().__init__([fb15k_like()], transform, pre_transform)

        @property
        def num_relations(self) -> int:   # with the reverse relations, as PyG's
            return int(self._data.edge_type.max()) + 1

    class WikipediaNetworkLike(Synthetic):
        def __init__(self, root, name, geom_gcn_preprocess=True, transform=None,
                     pre_transform=None, **kwargs):
            if name.lower() != "chameleon" or not geom_gcn_preprocess:
                raise ValueError(f"no stand-in for WikipediaNetwork {name!r} with "
                                 f"geom_gcn_preprocess={geom_gcn_preprocess} (only "
                                 f"'chameleon', preprocessed)")
            super().__init__([chameleon_like()], transform, pre_transform)

    class QM9Like(Synthetic):
        def __init__(self, root, transform=None, pre_transform=None, pre_filter=None,
                     **kwargs):
            super().__init__(qm9_like(), transform, pre_transform, pre_filter)

    class UPFDLike(Synthetic):
        def __init__(self, root, name, feature, split="train", transform=None,
                     pre_transform=None, pre_filter=None, **kwargs):
            super().__init__(upfd_like(name, feature, split), transform, pre_transform,
                             pre_filter)

    roots: dict[str, Path] = {}

    def own_root(name: str) -> Path:
        """A root of this process's own for `name`, the same for each of its datasets (a
        train and a test split share one processing, as under the real root): a fresh
        directory, so that no run reads what an earlier process of the same id left."""
        if name not in roots:
            (data_root / "stand-ins").mkdir(parents=True, exist_ok=True)
            roots[name] = Path(tempfile.mkdtemp(prefix=f"{name}-{os.getpid()}-",
                                                dir=data_root / "stand-ins"))
        return roots[name]

    def event_set(real: type) -> type:
        """PyG's `real` event set (GDELT, ICEWS18) with its raw files replaced by
        `events_like` and its split ends by the stand-in's: its own processing (the caller's
        pre-transform over the whole stream, then the splits) runs once a process, the first
        split asked for saving all three, as under a real root."""
        name = real.__name__

        def __init__(self, root, split="train", transform=None, pre_transform=None,
                     pre_filter=None, **kwargs):
            real.__init__(self, str(own_root(name)), split, transform, pre_transform,
                          pre_filter)

        def download(self) -> None:   # nothing to fetch: `process_events` makes the events
            pass

        def process_events(self):
            return events_like(name)

        ends = list(itertools.accumulate((0, *EVENT_SETS[name]["split"])))
        return type(f"{name}Like", (real, ), {
            "__init__": __init__, "download": download, "process_events": process_events,
            "splits": ends})

    class GraphLandLike(RealGraphLand):
        """PyG's GraphLandDataset with its raw files replaced by `tolokers_like`: its own
        processing (imputation, feature transforms, masks, ``ToUndirected``) runs on them."""

        def __init__(self, root, name, split, **kwargs):
            if name != "tolokers-2":
                raise ValueError(f"no stand-in for GraphLandDataset {name!r} (only "
                                 f"'tolokers-2')")
            super().__init__(str(own_root("GraphLandDataset")), name, split, **kwargs)

        def download(self) -> None:   # nothing to fetch: `_get_raw_data` makes the data
            pass

        def _get_raw_data(self) -> dict:
            return tolokers_like(self.split[:2])

    class FB15k237Like(RealFB15k237):
        """PyG's FB15k_237 with its raw files made up (`verbatim_kg_datasets`): its own
        processing numbers the entity and relation strings."""

        def __init__(self, root, split="train", transform=None, pre_transform=None,
                     force_reload=False):
            super().__init__(str(own_root("FB15k_237")), split, transform, pre_transform,
                             force_reload)

        def download(self) -> None:
            for name, lines in freebase_like_lines().items():
                Path(self.raw_dir, name).write_text("\n".join(lines) + "\n")

    datasets.FB15k_237 = FB15k237Like
    install_geometry(Synthetic)   # ModelNet, MNISTSuperpixels, FAUST
    datasets.AMiner = typed("AMinerLike", aminer_like)
    datasets.GDELT = event_set(RealGDELT)
    datasets.ICEWS18 = event_set(RealICEWS18)
    datasets.GraphLandDataset = GraphLandLike
    datasets.WikipediaNetwork = WikipediaNetworkLike
    datasets.QM9 = QM9Like
    datasets.UPFD = UPFDLike
    datasets.JODIEDataset = named("JODIEDataset", "wikipedia", jodie_like)
    datasets.AmazonBook = typed("AmazonBookLike", amazon_book_like)
    datasets.Taobao = typed("TaobaoLike", taobao_like)
    datasets.BitcoinOTC = BitcoinOTCLike
    datasets.LINKXDataset = named("LINKXDataset", "Penn94", penn94_like)
    datasets.RelLinkPredDataset = RelLinkPredLike
    datasets.OGB_MAG = MagLike
    datasets.DBLP = typed("DBLPLike", dblp_like)
    datasets.IMDB = typed("IMDBLike", imdb_like)
    datasets.MovieLens = typed("MovieLensLike", movielens_like)
    datasets.Entities = EntitiesLike
    datasets.Planetoid = bundled_planetoid
    datasets.Reddit = RedditLike
    datasets.Flickr = FlickrLike
    datasets.TUDataset = TUDatasetLike
    datasets.PPI = PPILike
    datasets.ZINC = ZINCLike
