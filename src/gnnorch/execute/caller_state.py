"""What a rank process takes over from the caller's interpreter before the user's function runs.

A rank is a fresh interpreter (or a fork of the zygote, made to be one), so what a script sets at
its top, before it calls the runtime, is not there by itself. Called plainly, the function would
see it; in the ranks it must see the same, or the run silently differs from the function's:

* ``sys.argv``: a function that parses its command line (``argparse`` inside ``main()``, as many
  of PyG's examples do) gets the caller's arguments, not the worker's (which, before, gave every
  rank the parser's defaults: ``--epochs 5`` trained 200 epochs);
* Python's `random` and numpy's global generator, in the caller's state: a split, a shuffle or a
  negative sample drawn with them inside the function is the one the caller's process would draw,
  in every rank alike (as torch's CPU generator already was, `RankJob.rng_state`), not a fresh
  interpreter's own -- which gave each rank other splits, averaged as if they were one;
* torch's default dtype, deterministic algorithms (and their warn-only mode), float32 matmul
  precision and anomaly detection.

The caller's own state is read, not advanced. Not carried: ``sys.path`` and the working directory
(the worker's protocol sets them, `gnnorch.launch.worker`), the environment (the launch passes
it), warning filters and logging handlers (user objects that need not pickle), torch's default
device. A torch.distributed world started by someone else runs the user's script in each of its
processes, which set all of this themselves: nothing is carried there.
"""
from __future__ import annotations

import dataclasses
import random
import sys
from typing import Any

import torch

__all__ = ["CallerState"]


@dataclasses.dataclass(frozen=True)
class CallerState:
    """The caller's interpreter settings a rank takes over (the module docstring says which);
    picklable, captured in the caller (`capture`), applied in a rank (`apply`)."""

    argv: tuple[str, ...]
    python_random: tuple[Any, ...]
    numpy_random: tuple[Any, ...] | None     # None: numpy was not imported by the caller
    default_dtype: torch.dtype
    deterministic: bool
    deterministic_warn_only: bool
    matmul_precision: str
    anomaly: bool
    anomaly_check_nan: bool

    @classmethod
    def capture(cls) -> CallerState:
        """This interpreter's settings now, its generators read without a draw."""
        numpy = sys.modules.get("numpy")
        return cls(argv=tuple(sys.argv), python_random=random.getstate(),
                   numpy_random=numpy.random.get_state() if numpy is not None else None,
                   default_dtype=torch.get_default_dtype(),
                   deterministic=torch.are_deterministic_algorithms_enabled(),
                   deterministic_warn_only=torch.is_deterministic_algorithms_warn_only_enabled(),
                   matmul_precision=torch.get_float32_matmul_precision(),
                   anomaly=torch.is_anomaly_enabled(),
                   anomaly_check_nan=torch.is_anomaly_check_nan_enabled())

    def apply(self) -> None:
        """Make this interpreter's settings the captured ones."""
        sys.argv[:] = list(self.argv)
        random.setstate(self.python_random)
        if self.numpy_random is not None:
            import numpy

            numpy.random.set_state(self.numpy_random)
        torch.set_default_dtype(self.default_dtype)
        torch.use_deterministic_algorithms(self.deterministic,
                                           warn_only=self.deterministic_warn_only)
        torch.set_float32_matmul_precision(self.matmul_precision)
        torch.autograd.set_detect_anomaly(self.anomaly, check_nan=self.anomaly_check_nan)
