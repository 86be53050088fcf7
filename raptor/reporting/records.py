"""Run records: the few small files of a finished, evaluated run that results and docs are made from.

A run folder holds megabytes (checkpoints, and the beam's candidates for every test query in
``predictions.parquet``); a results table, a significance test and a learning curve read a few
hundred kilobytes of it. A record is that subset, in the run folders' own layout::

    <train record>/run_config.json   the run's fingerprint (:meth:`raptor.runs.rundir.RunDir.fingerprint`)
    <train record>/summary.json      best validation MRR, epochs, seconds
    <train record>/history.json      per-epoch reward, losses, validation MRR
    <eval record>/metrics.json       test metrics of best.pt
    <eval record>/ranks.parquet      per test query: subject, relation, object, time, rank

Records are meant to be kept under version control (a sweep keeps them in ``results/``, beside the
docs generated from them), so that a clone can regenerate the docs, and a sweep whose run folders
are gone (a fresh machine, a cleaned work tree) does not train again a run whose record is of the
same run (:func:`valid_record`). The fingerprint is written last and removed first, so an
interrupted write leaves a record that is never used. Records are read, as run folders are, by
:mod:`raptor.reporting.runs_reader`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import pyarrow.parquet as pq

from raptor.common.io import atomic_path, atomic_write_bytes, atomic_write_json
from raptor.reporting.runs_reader import (RANK_COLUMNS, RANKS_FILE, ranks_source, read_fingerprint, read_json,
                                          read_summary)
from raptor.runs.rundir import RunDir

TRAIN_FILES = (RunDir.SUMMARY, RunDir.HISTORY)
EVAL_FILES = (RunDir.METRICS,)


def write_ranks(predictions: str | Path, out: str | Path) -> Path:
    """``out`` (a ranks file) from a predictions or ranks file: its :data:`RANK_COLUMNS`, written atomically."""
    table = pq.read_table(predictions, columns=list(RANK_COLUMNS))
    with atomic_path(out) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return Path(out)


def save_record(train_dir: str | Path, eval_dir: str | Path, record_train: str | Path,
                record_eval: str | Path, summary: Optional[Mapping[str, Any]] = None) -> None:
    """Copy the record of the run in ``train_dir`` (evaluated into ``eval_dir``) to ``record_train``
    and ``record_eval``, replacing any record there (``summary``: written instead of the run's
    ``summary.json``). Raises :class:`FileNotFoundError` naming the
    file if the run has not finished or was not evaluated (and then leaves no usable record)."""
    train_dir, eval_dir, rt, re_ = Path(train_dir), Path(eval_dir), Path(record_train), Path(record_eval)
    needed = [train_dir / f for f in TRAIN_FILES + (RunDir.CONFIG,)] + [eval_dir / f for f in EVAL_FILES]
    for f in needed:
        if not f.is_file():
            raise FileNotFoundError(f"{f} missing: the run is not finished and evaluated, no record to save")
    ranks = ranks_source(eval_dir)
    (rt / RunDir.CONFIG).unlink(missing_ok=True)  # the old record is unusable from here on
    for f in EVAL_FILES:
        atomic_write_bytes(re_ / f, (eval_dir / f).read_bytes())
    if ranks.resolve() != (re_ / RANKS_FILE).resolve():
        write_ranks(ranks, re_ / RANKS_FILE)
    for f in TRAIN_FILES + (RunDir.CONFIG,):  # the fingerprint last: it marks the record complete
        if f == RunDir.SUMMARY and summary is not None:
            atomic_write_json(rt / f, dict(summary))
        else:
            atomic_write_bytes(rt / f, (train_dir / f).read_bytes())


#: The key in a re-scored record's ``summary.json`` (:func:`save_rescored_record`) saying whose run it is.
RESCORED = "rescored"


def save_rescored_record(train_dir: str | Path, test_dir: str | Path, valid_dir: str | Path,
                         record_train: str | Path, record_eval: str | Path, about: Mapping[str, Any]) -> None:
    """The record of a run of an evaluation-only sweep arm: the run trained in ``train_dir`` (another arm's),
    its best model evaluated again under the arm's reading on the test split into ``test_dir`` and on the
    validation split into ``valid_dir`` (:mod:`raptor.pipeline.rescore`). The record holds the run's
    fingerprint and history, the reading's test metrics and ranks, and the run's summary with the reading's
    validation MRR as ``best_val_mrr`` (the checkpoint the run's own validation picked, scored under the
    reading: what the sweep's verdict compares with the run's own best validation MRR, kept as
    ``rescored.default_best_val_mrr``) and ``about`` (where it comes from) under :data:`RESCORED`. Written as
    :func:`save_record` writes, the fingerprint last; :class:`FileNotFoundError` naming a missing file."""
    train_dir, valid_dir = Path(train_dir), Path(valid_dir)
    for f in (train_dir / RunDir.SUMMARY, valid_dir / RunDir.METRICS):
        if not f.is_file():
            raise FileNotFoundError(f"{f} missing: no re-scored record to save")
    summary = read_summary(train_dir)
    valid = read_json(valid_dir / RunDir.METRICS)
    summary = {**summary, "best_val_mrr": valid["mrr"],
               RESCORED: {**about, "default_best_val_mrr": summary.get("best_val_mrr"),
                          "valid_metrics": {k: valid.get(k) for k in ("mrr", "hits@1", "hits@3", "hits@10")}}}
    save_record(train_dir, test_dir, record_train, record_eval, summary=summary)


def valid_record(record_train: str | Path, record_eval: str | Path, fingerprint: Mapping[str, Any],
                 rl_epochs: int) -> Optional[dict[str, Any]]:
    """The record's ``summary.json`` if it is complete and is the record of the run ``fingerprint``
    describes, trained for ``rl_epochs`` RL epochs (all of them, or stopped early); else ``None``. A
    ``precision`` of ``None`` in ``fingerprint`` (``train.precision: auto``) matches a record of any.
    A missing, partial or unreadable record, another fingerprint (params, inputs or code) or another
    epoch budget is not valid: the run is trained again."""
    complete = read_record(record_train, record_eval)
    if complete is None:
        return None
    recorded = dict(complete[0])
    if fingerprint.get("precision", "") is None:  # `auto`: the precision the training machine resolved
        recorded["precision"] = None
    if recorded != dict(fingerprint) or complete[1].get("rl_epochs") != rl_epochs:
        return None
    return complete[1]


def read_record(record_train: str | Path, record_eval: str | Path) -> Optional[tuple[dict[str, Any], dict[str, Any]]]:
    """``(fingerprint, summary)`` of a complete record (every file there and readable, read by
    :mod:`raptor.reporting.runs_reader`, leniently: a half-written file is a missing one), else ``None``."""
    rt, re_ = Path(record_train), Path(record_eval)
    fingerprint, summary = read_fingerprint(rt, lenient=True), read_summary(rt, lenient=True)
    if not isinstance(fingerprint, dict) or not isinstance(summary, dict):
        return None
    if not all(read_json(p, lenient=True) is not None for p in [rt / RunDir.HISTORY] + [re_ / f for f in EVAL_FILES]):
        return None
    if not (re_ / RANKS_FILE).is_file():
        return None
    return fingerprint, summary


def copy_tree_files(src: str | Path, dst: str | Path, pattern: str = "*.json") -> None:
    """Copy the files of ``src`` matching ``pattern`` (not recursive) into ``dst``, each atomically;
    files whose bytes are unchanged are left alone (their time stamps too)."""
    src, dst = Path(src), Path(dst)
    for f in sorted(src.glob(pattern)):
        if f.is_file():
            target = dst / f.name
            data = f.read_bytes()
            if not target.is_file() or target.read_bytes() != data:
                atomic_write_bytes(target, data)
