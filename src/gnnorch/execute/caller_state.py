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
* torch's default dtype and default device, deterministic algorithms (and their warn-only
  mode), float32 matmul precision, anomaly detection, and the CUDA numerics switches a GPU
  script sets at its top (``torch.backends.cudnn.benchmark`` / ``deterministic`` /
  ``allow_tf32`` / ``enabled``, reduced-precision reductions in fp16 / bf16 matmuls:
  `BACKEND_FLAGS`), readable and settable on any build;
* the warning filters (``warnings.filterwarnings('ignore', ...)`` at a script's top, as PyG's
  ``ogc.py`` and ``wl_kernel.py`` do, silences the ranks too), every filter whose category
  pickles, in the caller's order;
* torch's and numpy's print options (``torch.set_printoptions(precision=2)``: a printed tensor
  looks as the plain call's).

The caller's own state is read, not advanced. Not carried: ``sys.path`` and the working directory
(the worker's protocol sets them, `gnnorch.launch.worker`), the environment (the launch passes
it). Logging travels on its own path: the launch gives every rank the caller's logging layout
and hands rank 0's records and warnings to the caller's own handlers (`gnnorch.launch.relay`).
A torch.distributed world started by someone else runs the user's script in each of its
processes, which set all of this themselves: nothing is carried there.
"""
from __future__ import annotations

import dataclasses
import random
import sys
import warnings
from typing import Any

import torch

from ..compat import processes as compat_processes
from ..launch.serialize import travels

__all__ = ["CallerState", "BACKEND_FLAGS"]

# torch.backends switches carried as they are: (module, attribute), all public booleans
BACKEND_FLAGS = (("cudnn", "benchmark"), ("cudnn", "deterministic"), ("cudnn", "allow_tf32"),
                 ("cudnn", "enabled"),
                 ("cuda.matmul", "allow_fp16_reduced_precision_reduction"),
                 ("cuda.matmul", "allow_bf16_reduced_precision_reduction"))


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
    default_device: torch.device
    backend_flags: tuple[bool | None, ...]   # `BACKEND_FLAGS`' values (None: unreadable)
    warning_filters: tuple[tuple[Any, ...], ...]   # `warnings.filters` entries, first first
    torch_print: dict[str, Any] | None              # None: unreadable here (`compat.processes`)
    numpy_print: dict[str, Any] | None              # None: numpy was not imported

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
                   anomaly_check_nan=torch.is_anomaly_check_nan_enabled(),
                   default_device=torch.get_default_device(),
                   backend_flags=tuple(_backend_flag(*flag) for flag in BACKEND_FLAGS),
                   warning_filters=tuple(f for f in warnings.filters if travels(f)),
                   torch_print=compat_processes.tensor_print_options(),
                   numpy_print=_numpy_print_options(numpy))

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
        for (module, name), value in zip(BACKEND_FLAGS, self.backend_flags):
            if value is not None and _backend_flag(module, name) != value:
                setattr(_backend(module), name, value)
        if torch.get_default_device() != self.default_device:
            torch.set_default_device(self.default_device)
        _set_warning_filters(self.warning_filters)
        if self.torch_print is not None:
            torch.set_printoptions(**self.torch_print)
        if self.numpy_print is not None:
            import numpy

            numpy.set_printoptions(**self.numpy_print)


def _backend(module: str) -> Any:
    found: Any = torch.backends
    for part in module.split("."):
        found = getattr(found, part)
    return found


def _backend_flag(module: str, name: str) -> bool | None:
    """``torch.backends.<module>.<name>``, None where this torch lacks it."""
    try:
        value = getattr(_backend(module), name)
    except AttributeError:
        return None
    return value if isinstance(value, bool) else None


def _numpy_print_options(numpy: Any) -> dict[str, Any] | None:
    """numpy's print options (None: numpy not imported, or a formatter that does not pickle:
    the ranks keep numpy's defaults)."""
    if numpy is None:
        return None
    options = numpy.get_printoptions()
    return options if travels(options) else None


def _set_warning_filters(filters: tuple[tuple[Any, ...], ...]) -> None:
    """Make `warnings.filters` hold `filters` (entries as the module keeps them: action,
    message regex or None, category, module regex or None, line number), through the module's
    public functions: each added at the front, the last first. An entry the public function
    refuses (one a program put in the list by hand) is left out."""
    warnings.resetwarnings()
    for entry in reversed(filters):
        try:
            action, message, category, module, lineno = entry
            warnings.filterwarnings(action, message.pattern if message is not None else "",
                                    category, module.pattern if module is not None else "",
                                    lineno)
        except (AssertionError, TypeError, ValueError, AttributeError):
            continue
