"""Rank 0's log records and warnings, handled by the caller's own logging handlers and
``warnings.showwarning``.

A rank is a fresh interpreter, so what a script configured at its top is not there by itself:
after ``logging.basicConfig(level=logging.INFO)``, ``log.info(...)`` inside the function printed
nothing over p > 1 ranks (a fresh root logger is at WARNING, with no handler but
``logging.lastResort``), and a warning raised in rank 0 was text on its stderr, which neither
``warnings.catch_warnings(record=True)``, ``pytest.warns`` nor ``logging.captureWarnings`` around
the call saw. Handlers are objects of the caller's process (open streams and files, locks,
pytest's capture, sockets): they do not travel. So two things travel instead.

* **The logging layout** (`LoggingLayout`, captured in the caller, applied in every rank):
  every logger's level, ``propagate`` and ``disabled`` flags and filters (where they pickle),
  ``logging.disable``'s level, and which loggers hold handlers. A record is therefore made and
  propagated in a rank exactly where the caller would make and propagate it. Each logger that
  holds handlers in the caller holds a single stand-in in the rank instead of its own:

  - in rank 0, whose output is the caller's: a `RecordRelay`, which sends the record (its
    message formatted, its exception as text, pickled once: `log_message`) to the caller,
    where `deliver` hands it to that logger's own handlers, with their level checks, in the
    order rank 0 made the records (the caller reads them as they come, while it watches the
    ranks: `supervisor.RankGroup`);
  - in every other rank, and in rank 0 when its output goes to a log file: a
    ``StreamHandler`` on the rank's stderr (its log file), at the least level of the caller's
    handlers on that logger, in ``logging.BASIC_FORMAT``.

* **Warnings** (rank 0, output the caller's): the warning filters are the caller's
  (`gnnorch.execute.caller_state`), so rank 0 decides, as the caller would, whether a warning
  is shown; `WarningRelay`, rank 0's ``warnings.showwarning``, then sends it to the caller,
  where `deliver` calls the caller's ``warnings.showwarning`` at that moment: stderr, a
  ``catch_warnings(record=True)`` list or ``logging.captureWarnings``'s logger, as the plain
  call's warning would reach. A warning whose category or message does not pickle is written
  to rank 0's stderr, as before.

Invariant: each record rank 0 would hand to handler h of logger L in the caller's process, the
caller's h handles once, and nothing else (a logger's own filters decide in the rank, so one
that does not pickle leaves that logger's filtering to the rank's own filters). A record or warning is relayed while rank 0 runs the
function; once rank 0 has sent its final message (`RankChannel.final`), the relays write to
its stderr instead.
"""
from __future__ import annotations

import dataclasses
import logging
import pickle
import sys
import threading
import warnings
from typing import Any, Callable

import cloudpickle

from . import serialize

__all__ = ["LoggingLayout", "LoggerLayout", "RankChannel", "RecordRelay", "WarningRelay",
           "portable_record", "log_message", "deliver", "install", "RELAYED"]

RELAYED = ("log", "warning")   # the kinds of message `deliver` handles


class RankChannel:
    """A rank's connection to the caller, shared by the thread that sends its final message
    and the relays, which may send from any thread: one message at a time, and none after the
    final one (`open` turns false under the same lock)."""

    def __init__(self, conn: Any) -> None:   # a multiprocessing Connection
        self._conn = conn
        self._lock = threading.Lock()
        self.open = True

    def relay(self, message: bytes) -> bool:
        """Send a relayed message, pickled (the caller's ``recv`` unpickles it); False
        (nothing sent) once the final message is out."""
        with self._lock:
            if not self.open:
                return False
            self._conn.send_bytes(message)
            return True

    def final(self, message: tuple) -> None:
        """Send the rank's final message; the relays stop sending."""
        with self._lock:
            self.open = False
            self._conn.send(message)


@dataclasses.dataclass(frozen=True)
class LoggerLayout:
    """One logger of the caller's process: ``name`` ("" for the root logger), its settings,
    its filters (None where one does not pickle: the rank's logger keeps its own), and the
    least level of its handlers (None: it holds none)."""

    name: str
    level: int
    propagate: bool
    disabled: bool
    filters: tuple[Any, ...] | None
    handler_level: int | None


@dataclasses.dataclass(frozen=True)
class LoggingLayout:
    """The caller's loggers (`LoggerLayout`, root first) and ``logging.disable``'s level."""

    loggers: tuple[LoggerLayout, ...]
    disabled_below: int

    @classmethod
    def capture(cls) -> LoggingLayout:
        """This process's logging layout now (nothing in it changes)."""
        named = [(name, logger) for name, logger in
                 list(logging.Logger.manager.loggerDict.items())
                 if isinstance(logger, logging.Logger)]
        loggers = [_logger_layout("", logging.getLogger())]
        loggers += [_logger_layout(name, logger) for name, logger in sorted(named)]
        return cls(tuple(loggers), logging.root.manager.disable)

    def apply(self, stand_in: Callable[[LoggerLayout], logging.Handler]) -> None:
        """Make this process's loggers the captured ones, each logger that holds handlers in
        the caller holding ``stand_in(layout)`` instead of its own."""
        logging.disable(self.disabled_below)
        for layout in self.loggers:
            logger = logging.getLogger(layout.name or None)
            logger.setLevel(layout.level)
            logger.propagate = layout.propagate
            logger.disabled = layout.disabled
            if layout.filters is not None:
                logger.filters[:] = list(layout.filters)
            if layout.handler_level is not None:
                for handler in list(logger.handlers):
                    logger.removeHandler(handler)
                logger.addHandler(stand_in(layout))


def _logger_layout(name: str, logger: logging.Logger) -> LoggerLayout:
    levels = [handler.level for handler in logger.handlers]
    filters = tuple(logger.filters)
    return LoggerLayout(name=name, level=logger.level, propagate=logger.propagate,
                        disabled=logger.disabled,
                        filters=filters if not filters or serialize.travels(filters) else None,
                        handler_level=min(levels) if levels else None)


def stderr_stand_in(layout: LoggerLayout) -> logging.Handler:
    """The stand-in in a rank whose output is not the caller's: its stderr, basic format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(layout.handler_level or logging.NOTSET)
    handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
    return handler


_TEXT = logging.Formatter()


def portable_record(record: logging.LogRecord) -> dict[str, Any]:
    """`record`'s attributes: the message formatted (``args`` None), the exception as
    ``exc_text``. ``logging.makeLogRecord`` of it formats alike under any formatter."""
    fields = dict(record.__dict__)
    fields["msg"] = record.getMessage()
    fields["args"] = None
    if record.exc_info:
        fields["exc_text"] = record.exc_text or _TEXT.formatException(record.exc_info)
    fields["exc_info"] = None
    return fields


_PLAIN = (str, int, float, bool, type(None))


def log_message(logger_name: str, record: logging.LogRecord) -> bytes:
    """The pickled ("log", logger name, `portable_record`) message. Every attribute is a str,
    number, bool or None (an ``extra=`` value of another type travels as its ``str``), so the
    caller can always unpickle it: a record never fails the run."""
    fields = {key: value if isinstance(value, _PLAIN) else str(value)
              for key, value in portable_record(record).items()}
    return pickle.dumps(("log", logger_name, fields), pickle.HIGHEST_PROTOCOL)


class RecordRelay(logging.Handler):
    """Rank 0's stand-in for the handlers of logger ``layout.name``: sends each record to the
    caller (`deliver`); once the channel is closed, writes it to stderr."""

    def __init__(self, layout: LoggerLayout, channel: RankChannel) -> None:
        super().__init__()
        self.logger_name = layout.name
        self.channel = channel
        self.fallback = stderr_stand_in(layout)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if self.channel.relay(log_message(self.logger_name, record)):
                return
        except Exception:  # noqa: BLE001 - as any handler: logging's own error report
            self.handleError(record)
            return
        self.fallback.handle(record)


class WarningRelay:
    """Rank 0's ``warnings.showwarning``: sends each shown warning to the caller (`deliver`);
    one that does not pickle, or once the channel is closed, goes where it went before."""

    def __init__(self, channel: RankChannel, show: Callable[..., None]) -> None:
        self.channel = channel
        self.show = show

    def __call__(self, message: Warning | str, category: type[Warning], filename: str,
                 lineno: int, file: Any = None, line: str | None = None) -> None:
        if file is None:
            if line is None:
                import linecache

                line = linecache.getline(filename, lineno) or None
            try:
                payload = pickle.dumps(("warning", cloudpickle.dumps((message, category)),
                                        f"{category.__name__}: {message}", filename, lineno,
                                        line), pickle.HIGHEST_PROTOCOL)
            except Exception:  # noqa: BLE001 - a warning of the user's that does not travel
                payload = None
            if payload is not None and self.channel.relay(payload):
                return
        self.show(message, category, filename, lineno, file, line)


def deliver(message: tuple) -> None:
    """In the caller: handle a relayed message (its kind is in `RELAYED`) as the plain call's
    record or warning would be handled here."""
    if message[0] == "log":
        _, name, fields = message
        record = logging.makeLogRecord(fields)
        for handler in list(logging.getLogger(name or None).handlers):
            if record.levelno >= handler.level:
                handler.handle(record)
    elif message[0] == "warning":
        _, payload, text, filename, lineno, line = message
        try:
            warning, category = pickle.loads(payload)
        except Exception:  # noqa: BLE001 - a category the caller cannot import: its text
            warning, category = UserWarning(text), UserWarning
        warnings.showwarning(warning, category, filename, lineno, None, line)
    else:
        raise ValueError(f"not a relayed message: {message[0]!r}")


def install(layout: LoggingLayout, channel: RankChannel | None) -> None:
    """In a rank: apply the caller's logging `layout`; with a `channel` (rank 0, output the
    caller's), relay its records and warnings through it."""
    if channel is None:
        layout.apply(stderr_stand_in)
        return
    layout.apply(lambda logger: RecordRelay(logger, channel))
    warnings.showwarning = WarningRelay(channel, warnings.showwarning)
