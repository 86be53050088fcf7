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


def test_verdict_says_beforehand_what_prepare_does_and_touches_nothing(tmp_path):
    p = Params()
    fp = RunDir.rl_fingerprint(p, "pure_rl", 0, {"data": "a"}, "code")
    d = RunDir(tmp_path / "run")
    assert d.verdict(fp) is None and not d.path.exists()  # a missing folder: new, and not created
    d.prepare(fp)
    d.best.write_text("w")
    other = RunDir.rl_fingerprint(p, "pure_rl", 0, {"data": "b"}, "code")
    before = sorted((f.name, f.stat().st_mtime_ns) for f in d.path.iterdir())
    assert d.verdict(fp) is None
    assert d.verdict(fp, resume=False) == "asked to start afresh"
    assert d.verdict(fp, cannot_continue=lambda folder: f"{folder.name} is past its budget") == "run is past its budget"
    said = d.verdict(other)
    assert said.startswith("changed since its checkpoints were written: inputs.data")
    assert sorted((f.name, f.stat().st_mtime_ns) for f in d.path.iterdir()) == before  # nothing written
    assert d.prepare(other) == said and not d.best.exists()  # prepare does what verdict said
    stray = RunDir(tmp_path / "stray")
    stray.path.mkdir()
    (stray.path / "x.pt").write_text("?")
    assert stray.verdict(fp) == "holds files of an unknown run (no run_config.json)"
