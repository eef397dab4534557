"""Entry point of a rank process: `main`, run by ``python -c`` `zygote.WORKER_ARGV` (started by
the supervisor; the working directory kept off the path while it imports, `zygote.SAFE_PATH`).

A fresh interpreter (never a fork of the user's process: fork after OpenMP hangs), so the user's
`__main__` is not re-imported. Protocol over a Unix socket authenticated with the caller's key
(read from stdin): the rank says hello, receives (sys.path, cwd, the caller's logging layout),
then the pickled *runner* and the pickled payload (fn, args, kwargs); it takes over the layout
(`relay.install`), binds itself, joins the process group and calls
``runner(process, fn, args, kwargs)`` with its `RankProcess`, which returns (value, summary).
It sends exactly one final message: ("result", bytes, summary) from rank 0, ("done", summary)
from the others, or ("error", exception bytes | None, type name, message, traceback text).
Before it, rank 0 (when its output is the caller's) sends its log records and warnings as
("log", ...) and ("warning", ...) messages (`relay`).

This module knows processes only: what a rank does with the user's function (the seams, the
run's hooks) is the runner's business (`gnnorch.execute.rank.RankJob`, under the run's watchdog:
`gnnorch.execute.watched`).

Diagnosis: ``kill -USR1 <pid>`` makes a rank (and the loader workers it forked) write every
thread's stack to its stderr (rank 0: the caller's; others: ``<log_dir>/rank<r>.log``).
``GNNORCH_SEAM_DELAY`` (seconds, test-only: scripts/soak.py) adds a random sleep before the
rank joins its group and before it reports.
"""
from __future__ import annotations

import ctypes
import faulthandler
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when the supervisor dies (Linux), and watch too."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(1.0)

    threading.Thread(target=watch, name="gnnorch-parent-watch", daemon=True).start()


def main() -> None:
    _die_with_parent()
    if hasattr(signal, "SIGUSR1"):   # `kill -USR1 <pid>`: every thread's stack to the rank's log
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    spec = json.loads(os.environ["GNNORCH_RANK_SPEC"])
    authkey = bytes.fromhex(sys.stdin.readline().strip())
    multiprocessing.current_process().authkey = authkey  # receives shared-memory handles
    rank, world = spec["rank"], spec["world_size"]
    trainer_cpus = spec["cores"]["trainer_cpus"] if spec["cores"] else None
    if trainer_cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, trainer_cpus)

    from multiprocessing.connection import Client

    conn = Client(spec["address"], family="AF_UNIX", authkey=authkey)
    conn.send(("hello", rank, os.getpid()))
    try:
        status = _run(conn, spec)
    finally:
        conn.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _seam_delay() -> None:
    """Test-only (scripts/soak.py): a random sleep of up to GNNORCH_SEAM_DELAY seconds."""
    delay = float(os.environ.get("GNNORCH_SEAM_DELAY") or 0)
    if delay:
        import random

        time.sleep(random.Random().uniform(0, delay))


def _run(conn, spec: dict) -> int:  # noqa: ANN001 - multiprocessing Connection
    import datetime

    import torch
    import torch.distributed as dist

    from . import relay, serialize
    from .context import RankProcess
    from .plan import CorePlan, RankCores

    rank, world = spec["rank"], spec["world_size"]
    channel = relay.RankChannel(conn)   # the final message and, from rank 0, relayed ones
    try:
        plan = CorePlan(*spec["plan"])
        cores = RankCores(rank=rank, trainer_cpus=tuple(spec["cores"]["trainer_cpus"]),
                          sampler_cpus=tuple(spec["cores"]["sampler_cpus"])) if spec["cores"] else None
        torch.set_num_threads(plan.threads)
        sys_path, cwd, layout_bytes = conn.recv()
        sys.path[:] = sys_path
        os.chdir(cwd)
        runner = serialize.loads(conn.recv_bytes())
        fn, args, kwargs = serialize.loads(conn.recv_bytes())
        # after the imports unpickling made: a handler one of them added is replaced as well
        relay.install(serialize.loads(layout_bytes), channel if spec["relay"] else None)
        store = dist.TCPStore("127.0.0.1", spec["store_port"], is_master=False,
                              timeout=datetime.timedelta(seconds=spec["start_timeout"]))
        comm_device = None
        if spec["backend"] == "nccl":
            torch.cuda.set_device(0)  # CUDA_VISIBLE_DEVICES holds this rank's GPU only
            comm_device = torch.device("cuda", 0)
        _seam_delay()
        dist.init_process_group(spec["backend"], store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=spec["collective_timeout"]))
        process = RankProcess(rank=rank, world_size=world, plan=plan, cores=cores,
                              backend=spec["backend"], comm_device=comm_device)
        result, summary = runner(process, fn, args, kwargs)
        changed = serialize.changed_in_place()
        if changed:   # shared with every rank: each made the change (`serialize`)
            summary["stats"]["arguments_changed_in_place"] = changed
        _seam_delay()
        if rank == 0:
            channel.final(("result", serialize.dumps_result(result), summary))
        else:
            channel.final(("done", summary))
        dist.destroy_process_group()
        return 0
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the caller
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        sys.stderr.write(text)
        channel.final(("error", serialize.dumps_exception(exc), type(exc).__qualname__,
                       str(exc), text))
        return 1


if __name__ == "__main__":
    main()
