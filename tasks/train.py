"""Tasks of the learning stages: label, one training run, one evaluation, significance, report.

Each task calls one library function; the MLflow bookkeeping around it (one child run per
(dataset, variant, seed), per-epoch metrics, artifacts) lives here, outside ``raptor/``.
"""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path
from typing import Any, Optional

from prefect import task
from prefect.cache_policies import NO_CACHE

from raptor import layout
from raptor.config import flatten, load_params, params_to_dict
from raptor.experiment import evaluate_model, load_context, run_variant
from raptor.io import atomic_write_json
from raptor.labeling import label_dataset
from raptor.report import significance, write_report

from . import tracking

RUN_FILE = "mlflow_run.json"


@functools.lru_cache(maxsize=2)
def _load_context(root: str, params_path: str, stamp: tuple):
    params = load_params(params_path)
    ds = params.data.dataset
    return load_context(layout.ingested(root, ds), layout.graph(root, ds), params)


def _context(root: str, params_path: str):
    """The dataset, graph, environment and filter of a stage invocation, loaded once and shared by the
    (read-only) seed tasks in this process; reloaded when the params file or the data change."""
    ds = load_params(params_path).data.dataset
    files = (Path(params_path), layout.ingested(root, ds) / "meta.json", layout.graph(root, ds))
    stamp = tuple(f.stat().st_mtime_ns if f.exists() else None for f in files)
    return _load_context(root, params_path, stamp)


def threads_per_run(num_threads: int, parallel_runs: int) -> int:
    """Torch threads for each of ``parallel_runs`` concurrent runs (``num_threads`` 0 = all cores)."""
    cores = num_threads or len(os.sched_getaffinity(0))
    return max(1, cores // max(1, parallel_runs))


@task(name="label", cache_policy=NO_CACHE)
def label_task(data_dir: str, graph_path: str, out_dir: str, params_path: str) -> dict:
    params = load_params(params_path)
    return label_dataset(data_dir, out_dir, max_path_length=params.env.max_path_length, config=params.labeling,
                         graph_path=graph_path)


def _numeric(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}


@task(name="train-run", cache_policy=NO_CACHE, task_run_name="{variant}-seed{seed}")
def train_run_task(
    root: str,
    params_path: str,
    variant: str,
    seed: int,
    out_dir: str,
    experiment: str,
    parent_run_id: Optional[str],
    num_threads: int,
    pretrain_epochs: Optional[int] = None,
    init_model: Optional[str] = None,
    run_name: Optional[str] = None,
    extra_tags: Optional[dict] = None,
) -> dict:
    """Train one (variant, seed) with its own MLflow child run; resumes from ``out_dir`` if present."""
    ctx = _context(root, params_path)
    params, ds = ctx.params, ctx.params.data.dataset
    parent = tracking.Run(parent_run_id, tracking.experiment_id(experiment)) if parent_run_id else None
    tags = {"dataset": ds, "variant": variant, "seed": seed, "stage": "finetune", "profile": params.profile,
            **tracking.data_hashes(layout.ingested(root, ds)), **(extra_tags or {})}
    run = tracking.start_run(experiment, run_name or f"{ds}-{variant}-seed{seed}",
                             params={**flatten(params_to_dict(params)), "variant": variant, "seed": seed,
                                     **({"pretrain_epochs_override": pretrain_epochs} if pretrain_epochs is not None else {})},
                             tags=tags, parent=parent)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / RUN_FILE, {"run_id": run.run_id, "experiment": experiment})

    def on_epoch_end(phase: str, epoch: int, metrics: dict) -> None:
        run.log_metrics({f"{phase}/{k}": v for k, v in _numeric(metrics).items() if k != "epoch"}, step=epoch)

    try:
        summary = run_variant(ctx, variant, seed, out, labels=layout.labels(root, ds), on_epoch_end=on_epoch_end,
                              num_threads=num_threads, pretrain_epochs=pretrain_epochs, init_model=init_model,
                              progress=True)
        run.log_metrics(_numeric({"best_val_mrr": summary["best_val_mrr"], "final_reward": summary["final_reward"],
                                  "train_seconds": summary["seconds"]}), step=0)
        run.log_artifact(out / "rl" / "best.pt", "model")
        run.log_artifact(out / "rl" / "history.csv", "history")
        if (out / "pretrain" / "history.json").exists():
            run.log_artifact(out / "pretrain" / "history.json", "history/pretrain")
        run.finish()
    except BaseException:
        run.finish("FAILED")
        raise
    summary["mlflow_run_id"] = run.run_id
    return summary


@task(name="evaluate-run", cache_policy=NO_CACHE, task_run_name="{variant}-seed{seed}")
def evaluate_run_task(root: str, params_path: str, variant: str, seed: int, split: str, num_threads: int) -> dict:
    """Beam-search evaluation of one trained seed; logs test metrics and predictions to its MLflow run."""
    ctx = _context(root, params_path)
    ds = ctx.params.data.dataset
    train_seed = layout.seed_dir(layout.train_dir(root, ds, variant), seed)
    out = layout.seed_dir(layout.eval_dir(root, ds, variant), seed)
    metrics = evaluate_model(ctx, train_seed / "rl" / "best.pt", out, split=split, num_threads=num_threads)
    run_file = train_seed / RUN_FILE
    if run_file.exists():
        info = json.loads(run_file.read_text())
        run = tracking.Run(info["run_id"], tracking.experiment_id(info["experiment"]))
        run.log_metrics({f"{split}/{k}": v for k, v in _numeric(metrics).items()}, step=0)
        run.log_artifact(out / "predictions.parquet", "predictions")
        run.log_artifact(out / "metrics.json", "predictions")
    return metrics


@task(name="significance", cache_policy=NO_CACHE)
def significance_task(eval_dirs: dict[str, str], out_path: str) -> dict:
    result = significance(eval_dirs)
    atomic_write_json(out_path, result)
    return result


@task(name="report", cache_policy=NO_CACHE)
def report_task(dataset: str, train_dirs: dict[str, str], eval_dirs: dict[str, str], out_dir: str,
                significance_path: Optional[str]) -> dict:
    return write_report(dataset, train_dirs, eval_dirs, out_dir, significance_path)


@task(name="pretrain-snapshots", cache_policy=NO_CACHE, task_run_name="pretrain-seed{seed}")
def pretrain_snapshots_task(root: str, params_path: str, seed: int, out_dir: str, epochs: list[int],
                            num_threads: int) -> dict:
    """One pretraining run per seed for the ablation, with a snapshot at each arm's epoch count."""
    from raptor.experiment import pretrain_snapshots

    ctx = _context(root, params_path)
    return pretrain_snapshots(ctx, seed, out_dir, epochs, layout.labels(root, ctx.params.data.dataset),
                              num_threads=num_threads)


@task(name="ablation-report", cache_policy=NO_CACHE)
def ablation_report_task(dataset: str, arms: dict[int, str], out_dir: str) -> dict:
    from raptor.report import write_ablation_report

    return write_ablation_report(dataset, arms, out_dir)
