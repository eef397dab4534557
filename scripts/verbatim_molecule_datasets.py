"""Offline stand-ins of graph-level sets for `pyg_examples_verbatim.py`: molecules with
positions and 19 regression targets (``QM9``) and news propagation trees labelled fake or
real (``UPFD``), of the real sets' layouts, dtypes and feature widths, fewer or smaller
graphs. `verbatim_datasets` installs them.

Each label is planted so that a GNN can learn it: QM9's dipole moment is that of partial
charges that follow the electronegativity of bonded atoms, placed where the atoms are (atom
types, bonds and distances tell it); a fake story's cascade is deeper and its users' (and
its own) features lean its class's way. A runtime that broke message passing or pooling
would show it in the printed errors and accuracies.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["UPFD_FEATURES", "qm9_like", "upfd_like"]

#: QM9's atom types (the one-hot columns of ``x``): their atomic numbers, valences and
#: Pauling electronegativities.
QM9_ELEMENTS = ("H", "C", "N", "O", "F")
ATOMIC_NUMBER = (1, 6, 7, 8, 9)
VALENCE = (1, 4, 3, 2, 1)
ELECTRONEGATIVITY = (2.20, 2.55, 3.04, 3.44, 3.98)
#: Bond types (the one-hot columns of ``edge_attr``: single, double, triple, aromatic) and
#: the valence each uses.
BOND_ORDER = (1.0, 2.0, 3.0, 1.5)
DEBYE_PER_E_ANGSTROM = 4.803


def _unit(rows: int, gen: torch.Generator) -> torch.Tensor:
    """`rows` random unit vectors in 3-d."""
    import torch

    v = torch.randn(rows, 3, generator=gen)
    return v / v.norm(dim=1, keepdim=True).clamp(min=1e-6)


def qm9_like(num_graphs: int = 22_000, heavy: tuple[int, int] = (2, 6), seed: int = 0) -> list:
    """QM9-like molecules (real: 130,831 molecules of 1-9 heavy atoms C, N, O, F and their
    hydrogens, about 18 atoms and 37 directed bonds on average; ``x`` [n, 11] float: the
    one-hot of H, C, N, O, F, then the atomic number, aromatic, sp, sp2, sp3 and the number of
    bonded hydrogens; ``z`` the atomic numbers, long; ``pos`` [n, 3] float, in Angstrom;
    ``edge_index`` both directions of each bond, sorted by (row, col); ``edge_attr`` [e, 4]
    the one-hot bond type (single, double, triple, aromatic), float; ``y`` [1, 19] float, the
    dipole moment in Debye first; ``name`` 'gdb_<i>', ``idx`` i). Here `num_graphs` molecules
    (the script slices the first 20,000 off for test and validation: 22,000 leave 2,000 to
    train) of `heavy` heavy atoms and no hydrogen atoms: the hydrogens are only counted, in
    the last column of ``x`` (so ``x[:, 0]`` is 0). The script's edge network runs on every
    pair of atoms, test and validation sets included, every epoch: QM9's 18 atoms make 306
    pairs, these 2-6 atoms 14 on average, and an epoch takes about 25 s here. ``smiles`` is
    left out (nothing reads it).

    A molecule is a random tree of heavy atoms (C 70 %, N 12 %, O 15 %, F 3 %, a fluorine
    with a child made a carbon; bonds single 80 %, double 12 %, triple 4 %, aromatic 4 %),
    each atom 1.5 A from its parent in a random direction; an atom has as many hydrogens as
    its valence leaves free, and is sp with a triple bond, else sp2 with a double or aromatic
    one, else sp3.

    Planted: ``y[:, 0]``, the dipole moment, is 4.8 |sum_i q_i pos_i| for the partial charges
    q_i = 0.25 sum over i's bonds (chi_j - chi_i) (chi the electronegativity; they sum to 0,
    so the origin does not matter), which atom types, bonds and distances (the script's
    ``Distance`` transform) tell; the other 18 columns a fixed random linear function of the
    counts of each element, hydrogen and bond type, plus 5 % noise. The script trains target
    0."""
    import torch
    from torch_geometric.data import Data

    gen = torch.Generator().manual_seed(seed)
    g = num_graphs
    n = torch.randint(heavy[0], heavy[1] + 1, (g, ), generator=gen)   # atoms a graph
    atoms = int(n.sum())
    graph = torch.arange(g).repeat_interleave(n)
    first = n.cumsum(0) - n
    local = torch.arange(atoms) - first[graph]
    kind = 1 + torch.multinomial(torch.tensor([0.70, 0.12, 0.15, 0.03]), atoms,
                                 replacement=True, generator=gen)   # index into QM9_ELEMENTS
    child = (local > 0).nonzero().flatten()   # every atom but a graph's first has a parent
    parent = first[graph[child]] + (torch.rand(child.numel(), generator=gen)
                                    * local[child]).long()
    kind[parent[kind[parent] == 4]] = 1   # a fluorine bonded twice: a carbon instead
    bond = torch.multinomial(torch.tensor([0.80, 0.12, 0.04, 0.04]), child.numel(),
                             replacement=True, generator=gen)
    order = torch.tensor(BOND_ORDER)[bond]
    used = torch.zeros(atoms).index_add_(0, child, order).index_add_(0, parent, order)
    hydrogens = (torch.tensor(VALENCE)[kind] - used.ceil().long()).clamp(min=0)
    has = []   # per bond type: whether an atom has one
    for b in range(4):
        on = torch.zeros(atoms, dtype=torch.bool)
        on[child[bond == b]] = True
        on[parent[bond == b]] = True
        has.append(on)
    pos = torch.zeros(atoms, 3)
    parent_of = torch.full((atoms, ), -1)
    parent_of[child] = parent
    for i in range(1, int(local.max()) + 1):   # each atom after its parent
        at = (local == i).nonzero().flatten()
        pos[at] = pos[parent_of[at]] + 1.5 * _unit(at.numel(), gen)
    sp = has[2]
    sp2 = ~sp & (has[1] | has[3])
    z = torch.tensor(ATOMIC_NUMBER)[kind]
    x = torch.cat([torch.nn.functional.one_hot(kind, 5).float(), torch.stack([
        z.float(), has[3].float(), sp.float(), sp2.float(), (~sp & ~sp2).float(),
        hydrogens.float()], dim=1)], dim=1)
    # Bonds, both directions, sorted by (row, col): atoms are numbered graph by graph, so
    # this keeps every graph's bonds together.
    row, col = torch.cat([child, parent]), torch.cat([parent, child])
    perm = (row * atoms + col).argsort()
    row, col, bond_type = row[perm], col[perm], torch.cat([bond, bond])[perm]
    edge_attr = torch.nn.functional.one_hot(bond_type, 4).float()
    edge_graph = graph[row]
    edge_index = torch.stack([row, col]) - first[edge_graph]
    # Targets: the dipole of bond-polarity charges, then linear functions of the counts.
    chi = torch.tensor(ELECTRONEGATIVITY)[kind]
    charge = 0.25 * torch.zeros(atoms).index_add_(0, row, chi[col] - chi[row])
    dipole = torch.zeros(g, 3).index_add_(0, graph, charge[:, None] * pos)
    counts = torch.cat([
        torch.zeros(g, 5).index_add_(0, graph, x[:, :5]),
        torch.zeros(g).index_add_(0, graph, hydrogens.float())[:, None],
        torch.zeros(g, 4).index_add_(0, edge_graph, edge_attr) / 2], dim=1)
    rest = counts @ torch.randn(counts.size(1), 18, generator=gen)
    rest = rest + 0.05 * rest.std(dim=0) * torch.randn(g, 18, generator=gen)
    y = torch.cat([DEBYE_PER_E_ANGSTROM * dipole.norm(dim=1, keepdim=True), rest], dim=1)
    sizes, bonds = n.tolist(), torch.bincount(edge_graph, minlength=g).tolist()
    return [Data(x=x_i, z=z_i, pos=pos_i, edge_index=e_i, edge_attr=a_i, y=y[i:i + 1],
                 name=f"gdb_{i + 1}", idx=i)
            for i, (x_i, z_i, pos_i, e_i, a_i) in enumerate(zip(
                x.split(sizes), z.split(sizes), pos.split(sizes),
                edge_index.split(bonds, dim=1), edge_attr.split(bonds)))]


#: UPFD's node features: their widths ('content' is 'spacy' then 'profile').
UPFD_FEATURES = {"profile": 10, "spacy": 300, "bert": 768, "content": 310}
#: (graphs, mean nodes a graph) of each UPFD set here; the real gossipcop has 5,464 graphs.
UPFD_SETS = {"politifact": (314, 131), "gossipcop": (1000, 58)}
UPFD_SPLITS = ("train", "val", "test")


def upfd_like(name: str, feature: str, split: str, seed: int = 0) -> list:
    """UPFD-like news propagation trees of `split` (real: politifact 314 trees of 41,054
    nodes, gossipcop 5,464 of 314,262, half of them fake; node 0 of a tree is the news, the
    others the users who retweeted it, each joined to whom it retweeted from (the news, or
    another user) by an edge parent -> child; ``x`` the `feature` columns (`UPFD_FEATURES`),
    float; ``y`` 1 fake, 0 real, long; train / val / test a random 20 / 10 / 70 %): politifact
    at the real size, gossipcop 1,000 trees of the real mean size; tree sizes log-normal, at
    least 2 and at most 500 nodes.

    Planted: a real story's users retweet the news itself with probability 0.8, a fake one's
    0.5 (otherwise an earlier user, uniformly), so fake cascades are deeper; every node's
    features are unit Gaussian noise plus its class's centroid (a fixed Gaussian vector) times
    3 / sqrt(2 d) for the news and 1 / sqrt(2 d) for a user (d the width), so that on one node
    the two classes lie about 3 (news) and 1 (user) standard deviations apart; the script's
    GCN reaches about 0.8 test accuracy on politifact. 'spacy', 'profile' and 'bert' each
    draw from a generator of their own, so 'content' is 'spacy' then 'profile' of the same
    nodes."""
    import torch
    from torch_geometric.data import Data

    if name not in UPFD_SETS:
        raise ValueError(f"UPFD name must be one of {sorted(UPFD_SETS)}, got {name!r}")
    if feature not in UPFD_FEATURES:
        raise ValueError(f"UPFD feature must be one of {sorted(UPFD_FEATURES)}, got {feature!r}")
    if split not in UPFD_SPLITS:
        raise ValueError(f"UPFD split must be one of {list(UPFD_SPLITS)}, got {split!r}")
    graphs, mean_nodes = UPFD_SETS[name]
    gen = torch.Generator().manual_seed(seed + sorted(UPFD_SETS).index(name))
    y = torch.arange(graphs) % 2
    log_mean = torch.tensor(float(mean_nodes)).log() - 0.5   # log-normal, sigma 1: its mean
    n = (log_mean + torch.randn(graphs, generator=gen)).exp().round().long().clamp(2, 500)
    graph = torch.arange(graphs).repeat_interleave(n)
    first = n.cumsum(0) - n
    local = torch.arange(int(n.sum())) - first[graph]
    to_news = torch.rand(local.numel(), generator=gen) < torch.where(y[graph] == 1, 0.5, 0.8)
    earlier_user = 1 + (torch.rand(local.numel(), generator=gen) * (local - 1).clamp(min=0)
                        ).long()
    parent_local = torch.where(to_news | (local <= 1), 0, earlier_user)
    user = (local > 0).nonzero().flatten()
    edge_index = torch.stack([parent_local[user], local[user]])   # local, parent -> child
    edge_graph = graph[user]   # in graph order; within a graph sorted by (row, col):
    perm = (edge_graph * 1000 + edge_index[0]) * 1000 + edge_index[1]
    perm = perm.argsort()
    edge_index, edge_graph = edge_index[:, perm], edge_graph[perm]
    x = []
    for offset, part in enumerate(("spacy", "profile", "bert")):
        if part == feature or (feature == "content" and part != "bert"):
            width = UPFD_FEATURES[part]
            part_gen = torch.Generator().manual_seed(seed + 10 * (offset + 1)
                                                     + sorted(UPFD_SETS).index(name))
            centroids = torch.randn(2, width, generator=part_gen)
            scale = torch.where(local == 0, 3.0, 1.0)[:, None] / (2 * width) ** 0.5
            x.append(torch.randn(local.numel(), width, generator=part_gen)
                     + scale * centroids[y[graph]])
    x = torch.cat(x, dim=1)
    order = torch.randperm(graphs, generator=gen)
    ends = (graphs // 5, graphs // 5 + graphs // 10)
    picked = {"train": order[:ends[0]], "val": order[ends[0]:ends[1]], "test": order[ends[1]:]}
    sizes, edges = n.tolist(), torch.bincount(edge_graph, minlength=graphs).tolist()
    trees = [Data(x=x_i, edge_index=e_i, y=y[i:i + 1])
             for i, (x_i, e_i) in enumerate(zip(x.split(sizes),
                                                edge_index.split(edges, dim=1)))]
    return [trees[i] for i in picked[split].tolist()]
