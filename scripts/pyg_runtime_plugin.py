"""pytest plugin used by `scripts/pyg_tests_under_runtime.py` (loaded with ``-p pyg_runtime_plugin``).

Driven by environment variables set by the driver script:

* ``GNNORCH_PYG_EVENTS``: JSON-lines file; every test start, phase report, finish and
  collection error is appended (and flushed) to it, so the driver keeps what a run got through
  even when the process dies (segfault, hard timeout).
* ``GNNORCH_PYG_RUNTIME``: when ``1``, every synchronous, non-generator test function is called
  as ``gnnorch.Runtime(lambda: test(**funcargs), **options)()`` instead of ``test(**funcargs)``
  (pytest's own ``pytest_pyfunc_call`` otherwise does the same call: fixtures are resolved by
  pytest exactly as usual and only the call itself runs under the runtime). Options come from
  ``GNNORCH_PYG_RUNTIME_OPTIONS`` (JSON, default ``{"processes": 1, "autotune": false}``).
  The run's ``runtime.last_run.stats`` (sampler backend per loader, trimming per model, ...)
  is recorded with the test's report.
* ``GNNORCH_PYG_TIMEOUT``: seconds per test (0: none). SIGALRM raises ``HarnessTimeout`` in the
  test; 60 s later ``faulthandler`` dumps all stacks and exits the process (the driver resumes
  with the remaining tests and records the test as crashed).
* ``GNNORCH_PYG_ONLY`` / ``GNNORCH_PYG_DESELECT``: files of node ids (one a line) to keep /
  drop after collection (used by the driver to resume after a crash and to re-run differences).
"""
from __future__ import annotations

import faulthandler
import inspect
import json
import os
import signal
import sys
import time
import warnings

import pytest

_EVENTS = os.environ.get("GNNORCH_PYG_EVENTS")
_RUNTIME = os.environ.get("GNNORCH_PYG_RUNTIME") == "1"
_OPTIONS = json.loads(os.environ.get("GNNORCH_PYG_RUNTIME_OPTIONS")
                      or '{"processes": 1, "autotune": false}')
_TIMEOUT = float(os.environ.get("GNNORCH_PYG_TIMEOUT") or 0)
_MAX_TEXT = 9000


class HarnessTimeout(Exception):
    """Raised in a test that ran longer than GNNORCH_PYG_TIMEOUT seconds."""


def _clip(text: str) -> str:
    """Long reports keep their head (the traceback's frames) and tail (the error)."""
    if len(text) <= _MAX_TEXT:
        return text
    head, tail = _MAX_TEXT * 2 // 3, _MAX_TEXT // 3
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


def _emit(record: dict) -> None:
    if not _EVENTS:
        return
    with open(_EVENTS, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")
        f.flush()


def _read_ids(var: str) -> set[str] | None:
    path = os.environ.get(var)
    if not path:
        return None
    with open(path, encoding="utf-8") as f:
        return {line.rstrip("\n") for line in f if line.strip()}


# -- selection ---------------------------------------------------------------------------------
def pytest_collection_modifyitems(session, config, items):
    only, drop = _read_ids("GNNORCH_PYG_ONLY"), _read_ids("GNNORCH_PYG_DESELECT")
    if only is None and not drop:
        return
    keep, gone = [], []
    for item in items:
        ok = (only is None or item.nodeid in only) and not (drop and item.nodeid in drop)
        (keep if ok else gone).append(item)
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = keep


def pytest_sessionstart(session):
    record = {"event": "session", "runtime": _RUNTIME, "options": _OPTIONS if _RUNTIME else None,
              "pid": os.getpid(), "time": time.time()}
    if _RUNTIME:  # which gnnorch the runtime run uses (a snapshot on PYTHONPATH or the install)
        import gnnorch

        record["gnnorch_file"] = gnnorch.__file__
    _emit(record)


# -- recording ---------------------------------------------------------------------------------
def _message(report) -> str | None:
    longrepr = report.longrepr
    if longrepr is None:
        return None
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # skip: (path, line, reason)
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return crash.message
    text = str(longrepr).strip().splitlines()
    return text[-1] if text else None


def pytest_runtest_logstart(nodeid, location):
    _emit({"event": "start", "nodeid": nodeid, "time": time.time()})


def pytest_runtest_logreport(report):
    record = {"event": "report", "nodeid": report.nodeid, "when": report.when,
              "outcome": report.outcome, "duration": round(report.duration, 4),
              "message": _message(report)}
    if hasattr(report, "wasxfail"):
        record["wasxfail"] = report.wasxfail
    if report.failed:
        record["longrepr"] = _clip(str(report.longrepr))
    props = dict(p for p in report.user_properties if isinstance(p, tuple) and len(p) == 2)
    if "gnnorch_stats" in props:
        record["gnnorch_stats"] = props["gnnorch_stats"]
    _emit(record)


def pytest_runtest_logfinish(nodeid, location):
    _emit({"event": "finish", "nodeid": nodeid, "time": time.time()})


def pytest_collectreport(report):
    if report.failed:
        _emit({"event": "collect_error", "nodeid": report.nodeid, "message": _message(report),
               "longrepr": _clip(str(report.longrepr))})


# -- per-test timeout ------------------------------------------------------------------------
def _on_alarm(signum, frame):
    raise HarnessTimeout(f"gnnorch-harness timeout: test ran longer than {_TIMEOUT:g} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    armed = _TIMEOUT > 0 and hasattr(signal, "SIGALRM")
    if armed:
        previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, _TIMEOUT)
        faulthandler.dump_traceback_later(_TIMEOUT + 60, exit=True, file=sys.stderr)
    try:
        yield
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            faulthandler.cancel_dump_traceback_later()


# -- the runtime seam ----------------------------------------------------------------------------
def _plain_function(fn) -> bool:
    return not (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)
                or inspect.isgeneratorfunction(fn))


def _stats_summary(runtime) -> dict | None:
    """A compact, JSON-safe digest of `runtime.last_run.stats[0]`: each intercepted loader's
    role and sampler backend, each traced model's trimming decision, the rewrite decisions."""
    run = getattr(runtime, "last_run", None)
    if run is None:
        return None
    try:
        stats = run.stats.get(0, {})
        out = {"keys": sorted(stats)}
        loaders = stats.get("sampler", {}).get("loaders", [])
        if loaders:
            out["loaders"] = loaders[:20]
        trim = stats.get("trim", {})
        if trim.get("models"):
            out["trim"] = trim["models"][:20]
            out["rows"] = [trim.get("rows_computed"), trim.get("rows_untrimmed")]
        layers = stats.get("rewrite", {}).get("layers") or []
        if layers:
            out["rewrite_layers"] = json.loads(json.dumps(layers[:10], default=str))
        for key in stats:
            if key not in ("sampler", "trim", "rewrite", "allocator"):
                out[key] = json.loads(json.dumps(stats[key], default=str))
        json.dumps(out)
        return out
    except Exception as exc:  # noqa: BLE001 - diagnostics only
        return {"error": f"stats not serialisable: {exc!r}"}


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Same as pytest's default hook, but the call runs under `gnnorch.Runtime`."""
    if not _RUNTIME:
        return None
    testfunction = pyfuncitem.obj
    if not _plain_function(testfunction):
        return None  # async / generator tests: pytest's default hook
    import gnnorch

    funcargs = pyfuncitem.funcargs
    testargs = {arg: funcargs[arg] for arg in pyfuncitem._fixtureinfo.argnames}
    runtime = gnnorch.Runtime(lambda: testfunction(**testargs), **_OPTIONS)
    try:
        result = runtime()
    finally:
        stats = _stats_summary(runtime)
        if stats is not None:
            pyfuncitem.user_properties.append(("gnnorch_stats", stats))
    if hasattr(result, "__await__") or hasattr(result, "__aiter__"):
        pytest.fail(f"{pyfuncitem.nodeid}: async result under the runtime harness")
    elif result is not None:
        category = getattr(pytest, "PytestReturnNotNoneWarning", pytest.PytestWarning)
        warnings.warn(category(f"Test functions should return None, but {pyfuncitem.nodeid} "
                               f"returned {type(result)!r}."))
    return True
