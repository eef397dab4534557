"""The bookkeeping behind `gnnorch.compat`: one `Probe` per private name, resolved once.

A probe's ``resolve`` function returns the name's value after checking its shape (it is
callable, takes the parameters gnnorch passes, behaves as gnnorch relies on); anything it
raises -- ``AttributeError``, ``ImportError``, `Missing` from a failed shape check, any other
exception -- makes the probe *unavailable*: `Probe.get` returns ``None`` from then on and the
reason is kept. The feature that needs the name asks the probe (or an accessor built on it) and
switches itself off when it gets ``None``; `unavailable` collects every reason, for the run's
statistics (``stats[rank]["compat"]``) and the report.

Fail closed: nothing here raises at import, and no probe answers "fine" for a name it could
not check.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

__all__ = ["Missing", "CompatError", "Probe", "probes", "unavailable", "reset"]


class Missing(Exception):
    """A name resolved but its shape is not what gnnorch relies on (raised by a probe)."""


class CompatError(RuntimeError):
    """A feature that cannot run without a private name was asked to run without it."""


_PROBES: dict[str, "Probe"] = {}
_LOCK = threading.RLock()   # a probe may ask another while resolving
_UNRESOLVED = object()


class Probe:
    """One private PyG / torch name: resolved lazily, once; ``None`` with a reason if missing.

    ``name``: the dotted name as a maintainer greps for it; ``used_by``: the modules that need
    it; ``when_missing``: what gnnorch does without it (documented in ``docs/compat.md``);
    ``fallback``: the value to use instead when missing (``None``: the feature is off).
    """

    __slots__ = ("name", "used_by", "when_missing", "_resolve", "_fallback", "_value",
                 "reason")

    def __init__(self, name: str, used_by: str, when_missing: str,
                 resolve: Callable[[], Any], fallback: Any = None) -> None:
        self.name, self.used_by, self.when_missing = name, used_by, when_missing
        self._resolve, self._fallback = resolve, fallback
        self._value: Any = _UNRESOLVED
        self.reason: str | None = None
        with _LOCK:
            _PROBES[name] = self

    def get(self) -> Any:
        """The resolved value; the fallback (``None`` unless given) when the name is missing."""
        value = self._value
        if value is _UNRESOLVED:
            value = self._load()
        return value

    @property
    def available(self) -> bool:
        """Whether the name itself resolved and passed its check."""
        self.get()
        return self.reason is None

    def _load(self) -> Any:
        with _LOCK:
            if self._value is not _UNRESOLVED:
                return self._value
            try:
                value, reason = self._resolve(), None
            except Exception as error:  # noqa: BLE001 - any failure means "missing"
                value, reason = self._fallback, _describe(error)
            self.reason = reason
            self._value = value
            return value

    def mark_missing(self, reason: str) -> None:
        """Record that a check made at use (not at resolution) found the name missing or
        changed: the probe answers its fallback and reports ``reason`` from now on."""
        with _LOCK:
            self._value, self.reason = self._fallback, reason

    def reset(self) -> None:
        """Forget the resolution (tests: after monkeypatching the name away or back)."""
        with _LOCK:
            self._value, self.reason = _UNRESOLVED, None

    def __repr__(self) -> str:
        state = ("unresolved" if self._value is _UNRESOLVED
                 else "available" if self.reason is None else f"missing: {self.reason}")
        return f"Probe({self.name!r}, {state})"


def _describe(error: Exception) -> str:
    if isinstance(error, Missing):
        return str(error)
    return f"{type(error).__name__}: {error}"


def probes() -> dict[str, Probe]:
    """Every registered probe by name (importing `gnnorch.compat` registers all of them)."""
    with _LOCK:
        return dict(_PROBES)


def unavailable(resolve: bool = True) -> dict[str, str]:
    """``{name: "why it is missing; what gnnorch does instead"}`` for every missing name.

    ``resolve``: resolve the probes not asked yet (importing PyG where they need it); else only
    those already resolved are reported. An empty mapping means every name resolved.
    """
    out: dict[str, str] = {}
    for name, probe in sorted(probes().items()):
        if resolve:
            probe.get()
        if probe.reason is not None:
            out[name] = f"{probe.reason}; {probe.when_missing}"
    return out


def reset() -> None:
    """Forget every resolution (tests)."""
    for probe in probes().values():
        probe.reset()
