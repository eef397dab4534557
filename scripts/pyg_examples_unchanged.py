#!/usr/bin/env python
"""Run PyG's own example scripts *unchanged*, plainly and under `gnnorch.Runtime`, and compare
what they print.

    .venv/bin/python scripts/pyg_examples_unchanged.py --md results.md --out results.json
    .venv/bin/python scripts/pyg_examples_unchanged.py --examples gat.py jit/gcn.py --seeds 0 1

The corpus (`tests/pyg_examples`) adapts each example (offline data, small sizes, a `train`
function returning metrics). This script does not touch the scripts at all: PyG's
`examples/` tree is extracted from the fetched bare repository at the installed PyG version
(`git archive`, as `pyg_tests_under_runtime.py` does) into a work folder, and each script runs
in a fresh Python process, where `Planetoid.download` copies the bundled raw files
(`../shared/data/planetoid`) into the folder the example chose (the one change, made in both
modes: this machine has no network):

* ``plain``: ``runpy.run_path(script, run_name="__main__")`` after seeding torch, numpy and
  random with the seed;
* ``runtime``: the same call as the body of a function run by
  ``gnnorch.Runtime(body, **options)()`` (default options: the runtime exactly as a new user
  writes it), the same seeding before it;
* ``plain-tuned-malloc`` (``--tuned-malloc``): ``plain`` after only the runtime's glibc malloc
  settings (`gnnorch.launch.allocator.tune_allocator`), for scripts that are not deterministic:
  memory layout moves their floating-point rounding.

Every number the script prints on its last lines as ``Name: value`` is parsed; the table lists
the exit status of both runs, the wall time and the printed test metrics (keys containing
"test", else "acc"/"auc"). A script that fails plainly (a package missing here: captum, wandb's
absence is fine) is listed as not comparable.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED_PLANETOID = REPO.parent / "shared" / "data" / "planetoid"
DEFAULT_PYTHON = REPO / ".venv" / "bin" / "python"
DEFAULT_MIRROR = Path("/work/.mirror/pyg-team+pytorch_geometric/repo")

# Planetoid (Cora / CiteSeer) programs that run on one CPU, each "path [arguments]" under PyG's
# tree; left out: examples/multi_gpu/model_parallel.py (two GPUs), cora.py (pyg-lib),
# tensorboard_logging.py (tensorboard), explain/captum_explainer.py (captum), contrib/*
# (third-party attack / explainer code), seal_link_pred.py (an hour here), dna.py (14 minutes
# a run here).
DEFAULT_EXAMPLES = [
    "examples/gcn.py", "examples/gat.py", "examples/agnn.py", "examples/arma.py",
    "examples/mixhop.py", "examples/sgc.py", "examples/tagcn.py",
    "examples/pmlp.py", "examples/graph_unet.py", "examples/infomax_transductive.py",
    "examples/argva_node_clustering.py", "examples/ar_link_pred.py", "examples/rect.py",
    "examples/glnn.py", "examples/ogc.py", "examples/node2vec.py", "examples/jit/gcn.py",
    "examples/jit/gat.py", "examples/explain/gnn_explainer_link_pred.py",
    "examples/explain/graphmask_explainer.py",
    # PyG's citation benchmark (run.sh's commands, 2 runs instead of 100)
    "benchmark/citation/gcn.py --dataset=Cora --runs=2",
    "benchmark/citation/gat.py --dataset=Cora --runs=2",
    "benchmark/citation/cheb.py --dataset=Cora --num_hops=3 --runs=2",
    "benchmark/citation/sgc.py --dataset=Cora --K=3 --weight_decay=0.0005 --runs=2",
    "benchmark/citation/arma.py --dataset=Cora --num_stacks=2 --num_layers=1 --shared_weights "
    "--runs=2",
    "benchmark/citation/appnp.py --dataset=Cora --alpha=0.1 --runs=2",
]
LAST_LINES = 30
TUNED = "plain-tuned-malloc"
NUMBER = re.compile(r"([A-Za-z][A-Za-z0-9 _\-]*?)\s*[:=]\s*(-?\d+(?:\.\d+)?(?:e-?\d+)?)")


# -- the child: one script, one mode -----------------------------------------------------------
def _seed(seed: int) -> None:
    import random

    import numpy
    import torch

    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)


def run_script(path: str, argv: list[str]) -> None:
    """The example as ``python path *argv`` would run it, in this process."""
    import runpy

    offline_planetoid()      # here: in whichever process runs the script (a rank, too)
    saved = sys.argv
    sys.argv = [path, *argv]
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = saved


def offline_planetoid() -> None:
    """`Planetoid.download` copies the bundled raw files (``../shared/data/planetoid``) into
    whatever folder the example chose, instead of fetching them from GitHub."""
    from torch_geometric.datasets import Planetoid

    def download(self) -> None:
        names = {p.name.lower(): p for p in SHARED_PLANETOID.iterdir() if p.is_dir()}
        source = names.get(self.name.lower())
        if source is None:
            raise RuntimeError(f"no bundled raw files for Planetoid {self.name!r} "
                               f"in {SHARED_PLANETOID}")
        os.makedirs(self.raw_dir, exist_ok=True)
        for name in self.raw_file_names:
            shutil.copy(source / "raw" / name, os.path.join(self.raw_dir, name))

    Planetoid.download = download


def child(mode: str, path: str, seed: int, options: dict, argv: list[str]) -> None:
    # as `python path` puts the script's folder first; a script inside a package (PyG's
    # citation benchmark: `from citation import ...`) runs as `python -m package.script` from
    # the folder above would (its `statistics.py` must not shadow the standard library's)
    folder = Path(path).parent
    sys.path.insert(0, str(folder.parent if (folder / "__init__.py").exists() else folder))
    _seed(seed)
    if mode == "plain-tuned-malloc":   # vanilla, with only the runtime's glibc malloc settings
        from gnnorch.launch.allocator import tune_allocator

        if not tune_allocator():
            raise SystemExit("glibc's mallopt is not available here: nothing to compare")
    if mode in ("plain", "plain-tuned-malloc"):
        run_script(path, argv)
        return
    import gnnorch

    runtime = gnnorch.Runtime(run_script, **options)
    runtime(path, argv)
    print(f"[gnnorch] last_run: {json.dumps(_run_facts(runtime))}", flush=True)


def _run_facts(runtime) -> dict:
    """The run's layout and what `Runtime.summary()` says about it."""
    run = runtime.last_run
    if run is None:
        return {}
    return {"ranks": len(run.stats) or 1, "device": run.device,
            "summary": (runtime.summary() or "").splitlines()[:6]}


# -- the parent ----------------------------------------------------------------------------------
def extract_examples(mirror: Path, ref: str, dest: Path) -> None:
    archive = subprocess.Popen(["git", "-C", str(mirror), "archive", ref, "examples",
                                "benchmark"],
                               stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    archive.stdout.close()
    if archive.wait() != 0:
        raise SystemExit(f"git archive {ref} failed in {mirror}")


def printed_metrics(stdout: str) -> dict[str, float]:
    """``Name: value`` pairs of the last printed lines; later lines win."""
    found: dict[str, float] = {}
    for line in stdout.splitlines()[-LAST_LINES:]:
        if line.startswith("[gnnorch]"):
            continue
        for key, value in NUMBER.findall(line):
            found[key.strip()] = float(value)
    return found


def compared(metrics: dict[str, float]) -> dict[str, float]:
    keys = [k for k in metrics if "test" in k.lower()]
    if not keys:
        keys = [k for k in metrics if re.search(r"acc|auc|ap\b|nmi|ari", k.lower())]
    return {k: metrics[k] for k in keys}


def run_one(python: str, script: Path, mode: str, seed: int, options: dict, argv: list[str],
            timeout: float, env: dict) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--child", mode, str(script), str(seed),
           json.dumps(options), *argv]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              cwd=script.parent, env=env)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc = "timeout"
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    seconds = time.perf_counter() - start
    facts = {}
    for line in out.splitlines():
        if line.startswith("[gnnorch] last_run: "):
            facts = json.loads(line[len("[gnnorch] last_run: "):])
    metrics = printed_metrics(out)
    warnings = [line for line in err.splitlines() if "gnnorch" in line and "Warning" in line][:5]
    return {"rc": rc, "seconds": round(seconds, 1), "metrics": metrics,
            "compared": compared(metrics), "facts": facts,
            "stderr_tail": err.strip().splitlines()[-3:], "gnnorch_lines": warnings}


def verdict(plain: dict, runtime: dict) -> str:
    if plain["rc"] != 0:
        return "not comparable (fails plainly)"
    if runtime["rc"] != 0:
        return "**runtime fails**"
    a, b = plain["compared"], runtime["compared"]
    if not a:
        return "ran (no test metric printed)"
    if set(a) != set(b):
        return "**printed different metrics**"
    worst = max(abs(a[k] - b[k]) for k in a)
    return "equal" if worst == 0 else f"max diff {worst:.4f}"


def markdown(rows: list[dict], header: str) -> str:
    lines = [header, "",
             "| example | seed | plain s | runtime s | plain test metrics | runtime test metrics | verdict |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        fmt = lambda m: ", ".join(f"{k} {v:g}" for k, v in m.items()) or "-"   # noqa: E731
        tuned = r.get(TUNED)
        note = f" (vanilla with the runtime's malloc settings: {fmt(tuned['compared'])})" \
            if tuned else ""
        lines.append(f"| `{r['example']}` | {r['seed']} | {r['plain']['seconds']} | "
                     f"{r['runtime']['seconds']} | {fmt(r['plain']['compared'])} | "
                     f"{fmt(r['runtime']['compared'])} | {r['verdict']}{note} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, path, seed, options = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
        child(mode, path, seed, json.loads(options), sys.argv[6:])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--examples", nargs="+", default=DEFAULT_EXAMPLES,
                   help="programs as 'path [arguments]', the path under PyG's tree (or under "
                        "examples/); default: the Planetoid set")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--options", type=json.loads, default={},
                   help="Runtime options as JSON (default: none, the runtime as a user writes it)")
    p.add_argument("--ref", default=None, help="PyG git ref (default: the installed version's tag)")
    p.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR)
    p.add_argument("--python", default=str(DEFAULT_PYTHON if DEFAULT_PYTHON.exists()
                                           else sys.executable))
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per script run")
    p.add_argument("--tuned-malloc", action="store_true",
                   help="also run each script plainly with only the runtime's glibc malloc "
                        "settings (gnnorch.launch.allocator): tells layout noise from the "
                        "runtime's own effect on a script that is not deterministic")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--md", type=Path, default=None)
    args = p.parse_args()

    sys.path.insert(0, str(HERE))
    from pyg_tests_under_runtime import git_commit, pick_ref, probe_versions

    versions = probe_versions(args.python)
    ref, warning = (args.ref, None) if args.ref else pick_ref(args.mirror,
                                                             versions["torch_geometric"])
    if warning:
        print(f"[pyg-examples] {warning}", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="pyg-examples-"))
    extract_examples(args.mirror, ref, work)
    env = dict(os.environ, WANDB_MODE="disabled", PYTHONUNBUFFERED="1")
    print(f"[pyg-examples] PyG examples at {ref} in {work}", file=sys.stderr)

    rows = []
    for name in args.examples:
        path, *argv = shlex.split(name)
        if not path.startswith(("examples/", "benchmark/")):
            path = f"examples/{path}"
        script = work / path
        for seed in args.seeds:
            row = {"example": name, "seed": seed}
            for mode in ("plain", "runtime") + ((TUNED,) if args.tuned_malloc else ()):
                row[mode] = run_one(args.python, script, mode, seed, args.options, argv,
                                    args.timeout, env)
                print(f"[pyg-examples] {name} seed {seed} {mode}: rc {row[mode]['rc']} "
                      f"{row[mode]['seconds']} s {row[mode]['compared']}", file=sys.stderr,
                      flush=True)
            row["verdict"] = verdict(row["plain"], row["runtime"])
            rows.append(row)
            if args.out:
                args.out.write_text(json.dumps({"versions": versions, "ref": ref,
                                                "gnnorch": git_commit(REPO),
                                                "options": args.options, "rows": rows},
                                               indent=1))
    header = (f"PyG examples at {ref} (installed torch_geometric {versions['torch_geometric']}), "
              f"torch {versions['torch']}, gnnorch {git_commit(REPO)}; Runtime options "
              f"{json.dumps(args.options)}")
    text = markdown(rows, header)
    print(text)
    if args.md:
        args.md.write_text(text)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
