"""Exceptions and warnings gnnorch raises itself (a user's own exceptions are re-raised as their
own type). Every error is a `GnnorchError` and also subclasses the built-in base that says what
kind of failure it is (`TypeError`, `RuntimeError`); every warning is a `GnnorchWarning`, so
``warnings.filterwarnings("ignore", category=gnnorch.GnnorchWarning)`` silences all of them."""
from __future__ import annotations


class GnnorchError(Exception):
    """Base class of gnnorch's own errors."""


class SerializationError(GnnorchError, TypeError):
    """`train` or one of its arguments cannot be sent to a rank process."""


class RankFailedError(GnnorchError, RuntimeError):
    """A rank raised an exception that could not be re-created in the caller as its own type."""


class RankDiedError(GnnorchError, RuntimeError):
    """A rank process ended without reporting (killed by a signal, or exited on its own)."""


class RankStartError(GnnorchError, RuntimeError):
    """A rank process could not be started or did not connect back in time."""


class RemoteTraceback(Exception):
    """Carries a rank's formatted traceback as the `__cause__` of the re-raised exception."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n" + self.text


class GnnorchWarning(UserWarning):
    """Base class of gnnorch's warnings: a feature switched itself off and said why; the run
    stays correct."""


class TrimmingWarning(GnnorchWarning):
    """Hop-aware trimming was switched off for a model (e.g. its output was read beyond the seed
    rows); the run stays exact. Silence with ``warnings.filterwarnings("ignore",
    category=gnnorch.TrimmingWarning)`` or pass ``trim=False``."""


class TrimmingError(GnnorchError, RuntimeError):
    """A trimmed model's non-seed output rows were read after its weights changed: their exact
    values can no longer be recomputed. Read them before ``optimizer.step()``, or pass
    ``trim=False``."""


class StalenessError(GnnorchError, RuntimeError):
    """A forward was about to use a historical-embedding cache row older than the staleness
    bound (``CacheConfig(debug=True)``; without debug the row is refreshed first)."""


class CacheSharingError(GnnorchError, RuntimeError):
    """A model other than the one the historical-embedding cache serves ran on one of the
    loader's pruned training batches (its hot vertices were not expanded for the served
    model's cached rows), so that forward cannot be exact. Give each model its own loader, or
    pass ``cache=False``."""


class UnevenRanksError(GnnorchError, RuntimeError):
    """Ranks asked for gnnorch collectives that cannot be matched (e.g. different optimizers
    stepped in the same round, or tensors of different shapes): the program cannot run as
    written with ``processes`` > 1. The message names each rank, its step and what to change
    (docs/reliability.md)."""


class CollectiveError(GnnorchError, RuntimeError):
    """A gnnorch collective did not complete: a rank did not reach it within the stated bound
    (the run's ``collective_timeout``), or a rank left the world in the middle of it. The
    message names the ranks involved and where each was last seen."""


class ForkStuckError(GnnorchError, RuntimeError):
    """Every fork a rank process tried left its child stuck inside CPython's after-fork
    reinitialisation (CPython gh-112275: Python before 3.12; `gnnorch.launch.fork_guard`
    retries a stuck fork, so this needs several in a row). Use Python 3.12 or newer, or give
    the loader ``multiprocessing_context="spawn"``."""


class ArgumentsChangedError(GnnorchError, RuntimeError):
    """The tuner runs the function more than once (probes, then the real run); a probe run in
    the caller's process changed the arguments it shares with the caller in place (an
    attribute deleted, a tensor replaced or modified, a model it was handed trained), so the
    real run would not start from what was passed. The message names what changed. Pass
    ``autotune=False``, or leave the arguments unchanged (build the model inside the
    function, change a copy of the data)."""
