"""raptor.runs.rundir: a run folder's file names, fingerprint and preparation."""

from __future__ import annotations

import pytest

from raptor.config import Params
from raptor.common.io import RunMismatchError
from raptor.runs.rundir import RunDir


def test_file_names(tmp_path):
    d = RunDir(tmp_path)
    assert (d.best.name, d.final.name, d.checkpoint.name, d.history.name, d.history_csv.name) == (
        "best.pt", "final.pt", "checkpoint.pt", "history.json", "history.csv")
    assert (d.summary.name, d.metrics.name, d.predictions.name, d.config.name, d.pretrained.name) == (
        "summary.json", "metrics.json", "predictions.parquet", "run_config.json", "pretrained.pt")
    assert d.snapshot(5) == tmp_path / "pretrained-e5.pt" and d / "x" == tmp_path / "x"
    assert RunDir(str(tmp_path)) == d and d.epochs_done() == 0


def test_prepare_keeps_a_run_of_the_same_fingerprint_and_empties_another(tmp_path):
    p = Params()
    fp = RunDir.rl_fingerprint(p, "pure_rl", 0, {"data": "a"}, "code")
    d = RunDir(tmp_path / "run")
    assert d.prepare(fp) is None
    d.best.write_text("w")
    assert d.prepare(fp) is None and d.best.exists()
    other = RunDir.rl_fingerprint(p, "pure_rl", 0, {"data": "b"}, "code")
    with pytest.raises(RunMismatchError):
        d.prepare(other, resume_only=True)
    assert d.best.exists()
    reason = d.prepare(other)
    assert "inputs.data" in reason and not d.best.exists()
    assert RunDir.differences({"params": {"a": 1}}, {"params": {"a": 2}}) == ["params.a: 1 -> 2"]
