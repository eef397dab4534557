"""An offline stand-in for PyG's ``FB15k_237`` (`pyg_examples_verbatim.py`'s
``kge_fb15k_237*`` examples): PyG's own class with only its three raw files made up
(`freebase_like_lines`), so that its processing (entity and relation strings numbered in order
of appearance over the three files, ``num_nodes`` over all of them) runs as on the real ones.
`verbatim_datasets.install_stand_ins` installs it.

Real FB15k-237: 14,541 Freebase entities (``/m/0...`` ids), 237 relations
(``/people/person/nationality``-like paths), 272,115 / 17,535 / 20,466 train / valid / test
triples, tab-separated, one a line. Here 1,500 entities, 40 relations and 15,000 / 800 / 800
triples (a script's evaluation ranks every entity for each triple, twice).

Planted so that embeddings learn something: every entity has one of 10 types; a relation
links one head type to one tail type, and maps each head of its type to one usual tail (70 %,
else any entity of the tail type); heads are drawn by a heavy-tailed popularity. So a triple's
tail is predictable from its head and relation, as TransE / DistMult / ComplEx / RotatE model.
Triples are unique; the three files are a random split of them.
"""
from __future__ import annotations

__all__ = ["FB15K_SHAPE", "freebase_like_lines"]

#: (entities, relations, (train, valid, test) triples) of the stand-in.
FB15K_SHAPE = (1500, 40, (15_000, 800, 800))
TYPES = 10


def _mid(i: int) -> str:
    """A Freebase-like machine id for entity `i` (``/m/0`` then base 36)."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        i, r = divmod(i, 36)
        out = digits[r] + out
        if i == 0:
            return "/m/0" + out


def freebase_like_lines(seed: int = 0) -> dict[str, list[str]]:
    """The lines (``head\\trelation\\ttail``) of ``train.txt``, ``valid.txt`` and ``test.txt``
    (module docstring)."""
    import torch

    entities, relations, split = FB15K_SHAPE
    gen = torch.Generator().manual_seed(seed)
    kind = torch.randint(0, TYPES, (entities, ), generator=gen)
    members = [torch.nonzero(kind == t).view(-1) for t in range(TYPES)]
    popularity = torch.rand(entities, generator=gen) ** -0.7
    heads_type = torch.randint(0, TYPES, (relations, ), generator=gen)
    tails_type = torch.randint(0, TYPES, (relations, ), generator=gen)
    usual = torch.empty(relations, entities, dtype=torch.long)
    for r in range(relations):
        pool = members[int(tails_type[r])]
        usual[r] = pool[torch.randint(0, pool.numel(), (entities, ), generator=gen)]
    wanted = sum(split)
    triples: set[tuple[int, int, int]] = set()
    while len(triples) < wanted:
        rel = torch.randint(0, relations, (wanted, ), generator=gen)
        head = torch.empty(wanted, dtype=torch.long)
        tail = torch.empty(wanted, dtype=torch.long)
        for r in range(relations):
            at = torch.nonzero(rel == r).view(-1)
            heads = members[int(heads_type[r])]
            tails = members[int(tails_type[r])]
            pick = torch.multinomial(popularity[heads], at.numel(), replacement=True,
                                     generator=gen)
            head[at] = heads[pick]
            anyone = tails[torch.randint(0, tails.numel(), (at.numel(), ), generator=gen)]
            keep = torch.rand(at.numel(), generator=gen) < 0.7
            tail[at] = torch.where(keep, usual[r, head[at]], anyone)
        for h, r, t in zip(head.tolist(), rel.tolist(), tail.tolist()):
            if h != t and len(triples) < wanted:
                triples.add((h, r, t))
    ordered = sorted(triples)
    order = torch.randperm(len(ordered), generator=gen).tolist()
    lines = [f"{_mid(h)}\t/rel{r}/type{int(heads_type[r])}/type{int(tails_type[r])}\t{_mid(t)}"
             for h, r, t in (ordered[i] for i in order)]
    ends = [0, split[0], split[0] + split[1], wanted]
    return {name: lines[ends[i]:ends[i + 1]]
            for i, name in enumerate(("train.txt", "valid.txt", "test.txt"))}
