"""The tuning report: JSON that validates against the documented schema, atomic rewrites, the
table, the PNG, and `python -m gnnorch report PATH` (bad files: one line, exit code 2)."""
import json
import os
import subprocess
import sys

import pytest

import gnnorch
from gnnorch.cli import main
from gnnorch.tune.report import ReportError, TuningReport
from gnnorch.tune.schema import SCHEMA, validate

from helpers import cora
from test_tune_runtime import FORCE_ONE_RANK, TWO_CORES, cora_train


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    runtime = gnnorch.Runtime(cora_train, verbose=False,
                              tune=dict(FORCE_ONE_RANK, budget=2, report_dir=folder))
    runtime(cora(), epochs=6)
    return runtime, folder / "report.json"


def cli(*args):
    """`python -m gnnorch *args` in a fresh interpreter (exit code, stdout, stderr)."""
    return subprocess.run([sys.executable, "-m", "gnnorch", *args], capture_output=True,
                          text=True, timeout=60)


def cli_here(capsys, *args):
    """The same command line in this process (fast): (exit code, stdout, stderr)."""
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@TWO_CORES
def test_report_validates_and_matches_the_run(tuned):
    runtime, path = tuned
    data = json.loads(path.read_text())
    assert validate(data) == []
    assert data == runtime.report.data
    assert data["status"] == "done" and data["decision"]["tuned"]
    assert data["platform"]["usable_cores"] == runtime.topology.num_usable
    assert set(data["platform"]["versions"]) >= {"python", "torch", "torch_geometric",
                                                  "scikit_optimize", "gnnorch"}
    assert data["space"]["size"] == 3
    assert len(data["trials"]) == 2 == len(data["best_so_far"])
    for trial in data["trials"]:
        assert trial["throughput"] > 0 and trial["measured_batches"] == 6
        assert trial["cores"][0]["trainer_cpus"]
        assert trial["batch_size_per_rank"] == [20]
    assert data["best_so_far"] == sorted(data["best_so_far"])
    assert data["best"]["throughput"] == max(t["throughput"] for t in data["trials"])
    assert data["speedup_over_default"] == pytest.approx(
        data["best"]["throughput"] / data["trials"][0]["throughput"])
    assert data["overhead"]["probe_seconds"] > 0 and data["overhead"]["bo_seconds"] >= 0
    assert [e["epoch"] for e in data["run"]["epochs"]] == list(range(6))
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]   # atomic writes


def test_validator_catches_violations():
    assert validate({"format": "x"})
    good = {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer",
                                                                      "minimum": 1}}}
    assert validate({"a": 2}, good) == []
    assert validate({"a": 0}, good) and validate({"a": 1.5}, good) and validate({}, good)
    assert validate({"a": True}, good)                             # booleans are not integers
    assert SCHEMA["properties"]["format"]["const"] == "gnnorch-tuning-report"


@TWO_CORES
def test_table_and_plot(tuned, tmp_path):
    runtime, _ = tuned
    text = str(runtime.report)
    for needle in ("gnnorch tuning report", "platform:", "space:", "decision: tuned",
                   "chosen by", "default", "seeds/s", "best:", "overhead: BO", "run:"):
        assert needle in text
    try:
        import matplotlib  # noqa: F401  (an optional extra: gnnorch[plot])
    except ImportError:   # without it, plot says how to get it
        with pytest.raises(ImportError, match="pip install matplotlib"):
            runtime.report.plot(tmp_path / "tuning.png")
        return
    png = runtime.report.plot(tmp_path / "tuning.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@TWO_CORES
def test_cli_prints_the_table(tuned, capsys):
    runtime, path = tuned
    proc = cli("report", str(path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == runtime.report.table().strip()
    code, out, _ = cli_here(capsys, "report", str(path.parent))     # the folder works too
    assert code == 0 and out.strip() == runtime.report.table().strip()
    code, out, _ = cli_here(capsys, "report", "--json", str(path))
    assert code == 0 and json.loads(out) == runtime.report.data


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"hello": "world"}', "not a gnnorch tuning report"),
    ("[1, 2, 3]", "not a gnnorch tuning report"),
    ('{"format": "gnnorch-tuning-report", "version": 99}', "version 99"),
    ('{"format": "gnnorch-tuning-report", "version": 1, "status": "done"}', "invalid report"),
    (b"\xff\xfe\x00garbage", "cannot read"),
])
def test_cli_rejects_bad_files_with_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "report.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    code, out, err = cli_here(capsys, "report", str(path))
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("gnnorch report:")
    with pytest.raises(ReportError):
        TuningReport.load(path)


def test_cli_exit_code_two_for_a_foreign_file_and_schema(tmp_path, capsys):
    foreign = tmp_path / "other.json"
    foreign.write_text('{"loss": 0.3}')
    proc = cli("report", str(foreign))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    code, _, err = cli_here(capsys, "report", str(tmp_path / "nope.json"))
    assert code == 2 and "no such file" in err
    code, out, _ = cli_here(capsys, "schema")
    assert code == 0 and json.loads(out)["title"] == "gnnorch tuning report"


@TWO_CORES
def test_report_missing_a_field_is_rejected(tuned, tmp_path, capsys):
    _, path = tuned
    data = json.loads(path.read_text())
    del data["trials"][0]["throughput"]
    broken = tmp_path / "r.json"
    broken.write_text(json.dumps(data))
    code, _, err = cli_here(capsys, "report", str(broken))
    assert code == 2 and "missing 'throughput'" in err
