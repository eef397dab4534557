"""Measure vanilla PyG's spread over seeds for corpus cases (the ``sd`` behind each tolerance).

    .venv/bin/python tests/pyg_examples/measure_noise.py [--seeds 10] [--mode vanilla] [NAME ...]

For each case (all when no NAME is given) runs ``train`` for seeds 0..N-1 exactly as
``test_corpus.py`` does (``torch.manual_seed(seed)`` before building the arguments and before
the call) and prints, per compared metric, the mean and the standard deviation over seeds, plus
the seconds per run. ``--mode default`` / ``--mode p2`` measure the runtime instead.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("GNNORCH_DATA_DIR", str(HERE.parents[1] / ".data"))


def main() -> None:
    import torch

    import corpus

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--mode", choices=corpus.MODES, default="vanilla")
    parser.add_argument("--json", help="append one JSON line per case to this file")
    opts = parser.parse_args()

    for case in corpus.load_cases():
        if opts.names and case.name not in opts.names:
            continue
        rows, seconds = [], []
        for seed in range(opts.seeds):
            torch.manual_seed(seed)
            args, kwargs = case.make_args(seed)
            torch.manual_seed(seed)
            start = time.perf_counter()
            if opts.mode == "vanilla":
                result = case.train(*args, **{**kwargs, **case.vanilla_kwargs})
            else:
                import gnnorch

                options = {**case.options, **corpus.MODE_OPTIONS[opts.mode]}
                result = gnnorch.Runtime(case.train, **options)(*args, **kwargs)
            seconds.append(time.perf_counter() - start)
            rows.append({k: corpus.as_float(result[k])
                         for k in list(case.metrics) + list(case.exact)})
        summary = {
            key: {"mean": round(statistics.fmean(r[key] for r in rows), 4),
                  "sd": round(statistics.stdev(r[key] for r in rows), 4)}
            for key in rows[0]
        }
        line = {"case": case.name, "mode": opts.mode, "seeds": opts.seeds,
                "s_per_run": round(statistics.fmean(seconds), 2), "metrics": summary}
        print(json.dumps(line), flush=True)
        if opts.json:
            with open(opts.json, "a") as f:
                f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
