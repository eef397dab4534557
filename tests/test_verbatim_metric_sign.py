"""`scripts/verbatim_metric_sign.py`: summary lines paired by their header, metrics read, and
the sign test of the above / below split."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import verbatim_metric_sign as sign  # noqa: E402

VANILLA = """--
MUTAG - GCN
01/001: Val Loss: 0.7000, Test Accuracy: 0.600
Val Loss: 0.6395, Test Accuracy: 0.665 \u00b1 0.024, Duration: 0.065
--
MUTAG - GIN
Val Loss: 0.5854, Test Accuracy: 0.665 \u00b1 0.024, Duration: 0.070
"""
P2 = VANILLA.replace("0.6395", "0.6500").replace("0.5854", "0.5800").replace(
    "0.665 \u00b1 0.024, Duration: 0.070", "0.700 \u00b1 0.010, Duration: 0.090")


def test_summaries_are_named_by_their_header_and_read() -> None:
    found = sign.summaries(VANILLA.splitlines(), "Val Loss", " - ")
    assert [h for h, _ in found] == ["MUTAG - GCN", "MUTAG - GIN"]
    assert sign.metric(found[1][1], "Test Accuracy") == 0.665
    with pytest.raises(SystemExit, match="no 'Train'"):
        sign.metric(found[1][1], "Train")


def test_sign_test_is_two_sided_and_exact() -> None:
    assert sign.sign_test(0, 0) == 1.0
    assert sign.sign_test(3, 3) == 1.0
    assert sign.sign_test(26, 6) == pytest.approx(2 * sum(
        __import__("math").comb(32, i) for i in range(7)) / 2 ** 32)
    assert sign.sign_test(10, 0) == pytest.approx(2 / 1024)


def test_the_table_and_counts(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    report = {"results": [{"example": "kernel_main", "runs": {
        "vanilla": {"stdout": VANILLA}, "p2": {"stdout": P2}}}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    assert sign.main([str(path), "--example", "kernel_main", "--mode", "p2", "--line",
                      "Val Loss", "--metrics", "Val Loss", "Test Accuracy"]) == 0
    out = capsys.readouterr().out
    assert "| MUTAG - GCN | 0.6395 -> 0.65 | 0.665 -> 0.665 |" in out
    assert "Val Loss: p2 above vanilla in 1 of 2, equal in 0, below in 1" in out
    assert "Test Accuracy: p2 above vanilla in 1 of 2, equal in 1, below in 0" in out


def test_an_unknown_example_or_mode_says_what_there_is(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"results": [{"example": "kernel_main", "runs": {
        "vanilla": {"stdout": VANILLA}, "p2": {"stdout": P2}}}]}))
    with pytest.raises(SystemExit, match="it has: kernel_main"):
        sign.main([str(path), "--example", "gcn", "--mode", "p2", "--line", "Val Loss",
                   "--metrics", "Val Loss"])
    with pytest.raises(SystemExit, match="runs: vanilla, p2"):
        sign.main([str(path), "--example", "kernel_main", "--mode", "device", "--line",
                   "Val Loss", "--metrics", "Val Loss"])
