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
interrupted write leaves a record that is never used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raptor.common.io import atomic_path, atomic_write_bytes
from raptor.runs.rundir import RunDir

TRAIN_FILES = (RunDir.SUMMARY, RunDir.HISTORY)
EVAL_FILES = (RunDir.METRICS,)
PREDICTIONS_FILE = RunDir.PREDICTIONS
RANKS_FILE = "ranks.parquet"
#: The columns of ``predictions.parquet`` a ranks file keeps: the query and its rank.
RANK_COLUMNS = ("subject", "relation", "object", "time", "rank")


def write_ranks(predictions: str | Path, out: str | Path) -> Path:
    """``out`` (a ranks file) from a predictions or ranks file: its :data:`RANK_COLUMNS`, written atomically."""
    table = pq.read_table(predictions, columns=list(RANK_COLUMNS))
    with atomic_path(out) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return Path(out)


def ranks_source(eval_dir: str | Path) -> Path:
    """The file of an evaluation folder that holds its per-query ranks: ``predictions.parquet``, else
    ``ranks.parquet`` (a record); :class:`FileNotFoundError` naming the folder if neither exists."""
    d = Path(eval_dir)
    for name in (PREDICTIONS_FILE, RANKS_FILE):
        if (d / name).is_file():
            return d / name
    raise FileNotFoundError(f"{d}: neither {PREDICTIONS_FILE} nor {RANKS_FILE} (the evaluation did not finish)")


def read_ranks(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``(queries [Q, 4] int64: subject, relation, object, time; ranks [Q] float64)`` of a predictions
    or ranks file; :class:`ValueError` naming the file if it lacks a column."""
    try:
        table = pq.read_table(path, columns=list(RANK_COLUMNS))
    except (KeyError, pa.ArrowInvalid) as exc:
        raise ValueError(f"{path} is not a predictions or ranks file (columns {list(RANK_COLUMNS)}): {exc}") from exc
    queries = np.stack([table.column(c).to_numpy().astype(np.int64) for c in RANK_COLUMNS[:4]], 1)
    return queries, table.column("rank").to_numpy().astype(np.float64)


def save_record(train_dir: str | Path, eval_dir: str | Path, record_train: str | Path,
                record_eval: str | Path) -> None:
    """Copy the record of the run in ``train_dir`` (evaluated into ``eval_dir``) to ``record_train``
    and ``record_eval``, replacing any record there. Raises :class:`FileNotFoundError` naming the
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
        atomic_write_bytes(rt / f, (train_dir / f).read_bytes())


def _read_json(path: Path) -> Optional[Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def valid_record(record_train: str | Path, record_eval: str | Path, fingerprint: Mapping[str, Any],
                 rl_epochs: int) -> Optional[dict[str, Any]]:
    """The record's ``summary.json`` if it is complete and is the record of the run ``fingerprint``
    describes, trained for ``rl_epochs`` RL epochs (all of them, or stopped early); else ``None``.
    A missing, partial or unreadable record, another fingerprint (params, inputs or code) or another
    epoch budget is not valid: the run is trained again."""
    complete = read_record(record_train, record_eval)
    if complete is None or complete[0] != dict(fingerprint) or complete[1].get("rl_epochs") != rl_epochs:
        return None
    return complete[1]


def read_record(record_train: str | Path, record_eval: str | Path) -> Optional[tuple[dict[str, Any], dict[str, Any]]]:
    """``(fingerprint, summary)`` of a complete record (every file there and readable), else ``None``."""
    rt, re_ = Path(record_train), Path(record_eval)
    fingerprint, summary = _read_json(rt / RunDir.CONFIG), _read_json(rt / RunDir.SUMMARY)
    if not isinstance(fingerprint, dict) or not isinstance(summary, dict):
        return None
    if not all(_read_json(p) is not None for p in [rt / RunDir.HISTORY] + [re_ / f for f in EVAL_FILES]):
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
