"""Command line: ``python -m gnnorch report PATH`` prints a tuning report's table;
``python -m gnnorch schema`` prints the report's JSON schema; ``python -m gnnorch plan
CLUSTER.json PROFILE.json`` plans where a distributed job's tasks run (`gnnorch.place`,
docs/placement.md) and prints the placement, the flow schedule and the predicted iteration
time against co-location.

Bad input (a missing, corrupted or foreign file; a cluster the job cannot fit) gives one line
on stderr and exit code 2.
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
    plan = sub.add_parser("plan", help="plan task placement and flow scheduling (DGTP) for a "
                                       "distributed job on a cluster (docs/placement.md)")
    plan.add_argument("cluster", help="cluster file (JSON: nodes, NICs, optional links)")
    plan.add_argument("profile", help="profile file (JSON: one iteration's task times and "
                                      "flow bytes)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    plan.add_argument("--steps", type=int, help="Metropolis proposals (default 1500)")
    plan.add_argument("--time-budget", type=float, metavar="SECONDS",
                      help="stop the search after this many seconds")
    plan.add_argument("--policy", choices=("oes", "fifo", "mrtf"), default="oes",
                      help="flow schedule to plan for (default oes: DGTP's fair sharing)")
    plan.add_argument("--flows", type=int, default=12, metavar="N",
                      help="remote flows of the first iteration to list (0: all)")
    return ap


def _plan(args: argparse.Namespace) -> tuple[int, str]:
    """(exit code, text) of ``plan``; errors as one line."""
    from .place import PlacementError, load_cluster, load_profile, plan_overview

    options: dict = {"policy": args.policy}
    if args.steps is not None:
        options["steps"] = args.steps
    if args.time_budget is not None:
        options["time_budget_s"] = args.time_budget
    try:
        cluster, names = load_cluster(args.cluster)
        profile = load_profile(args.profile)
        result = plan_overview(cluster, profile, names, seed=args.seed, **options)
    except PlacementError as exc:      # bad files, or no placement fits the cluster
        return 2, f"gnnorch plan: error: {exc}"
    except ValueError as exc:          # bad command line values (--steps -1, --seed -1)
        return 2, f"gnnorch plan: error: {exc}"
    return 0, (json.dumps(result.to_dict(), indent=1) if args.json
               else result.text(max_flows=args.flows))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "schema":
        from .tune.schema import SCHEMA

        print(json.dumps(SCHEMA, indent=1))
        return 0
    if args.command == "plan":
        code, text = _plan(args)
        if code:
            print(text, file=sys.stderr)
            return code
        _print(text)
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
    if _print(text):
        return 0
    if args.plot:
        try:
            report.plot(args.plot)
        except ImportError as exc:
            print(f"gnnorch report: error: {exc}", file=sys.stderr)
            return 2
    return 0


def _print(text: str) -> bool:
    """Print `text` to stdout; True when the reader had gone (a closed pipe, e.g. into `head`:
    no error, but nothing more to do)."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        sys.stderr.close()
        return True
    return False


if __name__ == "__main__":
    sys.exit(main())
