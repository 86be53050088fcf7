"""The one reader of run folders: what reports, pages and records read of a run, read here only.

A training run's folder (:class:`raptor.runs.rundir.RunDir`, which names the files) holds
``history.json``, ``summary.json`` and ``run_config.json`` (its fingerprint, with its flat
``params``); an evaluation's folder ``metrics.json`` and ``predictions.parquet``. A run record
(:mod:`raptor.reporting.records`) has the same layout with ``ranks.parquet`` in place of the
predictions, and a result folder made by ``raptor collect`` (or a sweep's results folder) a
``COMMIT`` file naming the commit that trained its runs. One variant's runs are ``seed<S>/``
folders side by side.

Every function here reads and returns plain data; none writes. A missing file is ``None`` (or a
seed left out, where a function says so); a file that is there but is not JSON raises, unless
``lenient`` (a record's files, which an interrupted copy may have left half written, count as
missing then). Checkpoints and models are :mod:`raptor.runs.checkpoints`' to read (this module does
not import it, so that the stages reading runs' results do not depend on the torch files' code).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from raptor.constants import METRIC_KEYS
from raptor.runs.rundir import RunDir

#: A seed's folder: ``seed<S>`` (``S`` may be negative).
SEED_DIR = re.compile(r"^seed(-?\d+)$")
PREDICTIONS_FILE = RunDir.PREDICTIONS
#: A record's per-query ranks: the :data:`RANK_COLUMNS` of the predictions.
RANKS_FILE = "ranks.parquet"
#: The columns of ``predictions.parquet`` a ranks file keeps: the query and its rank.
RANK_COLUMNS = ("subject", "relation", "object", "time", "rank")
#: A result folder's file naming the commit that trained its runs (``raptor collect`` writes it).
COMMIT_FILE = "COMMIT"
#: A run's folder of re-scored evaluations (``raptor rescore``; :class:`RunFolders` says where it is in each
#: layout), holding ``<reading>/``, each an evaluation folder of the run's ``best.pt`` under other evaluation
#: params, with a :data:`READING_FILE`.
RESCORE_DIR = "rescore"
#: A re-scored evaluation's description (``overrides``, ``split``, ``model_hash``), written last: a folder
#: without it is unfinished and is not read.
READING_FILE = "reading.json"


# ------------------------------------------------------------------------------------------ layouts


@dataclass(frozen=True)
class RunFolders:
    """Where one run's files are, in either layout of a dataset's runs:

    * a folder of long runs (``raptor train --out``, ``scripts/longrun.sh``): ``<variant>/seed<S>/`` holding
      ``rl/`` (training), ``eval/`` (test evaluation) and ``rescore/`` (re-scored evaluations);
    * a pipeline workspace's ``runs/<dataset>/`` (the finetune and evaluate stages' outputs):
      ``<variant>/train/seed<S>/``, ``<variant>/eval/seed<S>/``, and ``<variant>/rescore/seed<S>/``, outside
      the stages' DVC outputs (which ``dvc repro`` replaces whole, and ``dvc status`` would report as changed).
    """

    seed: int
    train: Path  # best.pt, history.json, summary.json, run_config.json
    eval: Path  # metrics.json, predictions.parquet (or a record's ranks.parquet)
    readings: Path  # <reading>/ per re-scored evaluation
    #: The best model's name in a reading's description (``reading.json``): relative to the seed folder of a
    #: long run (``rl/best.pt``), to the variant's folder in a workspace (``train/seed0/best.pt``).
    model_name: str

    @classmethod
    def of(cls, variant_dir: str | Path, seed: int, pipeline: bool) -> "RunFolders":
        v = Path(variant_dir)
        if pipeline:
            s = f"seed{seed}"
            return cls(seed, v / "train" / s, v / "eval" / s, v / RESCORE_DIR / s, f"train/{s}/{RunDir.BEST}")
        d = v / f"seed{seed}"
        return cls(seed, d / "rl", d / "eval", d / RESCORE_DIR, f"rl/{RunDir.BEST}")

    @classmethod
    def long_run(cls, seed_dir: str | Path) -> "RunFolders":
        """The run of a long run's seed folder (``.../<variant>/seed<S>``)."""
        seed_dir = Path(seed_dir)
        m = SEED_DIR.match(seed_dir.name)
        if m is None:
            raise ValueError(f"{seed_dir}: not a seed<S> folder")
        return cls.of(seed_dir.parent, int(m.group(1)), pipeline=False)

    @property
    def best(self) -> Path:
        return RunDir(self.train).best

    def __str__(self) -> str:  # what messages name the run by
        return str(self.train.parent if self.train.name == "rl" else self.train)


def is_pipeline_variant(variant_dir: str | Path) -> bool:
    """Whether a variant's folder of runs is a pipeline workspace's (``train/`` and ``eval/`` with the seeds in
    them) rather than a folder of long runs (``seed<S>/`` in it)."""
    return (Path(variant_dir) / "train").is_dir()


def variant_runs(variant_dir: str | Path) -> dict[int, RunFolders]:
    """``{seed: folders}`` of one variant's trained runs in either layout (:class:`RunFolders`), by seed;
    :class:`FileNotFoundError` if ``variant_dir`` is not a folder."""
    pipeline = is_pipeline_variant(variant_dir)
    seeds = seed_dirs(Path(variant_dir) / "train" if pipeline else variant_dir)
    return {seed: RunFolders.of(variant_dir, seed, pipeline) for seed in seeds}


# ------------------------------------------------------------------------------------------ one file


def read_json(path: str | Path, lenient: bool = False) -> Optional[Any]:
    """The JSON document in the file ``path``; ``None`` when there is no such file (and, with
    ``lenient``, when it cannot be read or is not JSON)."""
    path = Path(path)
    if not lenient:
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both are
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_fingerprint(run_dir: str | Path, lenient: bool = False) -> Optional[dict[str, Any]]:
    """A run's ``run_config.json``: the fingerprint its checkpoints were written under (its flat
    params under ``"params"``); ``None`` without one."""
    return read_json(RunDir(run_dir).config, lenient)


def read_history(run_dir: str | Path, lenient: bool = False) -> Optional[list[dict[str, Any]]]:
    """A run's ``history.json``: one row per epoch done (``epoch``, ``reward``, ``val_mrr``, ...);
    ``None`` before its first epoch."""
    path = RunDir(run_dir).history
    rows = read_json(path, lenient)
    if rows is None:
        return None
    bad = "a list of rows" if not isinstance(rows, list) else next(
        (f"row {i}: {row!r:.80}" for i, row in enumerate(rows)
         if not (isinstance(row, dict) and type(row.get("epoch")) is int)), None)
    if bad is None:
        return rows
    if lenient:
        return None
    raise ValueError(f"{path}: not a run history ({bad}; every row is an object with an integer `epoch`)")


def read_summary(run_dir: str | Path, lenient: bool = False) -> Optional[dict[str, Any]]:
    """A finished run's ``summary.json`` (``rl_epochs``, ``pretrain_epochs``, ``best_val_mrr``,
    ``precision``, ``device``, ...); ``None`` while it trains."""
    return read_json(RunDir(run_dir).summary, lenient)


def read_metrics(eval_dir: str | Path, lenient: bool = False) -> Optional[dict[str, Any]]:
    """An evaluation's ``metrics.json`` (test metrics as fractions); ``None`` before it finished."""
    path = RunDir(eval_dir).metrics
    metrics = read_json(path, lenient)
    if metrics is None:
        return None
    bad = "not an object" if not isinstance(metrics, dict) else next(
        (f"{k!r} is {metrics[k]!r:.40}" for k in METRIC_KEYS
         if k in metrics and (isinstance(metrics[k], bool) or not isinstance(metrics[k], (int, float)))), None)
    if bad is None:
        return metrics
    if lenient:
        return None
    raise ValueError(f"{path}: not test metrics ({bad}; metrics are numbers)")


def ranks_source(eval_dir: str | Path) -> Path:
    """The file of an evaluation folder that holds its per-query ranks: ``predictions.parquet``, else
    ``ranks.parquet`` (a record); :class:`FileNotFoundError` naming the folder if neither exists."""
    d = Path(eval_dir)
    for name in (PREDICTIONS_FILE, RANKS_FILE):
        if (d / name).is_file():
            return d / name
    raise FileNotFoundError(f"{d}: neither {PREDICTIONS_FILE} nor {RANKS_FILE} (the evaluation did not finish)")


def read_readings(readings_dir: str | Path, model_sha256: Optional[str] = None,
                  lenient: bool = False) -> dict[str, Path]:
    """``{reading name: evaluation folder}`` of a run's finished re-scored evaluations (``<readings_dir>/<name>/``
    with its :data:`READING_FILE` and ``metrics.json``; ``readings_dir``: :attr:`RunFolders.readings`), by name;
    empty when there are none. With ``model_sha256`` (the model the run's default test evaluation names), a
    reading of another model (the run trained again since it was scored) is left out: it would be set beside
    an evaluation of a model it is not of."""
    root = Path(readings_dir)
    if not root.is_dir():
        return {}
    out = {}
    for d in sorted(root.iterdir()):
        about = read_json(d / READING_FILE, lenient) if d.is_dir() else None
        if about is None or read_metrics(d, lenient) is None:
            continue
        if model_sha256 and isinstance(about, dict) and about.get("model_hash") not in (None, model_sha256):
            continue
        out[d.name] = d
    return out


def read_ranks(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """``(queries [Q, 4] int64: subject, relation, object, time; ranks [Q] float64)`` of a predictions
    or ranks file; :class:`ValueError` naming the file if it lacks a column."""
    try:
        table = pq.read_table(path, columns=list(RANK_COLUMNS))
    except (KeyError, pa.ArrowInvalid) as exc:
        raise ValueError(f"{path} is not a predictions or ranks file (columns {list(RANK_COLUMNS)}): {exc}") from exc
    queries = np.stack([table.column(c).to_numpy().astype(np.int64) for c in RANK_COLUMNS[:4]], 1)
    return queries, table.column("rank").to_numpy().astype(np.float64)


def recorded_commit(folder: str | Path, length: int = 12) -> Optional[str]:
    """The first ``length`` characters of the commit in ``folder``'s ``COMMIT`` file; ``None`` when
    there is no such file or it is empty."""
    path = Path(folder) / COMMIT_FILE
    return (path.read_text().strip()[:length] or None) if path.is_file() else None


# ------------------------------------------------------------------------------------------ a variant's seeds


def seed_dirs(folder: str | Path) -> dict[int, Path]:
    """``{seed: folder}`` of the ``seed<S>`` folders in ``folder``, by seed;
    :class:`FileNotFoundError` if ``folder`` is not a folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"folder not found: {folder}")
    out = {int(m.group(1)): p for p in folder.iterdir() if p.is_dir() and (m := SEED_DIR.match(p.name))}
    return dict(sorted(out.items()))


def seed_metrics(eval_dir: str | Path) -> dict[int, dict]:
    """``{seed: metrics.json}`` of one variant's evaluation folder (``seed<S>/metrics.json``);
    :class:`FileNotFoundError` if a seed has none or there is no seed."""
    out = {}
    for seed, d in seed_dirs(eval_dir).items():
        metrics = read_metrics(d)
        if metrics is None:
            raise FileNotFoundError(f"{RunDir(d).metrics} missing: the evaluation of seed {seed} did not finish")
        out[seed] = metrics
    if not out:
        raise FileNotFoundError(f"no seed<S>/metrics.json under {eval_dir}")
    return out


def require_seeds(eval_dirs: Mapping[str, str | Path], seeds: Sequence[int]) -> None:
    """Refuse evaluation folders whose ``seed<S>`` folders are not exactly ``seeds`` (the params'
    ``train.seeds``): an evaluation that stopped part-way, or one left from other params, must not be
    tested or reported as if it were the whole set. :class:`ValueError` naming the folder."""
    want = sorted(int(s) for s in seeds)
    for variant, folder in eval_dirs.items():
        have = sorted(seed_dirs(folder))
        if have != want:
            raise ValueError(f"{folder}: seeds {have} evaluated for {variant}, the params ask for {want} "
                             "(run the evaluate stage to the end, into a folder of its own)")


def evaluated_seeds(eval_dir: str | Path) -> dict[int, dict]:
    """``{seed: metrics.json}`` of the seeds of ``eval_dir`` that have one (the others left out)."""
    return {seed: m for seed, d in seed_dirs(eval_dir).items() if (m := read_metrics(d)) is not None}


def seed_ranks(eval_dir: str | Path) -> dict[int, np.ndarray]:
    """``{seed: ranks [Q]}`` of one variant's evaluation folder, from each seed's predictions (or a
    record's ranks); checks every seed ranked the same queries."""
    out, keys = {}, None
    for seed, d in seed_dirs(eval_dir).items():
        k, ranks = read_ranks(ranks_source(d))  # predictions.parquet, or a record's ranks.parquet
        if keys is None:
            keys = k
        elif k.shape != keys.shape or not np.array_equal(k, keys):
            raise ValueError(f"{d}: predictions are not over the same queries as the other seeds")
        out[seed] = ranks
    return out


def histories(runs_dir: str | Path) -> dict[int, list[dict]]:
    """``{seed: per-epoch history}`` of a folder of runs (``seed<S>/history.json``: a training or a
    pretraining stage's output); seeds without one yet are left out."""
    return {seed: h for seed, d in seed_dirs(runs_dir).items() if (h := read_history(d)) is not None}
