"""Command line: ``python -m gnnorch report PATH`` prints a tuning report's table;
``python -m gnnorch schema`` prints the report's JSON schema.

Bad input (a missing, corrupted or foreign file) gives one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import sys


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m gnnorch",
                                 description="gnnorch command line tools")
    sub = ap.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="print a tuning report (report.json) as a table")
    rep.add_argument("path", help="a report.json file, or the report_dir that holds one")
    rep.add_argument("--json", action="store_true", help="print the validated JSON instead")
    rep.add_argument("--plot", metavar="PNG", help="also write the report's plot to PNG")
    sub.add_parser("schema", help="print the JSON schema of tuning reports")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "schema":
        from .tune.schema import SCHEMA

        print(json.dumps(SCHEMA, indent=1))
        return 0
    from .tune.report import ReportError, TuningReport

    try:
        report = TuningReport.load(args.path)
    except ReportError as exc:
        print(f"gnnorch report: error: {exc}", file=sys.stderr)
        return 2
    try:
        text = report.to_json() if args.json else report.table()
    except (KeyError, TypeError, ValueError, IndexError) as exc:   # valid schema, odd values
        print(f"gnnorch report: error: {args.path}: cannot format the report "
              f"({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    try:
        print(text, flush=True)
    except BrokenPipeError:                  # e.g. piped into `head`
        sys.stderr.close()
        return 0
    if args.plot:
        try:
            report.plot(args.plot)
        except ImportError as exc:
            print(f"gnnorch report: error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
