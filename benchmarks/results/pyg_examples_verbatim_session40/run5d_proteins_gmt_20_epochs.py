"""Run 5d of BENCHMARKS.md's session-40 verbatim study: PyG's proteins_gmt.py to 20 epochs
(the study's own entry lowers it to 5), vanilla twice, the runtime and two ranks."""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "scripts"))
import pyg_examples_verbatim as v  # noqa: E402

v.EXAMPLES["proteins_gmt20"] = v.Example(
    "examples/proteins_gmt.py", edits=(("range(1, 201)", "range(1, 21)"), ), why="200 -> 20")
sys.exit(v.main(["--examples", "proteins_gmt20", "--modes", "runtime", "p2",
                 "--out", str(HERE / "run5d_proteins_gmt_20_epochs.json")]))
