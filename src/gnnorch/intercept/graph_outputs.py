"""What a model outputs for a batch of whole graphs, watched during one training step, and
whether sharding a graph-level DataLoader's epochs by graph keeps one process's gradients.

Sharding gives each of p ranks b / p of a batch's b graphs and averages the ranks' gradients
with equal weights (`gradsync`). With a loss that is a mean over one row per graph,

    (1/p) * sum_r (p/b) * sum_{g in shard r} grad l_g = (1/b) * sum_{g in batch} grad l_g,

one process's gradient on the whole batch. With one row per *node* (a node-level task on
graph batches: PyG's ``ppi.py``, ``film.py``, ``gcn2_ppi.py``) the same mean loss is
(1/N_r) * sum over the shard's N_r nodes, and the average (1/p) * sum_r (1/N_r) * sum ... weighs
a node of a small shard more than one of a large shard: it equals the batch's mean over its
N = sum_r N_r nodes only when every shard holds as many nodes, which graphs of different sizes
do not. Anything else (a scalar the model computes itself, rows that are neither) cannot be
proved to be per graph either. So sharding needs every trained root model's output to have one
row per graph of the batch it ran on (`OutputWatch.verdict`); otherwise every rank runs every
graph, which is exact whatever the loss.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Iterable

import torch
from torch.nn.modules.module import register_module_forward_hook

__all__ = ["GraphOutputs", "OutputWatch", "leading_rows"]


@dataclasses.dataclass(frozen=True)
class GraphOutputs:
    """The verdict on one loader's batches: `per_graph` (sharding by graph is exact) and what
    was seen, in words (for the loader's statistics and the reason an epoch is kept whole)."""

    per_graph: bool
    detail: str


def leading_rows(output: Any) -> int | None:
    """Rows of a module's output: the first dimension of the tensor it returns, or of the first
    element of a returned tuple or list (PyG's pooling models return ``(out, aux_loss, ...)``);
    None for a scalar or anything else."""
    if isinstance(output, (tuple, list)) and output:
        output = output[0]
    if isinstance(output, torch.Tensor) and output.dim() >= 1:
        return int(output.shape[0])
    return None


class OutputWatch:
    """A context around one batch of graphs handed to the user: records the rows of every
    module output computed meanwhile (a global forward hook, removed on exit), keyed by the
    module's id, so that the root models' outputs can be judged once the roots are known."""

    def __init__(self, batch: Any) -> None:
        graphs, nodes = getattr(batch, "num_graphs", None), _node_count(batch)
        self.graphs = int(graphs) if isinstance(graphs, int) else None
        self.nodes = int(nodes) if isinstance(nodes, int) else None
        self.rows: dict[int, list[int | None]] = {}
        self._handle: torch.utils.hooks.RemovableHandle | None = None

    def __enter__(self) -> "OutputWatch":
        self._handle = register_module_forward_hook(self._record)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _record(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if torch.compiler.is_compiling():   # the eager outer call of a compiled model records
            return None
        self.rows.setdefault(id(module), []).append(leading_rows(output))
        return None

    def verdict(self, roots: Iterable[torch.nn.Module]) -> GraphOutputs | None:
        """Whether the root models with trainable parameters that ran during the watch
        returned one row per graph every time; None when none of them ran (nothing seen)."""
        seen = [rows for root in roots if id(root) in self.rows
                and any(p.requires_grad for p in root.parameters())
                for rows in self.rows[id(root)]]
        if not seen:
            return None
        graphs, nodes = self.graphs, self.nodes
        wrong = [rows for rows in seen if graphs is None or rows != graphs]
        batch = f"a batch of {_count(graphs, 'graph')} and {_count(nodes, 'node')}"
        if not wrong:
            return GraphOutputs(True, f"one row per graph ({graphs} rows for {batch})")
        rows = wrong[0]
        if rows is None:
            what = "no rows (a scalar or no tensor)"
        elif rows == nodes:
            what = f"one row per node ({rows} rows for {batch})"
        else:
            what = f"{rows} rows for {batch}"
        return GraphOutputs(False, f"the model returned {what}")


def _node_count(batch: Any) -> Any:
    """``batch.num_nodes`` (for messages only), read without the warning PyG gives when it has
    to infer it from what the batch holds: a batch without node attributes (the event batches
    PyG's ``renet.py`` collates itself) is the user's business, and vanilla reads no count."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unable to accurately infer 'num_nodes'")
        return getattr(batch, "num_nodes", None)


def _count(n: int | None, noun: str) -> str:
    return f"? {noun}s" if n is None else f"{n} {noun}" + ("" if n == 1 else "s")
