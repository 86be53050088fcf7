"""Run records: the small files of a finished run, saved, checked against the run they stand for, read back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from raptor.reporting import records
RUN_CONFIG_FILE = "run_config.json"
from raptor.evaluation.ranking import read_predictions, write_predictions
from raptor.reporting.records import save_record, valid_record
from raptor.reporting.runs_reader import RANK_COLUMNS, RANKS_FILE, read_ranks, seed_ranks

FINGERPRINT = {"kind": "rl", "seed": 0, "params": {"rl.gamma": 0.95}, "inputs": {"data": "ab"}, "code": "cd"}


def _run(tmp_path: Path, rl_epochs: int = 4, q: int = 50) -> tuple[Path, Path]:
    """A finished, evaluated run: training folder (with a checkpoint) and evaluation folder."""
    train, ev = tmp_path / "train/seed0", tmp_path / "eval/seed0"
    train.mkdir(parents=True)
    ev.mkdir(parents=True)
    (train / RUN_CONFIG_FILE).write_text(json.dumps(FINGERPRINT))
    (train / "summary.json").write_text(json.dumps({"rl_epochs": rl_epochs, "best_val_mrr": 0.4}))
    (train / "history.json").write_text(json.dumps([{"epoch": 0, "val_mrr": 0.4}]))
    (train / "best.pt").write_bytes(b"\0" * 1000)
    (ev / "metrics.json").write_text(json.dumps({"mrr": 0.41}))
    rng = np.random.default_rng(0)
    cands = rng.integers(0, 1000, size=(q, 100))
    queries = np.stack([np.arange(q), rng.integers(0, 20, q), rng.integers(0, 1000, q), np.arange(q) % 7], 1)
    write_predictions(ev / "predictions.parquet", queries, cands, rng.random((q, 100)),
                      rng.integers(1, 30, q).astype(np.float64))
    return train, ev


def test_a_saved_record_is_valid_for_its_run_only(tmp_path):
    train, ev = _run(tmp_path)
    rt, re_ = tmp_path / "rec/train/seed0", tmp_path / "rec/eval/seed0"
    save_record(train, ev, rt, re_)
    assert sorted(p.name for p in rt.iterdir()) == ["history.json", "run_config.json", "summary.json"]
    assert sorted(p.name for p in re_.iterdir()) == ["metrics.json", RANKS_FILE]  # not the candidates, not best.pt
    assert valid_record(rt, re_, FINGERPRINT, 4) == {"rl_epochs": 4, "best_val_mrr": 0.4}
    assert valid_record(rt, re_, {**FINGERPRINT, "code": "other"}, 4) is None       # other code
    assert valid_record(rt, re_, {**FINGERPRINT, "params": {"rl.gamma": 0.9}}, 4) is None
    assert valid_record(rt, re_, FINGERPRINT, 8) is None                            # another epoch budget
    assert valid_record(tmp_path / "nowhere", re_, FINGERPRINT, 4) is None


def test_a_record_matches_an_auto_precision_whatever_the_training_machine_resolved(tmp_path):
    """``train.precision: auto`` resolves by the machine that trains: a sweep matching records elsewhere asks
    for precision None, which a record of either precision matches; an explicit one must be the record's."""
    train, ev = _run(tmp_path)
    (train / RUN_CONFIG_FILE).write_text(json.dumps({**FINGERPRINT, "precision": "bfloat16"}))
    rt, re_ = tmp_path / "rec/train/seed0", tmp_path / "rec/eval/seed0"
    save_record(train, ev, rt, re_)
    assert valid_record(rt, re_, {**FINGERPRINT, "precision": None}, 4) is not None
    assert valid_record(rt, re_, {**FINGERPRINT, "precision": "bfloat16"}, 4) is not None
    assert valid_record(rt, re_, {**FINGERPRINT, "precision": "float32"}, 4) is None
    assert valid_record(rt, re_, {**FINGERPRINT, "precision": None, "code": "other"}, 4) is None


@pytest.mark.parametrize("damage", ["no run_config", "no ranks", "bad history", "no metrics"])
def test_a_partial_or_damaged_record_is_not_valid(tmp_path, damage):
    train, ev = _run(tmp_path)
    rt, re_ = tmp_path / "rec/train/seed0", tmp_path / "rec/eval/seed0"
    save_record(train, ev, rt, re_)
    {"no run_config": lambda: (rt / RUN_CONFIG_FILE).unlink(), "no ranks": lambda: (re_ / RANKS_FILE).unlink(),
     "bad history": lambda: (rt / "history.json").write_text("[{"),
     "no metrics": lambda: (re_ / "metrics.json").unlink()}[damage]()
    assert valid_record(rt, re_, FINGERPRINT, 4) is None


def test_an_interrupted_save_leaves_no_valid_record(tmp_path, monkeypatch):
    train, ev = _run(tmp_path)
    rt, re_ = tmp_path / "rec/train/seed0", tmp_path / "rec/eval/seed0"
    save_record(train, ev, rt, re_)  # a valid record of an earlier run
    real = records.atomic_write_bytes

    def failing(path, data):
        if Path(path).name == "history.json":
            raise OSError("disk full")
        real(path, data)

    monkeypatch.setattr(records, "atomic_write_bytes", failing)
    (train / "summary.json").write_text(json.dumps({"rl_epochs": 4, "best_val_mrr": 0.5}))
    with pytest.raises(OSError):
        save_record(train, ev, rt, re_)
    assert valid_record(rt, re_, FINGERPRINT, 4) is None  # half old, half new: never used


def test_an_unfinished_run_has_no_record(tmp_path):
    train, ev = _run(tmp_path)
    (ev / "metrics.json").unlink()
    with pytest.raises(FileNotFoundError, match="metrics.json missing"):
        save_record(train, ev, tmp_path / "rec/t", tmp_path / "rec/e")
    assert not (tmp_path / "rec/t" / RUN_CONFIG_FILE).exists()


def test_ranks_keep_the_queries_and_ranks_of_the_predictions(tmp_path):
    train, ev = _run(tmp_path, q=2000)
    re_ = tmp_path / "rec/eval/seed0"
    save_record(train, ev, tmp_path / "rec/train/seed0", re_)
    p = read_predictions(ev / "predictions.parquet")
    queries, ranks = read_ranks(re_ / RANKS_FILE)
    np.testing.assert_array_equal(queries, np.stack([p.subject, p.relation, p.object, p.time], 1))
    np.testing.assert_array_equal(ranks, p.rank)
    assert pq.read_schema(re_ / RANKS_FILE).names == list(RANK_COLUMNS)
    assert (re_ / RANKS_FILE).stat().st_size < (ev / "predictions.parquet").stat().st_size / 20
    # the significance tests read a record's folder as they read the evaluation's
    assert {s: r.tolist() for s, r in seed_ranks(tmp_path / "rec/eval").items()} == {
        s: r.tolist() for s, r in seed_ranks(tmp_path / "eval").items()}


def test_a_file_without_rank_columns_is_named(tmp_path):
    import pyarrow as pa

    bad = tmp_path / "x.parquet"
    pq.write_table(pa.table({"subject": [1]}), bad)
    with pytest.raises(ValueError, match="x.parquet is not a predictions or ranks file"):
        read_ranks(bad)
