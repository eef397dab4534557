"""Exceptions gnnorch raises itself (a user's own exceptions are re-raised as their own type)."""
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


class TrimmingWarning(UserWarning):
    """Hop-aware trimming was switched off for a model (e.g. its output was read beyond the seed
    rows); the run stays exact. Silence with ``warnings.filterwarnings("ignore",
    category=gnnorch.errors.TrimmingWarning)`` or pass ``trim=False``."""


class TrimmingError(GnnorchError, RuntimeError):
    """A trimmed model's non-seed output rows were read after its weights changed: their exact
    values can no longer be recomputed. Read them before ``optimizer.step()``, or pass
    ``trim=False``."""
