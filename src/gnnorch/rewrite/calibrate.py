"""Start-up micro-benchmarks that seed a :class:`~gnnorch.rewrite.costmodel.CostModel`.

Each benchmark times one operation, forward + backward, on random data of a random size
drawn from a fixed-seed generator, exactly the way PyG's message passing runs it
(``index_select`` of source rows, :func:`torch_geometric.utils.scatter` onto destination
rows, per-edge weights, :func:`torch_geometric.utils.softmax`, ``F.linear``). Sizes are kept
moderate and the whole run stops at a wall-clock budget (default 2 s); the online layer
measurements then refine the fit at the real sizes.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.utils import scatter, softmax

from .costmodel import OP_KINDS, CostModel, Op
from .timing import time_call

__all__ = ["calibrate", "run_op"]


def _sorted_edges(n_src: int, n_dst: int, n_edges: int, device: torch.device,
                  gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random (src, dst) with dst sorted, as sampled batches group edges by destination."""
    src = torch.randint(0, n_src, (n_edges,), generator=gen).to(device)
    dst = torch.randint(0, n_dst, (n_edges,), generator=gen).sort().values.to(device)
    return src, dst


def run_op(op: Op, device: torch.device, dtype: torch.dtype = torch.float32,
           repeats: int = 2, seed: int = 0) -> float:
    """Best-of-``repeats`` fwd(+bwd) seconds of ``op`` on random data (one warm-up run)."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int, grad: bool) -> Tensor:
        return torch.randn(*shape, generator=gen, dtype=dtype).to(device).requires_grad_(grad)

    wrt: list[Tensor]
    fn: Callable[[], Tensor]
    if op.kind == "linear":
        x = rand(op.n, op.f_in, grad=op.input_grad)
        w = rand(op.f_out, op.f_in, grad=True)
        fn, wrt = (lambda: F.linear(x, w)), [w] + ([x] if op.input_grad else [])
    elif op.kind in ("agg_sum", "agg_mean", "agg_weighted"):
        x = rand(op.n_src, op.f_in, grad=op.input_grad)
        src, dst = _sorted_edges(op.n_src, op.n_dst, op.n_edges, device, gen)
        weighted = op.kind == "agg_weighted"
        ew = rand(op.n_edges, 1, grad=op.weight_grad) if weighted else None
        reduce = "mean" if op.kind == "agg_mean" else "sum"

        def fn() -> Tensor:
            msg = x.index_select(0, src)
            if ew is not None:
                msg = ew * msg
            return scatter(msg, dst, 0, dim_size=op.n_dst, reduce=reduce)

        wrt = [t for t in (x, ew) if t is not None and t.requires_grad]
    elif op.kind == "edge_softmax":
        logits = rand(op.n_edges, 1, grad=True)
        _, dst = _sorted_edges(1, op.n_dst, op.n_edges, device, gen)
        fn, wrt = (lambda: softmax(logits, dst, num_nodes=op.n_dst)), [logits]
    elif op.kind == "elementwise":
        a = rand(op.n, op.f_in, grad=True)
        b = rand(op.n, op.f_in, grad=True)
        fn, wrt = (lambda: a + b), [a, b]
    else:
        raise ValueError(f"no micro-benchmark for operation kind {op.kind!r}")
    time_call(fn, wrt, op.backward, device)
    return min(time_call(fn, wrt, op.backward, device)[0] for _ in range(repeats))


def _random_op(kind: str, gen: torch.Generator, scale: float) -> Op:
    """A random operation of ``kind``; sizes grow with ``scale`` in (0, 1]."""
    def pick(lo: int, hi: int) -> int:
        hi = max(lo + 1, int(lo + (hi - lo) * scale))
        return int(torch.randint(lo, hi + 1, (1,), generator=gen))

    widths = [w for w in (16, 32, 47, 64, 100, 128, 256, 602) if w <= 64 + 600 * scale]
    f_in = widths[int(torch.randint(0, len(widths), (1,), generator=gen))]
    f_out = widths[int(torch.randint(0, len(widths), (1,), generator=gen))]
    flags = torch.rand(3, generator=gen) < 0.5
    backward = bool(torch.rand(1, generator=gen) < 0.8)
    if kind == "linear":
        return Op(kind, n=pick(256, 12000), f_in=f_in, f_out=f_out, backward=backward,
                  input_grad=bool(flags[0]))
    if kind == "elementwise":
        return Op(kind, n=pick(256, 12000), f_in=f_in, backward=backward)
    n_dst = pick(128, 6000)
    n_src = n_dst * int(torch.randint(1, 6, (1,), generator=gen))
    n_edges = n_dst * pick(2, 12)
    if kind == "edge_softmax":
        return Op(kind, n_dst=n_dst, n_edges=n_edges, backward=backward)
    return Op(kind, n_src=n_src, n_dst=n_dst, n_edges=n_edges, f_in=f_in,
              backward=backward, input_grad=bool(flags[1]),
              weight_grad=bool(flags[2]) and kind == "agg_weighted")


def calibrate(model: CostModel, device: torch.device, budget_s: float = 2.0,
              dtype: torch.dtype = torch.float32, seed: int = 0, repeats: int = 2) -> int:
    """Add micro-benchmark rows to ``model`` until ``budget_s`` seconds pass; then fit.

    Kinds are visited round-robin and sizes grow over the run. The first round, at the
    smallest sizes, always runs (every kind gets a row, even past a tiny budget); after it
    the model is refitted after each round and an operation predicted to overrun the
    remaining budget is replaced by a smaller one, so the run ends close to ``budget_s``.
    Returns the number of rows added.
    """
    gen = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    added, shrink = 0, 1.0
    while shrink > 1e-3:
        elapsed = time.perf_counter() - start
        first_round = added < len(OP_KINDS)
        if elapsed >= budget_s and not first_round:
            break
        kind = OP_KINDS[added % len(OP_KINDS)]
        scale = 0.0 if first_round else shrink * min(1.0, 0.1 + elapsed / budget_s)
        op = _random_op(kind, gen, scale)
        if not first_round:
            if added % len(OP_KINDS) == 0:
                model.fit()
            if model.predict([op]) * (repeats + 1) > budget_s - elapsed:
                shrink /= 2
                continue
        model.add_micro(op, run_op(op, device, dtype, repeats=repeats, seed=seed + added))
        added += 1
    model.fit()
    return added
