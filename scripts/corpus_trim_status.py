"""Which models of PyG's example corpus (`tests/pyg_examples`) hop-aware trimming reaches, and
why not where it does not: each named case run once under `gnnorch.Runtime` (seed 0, the
case's own options plus `--options`), its rank-0 trimming record printed as one JSON line.

    .venv/bin/python scripts/corpus_trim_status.py to_hetero_mag_neighbor taobao_multi_gpu
    .venv/bin/python scripts/corpus_trim_status.py --options '{"data_path": "device"}' ...
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "pyg_examples"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))
import corpus  # noqa: E402


def status(case: "corpus.Case", options: dict) -> dict:
    import gnnorch

    torch.manual_seed(0)
    args, kwargs = case.make_args(0)
    torch.manual_seed(0)
    runtime = gnnorch.Runtime(case.train, **{**case.options, **options})
    runtime(*args, **kwargs)
    trim = runtime.last_run.stats[0].get("trim") or {}
    loaders = (runtime.last_run.stats[0].get("sampler") or {}).get("loaders") or []
    return {"case": case.name, "options": options,
            "graphs": sorted({str(loader.get("graph")) for loader in loaders}),
            "models": [{k: m.get(k) for k in ("model", "trimmed", "encoder", "encoder_calls",
                                              "seeds_only", "layer_plan", "compact", "reason",
                                              "trimmed_forwards", "untrimmed_forwards",
                                              "materialized")} for m in trim.get("models", [])],
            "rows_computed": trim.get("rows_computed"),
            "rows_untrimmed": trim.get("rows_untrimmed")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--options", default="{}", help="Runtime options as JSON")
    parser.add_argument("--out", type=Path, help="append the JSON lines to this file")
    args = parser.parse_args()
    cases = {case.name: case for case in corpus.load_cases()}
    unknown = [name for name in args.cases if name not in cases]
    if unknown:
        parser.error(f"unknown cases {unknown}; the corpus has: {', '.join(sorted(cases))}")
    for name in args.cases:
        record = status(cases[name], json.loads(args.options))
        line = json.dumps(record)
        print(line, flush=True)
        if args.out:
            with args.out.open("a") as out:
                out.write(line + "\n")


if __name__ == "__main__":
    main()
