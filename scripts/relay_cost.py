"""What relaying rank 0's log records to the caller's handlers costs (`gnnorch.launch.relay`).

A function logs N records at INFO to a logger that holds a counting handler in the caller, and
times its loop. Rows: the plain call (the handler in the same process), the runtime with one
rank (the same), and two ranks, where rank 0 sends each record to the caller, which hands it to
the handler (the loop's time is what the function pays; the caller's handling runs beside it),
and two ranks with the handler removed (no logger holds one: the records are made and dropped
in the ranks, nothing is relayed; the loop's floor in a run of two ranks).
Each row also says how many records the caller's handler received and whether the last one's
text is the plain call's.

    python scripts/relay_cost.py [--records 20000] [--repeats 3] [--out benchmarks/results/relay_cost.json]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import pathlib
import platform
import statistics
import sys
import time

import torch

import gnnorch


class Counting(logging.Handler):
    """The caller's handler: counts what it handles and keeps the last formatted line."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.last = ""
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1
        self.last = self.format(record)


def log_records(n: int) -> float:
    """Log `n` records (a step's loss each) and return the loop's seconds."""
    log = logging.getLogger("relay_cost")
    start = time.perf_counter()
    for step in range(n):
        log.info("step %d loss %.4f", step, 1.0 / (step + 1))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/relay_cost.json")
    args = parser.parse_args()
    logger = logging.getLogger("relay_cost")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = Counting()
    logger.addHandler(handler)

    rows = []
    two_ranks = gnnorch.Runtime(log_records, processes=2, verbose=False,
                                launch={"threads": 1})
    runs = {"plain call": lambda n: log_records(n),
            "runtime, 1 rank": gnnorch.Runtime(log_records, processes=1, verbose=False),
            "runtime, 2 ranks (rank 0 relays)": two_ranks,
            "runtime, 2 ranks, no handler (records dropped)": two_ranks}
    expected = None
    for name, run in runs.items():
        if "no handler" in name:
            logger.removeHandler(handler)
        seconds, received = [], []
        for _ in range(args.repeats):
            handler.count = 0
            seconds.append(run(args.records))
            received.append(handler.count)
            expected = expected or handler.last
        rows.append({"row": name, "records": args.records,
                     "loop_s_median": statistics.median(seconds),
                     "us_per_record": 1e6 * statistics.median(seconds) / args.records,
                     "received": received,
                     "last_line_as_plain": handler.last == expected if any(received) else None})
    for row in rows:
        print(f"{row['row']:48s} {row['us_per_record']:7.2f} us/record  received "
              f"{row['received']}  last line as plain: {row['last_line_as_plain']}")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.node(), "cores": len(os.sched_getaffinity(0)),
                               "python": platform.python_version(), "torch": torch.__version__,
                               "date": time.strftime("%Y-%m-%d"),
                               "command": " ".join(["python"] + sys.argv), "rows": rows},
                              indent=2))


if __name__ == "__main__":
    main()
