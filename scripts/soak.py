"""Soak test of rank coordination (issue 22; not in CI): many short ``processes=2`` runs over the
patterns that touch it, with random delays injected at the seams, counting hangs, errors and
leftover processes.

    python scripts/soak.py --runs 300 --deadline 90 [--out soak.json] [--seed 0]
                           [--patterns persistent,break,...] [--delay 0.05]
    python scripts/soak.py --report a.json,b.json     # one table over several soaks' JSON

Each run calls ``gnnorch.Runtime(pattern, processes=2, ...)(cora, ...)`` in this process under
a SIGALRM deadline (gnnorch stops its ranks when the call it waits in raises). Seam delays:
``GNNORCH_SEAM_DELAY`` (seconds, read once by each rank process: a random sleep of up to that
before each gradient-seam round, `gnnorch.intercept.join`, and before a rank joins its group
and reports, `gnnorch.launch.worker`), plus random sleeps inside the patterns' loops.

Outcomes per run: ``ok`` (returned), ``expected`` (the error the pattern provokes, e.g. a
killed rank's `RankDiedError` naming rank 1, `KeyboardInterrupt` for Ctrl-C), ``error`` (any
other exception; ``named`` says whether it is a gnnorch error naming a rank), ``hang`` (past
the deadline). After every run, child processes of this process still alive 10 s later are
counted as leftovers (and killed). Writes a JSON file and prints a table per pattern, with the
fork guard's counts summed over ranks (`gnnorch.launch.fork_guard`: forks made through it and
stuck children it killed and forked again; ``workers_each_epoch`` forks most).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import sys
import threading
import time
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


# -- the patterns (run in both ranks; `jitter` sleeps a random while at the loader seam) ----
def _parts(data, lr=0.01, **loader_kwargs):
    from torch_geometric.loader import NeighborLoader
    from torch_geometric.nn import GraphSAGE

    loader = NeighborLoader(data, num_neighbors=[5, 5], batch_size=32, shuffle=True,
                            input_nodes=loader_kwargs.pop("input_nodes", data.train_mask),
                            **loader_kwargs)
    model = GraphSAGE(data.num_features, 16, num_layers=2, out_channels=7)
    return loader, model, torch.optim.Adam(model.parameters(), lr=lr)


def _jitter(delay):
    if delay:
        time.sleep(random.uniform(0, delay))


def _train_step(model, optimizer, batch):
    optimizer.zero_grad()
    out = model(batch.x, batch.edge_index)[:batch.batch_size]
    loss = F.cross_entropy(out, batch.y[:batch.batch_size])
    loss.backward()
    optimizer.step()
    return loss


def _train_and_evaluate(data, delay, epochs, **workers):
    """Train on a loader and evaluate on a full-neighbourhood loader every epoch, both with
    the loader worker options `workers`."""
    from torch_geometric.loader import NeighborLoader

    loader, model, optimizer = _parts(data, **workers)
    evaluate = NeighborLoader(data, num_neighbors=[-1], batch_size=512, **workers)
    for _ in range(epochs):
        model.train()
        for batch in loader:
            _train_step(model, optimizer, batch)
            _jitter(delay)
        model.eval()
        with torch.no_grad():
            for batch in evaluate:
                model(batch.x, batch.edge_index)
    return "ok"


def persistent(data, delay):
    """Persistent-worker training loader and a persistent evaluation loader (reddit's shape)."""
    return _train_and_evaluate(data, delay, 2, num_workers=1, persistent_workers=True)


def workers_each_epoch(data, delay):
    """Training and evaluation loaders whose workers start at every epoch (not persistent):
    each start forks right after the previous epoch's collectives (the fork race)."""
    return _train_and_evaluate(data, delay, 3, num_workers=2)


def early_break(data, delay):
    """Leave the epoch at a rank-dependent step (and on a small loss)."""
    loader, model, optimizer = _parts(data)
    rank = dist.get_rank()
    for epoch in range(3):
        for i, batch in enumerate(loader):
            loss = _train_step(model, optimizer, batch)
            _jitter(delay)
            if epoch >= 1 and (i >= random.randint(0, 3) + rank or loss.item() < 0.05):
                break
    return "ok"


def evaluation(data, delay):
    """Evaluation loaders (shuffle=True under no_grad) on every rank and one on rank 0 only;
    a skipped step on rank 1."""
    from torch_geometric.loader import NeighborLoader

    loader, model, optimizer = _parts(data)
    val = NeighborLoader(data, num_neighbors=[5, 5], batch_size=64, shuffle=True,
                         input_nodes=data.val_mask)
    for _ in range(2):
        model.train()
        for i, batch in enumerate(loader):
            optimizer.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            if dist.get_rank() == 1 and i == 1:
                loss = loss * float("nan")
            if loss.isfinite():
                loss.backward()
                optimizer.step()
            _jitter(delay)
        model.eval()
        with torch.no_grad():
            for batch in val:
                model(batch.x, batch.edge_index)
            if dist.get_rank() == 0:
                model(data.x, data.edge_index)
                _jitter(delay * 10)
    return "ok"


def own_group(data, delay):
    """The user's own init_process_group and DistributedDataParallel (PyG's multi-GPU shape)."""
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    seeds = data.train_mask.nonzero().view(-1)[rank::world]
    loader, model, optimizer = _parts(data, input_nodes=seeds)
    model = DistributedDataParallel(model)
    for _ in range(2):
        for batch in loader:
            _train_step(model, optimizer, batch)
            _jitter(delay)
    dist.destroy_process_group()
    return "ok"


def partitioned(data, delay):
    """Training with the partitioned feature store (options: partition_features=True)."""
    loader, model, optimizer = _parts(data)
    for _ in range(2):
        for batch in loader:
            _train_step(model, optimizer, batch)
            _jitter(delay)
    return "ok"


def killed_rank(data, delay):
    """Rank 1 is SIGKILLed at a random step: RankDiedError naming it, nothing left behind."""
    loader, model, optimizer = _parts(data)
    fatal = random.randint(0, 6)
    for epoch in range(2):
        for i, batch in enumerate(loader):
            _train_step(model, optimizer, batch)
            if dist.get_rank() == 1 and epoch * 10 + i >= fatal:
                os.kill(os.getpid(), signal.SIGKILL)
    return "ok"


def ctrl_c(data, delay):
    """Long training; the soak sends SIGINT to itself at a random moment."""
    loader, model, optimizer = _parts(data)
    for _ in range(200):
        for batch in loader:
            _train_step(model, optimizer, batch)
    return "ok"


PATTERNS = {
    "persistent": (persistent, {}, None),
    "workers_each_epoch": (workers_each_epoch, {}, None),
    "break": (early_break, {}, None),
    "evaluation": (evaluation, {}, None),
    "own_group": (own_group, {}, None),
    "partitioned": (partitioned, {"partition_features": True, "sampler": "gnnorch"}, None),
    "killed_rank": (killed_rank, {}, "RankDiedError"),
    "ctrl_c": (ctrl_c, {}, "KeyboardInterrupt"),
}


# -- the driver -----------------------------------------------------------------------------
class Deadline(Exception):
    pass


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}\n" + "\n".join(getattr(exc, "__notes__", []))


def _named(exc: BaseException) -> bool:
    """A gnnorch error (or a user's exception re-raised by gnnorch) that names a rank."""
    from gnnorch.errors import GnnorchError

    text = _text(exc)
    ours = isinstance(exc, GnnorchError) or "[gnnorch] raised in rank" in text
    return ours and re.search(r"\brank \d+\b", text) is not None


def _leftovers() -> list[str]:
    """Children of this process still alive 10 s after a run (killed), but the zygote that warm
    launches keep for the process (`gnnorch.launch.zygote`): its own children are counted."""
    from gnnorch.launch import zygote

    kept = zygote.current_pid()
    children = [p for p in psutil.Process().children(recursive=True) if p.pid != kept]
    _, alive = psutil.wait_procs(children, timeout=10)
    found = []
    for proc in alive:
        try:
            found.append(f"{proc.pid} {proc.name()}")
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    return found


def run_once(name: str, data, deadline: float, delay: float, log_dir: Path) -> dict:
    import gnnorch

    fn, options, expected = PATTERNS[name]
    record = {"pattern": name, "outcome": "ok", "error": None, "named": None}
    main = threading.get_ident()
    timer = None
    if name == "ctrl_c":
        timer = threading.Timer(random.uniform(1.0, 6.0),
                                lambda: signal.pthread_kill(main, signal.SIGINT))
        timer.start()

    def expired(signum, frame):
        raise Deadline(f"{name} did not finish within {deadline:.0f} s")

    previous = signal.signal(signal.SIGALRM, expired)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.setitimer(signal.ITIMER_REAL, deadline)
    start = time.monotonic()
    try:
        runtime = gnnorch.Runtime(fn, processes=2, autotune=False,
                                  launch={"threads": 1, "bind": False, "log_dir": str(log_dir),
                                          "collective_timeout": 60},
                                  **options)
        runtime(data, delay)
        guards = [stats.get("fork_guard") or {} for stats in runtime.last_run.stats.values()]
        record["forks"] = sum(g.get("forks", 0) for g in guards)
        record["stuck_killed"] = sum(g.get("stuck_killed", 0) for g in guards)
        record["rank_start"] = runtime.last_run.stats[0].get("launch", {}).get("rank_start")
        if expected is not None:
            record.update(outcome="error", error=f"expected {expected}, the run returned")
    except Deadline as exc:
        record.update(outcome="hang", error=str(exc))
    except BaseException as exc:  # noqa: BLE001 - every outcome is recorded
        kind = type(exc).__name__
        named = kind == "KeyboardInterrupt" or _named(exc)
        ok = kind == expected and (kind == "KeyboardInterrupt" or "rank 1" in _text(exc))
        record.update(outcome="expected" if ok else "error", error=_text(exc)[:600],
                      named=named)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if timer is not None:
            timer.cancel()
        signal.signal(signal.SIGINT, previous_int)
    record["seconds"] = round(time.monotonic() - start, 2)
    record["leftovers"] = _leftovers()
    return record


def table(records: list[dict]) -> str:
    rows = [("pattern", "runs", "ok", "expected", "errors", "unnamed", "hangs", "leftover",
             "median s", "guarded forks", "stuck killed")]
    for name in list(PATTERNS) + ["all"]:
        mine = [r for r in records if name == "all" or r["pattern"] == name]
        if not mine:
            continue
        count = lambda outcome: sum(r["outcome"] == outcome for r in mine)  # noqa: E731
        rows.append((name, len(mine), count("ok"), count("expected"), count("error"),
                     sum(r["outcome"] == "error" and not r["named"] for r in mine),
                     count("hang"), sum(len(r["leftovers"]) for r in mine),
                     f"{statistics.median(r['seconds'] for r in mine):.1f}",
                     sum(r.get("forks", 0) for r in mine),
                     sum(r.get("stuck_killed", 0) for r in mine)))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("| " + " | ".join(str(v).ljust(w) for v, w in zip(row, widths)) + " |"
                     for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--deadline", type=float, default=90.0, help="seconds per run")
    parser.add_argument("--delay", type=float, default=0.05,
                        help="largest random delay (s) injected at each seam")
    parser.add_argument("--patterns", default=",".join(PATTERNS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="soak.json")
    parser.add_argument("--stop-at", type=float, default=None,
                        help="UTC epoch seconds after which no new run starts")
    parser.add_argument("--report", default=None,
                        help="comma-separated soak JSON files: print their combined table")
    args = parser.parse_args()
    if args.report:
        runs = [json.loads(Path(p).read_text()) for p in args.report.split(",")]
        records = [r for run in runs for r in run["records"]]
        wall = sum(run["wall_s"] for run in runs)
        print(f"{len(records)} runs in {len(runs)} soak(s), {wall:.0f} s of soak wall time")
        print(table(records))
        return
    names = args.patterns.split(",")
    unknown = set(names) - set(PATTERNS)
    if unknown:
        raise SystemExit(f"unknown patterns {sorted(unknown)}; choose from {list(PATTERNS)}")
    random.seed(args.seed)
    os.environ["GNNORCH_SEAM_DELAY"] = str(args.delay)   # read by the rank processes
    from gnnorch.datasets import load_cora

    data = load_cora()
    log_dir = Path(args.out).with_suffix(".logs")
    log_dir.mkdir(parents=True, exist_ok=True)
    records: list[dict] = []
    started = time.time()
    for i in range(args.runs):
        if args.stop_at is not None and time.time() > args.stop_at:
            break
        name = names[i % len(names)]
        record = run_once(name, data, args.deadline, args.delay, log_dir)
        record["run"] = i
        records.append(record)
        flag = "" if record["outcome"] in ("ok", "expected") else f"  <-- {record['error']}"
        print(f"[{i + 1}/{args.runs}] {name}: {record['outcome']} {record['seconds']} s "
              f"leftovers={len(record['leftovers'])}{flag}", flush=True)
        summary = {"runs": len(records), "deadline_s": args.deadline, "delay_s": args.delay,
                   "wall_s": round(time.time() - started, 1), "cores": os.cpu_count(),
                   "torch": torch.__version__, "records": records}
        Path(args.out).write_text(json.dumps(summary, indent=1))
    print(table(records))


if __name__ == "__main__":
    main()
