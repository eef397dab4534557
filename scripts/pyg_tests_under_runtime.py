#!/usr/bin/env python
"""Run PyG's own tests plainly and with every test function under `gnnorch.Runtime`, and list
the tests whose outcome differs (issue 12).

    .venv/bin/python scripts/pyg_tests_under_runtime.py --out results.json

PyG's `test/` tree (plus its `pyproject.toml`, which holds PyG's pytest settings: warning
filters such as ``error::DeprecationWarning``) is extracted at run time for the installed PyG
version from the fetched bare repository (``git archive <tag>``; master with a warning when the
version has no tag), or taken from ``--pyg-tests DIR``. Nothing of PyG's test code is kept in
this repository.

The selected files are run twice with pytest in subprocesses of the venv's Python:

* ``plain``: as PyG runs them;
* ``runtime``: with ``scripts/pyg_runtime_plugin.py`` (``-p pyg_runtime_plugin``) whose
  ``pytest_pyfunc_call`` runs each test function as
  ``gnnorch.Runtime(lambda: test(**funcargs), processes=1, autotune=False)()``; fixtures are
  resolved by pytest as usual (outside the runtime).

Outcomes are recorded per test id (JSON lines written by the plugin, so a crash loses nothing;
after a crash or hard timeout the run resumes with the remaining tests). Tests whose outcome
differs are re-run ``--confirm`` times in both modes to tell stable differences from flaky
ones. Prints a Markdown summary (counts, skip reasons, the differences with the first line of
each failure) and writes everything to ``--out`` (JSON).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_PYTHON = REPO / ".venv" / "bin" / "python"
DEFAULT_MIRROR = Path("/work/.mirror/pyg-team+pytorch_geometric/repo")
DEFAULT_FILES = [
    "test/loader/test_neighbor_loader.py",
    "test/loader/test_link_neighbor_loader.py",
    "test/loader/test_mixin.py",              # NeighborLoader workers: affinity, threads
    "test/sampler/",
    "test/nn/models/test_basic_gnn.py",
    "test/nn/conv/test_pna_conv.py",
    "test/utils/test_trim_to_layer.py",
    "test/nn/conv/test_message_passing.py",   # explain mode, TorchScript of MessagePassing
    "test/explain/algorithm/test_gnn_explainer.py",
]
# --extended: every loader test, every model and conv test (the rewrite seam acts on every layer
# call), fx / to_hetero / compile tests.
EXTENDED_FILES = [
    "test/loader/", "test/sampler/", "test/nn/models/", "test/nn/conv/", "test/nn/test_fx.py",
    "test/nn/test_sequential.py", "test/nn/test_to_hetero_transformer.py",
    "test/nn/test_to_hetero_with_bases_transformer.py", "test/nn/test_to_hetero_module.py",
    "test/nn/test_compile_basic.py", "test/nn/test_compile_conv.py",
    "test/nn/test_compile_dynamic.py", "test/utils/test_trim_to_layer.py", "test/explain/",
]
DEFAULT_OPTIONS = {"processes": 1, "autotune": False}
MODES = ("plain", "runtime")
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "timeout", "crashed")


# -- PyG's tests ---------------------------------------------------------------------------------
def probe_versions(python: str) -> dict:
    code = (
        "import json, sys, platform\n"
        "out = {'python': sys.version.split()[0]}\n"
        "for name in ('torch', 'torch_geometric', 'torch_sparse', 'torch_scatter', 'pyg_lib',\n"
        "             'pytest', 'gnnorch', 'xdist'):\n"
        "    try:\n"
        "        m = __import__(name)\n"
        "        out[name] = getattr(m, '__version__', 'installed')\n"
        "    except Exception as exc:\n"
        "        out[name] = None\n"
        "print(json.dumps(out))\n")
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def git_commit(path: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--", "src"],
                               capture_output=True, text=True).stdout.strip()
        return out + ("+dirty(src)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def _version_key(text: str):
    try:
        from packaging.version import Version

        return Version(text)
    except Exception:  # noqa: BLE001 - not a version (or no packaging): not comparable
        return None


def pick_ref(mirror: Path, version: str) -> tuple[str, str | None]:
    """(git ref, warning or None) for PyG `version` in the bare repository `mirror`: its tag;
    else the newest earlier tag of the same major.minor series (a patch release whose tag the
    mirror lacks), with a warning; else master, with a warning."""
    tags = subprocess.run(["git", "-C", str(mirror), "tag"], capture_output=True, text=True,
                          check=True).stdout.split()
    base = version.split("+")[0]
    for candidate in (version, base):
        if candidate in tags:
            return candidate, None
    want = _version_key(base)
    if want is not None:
        series = [(k, t) for t in tags if (k := _version_key(t)) is not None
                  and k.release[:2] == want.release[:2] and k <= want]
        if series:
            tag = max(series)[1]
            return tag, (f"PyG {version} has no tag in {mirror}; using the newest earlier tag "
                         f"of its series, {tag} (pass --ref master to use master instead)")
    for ref in ("master", "main", "HEAD"):
        ok = subprocess.run(["git", "-C", str(mirror), "rev-parse", "--verify", "-q", ref],
                            capture_output=True).returncode == 0
        if ok:
            return ref, (f"PyG {version} has no tag in {mirror}; using {ref}: its tests may "
                         f"not match the installed PyG")
    raise SystemExit(f"no usable ref in {mirror}")


def extract_tests(mirror: Path, ref: str, dest: Path) -> None:
    """`git archive <ref> test pyproject.toml | tar -x -C dest`."""
    archive = subprocess.Popen(["git", "-C", str(mirror), "archive", ref, "test",
                                "pyproject.toml"], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    archive.stdout.close()
    if archive.wait() != 0:
        raise SystemExit(f"git archive {ref} failed in {mirror}")


def tests_root(path: Path) -> Path:
    """The folder holding `test/` (accepts that folder or `test/` itself)."""
    path = path.resolve()
    if (path / "test").is_dir():
        return path
    if path.name == "test" and path.is_dir():
        return path.parent
    raise SystemExit(f"--pyg-tests {path}: no test/ folder there")


# -- running pytest --------------------------------------------------------------------------
def pytest_command(python: str, files: list[str], keyword: str | None, markers: str | None,
                   jobs: int, extra: list[str]) -> list[str]:
    cmd = [python, "-m", "pytest", *files, "-p", "pyg_runtime_plugin", "-p", "no:cacheprovider",
           "--capture=fd", "--color=no", "-q", "-rN", "--tb=short"]
    if keyword:
        cmd += ["-k", keyword]
    if markers is not None:
        cmd += ["-m", markers]
    if jobs > 1:
        cmd += ["-n", str(jobs)]
    return cmd + extra


def run_mode(mode: str, args: argparse.Namespace, root: Path, work: Path, tag: str,
             only: set[str] | None = None) -> dict:
    """Run pytest for `mode` until every selected test has a result; returns the run's records."""
    events = work / f"events-{tag}.jsonl"
    events.unlink(missing_ok=True)
    log = work / f"pytest-{tag}.log"
    env = dict(os.environ)
    paths = [str(HERE)] + ([str(args.gnnorch_path)] if args.gnnorch_path else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]]
                                                 if env.get("PYTHONPATH") else []))
    env["GNNORCH_PYG_EVENTS"] = str(events)
    env["GNNORCH_PYG_RUNTIME"] = "1" if mode == "runtime" else "0"
    env["GNNORCH_PYG_RUNTIME_OPTIONS"] = json.dumps(args.runtime_options)
    env["GNNORCH_PYG_TIMEOUT"] = str(args.timeout)
    if args.full_test:
        env["FULL_TEST"] = "1"
    else:
        env.pop("FULL_TEST", None)
    if only is not None:
        only_file = work / f"only-{tag}.txt"
        only_file.write_text("\n".join(sorted(only)) + "\n")
        env["GNNORCH_PYG_ONLY"] = str(only_file)
    crashed: list[str] = []
    rounds, returncodes = 0, []
    start = time.time()
    with open(log, "w") as log_f:
        while True:
            rounds += 1
            done = finished_ids(events)
            drop = done | set(crashed)
            if drop:
                drop_file = work / f"deselect-{tag}.txt"
                drop_file.write_text("\n".join(sorted(drop)) + "\n")
                env["GNNORCH_PYG_DESELECT"] = str(drop_file)
            cmd = pytest_command(args.python, args.files, args.keyword, args.markers,
                                 args.jobs, args.pytest_args)
            log_f.write(f"\n### round {rounds}: {' '.join(cmd)}\n")
            log_f.flush()
            try:
                proc = subprocess.run(cmd, cwd=root, env=env, stdout=log_f,
                                      stderr=subprocess.STDOUT, timeout=args.run_timeout)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "run-timeout"
            returncodes.append(rc)
            # A test that started but never finished means the process died in it (a signal,
            # or faulthandler's exit after the hard timeout): record it, resume after it.
            unfinished = started_unfinished(events) - set(crashed)
            crashed += sorted(unfinished)
            if not unfinished or rc == "run-timeout" or rounds > args.max_restarts:
                break
            print(f"[{tag}] pytest died (rc {rc}) in {sorted(unfinished)}; resuming",
                  file=sys.stderr)
    results = collect(events, crashed)
    files = sorted({e["gnnorch_file"] for e in read_events(events) if e.get("gnnorch_file")})
    if mode == "runtime" and args.gnnorch_path and any(
            not f.startswith(str(args.gnnorch_path)) for f in files):
        raise SystemExit(f"the runtime run imported gnnorch from {files}, not from "
                         f"{args.gnnorch_path}")
    return {"mode": mode, "returncodes": returncodes, "rounds": rounds,
            "seconds": round(time.time() - start, 1), "log": str(log), "gnnorch_file": files,
            "tests": results}


def read_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line cut by a crash
    return out


def finished_ids(path: Path) -> set[str]:
    return {e["nodeid"] for e in read_events(path) if e.get("event") == "finish"}


def started_unfinished(path: Path) -> set[str]:
    events = read_events(path)
    started = {e["nodeid"] for e in events if e.get("event") == "start"}
    return started - {e["nodeid"] for e in events if e.get("event") == "finish"}


def collect(path: Path, crashed: list[str]) -> dict[str, dict]:
    """One result per test id: outcome, message (first line), longrepr, phase durations."""
    results: dict[str, dict] = {}
    for e in read_events(path):
        kind = e.get("event")
        if kind == "collect_error":
            results[e["nodeid"] or "<collection>"] = {
                "outcome": "error", "phase": "collect", "message": e.get("message"),
                "longrepr": e.get("longrepr")}
            continue
        if kind != "report":
            continue
        r = results.setdefault(e["nodeid"], {"outcome": None, "phase": None, "message": None})
        when, outcome = e["when"], e["outcome"]
        if e.get("gnnorch_stats"):
            r["gnnorch_stats"] = e["gnnorch_stats"]
        if when == "setup":
            if outcome == "failed":
                r.update(outcome="error", phase="setup", message=e.get("message"),
                         longrepr=e.get("longrepr"))
            elif outcome == "skipped":
                r.update(outcome="xfailed" if "wasxfail" in e else "skipped", phase="setup",
                         message=e.get("wasxfail") or e.get("message"))
        elif when == "call":
            r["duration"] = e.get("duration")
            if outcome == "passed":
                r.update(outcome="xpassed" if "wasxfail" in e else "passed", phase="call")
            elif outcome == "failed":
                msg = e.get("message") or ""
                r.update(outcome="timeout" if "gnnorch-harness timeout" in msg else "failed",
                         phase="call", message=msg, longrepr=e.get("longrepr"))
            else:
                r.update(outcome="xfailed" if "wasxfail" in e else "skipped", phase="call",
                         message=e.get("wasxfail") or e.get("message"))
        elif when == "teardown" and outcome == "failed":
            r["teardown_error"] = e.get("message")
            if r["outcome"] in ("passed", None):
                r.update(outcome="error", phase="teardown", message=e.get("message"),
                         longrepr=e.get("longrepr"))
    for nodeid in crashed:
        results[nodeid] = {"outcome": "crashed", "phase": "call",
                           "message": "the pytest process died in this test (signal, or the "
                                      "harness's hard timeout); see the pytest log"}
    return results


# -- comparing ---------------------------------------------------------------------------------
def counts(tests: dict[str, dict]) -> dict[str, int]:
    c = collections.Counter(r["outcome"] for r in tests.values())
    return {k: c.get(k, 0) for k in OUTCOMES if c.get(k, 0) or k in ("passed", "failed",
                                                                     "skipped", "error")}


def differences(plain: dict, runtime: dict) -> list[dict]:
    rows = []
    for nodeid in sorted(set(plain) | set(runtime)):
        a, b = plain.get(nodeid), runtime.get(nodeid)
        oa = a["outcome"] if a else "not run"
        ob = b["outcome"] if b else "not run"
        if oa == ob and not (oa in ("failed", "error") and _normalised(a.get("message"))
                             != _normalised(b.get("message"))):
            continue
        failing = b if ob not in ("passed", "xfailed", "skipped") else a
        rows.append({"test": nodeid, "plain": oa, "runtime": ob,
                     "message": first_line((failing or {}).get("message")),
                     "plain_message": (a or {}).get("message"),
                     "runtime_message": (b or {}).get("message"),
                     "plain_longrepr": (a or {}).get("longrepr"),
                     "runtime_longrepr": (b or {}).get("longrepr"),
                     "gnnorch_stats": (b or {}).get("gnnorch_stats")})
    return rows


def _normalised(message: str | None) -> str:
    """A failure's first line without what differs between two processes (addresses)."""
    return re.sub(r"0x[0-9a-fA-F]+", "0x?", first_line(message))


def first_line(text: str | None) -> str:
    if not text:
        return ""
    return text.strip().splitlines()[0][:300]


def missing_package_skips(tests: dict[str, dict]) -> dict[str, int]:
    """Skip reasons that name missing packages (PyG's `withPackage`), with counts."""
    c = collections.Counter()
    for r in tests.values():
        if r["outcome"] == "skipped" and r.get("message") and (
                re.search(r"not (installed|found|available)|No module named", r["message"])):
            c[first_line(r["message"])] += 1
    return dict(c.most_common())


def skip_reasons(tests: dict[str, dict]) -> dict[str, int]:
    c = collections.Counter(first_line(r.get("message")) for r in tests.values()
                            if r["outcome"] == "skipped")
    return dict(c.most_common())


def md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(report: dict) -> str:
    lines = []
    meta = report["meta"]
    lines.append(f"PyG tests {meta['pyg_ref']} (installed torch_geometric "
                 f"{meta['versions'].get('torch_geometric')}), torch "
                 f"{meta['versions'].get('torch')}, torch_sparse "
                 f"{meta['versions'].get('torch_sparse')}, pyg_lib "
                 f"{meta['versions'].get('pyg_lib')}, gnnorch {meta['gnnorch_commit']}")
    lines.append(f"runtime options: {json.dumps(meta['runtime_options'])}; files: "
                 f"{' '.join(meta['files'])}; -m {meta['markers']!r}; FULL_TEST="
                 f"{int(meta['full_test'])}" + (f"; -k {meta['keyword']!r}"
                                                if meta['keyword'] else ""))
    lines.append("")
    keys = [k for k in OUTCOMES if any(report["counts"][m].get(k) for m in MODES)]
    lines.append("| run | " + " | ".join(keys) + " | seconds |")
    lines.append("|---|" + "---|" * (len(keys) + 1))
    for m in MODES:
        lines.append(f"| {m} | " + " | ".join(str(report["counts"][m].get(k, 0)) for k in keys)
                     + f" | {report['runs'][m]['seconds']} |")
    lines.append("")
    skips = report["skips_missing_packages"]
    if skips:
        lines.append("Skipped for missing packages (plain run): " + "; ".join(
            f"{reason} ({n})" for reason, n in skips.items()))
        lines.append("")
    diffs = [d for d in report["differences"] if d["plain"] != d["runtime"]]
    same = [d for d in report["differences"] if d["plain"] == d["runtime"]]
    lines.append(f"{len(diffs)} test(s) differ in outcome:")
    lines.append("")
    if diffs:
        lines.append("| test | plain | under runtime | confirm | first line of failure |")
        lines.append("|---|---|---|---|---|")
        for d in diffs:
            lines.append(f"| `{md_escape(d['test'])}` | {d['plain']} | {d['runtime']} | "
                         f"{d.get('confirm', '')} | {md_escape(d['message'])} |")
    if same:
        lines.append("")
        lines.append(f"{len(same)} test(s) fail in both runs, with different errors:")
        lines.append("")
        lines.append("| test | outcome | plain: first line | under runtime: first line |")
        lines.append("|---|---|---|---|")
        for d in same:
            lines.append(f"| `{md_escape(d['test'])}` | {d['plain']} | "
                         f"{md_escape(first_line(d['plain_message']))} | "
                         f"{md_escape(first_line(d['runtime_message']))} |")
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pyg-tests", type=Path, default=None,
                   help="folder holding PyG's test/ (default: extract it from the mirror)")
    p.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR,
                   help="bare git repository of pytorch_geometric (default: %(default)s)")
    p.add_argument("--ref", default=None, help="git ref to extract (default: the installed "
                   "PyG version's tag)")
    p.add_argument("--gnnorch-ref", default=None,
                   help="run the runtime mode with gnnorch's src/ at this git commit of the "
                        "repository (extracted with git archive; default: the installed, "
                        "editable working tree)")
    p.add_argument("--gnnorch-src", type=Path, default=None,
                   help="run the runtime mode with the gnnorch package found in this folder "
                        "(put first on PYTHONPATH)")
    p.add_argument("--python", default=str(DEFAULT_PYTHON if DEFAULT_PYTHON.exists()
                                           else sys.executable),
                   help="interpreter with torch_geometric and gnnorch (default: %(default)s)")
    p.add_argument("--files", nargs="+", default=DEFAULT_FILES,
                   help="test files / folders relative to the PyG checkout (default: loader, "
                        "sampler, BasicGNN, PNA and trim_to_layer tests)")
    p.add_argument("--extended", action="store_true",
                   help="run the extended selection instead of --files: all of test/loader/, "
                        "test/sampler/, test/nn/models/, test/nn/conv/, fx, to_hetero and "
                        "compile tests (about 2,850 tests)")
    p.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    p.add_argument("--jobs", type=int, default=1, help="pytest-xdist workers (needs xdist)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds per test before it is failed as a timeout (0: none)")
    p.add_argument("--run-timeout", type=float, default=None,
                   help="seconds for one whole pytest run (default: none)")
    p.add_argument("--max-restarts", type=int, default=20,
                   help="resumptions after the pytest process dies in a test")
    p.add_argument("--confirm", type=int, default=1,
                   help="re-run each differing test this many times in both modes (0: don't)")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--runtime-options", type=json.loads, default=DEFAULT_OPTIONS,
                   help="gnnorch.Runtime options as JSON (default: %(default)s)")
    p.add_argument("--full-test", action=argparse.BooleanOptionalAction, default=True,
                   help="set FULL_TEST=1 so that PyG's @onlyFullTest tests run too "
                        "(default: on; --no-full-test for PyG's fast test run)")
    p.add_argument("-m", dest="markers", default="not rag",
                   help="pytest -m expression (default: %(default)r; PyG's own addopts say "
                        "'not rag and not dataset', but its 'dataset' tests in the default "
                        "files use the in-package KarateClub, no download)")
    p.add_argument("--out", type=Path, default=None, help="write the full results (JSON) here")
    p.add_argument("--md", type=Path, default=None, help="also write the Markdown summary here")
    p.add_argument("--keep", action="store_true", help="keep the work folder (logs, events)")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.extended:
        args.files = EXTENDED_FILES
    versions = probe_versions(args.python)
    if versions.get("torch_geometric") is None:
        raise SystemExit(f"{args.python} cannot import torch_geometric")
    if args.jobs > 1 and versions.get("xdist") is None:
        warnings.warn("--jobs needs pytest-xdist, which is not installed: running serially")
        args.jobs = 1
    work = Path(tempfile.mkdtemp(prefix="pyg-tests-"))
    ref_warning = None
    try:
        if args.pyg_tests is not None:
            root, ref = tests_root(args.pyg_tests), f"dir:{args.pyg_tests}"
        else:
            ref = args.ref
            if ref is None:
                ref, ref_warning = pick_ref(args.mirror, versions["torch_geometric"])
            if ref_warning:
                warnings.warn(ref_warning)
            root = work / "pyg"
            root.mkdir()
            extract_tests(args.mirror, ref, root)
        args.gnnorch_path, gnnorch_version = None, git_commit(REPO)
        if args.gnnorch_ref is not None:
            snap = work / "gnnorch"
            snap.mkdir()
            commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", args.gnnorch_ref],
                                    capture_output=True, text=True, check=True).stdout.strip()
            archive = subprocess.Popen(["git", "-C", str(REPO), "archive", commit, "src"],
                                       stdout=subprocess.PIPE)
            subprocess.run(["tar", "-x", "-C", str(snap)], stdin=archive.stdout, check=True)
            archive.stdout.close()
            archive.wait()
            args.gnnorch_path, gnnorch_version = snap / "src", commit
        elif args.gnnorch_src is not None:
            args.gnnorch_path = args.gnnorch_src.resolve()
            gnnorch_version = f"dir:{args.gnnorch_path}"
        for f in args.files:
            if not (root / f).exists():
                raise SystemExit(f"{f} does not exist in PyG's tests ({ref})")
        print(f"[pyg-tests] PyG tests from {ref} in {root}; work folder {work}", file=sys.stderr)
        runs = {}
        for mode in args.modes:
            print(f"[pyg-tests] running {mode} ...", file=sys.stderr)
            runs[mode] = run_mode(mode, args, root, work, mode)
            print(f"[pyg-tests] {mode}: {counts(runs[mode]['tests'])} in "
                  f"{runs[mode]['seconds']} s", file=sys.stderr)
        for mode in MODES:
            runs.setdefault(mode, {"mode": mode, "returncodes": [], "rounds": 0, "seconds": 0,
                                   "log": None, "tests": {}})
        diffs = differences(runs["plain"]["tests"], runs["runtime"]["tests"]) \
            if len(args.modes) == 2 else []
        if diffs and args.confirm > 0:
            ids = {d["test"] for d in diffs}
            seen = {d["test"]: {m: [] for m in MODES} for d in diffs}
            for i in range(args.confirm):
                for mode in MODES:
                    rerun = run_mode(mode, args, root, work, f"{mode}-confirm{i}", only=ids)
                    for nodeid in ids:
                        r = rerun["tests"].get(nodeid)
                        seen[nodeid][mode].append(r["outcome"] if r else "not run")
            for d in diffs:
                s = seen[d["test"]]
                stable = all(o == d["plain"] for o in s["plain"]) and all(
                    o == d["runtime"] for o in s["runtime"])
                d["confirm"] = "stable" if stable else (
                    "flaky: plain " + ",".join(s["plain"]) + " / runtime " + ",".join(
                        s["runtime"]))
        report = {
            "meta": {"command": " ".join([sys.executable] + sys.argv),
                     "pyg_ref": ref, "ref_warning": ref_warning, "versions": versions,
                     "gnnorch_commit": gnnorch_version, "platform": platform.platform(),
                     "runtime_options": args.runtime_options, "files": args.files,
                     "keyword": args.keyword, "markers": args.markers, "timeout": args.timeout,
                     "full_test": args.full_test},
            "counts": {m: counts(runs[m]["tests"]) for m in MODES},
            "runs": {m: {k: v for k, v in runs[m].items() if k != "tests"} for m in MODES},
            "skips_missing_packages": missing_package_skips(runs["plain"]["tests"]),
            "skip_reasons": {m: skip_reasons(runs[m]["tests"]) for m in MODES},
            "differences": diffs,
            "tests": {m: {k: {f: v for f, v in r.items()
                              if f != "longrepr" or r["outcome"] not in ("passed", "skipped")}
                          for k, r in runs[m]["tests"].items()} for m in MODES},
        }
        text = markdown(report)
        print(text)
        if args.md:
            args.md.write_text(text + "\n")
        if args.out:
            args.out.write_text(json.dumps(report, indent=1, default=str))
            print(f"\n[pyg-tests] results written to {args.out}", file=sys.stderr)
        return 0
    finally:
        if args.keep:
            print(f"[pyg-tests] work folder kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
