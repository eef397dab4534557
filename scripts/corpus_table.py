"""The corpus of PyG's examples (tests/pyg_examples) as a Markdown table, from the JSON lines
its tests append to ``$GNNORCH_CORPUS_LOG``: per case and mode, each compared metric's vanilla
mean, the mode's mean and the tolerance, the outcome and the seconds over the case's seeds.

    GNNORCH_CORPUS_LOG=/tmp/corpus.jsonl .venv/bin/python -m pytest tests/pyg_examples -q
    .venv/bin/python scripts/corpus_table.py /tmp/corpus.jsonl [--modes device default]
"""
from __future__ import annotations

import argparse
import json


def rows(path: str, modes: list[str] | None) -> list[str]:
    out = ["| case | mode | outcome | metric: vanilla / mode (tol) | seconds |",
           "|---|---|---|---|---|"]
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    for r in records:
        if r["mode"] == "vanilla" or (modes and r["mode"] not in modes):
            continue
        cells = []
        for key, value in (r.get("summary") or {}).items():
            want, got = value[0], value[1]
            if isinstance(want, list):            # an exact metric, seed by seed
                cells.append(f"{key}: {'equal' if want == got else f'{want} vs {got}'}")
            else:
                cells.append(f"{key}: {want:.3f} / {got:.3f} ({value[2]:.3f})")
        detail = "; ".join(cells) or r.get("error", "")
        out.append(f"| {r['case']} | {r['mode']} | {r['outcome']} | {detail} | "
                   f"{r['seconds']:.1f} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--modes", nargs="*", help="only these modes (default: all but vanilla)")
    args = parser.parse_args()
    print("\n".join(rows(args.log, args.modes)))


if __name__ == "__main__":
    main()
