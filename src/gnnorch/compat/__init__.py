"""Every private (``_``-prefixed) PyG / torch name gnnorch touches, resolved once, failing closed.

gnnorch plugs into PyG and torch at seams that have no public API: a sampler hook, a layer's
normalisation cache, tensor-subclass helpers, process-group internals. Each such name lives in this
package only, behind one accessor in the style of PyG's ``torch_geometric/typing.py``
(``WITH_PYG_LIB``, ...): `compat.torch`, `compat.processes`, `compat.pyg`, `compat.distributed`,
`compat.grad_clip`, `compat.jit` (TorchScript, for the bodies gnnorch compiles). An
accessor checks the name's shape once, on first use; when the name is missing or changed, the
feature that needs it switches off (or takes a conservative path) and says why, never a silently
wrong result and never an error at import. `unavailable()` lists every missing name with its reason
and effect; the session puts those its run asked for in each rank's statistics
(``stats["compat"]``).

``tests/test_compat.py`` checks that no other module of gnnorch names a private torch / PyG
attribute, and that every accessor fails closed. ``docs/compat.md`` is the inventory.
"""
from __future__ import annotations

from . import distributed, grad_clip, jit, processes, pyg, torch
from .registry import CompatError, Missing, Probe, probes, reset, unavailable

__all__ = ["CompatError", "Missing", "Probe", "probes", "reset", "unavailable", "torch", "pyg",
           "distributed", "grad_clip", "jit", "processes"]
