"""The lifecycle of one training loader's cache, and the warning that says it is off."""
from __future__ import annotations

import enum

from ..errors import GnnorchWarning


class CacheStatus(enum.Enum):
    """pending (attached, its model's first forward not yet inspected) -> active | off.
    The value is what the report shows."""

    PENDING = "pending"
    ACTIVE = "active"
    OFF = "off"


class CacheWarning(GnnorchWarning):
    """The historical-embedding cache is off for a loader or model; training runs exactly."""
