"""The parts of the layer seam's per-step host cost changed in session 23, timed against the code
they replaced, in one process (`timeit`, the minimum over repeats; one intra-op thread):

* the bookkeeping a trimmed training forward keeps for a later recomputation
  (`gnnorch.trim.materialize.materializer`): now, and as at ``--ref`` (its source read with
  ``git show``, run beside the current package);
* a rewrite rule binding one layer call's arguments by name: `bind_call` now, and the
  ``inspect.Signature.bind`` + ``apply_defaults`` `Rule.bind` used before.

    .venv/bin/python scripts/bench_seam_parts.py --ref e0c047d --out benchmarks/results/seam_parts.json
"""
from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import time
import timeit
import types
from pathlib import Path

import torch
from torch_geometric.nn import GraphSAGE, SAGEConv

from gnnorch.rewrite.rules.base import bind_call
from gnnorch.trim import materialize as now_module
from gnnorch.trim.state import ModelState

ROOT = Path(__file__).resolve().parent.parent


def module_at(ref: str, path: str, package: str) -> types.ModuleType:
    """The module at `path` as it was at git `ref`, its relative imports resolved in `package`."""
    source = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType(f"{package}._at_{ref}")
    module.__package__ = package
    exec(compile(source, f"{path}@{ref}", "exec"), module.__dict__)
    return module


def best_us(fn, number: int, repeats: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeats)) / number * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="e0c047d", help="the git ref of the code before")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    before = module_at(args.ref, "src/gnnorch/trim/materialize.py", "gnnorch.trim")
    # (its compat accessor `parameter_versions` is gone; the current one does the same walk)
    before.parameter_versions = now_module.parameter_versions
    rows = {}
    for hidden in (8, 256):
        model = GraphSAGE(100, hidden, 3, out_channels=47)
        for name, module in (("before", before), ("now", now_module)):
            rows[f"materializer per training forward, hidden {hidden}, {name}"] = best_us(
                lambda: module.materializer(model, ModelState("m"), 4, None), 1000,
                args.repeats)
    layer = SAGEConv(8, 8)
    x, edge_index = torch.randn(10, 8), torch.randint(0, 10, (2, 20))
    signature = inspect.signature(SAGEConv.forward)

    def inspect_bind():
        bound = signature.bind(layer, x, edge_index)
        bound.apply_defaults()
        return dict(bound.arguments)

    rows["layer call's arguments bound, before (inspect)"] = best_us(inspect_bind, 5000,
                                                                     args.repeats)
    rows["layer call's arguments bound, now (bind_call)"] = best_us(
        lambda: bind_call(SAGEConv, layer, (x, edge_index), {}), 5000, args.repeats)
    print("| part | us |\n|---|---|")
    for name, us in rows.items():
        print(f"| {name} | {us:.1f} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "ref": args.ref,
                                        "torch": torch.__version__, "us": rows}, indent=1))


if __name__ == "__main__":
    main()
