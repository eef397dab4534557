"""The fork race behind the reddit p=2 hang, measured (not in CI): forks beside threads that
enter Python from C, as torch's gloo threads do after each collective, with and without
gnnorch's fork guard (`gnnorch.launch.fork_guard`).

    python scripts/fork_race.py [--forks 2000] [--python /path/to/python3.x ...]
                                [--out benchmarks/results/fork_race.json]

For each interpreter (this one by default, plus every ``--python``): ``--forks`` forks from a
process whose two other threads keep creating C threads that call a Python function (each
takes CPython's thread-state lock without the GIL, as ``PyThreadState_New`` does for torch's
``decref_pyobject``). A child that has not ended 3 s after its fork is *hung* (then killed).
The guarded rows (this interpreter only: they import gnnorch) fork through the guard. The
latency rows time ``os.fork()`` in the parent, torch imported, nothing else running: plain vs
guarded (the guard waits for the child's announcement).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HARNESS = r"""
import ctypes, json, os, signal, sys, threading, time
forks, guarded, churn = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3] == "1"
if guarded or not churn:
    sys.path.insert(0, sys.argv[4])
    import torch
if guarded:
    from gnnorch.launch import fork_guard
    assert fork_guard.install()
    fork_guard.ANNOUNCE_SECONDS = 1.0
stop = False
if churn:
    libc = ctypes.CDLL(None)
    start = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda arg: None)
    libc.pthread_create.argtypes = [ctypes.POINTER(ctypes.c_ulong), ctypes.c_void_p,
                                    type(start), ctypes.c_void_p]
    libc.pthread_join.argtypes = [ctypes.c_ulong, ctypes.c_void_p]
    def spin():
        while not stop:
            t = ctypes.c_ulong()
            libc.pthread_create(ctypes.byref(t), None, start, None)
            libc.pthread_join(t.value, None)
    for _ in range(2):
        threading.Thread(target=spin, daemon=True).start()
hung, latency = 0, []
for _ in range(forks):
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    latency.append(time.perf_counter() - t0)
    deadline = time.monotonic() + 3
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.monotonic() > deadline:
            hung += 1
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            break
        time.sleep(0.0005)
stop = True
latency.sort()
out = {"python": sys.version.split()[0], "forks": forks, "hung": hung,
       "fork_ms_median": 1e3 * latency[len(latency) // 2],
       "fork_ms_p99": 1e3 * latency[int(0.99 * (len(latency) - 1))]}
if guarded:
    out.update(fork_guard.stats().to_dict())
print(json.dumps(out))
"""


def run(python: str, forks: int, guarded: bool, churn: bool) -> dict:
    proc = subprocess.run([python, "-c", HARNESS, str(forks), "1" if guarded else "0",
                           "1" if churn else "0", str(ROOT / "src")],
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row.update(guarded=guarded, churn=churn)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forks", type=int, default=2000)
    parser.add_argument("--python", action="append", default=[])
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/fork_race.json"))
    args = parser.parse_args()
    rows = [run(python, args.forks, False, True) for python in [sys.executable, *args.python]]
    rows.append(run(sys.executable, args.forks, True, True))
    rows += [run(sys.executable, min(args.forks, 500), guarded, False)
             for guarded in (False, True)]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))
    print("| python | C threads entering Python | fork | forks | hung children | stuck "
          "children killed and forked again | fork() in the parent, median / p99 ms |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['python']} | {'yes' if row['churn'] else 'no'} | "
              f"{'guarded' if row['guarded'] else 'plain'} | {row['forks']} | {row['hung']} | "
              f"{row.get('stuck_killed', '-')} | {row['fork_ms_median']:.2f} / "
              f"{row['fork_ms_p99']:.2f} |")
    rates = [r["hung"] / r["forks"] for r in rows if r["churn"] and not r["guarded"]]
    print(f"plain forks hung: {statistics.fmean(rates):.2%} on average over the interpreters")


if __name__ == "__main__":
    main()
