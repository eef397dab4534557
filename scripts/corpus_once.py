"""One seed of PyG's example corpus (tests/pyg_examples) under any runtime options, beside
vanilla, for exploring a mode the corpus tests do not run (not in CI; no tolerance applied:
read the metrics side by side).

    .venv/bin/python scripts/corpus_once.py --options '{"processes": 2, "data_path": "device"}' \
        [--seed 0] [case ...]

Prints one JSON line per case: vanilla's and the mode's metrics, seconds, and which loaders
the GPU data path served (``stats[0]["device"]``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "pyg_examples"))


def _metrics(out) -> dict:
    items = out.items() if isinstance(out, dict) else [("out", out)]
    return {k: round(float(v), 3) if isinstance(v, (int, float)) else str(v)[:40]
            for k, v in items}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--options", required=True, help="runtime options as a JSON object")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("cases", nargs="*", help="case names (default: every case)")
    args = parser.parse_args()
    options = json.loads(args.options)
    if not isinstance(options, dict):
        raise SystemExit("--options must be a JSON object, e.g. '{\"processes\": 2}'")
    import corpus
    import gnnorch

    cases = corpus.load_cases()
    unknown = set(args.cases) - {c.name for c in cases}
    if unknown:
        raise SystemExit(f"unknown cases {sorted(unknown)}; choose from "
                         f"{[c.name for c in cases]}")
    for case in cases:
        if args.cases and case.name not in args.cases:
            continue
        row: dict = {"case": case.name}
        for mode in ("vanilla", "mode"):
            torch.manual_seed(args.seed)
            case_args, kwargs = case.make_args(args.seed)
            torch.manual_seed(args.seed)
            start = time.time()
            try:
                if mode == "vanilla":
                    out = case.train(*case_args, **{**kwargs, **case.vanilla_kwargs})
                else:
                    runtime = gnnorch.Runtime(case.train, **{**case.options, **options},
                                              verbose=False)
                    out = runtime(*case_args, **kwargs)
                    device = runtime.last_run.stats[0].get("device", {})
                    row["served"] = [l.get("served") for l in device.get("loaders", [])]
                row[mode] = _metrics(out)
            except Exception as exc:  # noqa: BLE001 - reported per case
                row[mode] = f"ERROR {type(exc).__name__}: {str(exc)[:300]}"
            row[f"{mode}_s"] = round(time.time() - start, 1)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
