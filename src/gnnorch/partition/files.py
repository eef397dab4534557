"""Features on disk, memory-mapped: how a rank's `data.x` can be larger than its memory.

With ``partition_features`` on, the runtime copies only the rows of the rank's partition (and
its replicated hot rows) out of ``data.x``; nothing else reads it (the loader is built on a
copy of the data without ``x``). When ``data.x`` is an ordinary tensor, the user's process
still holds all of it. When it is memory-mapped (`open_features`), only the pages of the rows
copied are read from disk, through the page cache, which the kernel may drop again: the
rank's resident memory for features is its partition plus its hot rows.

    gnnorch.partition.save_features(data.x, "/shared/x.bin")   # once, anywhere
    data.x = gnnorch.partition.open_features("/shared/x.bin")  # in every rank's script

The file is raw row-major bytes; ``<path>.json`` holds its shape and dtype. Invariant:
``open_features(p)`` after ``save_features(x, p)`` equals ``x`` bit for bit.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import Tensor


def _meta_path(path: str | os.PathLike) -> Path:
    return Path(f"{os.fspath(path)}.json")


def save_features(x: Tensor, path: str | os.PathLike, chunk_rows: int = 1 << 16) -> Path:
    """Write `x` (rows first) to `path` as raw bytes plus ``<path>.json``; returns `path`."""
    path = Path(path)
    x = x.detach().cpu()
    with open(path, "wb") as out:
        for start in range(0, max(1, x.shape[0]), chunk_rows):
            part = x[start:start + chunk_rows].contiguous()
            out.write(part.reshape(-1).view(torch.uint8).numpy().tobytes())
    dtype = str(x.dtype).removeprefix("torch.")
    _meta_path(path).write_text(json.dumps({"shape": list(x.shape), "dtype": dtype}))
    return path


def open_features(path: str | os.PathLike) -> Tensor:
    """The tensor `save_features` wrote to `path`, memory-mapped privately (read lazily, page
    by page; writes to it never reach the file)."""
    meta = json.loads(_meta_path(path).read_text())
    dtype = getattr(torch, meta["dtype"])
    shape = tuple(meta["shape"])
    numel = int(torch.Size(shape).numel())
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    flat = torch.from_file(os.fspath(path), shared=False, size=numel, dtype=dtype)
    return flat.view(shape)
