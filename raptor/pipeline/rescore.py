"""Re-scoring: the test evaluation of finished runs' checkpoints again, under other evaluation params.

An evaluation-only reading of the method (which beam paths are ranked, how an entity's paths merge, the
beam width) changes no training: the runs need not be trained again to measure it, only their
best-validation models (``rl/best.pt``) evaluated again with the reading's ``eval.*`` params. The
checkpoints stay the ones validation picked under the runs' own params (so a reading that would have
changed validation is measured at the checkpoint the default picked: issue 39's evaluation-only arms).

Layout, in a folder of long runs (``<dataset>/<variant>/seed<S>/`` with ``rl/`` and ``eval/``, as
``scripts/longrun.sh`` and ``raptor train --out`` lay runs out)::

    seed<S>/rescore/<reading>/metrics.json         test metrics, as eval/metrics.json
    seed<S>/rescore/<reading>/predictions.parquet  per-query candidates and ranks
    seed<S>/rescore/<reading>/ranks.parquet        per-query ranks alone (what `scripts/longrun.sh park` keeps of a
                                                   tested run's reading: its predictions are hundreds of MB on ICEWS18)
    seed<S>/rescore/<reading>/reading.json         overrides, split, the model's content hash, the code's (written last)
    seed<S>/rescore/<reading>/valid/...            the same on the validation split, where asked for

In a pipeline workspace's ``runs/<dataset>/`` (``<variant>/train/seed<S>/`` and ``<variant>/eval/seed<S>/``, the
finetune and evaluate stages' outputs) the same files go to ``<variant>/rescore/seed<S>/<reading>/``: beside the
stages' DVC outputs, not in them (:class:`raptor.reporting.runs_reader.RunFolders`).

``<reading>`` is :func:`reading_name` of the overrides (``eval.rank_last_expansions=true``). A reading
whose ``reading.json`` names another model hash (the run was trained further) is evaluated again.
``raptor collect`` keeps the test readings (ranks instead of predictions) and ``raptor results`` sets them
beside the default evaluation of the same checkpoints. The validation split is what a sweep's
evaluation-only arm is judged by (:func:`rescore_sweep`; ``raptor collect --sweep`` makes the arm's records
from both splits: docs/sweeps.md). In a sweep's own folder (``raptor sweep``, the Prefect flow) such an arm's
run is :func:`rescore_job`: the default arm's run re-scored there, its record saved at once.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import yaml

from raptor.agents import variants as variant_registry
from raptor.common.io import atomic_write_json
from raptor.common.provenance import code_hash, content_hash
from raptor.config import ConfigError, TEST_TIME_EVAL_KEYS, load_params, load_resolved, result_params
from raptor.pipeline.experiment import evaluate_model, load_context
from raptor.reporting.records import write_ranks
from raptor.reporting.runs_reader import (RANKS_FILE, READING_FILE, RunFolders, is_pipeline_variant,
                                          read_fingerprint, read_json, variant_runs)
from raptor.runs.rundir import RunDir

log = logging.getLogger("raptor")


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["eval.rank_last_expansions=true", ...]`` -> ``{"eval.rank_last_expansions": True, ...}`` (values
    read as YAML scalars). :class:`ConfigError` naming the item when it is not ``KEY=VALUE``, when ``KEY``
    is not an evaluation param that acts at test time (:data:`raptor.config.TEST_TIME_EVAL_KEYS`: the
    others would need the runs trained again), or when there is none."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{item!r}: expected KEY=VALUE (e.g. eval.rank_last_expansions=true)")
        if key not in TEST_TIME_EVAL_KEYS:
            raise ConfigError(f"{key}: not an evaluation param a finished run can be re-scored with; "
                              f"one of {', '.join(TEST_TIME_EVAL_KEYS)}")
        out[key] = yaml.safe_load(value) if value.strip() else value
    if not out:
        raise ConfigError("no override given: a reading is the default evaluation with at least one param changed")
    return out


def reading_name(overrides: Mapping[str, Any]) -> str:
    """The folder name of a reading: ``key=value`` per override, sorted by key, joined by ``,``; values as
    YAML writes them (``true``, ``logsumexp``, ``50``)."""
    def text(v: Any) -> str:
        return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()

    return ",".join(f"{k}={text(v)}" for k, v in sorted(overrides.items()))


def _load(params_path: str | Path, overrides: Optional[Mapping[str, Any]] = None):
    """A params YAML file, or a resolved params file (JSON, no profile applied again: a workspace's
    ``build/params.json``), with ``overrides`` on top."""
    if Path(params_path).suffix == ".json":
        return load_resolved(params_path, dict(overrides or {}))
    return load_params(params_path, dict(overrides or {}))


def _differences(run_params: Mapping[str, Any], params: Mapping[str, Any]) -> list[str]:
    return [f"{k}: run {v!r}, params file {params[k]!r}" if k in params else f"{k}: run {v!r}, params file (absent)"
            for k, v in sorted(run_params.items()) if k not in params or params[k] != v]


#: What makes a reading's evaluation the one asked for (``reading.json`` also names the code that made it).
_IDENTITY = ("overrides", "split", "model", "model_hash")
#: The splits a reading is scored on: the test split (always, first), and the validation split on request.
SPLITS = ("test", "valid")


def reading_dir(run: RunFolders, name: str, split: str = "test") -> Path:
    """Where a run's reading ``name`` on ``split`` goes: ``<run.readings>/<name>/`` for the test split (what
    ``raptor collect`` and ``raptor results`` read), ``.../<name>/valid/`` for the validation split."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: one of {', '.join(SPLITS)}")
    d = run.readings / name
    return d if split == "test" else d / split


def _identity(run: RunFolders, overrides: Mapping[str, Any], split: str) -> dict[str, Any]:
    return {"overrides": dict(overrides), "split": split, "model": run.model_name, "model_hash": content_hash(run.best)}


def finished_reading(run: RunFolders, overrides: Mapping[str, Any], split: str = "test") -> Optional[Path]:
    """The folder of ``run``'s evaluation under ``overrides`` on ``split`` if it is whole (its ``reading.json``,
    metrics, and predictions or ranks) and of the run's present ``best.pt``; else ``None``."""
    target = reading_dir(run, reading_name(overrides), split)
    done = read_json(target / READING_FILE, lenient=True) or {}
    if not (run.best.is_file() and RunDir(target).metrics.is_file()
            and (RunDir(target).predictions.is_file() or (target / RANKS_FILE).is_file())):
        return None
    return target if {k: done.get(k) for k in _IDENTITY} == _identity(run, overrides, split) else None


def _clear(target: Path) -> None:
    """Remove an unfinished or outdated reading's files, not the folders of its other splits inside it."""
    if not target.is_dir():
        return
    for f in target.iterdir():
        if f.is_dir() and f.name in SPLITS:
            continue
        shutil.rmtree(f) if f.is_dir() else f.unlink()


#: Test queries scored again to tell which model an evaluation naming no model hash was of (evaluations made
#: before ``metrics.json`` recorded ``model_sha256``): the first this many, and the share of them whose rank
#: must come back. File times cannot tell: a park, or a change of machine, writes every file anew.
SAMPLE_QUERIES, SAMPLE_AGREEMENT = 512, 0.95


def _tested_another_model(run: RunFolders, default_ctx, num_threads: Optional[int] = None) -> str:
    """Why ``run``'s test evaluation is not of its present ``best.pt`` (``""`` when it is): the model
    hash the evaluation recorded; for an evaluation that recorded none, the ranks of :data:`SAMPLE_QUERIES`
    test queries scored again with the runs' own params (``default_ctx``) against its predictions (at least
    :data:`SAMPLE_AGREEMENT` of them the same: a thread count other than the test's may move a near tie)."""
    from raptor.common.io import sha256_file
    from raptor.pipeline.experiment import model_ranks
    from raptor.reporting.runs_reader import ranks_source, read_ranks

    model, eval_dir = run.best, run.eval
    recorded = (read_json(RunDir(eval_dir).metrics) or {}).get("model_sha256")
    if recorded:
        return "" if recorded == sha256_file(model) else "it names another model_sha256"
    try:
        _, ranks = read_ranks(ranks_source(eval_dir))
    except FileNotFoundError:
        return "it names no model hash, and has no per-query ranks to compare with"
    n = min(SAMPLE_QUERIES, len(ranks))
    same = float(np.mean(model_ranks(default_ctx, model, "test", n, num_threads=num_threads) == ranks[:n])) if n else 0.0
    if same < SAMPLE_AGREEMENT:
        return (f"it names no model hash, and the model ranks {same:.0%} of the first {n} test queries as it "
                f"recorded, under {SAMPLE_AGREEMENT:.0%}")
    return ""


def _plan(runs_dir: Path, params_path: str | Path, base: Mapping[str, Any], inputs: Mapping[str, Any],
          data: str | Path, graph: str | Path, default_ctx,
          num_threads: Optional[int] = None) -> tuple[list[RunFolders], list[dict[str, Any]]]:
    """``(runs to re-score, skipped runs)``: every run checked before any is scored, so a refusal leaves
    nothing half done. :class:`ConfigError` / :class:`ValueError` naming the run (module docstring)."""
    todo, skipped = [], []
    for v in variant_registry.VARIANTS:
        if not (runs_dir / v).is_dir():
            continue
        for run in variant_runs(runs_dir / v).values():
            if not (run.best.is_file() and RunDir(run.eval).metrics.is_file()):
                skipped.append({"run": str(run), "status": "skipped: not tested yet"})
                continue
            fingerprint = read_fingerprint(run.train) or read_fingerprint(run.train.parent)
            if not fingerprint:
                raise ValueError(f"{run}: no run_config.json (in {run.train.name}/ or beside it): cannot tell what it "
                                 "trained with")
            diffs = _differences(fingerprint.get("params", {}), base)
            if diffs:
                hint = ("; a workspace's runs trained with its resolved build/params.json, profile and "
                        "params.local.yaml applied: pass that" if is_pipeline_variant(runs_dir / v)
                        and Path(params_path).suffix != ".json" else "")
                raise ConfigError(f"{run}: {params_path} is not the params this run trained with "
                                  f"({'; '.join(diffs)}){hint}")
            for key, path in (("data", data), ("graph", graph)):
                if fingerprint.get("inputs", {}).get(key) != inputs[key]:
                    raise ValueError(f"{run}: trained on other {key} than {path}")
            other = _tested_another_model(run, default_ctx, num_threads)
            if other:  # the run trained on (or was restarted) after its test: the default evaluation is of another model
                skipped.append({"run": str(run), "status": f"skipped: its test evaluation is not of "
                                                           f"{run.model_name} ({other})"})
                continue
            todo.append(run)
    return todo, skipped


def rescore_runs(runs_dir: str | Path, data: str | Path, graph: str | Path, params_path: str | Path,
                 overrides: Mapping[str, Any], num_threads: Optional[int] = None,
                 splits: Sequence[str] = ("test",)) -> list[dict[str, Any]]:
    """Evaluate again on the test split (and on the others of ``splits``: ``valid``), under ``overrides``, the
    best model of every tested run in ``runs_dir`` (one dataset's folder of long runs,
    ``<variant>/seed<S>/{rl,eval}``, or a pipeline workspace's ``runs/<dataset>/``; the ablation's arms are not
    read), into the run's readings folder (module docstring). A run not yet tested (no ``eval/metrics.json``), or whose test is not of its present
    ``rl/best.pt`` (it trained on since: by the model hash the test recorded, else by
    :data:`SAMPLE_QUERIES` of its ranks), is skipped: the reading would not be of the checkpoint the default
    evaluation tested. A reading already there for the same model is kept.

    ``params_path`` must be the params the runs trained with (their fingerprints' params; params a later
    commit added are not compared): a params YAML file, or a resolved one (JSON: a workspace's
    ``build/params.json``, read with :func:`raptor.config.load_resolved`): :class:`ConfigError` naming the run and the keys otherwise, or when an
    override leaves its param as it is (no reading); :class:`ValueError` when ``data`` or ``graph`` is not
    what the run trained on, or the run has no fingerprint. Every run is checked before any is scored. The
    evaluation folder is written as ``raptor evaluate`` writes it, its :data:`READING_FILE` last, so an
    interrupted re-score leaves a folder that is neither read nor kept.

    Returns one ``{"run", "split", "status" ("scored" | "kept" | "skipped: why"), "reading", "metrics"}`` per
    run and split, the test split first (one row without ``split``, ``reading`` and ``metrics`` for a skipped
    run)."""
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise ValueError(f"split {', '.join(map(repr, unknown))}: one of {', '.join(SPLITS)}")
    splits = ["test", *(s for s in SPLITS if s != "test" and s in splits)]
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise FileNotFoundError(f"runs folder not found: {runs_dir}")
    name = reading_name(overrides)
    base = result_params(_load(params_path))
    same = [k for k, v in overrides.items() if base.get(k) == v]
    if same:
        raise ConfigError(f"{', '.join(f'{k}={overrides[k]!r}' for k in same)}: the value {params_path} already "
                          "has (the default evaluation, not a reading)")
    params = _load(params_path, dict(overrides))
    ctx = load_context(data, graph, params)
    default_ctx = dataclasses.replace(ctx, params=_load(params_path))  # (the same data, graph and filter)
    todo, out = _plan(runs_dir, params_path, base, ctx.input_hashes(), data, graph, default_ctx, num_threads)
    code = code_hash(["raptor.pipeline.rescore"])
    for run in todo:
        for split in splits:
            kept = finished_reading(run, overrides, split)
            if kept is not None:
                if not (kept / RANKS_FILE).is_file():  # a reading made before its ranks were written beside it
                    write_ranks(RunDir(kept).predictions, kept / RANKS_FILE)
                out.append({"run": str(run), "split": split, "reading": name, "status": "kept",
                            "metrics": read_json(RunDir(kept).metrics)})
                continue
            target = reading_dir(run, name, split)
            (target / READING_FILE).unlink(missing_ok=True)  # not a reading until it is whole again
            _clear(target)
            log.info("re-scoring %s (%s, %s split)", run, name, split)
            metrics = evaluate_model(ctx, run.best, target, split=split, num_threads=num_threads)
            write_ranks(RunDir(target).predictions, target / RANKS_FILE)  # what a park keeps (module docstring)
            atomic_write_json(target / READING_FILE, {**_identity(run, overrides, split), "code": code})
            out.append({"run": str(run), "split": split, "reading": name, "status": "scored", "metrics": metrics})
    return sorted(out, key=lambda r: r["run"])


def rescore_sweep(runs_dir: str | Path, data: str | Path, graph: str | Path, params_file: str | Path, name: str,
                  num_threads: Optional[int] = None) -> list[dict[str, Any]]:
    """The runs of sweep ``name``'s evaluation-only arms (:func:`raptor.pipeline.sweep.evaluation_only_arms`:
    an arm whose params differ from the default arm's in test-time evaluation params alone): the default arm's
    tested long runs (``runs_dir``: one dataset's folder of long runs, the arm's runs under
    ``sweeps/<name>/default/``) evaluated again under each such arm's overrides, on the test and the validation
    split (:func:`rescore_runs`), with the default arm's params as sweep ``name`` of ``params_file`` (the folder's
    params file) resolves them. Training such an arm would train the default arm again; ``raptor collect --sweep``
    makes its records from these. Returns :func:`rescore_runs`' rows, each with its ``arm``.
    :class:`ConfigError` when the sweep has no evaluation-only arm, :class:`FileNotFoundError` when no default
    arm's run is here."""
    import tempfile

    from raptor.pipeline.sweep import DEFAULT_ARM, LONG_RUN_ARM, arm_run_params, evaluation_only_arms, load_sweep

    _, params = load_sweep(params_file, name)
    arms = evaluation_only_arms(params)
    if not arms:
        raise ConfigError(f"{params_file}: sweep {name} has no evaluation-only arm (one whose params differ from "
                          f"arm {DEFAULT_ARM}'s in {', '.join(TEST_TIME_EVAL_KEYS)} alone): nothing to re-score")
    default_runs = Path(runs_dir) / LONG_RUN_ARM.format(name=name, arm=DEFAULT_ARM, variant="").rstrip("/")
    if not default_runs.is_dir():
        raise FileNotFoundError(f"{default_runs}: no long runs of sweep {name}'s arm {DEFAULT_ARM} here "
                                "(its tested runs are what an evaluation-only arm re-scores)")
    text, _, _ = arm_run_params(params_file, name, DEFAULT_ARM)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        default_params = Path(tmp) / f"{DEFAULT_ARM}.yaml"
        default_params.write_text(text)
        for arm, overrides in arms.items():
            out += [{**r, "arm": arm} for r in rescore_runs(default_runs, data, graph, default_params, overrides,
                                                            num_threads=num_threads, splits=SPLITS)]
    return out


def rescore_job(plan, job, data_dir: str | Path, graph_path: str | Path, results: str | Path,
                num_threads: Optional[int] = None) -> dict[str, Any]:
    """One run of a sweep's evaluation-only arm (``job`` of ``plan``:
    :func:`raptor.pipeline.sweep.rescored_jobs`): the best model of the default arm's run of the same variant
    and seed (trained in the sweep folder) evaluated under the arm's params (``job.params_path``: the default's
    with the arm's overrides) on the test split, into ``job.eval_dir``, and on the validation split, into its
    ``valid/``; then the arm's record in ``results`` (:func:`raptor.reporting.records.save_rescored_record`).
    :class:`ValueError` for a job of another arm; :class:`FileNotFoundError` naming the default run when its
    model is not here (its record may be, from an earlier sweep whose run folders are gone)."""
    from raptor.config import load_resolved
    from raptor.pipeline.sweep import DEFAULT_ARM, job_dirs, rescored_jobs
    from raptor.reporting.records import save_rescored_record

    pairs = rescored_jobs(plan, {arm: load_resolved(path) for arm, path in plan.params_files.items()})
    if job.run_name not in pairs:
        raise ValueError(f"{job.run_name}: not a run of an evaluation-only arm of sweep {plan.sweep.name} "
                         "(one whose params differ from the default arm's in test-time evaluation params alone)")
    default_job, overrides = pairs[job.run_name]
    train_dir, _ = job_dirs(plan, default_job)
    if not RunDir(train_dir).summary.is_file() or not RunDir(train_dir).best.is_file():
        raise FileNotFoundError(f"{train_dir}: no finished run here, and {job.run_name} is that run "
                                f"({default_job.run_name}) re-scored under {reading_name(overrides)}; a record in "
                                f"{results} keeps no model: move {default_job.run_name}'s record out of it to train "
                                "the run here again")
    ctx = load_context(data_dir, graph_path, load_resolved(job.params_path))
    model = RunDir(train_dir).finished_best()
    test_dir, valid_dir = Path(job.eval_dir), Path(job.eval_dir) / "valid"
    metrics = evaluate_model(ctx, model, test_dir, split="test", num_threads=num_threads)
    evaluate_model(ctx, model, valid_dir, split="valid", num_threads=num_threads)
    save_rescored_record(train_dir, test_dir, valid_dir, *job_dirs(plan, job, results),
                         {"arm": DEFAULT_ARM, "reading": reading_name(overrides), "overrides": dict(overrides)})
    return {"test_mrr": metrics.get("mrr")}
