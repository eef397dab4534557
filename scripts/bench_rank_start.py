"""Rank processes started fresh vs warm (`Runtime(launch={"rank_start": ...})`).

Each setting runs in a fresh caller process (so the warm one starts with no zygote), which makes
``--launches`` launches in a row of ``--processes`` ranks each, of two functions:

* ``empty``: a function that returns its rank at once: the launch's own cost (starting the
  ranks, connecting them, the process group, stopping them);
* ``cora``: `examples/train_vanilla.py`'s GraphSAGE on Cora for ``--epochs`` epochs.

It prints each launch's wall seconds as the caller sees them (the call of the runtime) and the
idle zygote's memory after them, and writes them, with the machine and versions, to ``--out``.

    .venv/bin/python scripts/bench_rank_start.py --launches 4 \
        --out benchmarks/results/rank_start.json
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rank_of_this_process() -> int:
    import torch.distributed as dist

    return dist.get_rank()


def measure(start: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """Wall seconds of each launch, in this (fresh) process."""
    sys.path.insert(0, str(ROOT / "examples"))
    import gnnorch
    from gnnorch.datasets import load_cora
    from train_vanilla import train

    data = load_cora()
    launch = {"rank_start": start, "threads": 1}
    walls: dict[str, list[float]] = {"empty": [], "cora": []}
    for _ in range(args.launches):
        for name, fn, call_args in (("empty", rank_of_this_process, ()),
                                    ("cora", train, (data,))):
            runtime = gnnorch.Runtime(fn, processes=args.processes, launch=launch)
            kwargs = {"epochs": args.epochs} if name == "cora" else {}
            began = time.perf_counter()
            runtime(*call_args, **kwargs)
            walls[name].append(time.perf_counter() - began)
            how = runtime.last_run.stats[0]["launch"]["rank_start"]
            print(f"  {start}: {name} {walls[name][-1]:.2f} s ({how})", file=sys.stderr,
                  flush=True)
    if start == "warm":
        walls["zygote_memory_mb"] = _zygote_memory_mb()
    return walls


def _zygote_memory_mb() -> list[float]:
    """The idle zygote's resident and proportional set sizes, MB (after the launches)."""
    import psutil

    from gnnorch.launch import zygote

    info = psutil.Process(zygote.current_pid()).memory_full_info()
    return [info.rss / 2**20, info.pss / 2**20]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--out", default="bench-results/rank_start.json")
    ap.add_argument("--measure", choices=["fresh", "warm"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args)))
        return
    runs = {}
    for start in ("fresh", "warm"):
        cmd = [sys.executable, __file__, "--measure", start, "--launches", str(args.launches),
               "--processes", str(args.processes), "--epochs", str(args.epochs)]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, cwd=ROOT)
        runs[start] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"\n| function ({args.processes} ranks) | launch | fresh s | warm s | fresh / warm |")
    print("|---|---|---|---|---|")
    for name in ("empty", "cora"):
        for k, (fresh, warm) in enumerate(zip(runs["fresh"][name], runs["warm"][name]), 1):
            print(f"| {name} | {k} | {fresh:.2f} | {warm:.2f} | {fresh / warm:.1f}x |")
        later_fresh = statistics.median(runs["fresh"][name][1:])
        later_warm = statistics.median(runs["warm"][name][1:])
        print(f"| {name} | 2-{args.launches} (median) | {later_fresh:.2f} | {later_warm:.2f} | "
              f"{later_fresh / later_warm:.1f}x |")
    rss, pss = runs["warm"]["zygote_memory_mb"]
    print(f"\nidle zygote: {rss:.0f} MB resident, {pss:.0f} MB PSS")
    import torch

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.date.today().isoformat(), "machine": platform.node(),
        "cpus": len(os.sched_getaffinity(0)), "python": platform.python_version(),
        "torch": torch.__version__, "processes": args.processes, "epochs": args.epochs,
        "walls": runs}, indent=1))


if __name__ == "__main__":
    main()
