"""Offline stand-ins for seven more of PyG's examples in `pyg_examples_verbatim.py`: a
heterogeneous bibliographic graph (``AMiner``), the ENZYMES graph-kernel set
(``TUDataset(root, 'ENZYMES')``), a temporal knowledge graph of events (``GDELT`` /
``ICEWS18``), an industrial node-property graph (``GraphLandDataset('tolokers-2')``), all of
which `verbatim_datasets` installs, and an offline ``ogb`` package (`ogb_modules`: the
'ogbn-arxiv' citation graph and the 'ogbg-molhiv' molecules, ogb's evaluators and atom
encoder), which the child process of `pyg_examples_verbatim` installs (`install_ogb`). All of
the real sets' types, field names, dtypes, widths, classes and splits, the large ones smaller.

Each label is planted so that the script learns something: an author's research area decides
where its papers appear (metapath2vec's walks find it), an enzyme class its graphs' labels and
density (the WL kernel's histograms find it), a subject its usual partners under a relation
(RE-Net's history finds it), a worker's ban its features and whom it works with, a paper's
area its features and what it cites, and a molecule's activity a motif of nitrogens by
aromatic rings (the GNNs find them). A runtime that lost walks, events or messages would show
it in the printed metrics.

The event sets and GraphLand are PyG's own classes with only their raw data replaced (their
processing, splits, ``RENet.pre_transform`` over the whole stream and GraphLand's feature
transforms run as on the real files); AMiner and ENZYMES are built as PyG's processing would
leave them (pandas, which AMiner's processing reads with, is not installed here), the ogb
sets as ogb's would.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch_geometric.data import HeteroData

__all__ = ["AMINER_AREAS", "ENZYMES_ATTRIBUTES", "EVENT_SETS", "OGB_SETS", "TOLOKERS_KINDS",
           "aminer_like", "arxiv_like", "enzymes_like", "events_like", "install_ogb",
           "molhiv_like", "ogb_modules", "tolokers_like"]

#: AMiner's research areas (the classes of its labelled authors and venues).
AMINER_AREAS = 8


def aminer_like(authors: int = 1024, papers: int = 2000, venues: int = 16,
                labelled: float = 1.0, seed: int = 0) -> HeteroData:
    """An AMiner-like bibliographic graph (real: 1,693,531 authors, 3,194,405 papers, 3,883
    venues, 9,323,605 authorships (about 2.9 authors a paper), each paper in one venue; 246,678
    authors and 134 venues labelled with one of 8 research areas), as PyG's processing leaves
    it: node types ``author`` (``y``, ``y_index``: the labelled authors' areas, long, and
    indices), ``venue`` (``y``, ``y_index``: the labelled venues) and ``paper`` (only
    ``num_nodes``), in that order; edge types ``('paper', 'written_by', 'author')`` (coalesced,
    sorted by paper), ``('author', 'writes', 'paper')`` (its flip), ``('paper',
    'published_in', 'venue')`` (coalesced) and ``('venue', 'publishes', 'paper')`` (its flip).

    Here `authors` authors, `papers` papers, `venues` venues (2 an area), a random `labelled`
    share of the authors labelled (real: 14.6 %) and half the venues. Why so few: the script's
    walks (5 of 50 steps from each of 128 authors a batch, 5 negatives each, 128-d sparse
    embeddings) make a training step cost 2-4 s on two CPU cores, whatever the graph, and an
    epoch has a step for every 128 authors: 1,024 make 8 steps an epoch, 40 in the script's 5
    epochs (a vanilla run about 2-3 minutes). Forty steps of SparseAdam at lr 0.01 barely move
    embeddings initialised N(0, 1), so the printed accuracies stay low (about 0.2 against 1/8
    by chance, rising with more steps); all authors are labelled so that the script's 10 %
    training share has about 100 of them.

    Planted: every author, paper and venue has an area (venue v: v % 8, a paper: its venue's);
    each author first-authors one paper, 95 % of them of its own area, and the remaining
    authorships (2.9 a paper in all) go 90 % to an author of the paper's area, drawn by a
    heavy-tailed productivity, else to any author. So metapath2vec's
    author-paper-venue-paper-author walks stay mostly within an area."""
    import torch
    from torch_geometric.data import HeteroData
    from torch_geometric.utils import coalesce

    gen = torch.Generator().manual_seed(seed)
    areas = AMINER_AREAS
    author_area = torch.randint(0, areas, (authors, ), generator=gen)
    venue_area = torch.arange(venues) % areas
    paper_venue = torch.randint(0, venues, (papers, ), generator=gen)
    paper_area = venue_area[paper_venue]
    productivity = torch.rand(authors, generator=gen) ** -0.7

    def pick(pool_area: torch.Tensor, count: int, own: float, weights: torch.Tensor,
             pool_of: torch.Tensor) -> torch.Tensor:
        """For each wanted area, an index into `pool_of`'s members: with probability `own`
        one of that area drawn by `weights`, else any drawn by `weights`."""
        by_area = [torch.nonzero(pool_of == a).flatten() for a in range(areas)]
        out = torch.multinomial(weights, count, replacement=True, generator=gen)
        within = torch.rand(count, generator=gen) < own
        for a in range(areas):
            at = torch.nonzero(within & (pool_area == a)).flatten()
            members = by_area[a]
            draw = torch.multinomial(weights[members], at.numel(), replacement=True,
                                     generator=gen)
            out[at] = members[draw]
        return out

    # Every author writes one paper (95 % of its own area), then the remaining authorships.
    first = pick(author_area, authors, 0.95, torch.ones(papers), paper_area)
    extra = int(2.9 * papers) - authors
    extra_paper = torch.randint(0, papers, (extra, ), generator=gen)
    extra_author = pick(paper_area[extra_paper], extra, 0.9, productivity, author_area)
    paper_author = torch.stack([torch.cat([first, extra_paper]),
                                torch.cat([torch.arange(authors), extra_author])])
    paper_author = coalesce(paper_author, num_nodes=max(papers, authors))
    published = coalesce(torch.stack([torch.arange(papers), paper_venue]),
                         num_nodes=max(papers, venues))
    data = HeteroData()
    author_index = torch.randperm(authors, generator=gen)[:int(labelled * authors)]
    data["author"].y = author_area[author_index]
    data["author"].y_index = author_index
    venue_index = torch.randperm(venues, generator=gen)[:venues // 2]
    data["venue"].y = venue_area[venue_index]
    data["venue"].y_index = venue_index
    data["paper"].num_nodes = papers
    data["author"].num_nodes = authors
    data["paper", "written_by", "author"].edge_index = paper_author
    data["author", "writes", "paper"].edge_index = paper_author.flip([0])
    data["venue"].num_nodes = venues
    data["paper", "published_in", "venue"].edge_index = published
    data["venue", "publishes", "paper"].edge_index = published.flip([0])
    return data


#: ENZYMES' continuous node attributes (put before the 3 one-hot node labels with
#: ``use_node_attr=True``, as PyG's TUDataset does).
ENZYMES_ATTRIBUTES = 18
#: Per enzyme class: the probabilities of the three node labels (helix, sheet, turn), the
#: chords a node (besides its ring) and the share of chords that join near nodes of the ring.
ENZYMES_CLASSES = (((0.50, 0.30, 0.20), 0.8, 0.7), ((0.30, 0.50, 0.20), 0.9, 0.3),
                   ((0.40, 0.40, 0.20), 1.0, 0.5), ((0.45, 0.25, 0.30), 0.9, 0.6),
                   ((0.35, 0.35, 0.30), 1.1, 0.4), ((0.40, 0.30, 0.30), 0.8, 0.4))


def enzymes_like(num_graphs: int = 600, attributes: int = 0, seed: int = 0) -> list:
    """ENZYMES-like graphs (real: 600 protein tertiary structures, 100 of each of 6 enzyme
    classes, 2-126 secondary-structure elements (32.6 on average) joined by 62.1 undirected
    edges on average, 3 node labels one-hot, 18 node attributes; ``y`` the class, long, one a
    graph): `num_graphs` graphs of class i % 6, 6-60 nodes, a ring and about 0.8-1.1 chords a
    node (so 3.6-4.2 neighbours, real 3.8), undirected, no self-loops; ``x`` the 3 node labels
    one-hot, after `attributes` continuous ones (unit noise plus 0.5 times a fixed class
    centroid) when asked.

    Planted, with overlap (the real set's WL-kernel accuracy is about 50 %): each class draws
    node labels from its own mix, its number of chords, and how many of them join nodes 2-4
    apart on the ring (the others join any two nodes) (`ENZYMES_CLASSES`): label counts tell
    the first, the WL kernel's later iterations (neighbourhoods) the rest."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    centroids = torch.randn(6, attributes, generator=gen) if attributes else None
    graphs = []
    for i in range(num_graphs):
        y = i % 6
        mix, chords_a_node, near = ENZYMES_CLASSES[y]
        n = int(torch.randint(6, 61, (1, ), generator=gen))
        ring = torch.arange(n)
        chords = int(round(chords_a_node * n))
        src = torch.randint(0, n, (chords, ), generator=gen)
        step = torch.randint(2, 5, (chords, ), generator=gen)
        anywhere = torch.randint(0, n, (chords, ), generator=gen)
        dst = torch.where(torch.rand(chords, generator=gen) < near, (src + step) % n, anywhere)
        edges = torch.cat([torch.stack([ring, (ring + 1) % n]), torch.stack([src, dst])], dim=1)
        edges = torch.cat([edges, edges.flip(0)], dim=1)
        edges = edges[:, edges[0] != edges[1]].unique(dim=1).contiguous()
        labels = torch.multinomial(torch.tensor(mix), n, replacement=True, generator=gen)
        x = torch.nn.functional.one_hot(labels, 3).float()
        if attributes:
            attrs = torch.randn(n, attributes, generator=gen) + 0.5 * centroids[y]
            x = torch.cat([attrs, x], dim=1)
        graphs.append(Data(x=x, edge_index=edges, y=torch.tensor([y])))
    return graphs


#: Per event set: its real entities and relations (the class's ``num_nodes`` and
#: ``num_rels``), and here its events (train, val, test, in the real shares) and time steps
#: (as after the class's ``t // 15`` or ``t // 24``).
EVENT_SETS = {
    "GDELT": {"entities": 7691, "relations": 240, "split": (11_400, 1_575, 2_025),
              "steps": 150},
    "ICEWS18": {"entities": 23_033, "relations": 256, "split": (12_000, 1_480, 1_590),
                "steps": 150},
}


def events_like(name: str, seed: int = 0) -> torch.Tensor:
    """The [E, 4] long events (subject, relation, object, time step) of a GDELT- or
    ICEWS18-like temporal knowledge graph, as the class's ``process_events`` returns them (the
    three raw files' events in time order, the time divided into steps), for PyG's own
    processing to subtract each column's minimum, split and run the caller's pre-transform
    (``RENet.pre_transform``) over (real GDELT: 2,278,405 events among 7,691 entities under
    240 relations in 2,976 steps of 15 minutes, split 1,734,399 / 238,765 / 305,241 in time
    order; ICEWS18: 468,558 among 23,033 entities, 256 relations, 304 daily steps, 373,018 /
    45,995 / 49,545): here `EVENT_SETS[name]`'s events over its steps, 100 a step. (The
    script's model scores all 7,691 entities for each of its 1,024 events a batch, two to
    three seconds a batch here, and the pre-transform takes about two milliseconds an event:
    15,000 events, and the script's 20 epochs lowered, keep a run to about three minutes.)

    Planted: entities are active by a heavy tail; a subject acts under one of its 2 own
    relations (80 %, else any) on one of its 3 own partners for that relation (70 %, else an
    entity drawn by activity). So a subject's recent history under a relation (what RE-Net's
    pre-transform collects) and its embedding tell the object, and the object's the subject.
    Entities are numbered by first appearance (RE-Net's pre-transform grows its history table
    5,000 entities at a time, so an id may not run far ahead of those seen)."""
    import torch

    if name not in EVENT_SETS:
        raise ValueError(f"no stand-in for the event set {name!r} (only {sorted(EVENT_SETS)})")
    spec = EVENT_SETS[name]
    entities, relations, steps = spec["entities"], spec["relations"], spec["steps"]
    count = sum(spec["split"])
    gen = torch.Generator().manual_seed(seed + sorted(EVENT_SETS).index(name))
    activity = torch.rand(entities, generator=gen) ** -0.8
    own_rel = torch.randint(0, relations, (entities, 2), generator=gen)
    partners = torch.multinomial(activity, entities * 2 * 3, replacement=True,
                                 generator=gen).view(entities, 2, 3)
    sub = torch.multinomial(activity, count, replacement=True, generator=gen)
    which = torch.randint(0, 2, (count, ), generator=gen)
    usual = torch.rand(count, generator=gen) < 0.8
    rel = torch.where(usual, own_rel[sub, which],
                      torch.randint(0, relations, (count, ), generator=gen))
    partner = partners[sub, which, torch.randint(0, 3, (count, ), generator=gen)]
    other = torch.multinomial(activity, count, replacement=True, generator=gen)
    obj = torch.where(usual & (torch.rand(count, generator=gen) < 0.7), partner, other)
    obj = torch.where(obj == sub, (obj + 1) % entities, obj)
    t = torch.randint(0, steps, (count, ), generator=gen).sort().values
    # Number entities by first appearance (subject before object within an event).
    seen = torch.stack([sub, obj], dim=1).flatten()
    order = torch.full((entities, ), seen.numel())
    order.scatter_reduce_(0, seen, torch.arange(seen.numel()), "amin")
    number = torch.empty(entities, dtype=torch.long)
    number[order.argsort()] = torch.arange(entities)
    return torch.stack([number[sub], rel, number[obj], t], dim=1)


#: tolokers-2's raw features as this stand-in gives them: (numerical, fraction, categorical)
#: columns. The real set has 16 raw features; how they divide into the three kinds is assumed
#: here (the real info.yaml was not available): 9 numerical (activity counts and times, one
#: with missing values), the 4 task-outcome rates of the original Tolokers set and 3
#: categorical (education, of 4 levels, and two yes / no answers), which PyG's one-hot
#: encoding (binary ones in one column) makes 9 + 4 + 6 = 19 columns.
TOLOKERS_KINDS = (9, 4, 3)
#: GraphLand's splits: the train / val / test shares of the random (RL, RH) and temporal (TH)
#: ones; THI reads TH's masks, as PyG's class does.
GRAPHLAND_SPLITS = {"RL": (0.1, 0.1), "RH": (0.5, 0.25), "TH": (0.5, 0.25)}


def tolokers_like(split: str, nodes: int = 11_758, pairs: int = 60_000,
                  seed: int = 0) -> dict:
    """The raw data of a GraphLand 'tolokers-2'-like graph, as ``GraphLandDataset``'s
    ``_get_raw_data`` returns it for its own processing (imputation, quantile transform,
    one-hot encoding, masks, ``ToUndirected``): ``info``, ``num_features`` / ``frac_features``
    float32 and ``cat_features`` int32 numpy arrays (`TOLOKERS_KINDS`), ``targets`` float32
    (1: banned), ``masks`` (``train`` / ``val`` / ``test`` bool arrays of `split`, RL / RH / TH)
    and ``edges`` ([pairs, 2] int64, each pair once). Real: 11,758 crowd workers, 519,000
    undirected edges (two workers who annotated the same task), about 22 % banned; here the
    real nodes and `pairs` edges (the script runs a full-graph GCN 400 times).

    Planted: a banned worker's rejected and skipped rates run higher (Beta draws) and its
    activity lower, all overlapping; each worker starts `pairs` / `nodes` edges (about 10
    neighbours a worker in all), 40 % of them to a worker of its own kind (banned or not), the
    rest to anyone, so neighbours tell a little more.
    Random splits are stratified by the label, as GraphLand's are; TH orders workers by a
    registration time."""
    import numpy as np

    if split not in GRAPHLAND_SPLITS:
        raise ValueError(f"GraphLand split must be one of {sorted(GRAPHLAND_SPLITS)} (THI "
                         f"reads TH), got {split!r}")
    rng = np.random.default_rng(seed)
    banned = rng.random(nodes) < 0.22
    b = banned.astype(np.float64)
    # Numerical: activity (log-normal counts), tenure, speed...; one column partly missing.
    numerical = np.stack([
        rng.lognormal(3.0 - 0.6 * b, 1.0),          # tasks done
        rng.lognormal(1.5 - 0.3 * b, 0.8),          # projects
        rng.gamma(2.0 + b, 30.0),                   # median seconds a task
        rng.lognormal(4.0 - 0.2 * b, 0.7),          # days since registration
        rng.poisson(3.0 + 2.0 * b).astype(float),   # warnings
        rng.normal(30.0, 8.0, nodes),               # age
        rng.lognormal(2.0, 1.0, nodes),             # earnings
        rng.poisson(1.0, nodes).astype(float),      # devices
        rng.normal(0.5 * b, 1.0),                   # a score
    ], axis=1).astype(np.float32)
    numerical[rng.random(nodes) < 0.05, 5] = np.nan   # age not given
    rates = np.stack([rng.beta(8.0 - 3.0 * b, 2.0), rng.beta(1.0 + b, 8.0),
                      rng.beta(1.0, 12.0, nodes), rng.beta(1.0 + 1.5 * b, 10.0)], axis=1)
    fraction = (rates / rates.sum(axis=1, keepdims=True)).astype(np.float32)
    categorical = np.stack([rng.choice(4, nodes, p=[0.1, 0.2, 0.4, 0.3]),
                            (rng.random(nodes) < 0.6 - 0.2 * b).astype(int),
                            (rng.random(nodes) < 0.3).astype(int)], axis=1).astype(np.int32)
    src = np.arange(pairs) % nodes
    kinds = [np.flatnonzero(~banned), np.flatnonzero(banned)]
    own = np.where(banned[src], rng.choice(kinds[1], pairs), rng.choice(kinds[0], pairs))
    dst = np.where(rng.random(pairs) < 0.4, own, rng.integers(0, nodes, pairs))
    keep = src != dst
    edges = np.stack([src[keep], dst[keep]], axis=1).astype(np.int64)
    train_share, val_share = GRAPHLAND_SPLITS[split]
    if split == "TH":
        orders = [np.argsort(numerical[:, 3])[::-1]]   # the longest registered first
    else:   # stratified: each class split alone
        orders = [rng.permutation(kind) for kind in kinds]
    masks = {part: np.zeros(nodes, dtype=bool) for part in ("train", "val", "test")}
    for order in orders:
        ends = (int(train_share * len(order)), int((train_share + val_share) * len(order)))
        masks["train"][order[:ends[0]]] = True
        masks["val"][order[ends[0]:ends[1]]] = True
        masks["test"][order[ends[1]:]] = True
    info = {"task": "binary_classification", "target_name": "banned",
            "numerical_features_names": [f"num_{i}" for i in range(TOLOKERS_KINDS[0])]
            + [f"rate_{i}" for i in range(TOLOKERS_KINDS[1])],
            "fraction_features_names": [f"rate_{i}" for i in range(TOLOKERS_KINDS[1])],
            "categorical_features_names": [f"cat_{i}" for i in range(TOLOKERS_KINDS[2])]}
    return {"info": info, "num_features": numerical, "cat_features": categorical,
            "frac_features": fraction, "targets": banned.astype(np.float32), "masks": masks,
            "edges": edges}


# -- an offline `ogb` package ----------------------------------------------------------------
#: ogb's atom and bond feature columns and how many values each takes
#: (`ogb.utils.features.get_atom_feature_dims` / `get_bond_feature_dims`).
ATOM_FEATURE_DIMS = (119, 5, 12, 12, 10, 6, 6, 2, 2)
BOND_FEATURE_DIMS = (5, 6, 2)
#: The ogb sets stood in for: (num tasks, num classes, eval metric, task type), as ogb's
#: master.csv has them.
OGB_SETS = {"ogbn-arxiv": (1, 40, "acc", "multiclass classification"),
            "ogbn-products": (1, 47, "acc", "multiclass classification"),
            "ogbn-proteins": (112, 2, "rocauc", "binary classification"),
            "ogbg-molhiv": (1, 2, "rocauc", "binary classification")}
#: arxiv's years: (first, last) of the training years, then the weights of the training
#: years together, 2018 (validation), 2019 and 2020 (test), as the real split's shares.
ARXIV_YEARS = ((1995, 2017), (0.537, 0.176, 0.200, 0.087))


def arxiv_like(nodes: int = 5000, cites: int = 7, homophily: float = 0.45, seed: int = 0):
    """An ogbn-arxiv-like citation graph and its split (real: 169,343 CS papers, 1,166,243
    citations (citing -> cited, directed), ``x`` 128 float features (averaged word
    embeddings of title and abstract), ``node_year`` [N, 1] long, ``y`` [N, 1] long, one of 40
    subject areas, unevenly used; split by year: train up to 2017 (90,941), valid 2018
    (29,799), test 2019 on (48,603)): `nodes` papers, citing `cites` others on average (real
    6.9), years and split shares as the real ones (`ARXIV_YEARS`). Returns the ``Data`` and
    the split (``train`` / ``valid`` / ``test`` index tensors, ascending).

    Planted: areas drawn with Zipf-like weights; features unit noise plus 0.25 times a fixed
    Gaussian centroid of the area (alone they tell the area about half the time, as arxiv's
    do an MLP); a paper cites a log-normal number of papers (many one or two), a `homophily`
    share of them of its own area, the rest any, the older of two the cited one: label
    propagation reaches about 0.7 test accuracy, as on the real set."""
    import math

    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    classes = OGB_SETS["ogbn-arxiv"][1]
    (first, last), (train, valid, test19, test20) = ARXIV_YEARS
    span = torch.arange(first, last + 1)
    growth = 1.15 ** (span - first).double()
    weights = torch.cat([train * growth / growth.sum(), torch.tensor([valid, test19, test20],
                                                                     dtype=torch.double)])
    years = torch.cat([span, torch.tensor([2018, 2019, 2020])])
    year = years[torch.multinomial(weights, nodes, replacement=True, generator=gen)]
    area_weights = 1.0 / torch.arange(1, classes + 1).double() ** 0.8
    y = torch.multinomial(area_weights, nodes, replacement=True, generator=gen)
    x = 0.25 * torch.randn(classes, 128, generator=gen)[y] + torch.randn(nodes, 128,
                                                                         generator=gen)
    from verbatim_typed_datasets import same_class_picks

    # How many a paper cites: log-normal (many cite one or two), `cites` on average.
    counts = (torch.randn(nodes, generator=gen) + math.log(cites + 0.5) - 0.5).exp()
    src = torch.arange(nodes).repeat_interleave(counts.long().clamp(max=100))
    within = same_class_picks(y, y[src], gen)
    anywhere = torch.randint(0, nodes, (src.numel(), ), generator=gen)
    dst = torch.where(torch.rand(src.numel(), generator=gen) < homophily, within, anywhere)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    # The newer paper cites the older (a tie: the higher index cites).
    newer = (year[src] > year[dst]) | ((year[src] == year[dst]) & (src > dst))
    edges = torch.stack([torch.where(newer, src, dst), torch.where(newer, dst, src)])
    edges = edges.unique(dim=1).contiguous()
    data = Data(x=x, edge_index=edges, node_year=year.view(-1, 1), y=y.view(-1, 1),
                num_nodes=nodes)
    split = {"train": (year <= last).nonzero().flatten(),
             "valid": (year == 2018).nonzero().flatten(),
             "test": (year >= 2019).nonzero().flatten()}
    return data, split


#: molhiv's atoms here: (atomic number, valence, share in chains).
MOLHIV_ATOMS = ((6, 4, 0.62), (7, 3, 0.14), (8, 2, 0.16), (16, 2, 0.04), (9, 1, 0.02),
                (17, 1, 0.02))


def _molecule(gen: torch.Generator) -> tuple:
    """One molecule of 2-8 units (a six-ring, 70 % of them aromatic; a five-ring, 30 %
    aromatic; or a chain of 1-3 atoms), each joined by a single bond to an atom of the units
    before it that has a valence free: atom kinds (index into `MOLHIV_ATOMS`), bonds ([a, b,
    type], type 0 single, 1 double, 2 triple, 3 aromatic), and per atom whether aromatic, in a
    ring, and its valence used (an aromatic bond counting 1.5)."""
    import torch

    shares = torch.tensor([a[2] for a in MOLHIV_ATOMS])
    valence = [a[1] for a in MOLHIV_ATOMS]
    kind, bonds, aromatic, ring, used = [], [], [], [], []

    def draw(p):
        return float(torch.rand(1, generator=gen)) < p

    for unit in range(int(torch.randint(2, 9, (1, ), generator=gen))):
        shape = int(torch.multinomial(torch.tensor([0.45, 0.2, 0.35]), 1, generator=gen))
        first = len(kind)
        if shape < 2:   # a ring: carbons, a nitrogen now and then, a five-ring's O or S
            size, flat = (6, draw(0.7)) if shape == 0 else (5, draw(0.3))
            for k in range(size):
                kinds = 1 if draw(0.12) else 0
                if size == 5 and k == 0 and draw(0.4):
                    kinds = 2 if draw(0.7) else 3
                kind.append(kinds)
                aromatic.append(flat)
                ring.append(True)
                used.append(0.0)
            order = 1.5 if flat else 1.0
            for k in range(size):
                a, b = first + k, first + (k + 1) % size
                bonds.append([min(a, b), max(a, b), 3 if flat else 0])
                used[a] += order
                used[b] += order
        else:   # a chain
            for k in range(int(torch.randint(1, 4, (1, ), generator=gen))):
                kind.append(int(torch.multinomial(shares, 1, generator=gen)))
                aromatic.append(False)
                ring.append(False)
                used.append(0.0)
                if k:
                    a = len(kind) - 1
                    if valence[kind[a - 1]] - used[a - 1] < 1:
                        kind[a - 1] = 0   # a halogen inside a chain: a carbon instead
                    bonds.append([a - 1, a, 0])
                    used[a - 1] += 1
                    used[a] += 1
        if unit:   # join the unit's first atom that has room to an earlier atom with room
            free = [a for a in range(first) if valence[kind[a]] - used[a] >= 1]
            mine = [a for a in range(first, len(kind)) if valence[kind[a]] - used[a] >= 1]
            if not mine:
                kind[first] = 0
                mine = [first] if valence[0] - used[first] >= 1 else []
            if free and mine:
                a = free[int(torch.randint(0, len(free), (1, ), generator=gen))]
                bonds.append([a, mine[0], 0])
                used[a] += 1
                used[mine[0]] += 1
    for bond in bonds:   # some double and triple bonds off the rings, valences allowing
        a, b = bond[0], bond[1]
        if bond[2] == 0 and not (ring[a] and ring[b]):
            u = float(torch.rand(1, generator=gen))
            extra = 2 if u < 0.02 else 1 if u < 0.15 else 0
            extra = int(min(extra, valence[kind[a]] - used[a], valence[kind[b]] - used[b]))
            if extra > 0:
                bond[2] = extra
                used[a] += extra
                used[b] += extra
    return kind, bonds, aromatic, ring, used


def molhiv_like(graphs: int = 2000, positive: float = 0.1, noise: float = 0.3, seed: int = 0):
    """ogbg-molhiv-like molecules and their split (real: 41,127 molecules of 25.5 atoms and 27.5
    bonds on average, 3.5 % of them active against HIV; ``x`` [n, 9] long, ogb's atom
    features (atomic number - 1, chirality, degree with hydrogens, formal charge (5: none),
    hydrogens, radical electrons, hybridization (0 SP, 1 SP2, 2 SP3), aromatic, in a ring),
    ``edge_attr`` [e, 3] long (bond type: 0 single, 1 double, 2 triple, 3 aromatic; stereo;
    conjugated), both directions of a bond next to each other, ``y`` [1, 1] long; a scaffold
    split of 32,901 / 4,113 / 4,113): `graphs` molecules of rings and chains (`_molecule`,
    about 18 atoms on average), split 80 / 10 / 10 % at random (no scaffolds here), a
    `positive` share active (more than the real 3.5 %, so that the small validation and test
    sets hold some 20 actives each). Returns the graphs and the split.

    Planted: activity follows a motif: the number of nitrogens in or next to an aromatic ring
    plus half the number of sulphurs, over the square root of the atoms, plus Gaussian
    `noise`; the top `positive` share of that score is active (the noiseless motif ranks the
    actives with a ROC-AUC of about 0.9)."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    numbers = torch.tensor([a[0] for a in MOLHIV_ATOMS])
    valences = torch.tensor([a[1] for a in MOLHIV_ATOMS], dtype=torch.float)
    molecules, scores = [], []
    for _ in range(graphs):
        kind, bonds, aromatic, ring, used = _molecule(gen)
        n = len(kind)
        kind = torch.tensor(kind)
        bond_t = torch.tensor(bonds, dtype=torch.long).view(-1, 3)
        ones = torch.ones(len(bonds), dtype=torch.long)
        heavy = torch.zeros(n, dtype=torch.long).index_add_(0, bond_t[:, 0], ones).index_add_(
            0, bond_t[:, 1], ones)
        aromatic_t, ring_t = torch.tensor(aromatic), torch.tensor(ring)
        hydrogens = (valences[kind] - torch.tensor(used)).floor().clamp(min=0).long()
        kinds_of = {t: torch.zeros(n, dtype=torch.bool) for t in (1, 2)}
        for t, on in kinds_of.items():
            ends = bond_t[bond_t[:, 2] == t, :2].flatten()
            on[ends] = True
        hybrid = torch.where(kinds_of[2], 0, torch.where(aromatic_t | kinds_of[1], 1, 2))
        x = torch.stack([numbers[kind] - 1, torch.zeros(n, dtype=torch.long),
                         (heavy + hydrogens).clamp(max=10), torch.full((n, ), 5),
                         hydrogens.clamp(max=8), torch.zeros(n, dtype=torch.long), hybrid,
                         aromatic_t.long(), ring_t.long()], dim=1)
        conjugated = ((bond_t[:, 2] == 3) | (bond_t[:, 2] == 1)).long()
        attr = torch.stack([bond_t[:, 2], torch.zeros(len(bonds), dtype=torch.long),
                            conjugated], dim=1)
        pairs = bond_t[:, :2]
        edge_index = torch.stack([pairs, pairs.flip(1)], dim=1).reshape(-1, 2).t().contiguous()
        edge_attr = attr.repeat_interleave(2, dim=0)
        near = aromatic_t.clone()
        near[bond_t[:, 0][aromatic_t[bond_t[:, 1]]]] = True
        near[bond_t[:, 1][aromatic_t[bond_t[:, 0]]]] = True
        motif = float(((numbers[kind] == 7) & near).sum()) + 0.5 * float(
            (numbers[kind] == 16).sum())
        scores.append(motif / n ** 0.5 + noise * float(torch.randn(1, generator=gen)))
        molecules.append(Data(x=x, edge_index=edge_index, edge_attr=edge_attr, num_nodes=n))
    cut = torch.tensor(scores).quantile(1 - positive)
    for molecule, score in zip(molecules, scores):
        molecule.y = torch.tensor([[int(score > cut)]])
    order = torch.randperm(graphs, generator=gen)
    ends = (int(0.8 * graphs), int(0.9 * graphs))
    split = {"train": order[:ends[0]].sort().values,
             "valid": order[ends[0]:ends[1]].sort().values,
             "test": order[ends[1]:].sort().values}
    return molecules, split


def ogb_modules(data_root: Path) -> dict:
    """Modules of an offline ``ogb`` package, by name (``ogb``, ``ogb.nodeproppred``,
    ``ogb.graphproppred``, ``ogb.graphproppred.mol_encoder``), for `install_ogb` to put into
    ``sys.modules``: ``PygNodePropPredDataset`` ('ogbn-arxiv': `arxiv_like`; 'ogbn-products' and
    'ogbn-proteins': `verbatim_ogbn_datasets`) and
    ``PygGraphPropPredDataset`` ('ogbg-molhiv' only: `molhiv_like`), each ogb's signature
    (``name, root, transform, pre_transform, meta_dict``), ``num_tasks``, ``task_type``,
    ``eval_metric``, ``num_classes`` and ``get_idx_split()``, built through PyG's
    ``InMemoryDataset`` with the caller's transform and pre-transform, under a root of this
    process's own; the two ``Evaluator`` classes, computing what ogb's compute (accuracy a
    task, averaged; ROC-AUC a task by sklearn's ``roc_auc_score`` where a task has both
    labels, averaged), with ogb's input checks and output keys; and ``AtomEncoder`` /
    ``BondEncoder``, ogb's (a sum of one embedding a feature column, Xavier-initialised)."""
    import os
    import tempfile
    import types

    import numpy as np
    import torch
    from torch_geometric.data import InMemoryDataset

    def check_name(name: str, kind: str) -> tuple:
        if name not in OGB_SETS or not name.startswith(kind):
            raise ValueError(f"no stand-in for the ogb set {name!r} (only "
                             f"{[n for n in OGB_SETS if n.startswith(kind)]})")
        return OGB_SETS[name]

    class Stand_in(InMemoryDataset):
        """An ogb set built in memory: ogb's attributes, PyG's processing."""

        def __init__(self, name, kind, build, transform, pre_transform):
            self.name = name
            self.num_tasks, self.__num_classes__, self.eval_metric, self.task_type = (
                check_name(name, kind))
            (data_root / "stand-ins").mkdir(parents=True, exist_ok=True)
            root = tempfile.mkdtemp(prefix=f"{name.replace('-', '_')}_pyg-{os.getpid()}-",
                                    dir=data_root / "stand-ins")
            os.makedirs(os.path.join(root, "processed"), exist_ok=True)
            super().__init__(root, transform)
            graphs, self._split = build()
            if pre_transform is not None:
                graphs = [pre_transform(g) for g in graphs]
            self.data, self.slices = self.collate(graphs)

        @property
        def num_classes(self) -> int:
            return self.__num_classes__

        def get_idx_split(self, split_type=None) -> dict:
            if split_type is not None:
                raise ValueError("the stand-in has its set's own split only")
            return {part: index.clone() for part, index in self._split.items()}

    class PygNodePropPredDataset(Stand_in):
        def __init__(self, name, root="dataset", transform=None, pre_transform=None,
                     meta_dict=None):
            def build():
                from verbatim_ogbn_datasets import products_like, proteins_like

                make = {"ogbn-arxiv": arxiv_like, "ogbn-products": products_like,
                        "ogbn-proteins": proteins_like}[name]
                data, split = make()
                return [data], split

            super().__init__(name, "ogbn", build, transform, pre_transform)

    class PygGraphPropPredDataset(Stand_in):
        def __init__(self, name, root="dataset", transform=None, pre_transform=None,
                     meta_dict=None):
            super().__init__(name, "ogbg", molhiv_like, transform, pre_transform)

    def evaluator(kind: str) -> type:
        class Evaluator:
            def __init__(self, name):
                self.name = name
                self.num_tasks, _, self.eval_metric, _ = check_name(name, kind)

            def _parse_and_check_input(self, input_dict):
                y_true, y_pred = input_dict["y_true"], input_dict["y_pred"]
                if isinstance(y_true, torch.Tensor):
                    y_true = y_true.detach().cpu().numpy()
                if isinstance(y_pred, torch.Tensor):
                    y_pred = y_pred.detach().cpu().numpy()
                if not (isinstance(y_true, np.ndarray) and isinstance(y_pred, np.ndarray)):
                    raise RuntimeError("Arguments to Evaluator need to be either numpy "
                                       "ndarray or torch tensor")
                if y_true.shape != y_pred.shape:
                    raise RuntimeError("Shape of y_true and y_pred must be the same")
                if y_true.ndim != 2:
                    raise RuntimeError(f"y_true and y_pred must to 2-dim arrray, "
                                       f"{y_true.ndim}-dim array given")
                if y_true.shape[1] != self.num_tasks:
                    raise RuntimeError(f"Number of tasks for {self.name} should be "
                                       f"{self.num_tasks} but {y_true.shape[1]} given")
                return y_true, y_pred

            def eval(self, input_dict):
                y_true, y_pred = self._parse_and_check_input(input_dict)
                if self.eval_metric == "acc":
                    scores = []
                    for i in range(y_true.shape[1]):
                        valid = y_true[:, i] == y_true[:, i]
                        correct = y_true[valid, i] == y_pred[valid, i]
                        scores.append(float(np.sum(correct)) / len(correct))
                    return {"acc": sum(scores) / len(scores)}
                from sklearn.metrics import roc_auc_score

                scores = []
                for i in range(y_true.shape[1]):
                    if np.sum(y_true[:, i] == 1) > 0 and np.sum(y_true[:, i] == 0) > 0:
                        valid = y_true[:, i] == y_true[:, i]
                        scores.append(roc_auc_score(y_true[valid, i], y_pred[valid, i]))
                if not scores:
                    raise RuntimeError("No positively labeled data available. Cannot compute "
                                       "ROC-AUC.")
                return {"rocauc": sum(scores) / len(scores)}

        return Evaluator

    class _Encoder(torch.nn.Module):
        def __init__(self, emb_dim, dims):
            super().__init__()
            self.embedding_list = torch.nn.ModuleList()
            for dim in dims:
                emb = torch.nn.Embedding(dim, emb_dim)
                torch.nn.init.xavier_uniform_(emb.weight.data)
                self.embedding_list.append(emb)

        def forward(self, x):
            out = 0
            for i in range(x.shape[1]):
                out += self.embedding_list[i](x[:, i])
            return out

    class AtomEncoder(_Encoder):
        def __init__(self, emb_dim, optional_full_atom_features_dims=None):
            super().__init__(emb_dim, optional_full_atom_features_dims or ATOM_FEATURE_DIMS)
            self.atom_embedding_list = self.embedding_list

    class BondEncoder(_Encoder):
        def __init__(self, emb_dim):
            super().__init__(emb_dim, BOND_FEATURE_DIMS)
            self.bond_embedding_list = self.embedding_list

    def module(name: str, package: bool = False, **members) -> types.ModuleType:
        mod = types.ModuleType(name, f"offline stand-in for {name} (pyg_examples_verbatim)")
        if package:
            mod.__path__ = []
        mod.__dict__.update(members)
        return mod

    encoders = module("ogb.graphproppred.mol_encoder", AtomEncoder=AtomEncoder,
                      BondEncoder=BondEncoder)
    node = module("ogb.nodeproppred", True, PygNodePropPredDataset=PygNodePropPredDataset,
                  Evaluator=evaluator("ogbn"))
    graph = module("ogb.graphproppred", True, PygGraphPropPredDataset=PygGraphPropPredDataset,
                   Evaluator=evaluator("ogbg"), mol_encoder=encoders)
    root = module("ogb", True, nodeproppred=node, graphproppred=graph, __version__="1.3.6")
    return {m.__name__: m for m in (root, node, graph, encoders)}


def install_ogb(data_root: Path) -> None:
    """Put `ogb_modules` into ``sys.modules`` (for the process that runs an example only)."""
    import sys

    sys.modules.update(ogb_modules(data_root))
