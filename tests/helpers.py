"""Shared pieces for tests: Cora, the example's train function, a dropout-free SAGE model."""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def cora():
    from gnnorch.datasets import load_cora

    return load_cora()


def load_example(name: str):
    """Import examples/<name>.py as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_accuracy(model, data) -> float:
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=-1)
    mask = data.test_mask
    return float((pred[mask] == data.y[mask]).float().mean())


test_accuracy.__test__ = False  # not a pytest test
