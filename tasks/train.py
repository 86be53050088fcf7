"""Tasks of the learning stages: pretraining and training runs, evaluation, a sweep's runs.

Each mapped task takes one frozen job (:mod:`tasks.jobs`) and calls one library function; the MLflow
bookkeeping around a run (one run per (dataset, variant, seed), per-epoch metrics, artifacts) lives
here, outside ``raptor/``: :func:`training_run` owns a training run's MLflow run.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Union


from raptor.agents import variants
from raptor.runs.rundir import RunOptions
from raptor.config import Params, flatten, params_to_dict
from raptor.runs.context import load_context
from raptor.agents import get_agent
from raptor.pipeline.experiment import effective_epochs, evaluate_model, run_variants
from raptor.common.runtime import resolve_device, resolve_precision
from raptor.common.io import atomic_write_json
from raptor.agents.actor_critic.pretrain import pretrain_run
from raptor.agents.actor_critic.pretrain_seeds import pretrain_runs
from raptor.runs.rundir import RunDir
from raptor.evaluation.summary import summarize
from raptor.pipeline.rescore import rescore_job
from raptor.pipeline.sweep import save_job_record
from raptor.config import load_resolved

from . import tracking
from .lazy import NO_CACHE, in_prefect_run, task
from .jobs import (EvaluateJob, PretrainGroup, PretrainJob, RecordJob, ResultRunJob, SweepRescoreJob, SweepRunJob,
                   TrainGroup, TrainJob)

RUN_FILE = "mlflow_run.json"
#: Where a training run's best checkpoint is in its MLflow artifacts (``checkpoint/best.pt``).
CHECKPOINT_ARTIFACT = "checkpoint"


@functools.lru_cache(maxsize=2)
def _load_context(params_path: str, data_dir: str, graph_path: str, stamp: tuple):
    return load_context(data_dir, graph_path, load_resolved(params_path))


def context(params_path: str, data_dir: str, graph_path: str):
    """The dataset, graph, environment and filter of a stage invocation, loaded once and shared by
    the (read-only) seed tasks in this process; reloaded when the params or the data change."""
    files = (Path(params_path), Path(data_dir) / "meta.json", Path(graph_path))
    stamp = tuple(f.stat().st_mtime_ns if f.exists() else None for f in files)
    return _load_context(params_path, data_dir, graph_path, stamp)


def threads_per_run(num_threads: int, parallel_runs: int) -> int:
    """Torch threads for each of ``parallel_runs`` concurrent runs (``num_threads`` 0 = all cores)."""
    cores = num_threads or len(os.sched_getaffinity(0))
    return max(1, cores // max(1, parallel_runs))


def _numeric(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}


#: The params sections every training run reads (besides its agent's own: ``Variant.params``).
SHARED_SECTIONS = ("env", "eval", "train")
#: Resolved at run time, logged as ``precision`` and ``device`` instead (``auto`` says nothing).
_RESOLVED_KEYS = ("train.precision", "train.device", "titer.precision")


def run_params(params: Params, sections: tuple[str, ...], device=None, precision: Optional[str] = None) -> dict:
    """The params an MLflow run logs: ``profile`` and the keys of ``sections`` only (a run of one agent
    shows none of another agent's settings), with the precision and device it really trains with
    (``precision``, ``device``) in place of the configured ``train.precision``/``train.device``/
    ``titer.precision`` (which may say ``auto``)."""
    d = params_to_dict(params)
    logged = {"profile": d.get("profile"), **flatten({k: v for k, v in d.items() if k in sections})}
    if precision is not None:
        for key in _RESOLVED_KEYS:
            logged.pop(key, None)
        logged["precision"] = precision
    if device is not None:
        logged["device"] = str(device)
    return logged


def variant_sections(variant: str) -> tuple[str, ...]:
    """The params sections that shape a (variant, seed) run: the shared ones, its agent's, and the
    labels and pretraining of a variant that starts from a pretrained checkpoint."""
    v = variants.get(variant)
    return SHARED_SECTIONS + v.params + (("labeling", "pretrain") if v.pretrained else ())


def resolved_runtime(params: Params, variant: Optional[str]) -> tuple[Any, str]:
    """``(device, precision)`` a run of ``variant`` (None: pretraining) trains with on this machine."""
    device = resolve_device(params.train.device)
    if variant is None:
        return device, resolve_precision(params.train.precision, device)
    return device, get_agent(variants.get(variant).agent).precision(params, device)


def epoch_line(run_name: str, phase: str, epoch: int, metrics: dict, total: Optional[int] = None) -> str:
    """One human-readable line per epoch, 1-based: ``SYN-raptor-seed0 rl epoch 3/15: reward 0.4121,
    val MRR 0.2310, 12.4 s`` (validation only on the epochs that validate)."""
    parts = [f"{run_name} {phase} epoch {epoch + 1}" + (f"/{total}" if total else "") + ":"]
    values = []
    for key, label in (("reward", "reward"), ("loss", "loss"), ("val_mrr", "val MRR")):
        v = metrics.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            values.append(f"{label} {v:.4f}")
    if isinstance(metrics.get("seconds"), (int, float)):
        values.append(f"{metrics['seconds']:.1f} s")
    return " ".join(parts) + " " + ", ".join(values)


def prefect_logger():
    """The task run's Prefect logger (its lines go to the run's log in the UI and to the console), or
    the ``raptor.train`` logger outside a Prefect run."""
    if not in_prefect_run():
        return logging.getLogger("raptor.train")
    from prefect.exceptions import MissingContextError
    from prefect.logging import get_run_logger

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("raptor.train")


def _epoch_logger(run: tracking.Run, trained: Optional[list] = None, pretrained_epochs: int = 0,
                  logger=None, total: Optional[int] = None):
    """``(phase, epoch, metrics)`` hook logging one epoch's numeric metrics as ``phase/name`` at
    step ``epoch + 1`` (epochs are 1-based wherever a person reads them: the library's 0-based
    epoch index 0 is the first epoch) and noting the epoch in ``trained``. RL epochs are logged a
    second time as ``total/name`` at step ``pretrained_epochs + epoch + 1``: the epochs of the whole
    budget, on which variants with and without pretraining compare at equal cost. With ``logger``
    (the task's Prefect logger), every epoch trained now is also one line there (:func:`epoch_line`)."""
    def on_epoch_end(phase: str, epoch: int, metrics: dict) -> None:
        replayed = bool(metrics.get("replayed"))  # trained before: logged only if this run logs anything new
        if trained is not None and not replayed:
            trained.append((phase, epoch))
        if logger is not None and not replayed:
            logger.info(epoch_line(run.name, phase, epoch, metrics, total))
        for values, step in epoch_series(phase, epoch, metrics, pretrained_epochs):
            run.log_metrics(values, step=step, defer=replayed)
    return on_epoch_end


def epoch_series(phase: str, epoch: int, metrics: dict, pretrained_epochs: int = 0) -> list[tuple[dict, int]]:
    """One epoch's numeric metrics as MLflow logs them (:func:`_epoch_logger`): ``(phase/name values, epoch + 1)``
    and, for an RL epoch, ``(total/name values, pretrained_epochs + epoch + 1)``."""
    values = {k: v for k, v in _numeric(metrics).items() if k != "epoch"}
    out = [({f"{phase}/{k}": v for k, v in values.items()}, epoch + 1)]
    if phase == "rl":
        out.append(({f"total/{k}": v for k, v in values.items()}, pretrained_epochs + epoch + 1))
    return out


def _kept_run(out: Path, run: tracking.Run, previous: dict, trained: list) -> Optional[str]:
    """The earlier MLflow run id when this invocation trained nothing (its folder was complete and
    resumed as it was): the new run is dropped instead of logging the same run again."""
    if trained or not previous.get("run_id") or not run.discard():
        return None
    atomic_write_json(out / RUN_FILE, previous)
    return previous["run_id"]


PARENT_FILE = "mlflow_parent.json"


def seed_aggregates(per_seed: list[dict], keys: tuple[str, ...]) -> dict[str, float]:
    """``{key}_mean`` and ``{key}_std`` over the seeds (:func:`raptor.evaluation.summary.summarize`) of the keys
    every seed has a number for, for a stage's parent MLflow run."""
    keys = tuple(k for k in keys if all(isinstance(r.get(k), (int, float)) for r in per_seed))
    summary = summarize(dict(enumerate(per_seed)), keys)
    return {f"{k}_{stat}": summary[k][stat] for k in keys for stat in ("mean", "std")}


def remember_parent(folder: str | Path, run: tracking.Run) -> None:
    """Where the evaluation of this stage's runs logs its aggregate: the stage output's parent run."""
    if run.run_id:
        atomic_write_json(Path(folder) / PARENT_FILE, {"run_id": run.run_id})


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def parent_of(folder: str | Path) -> Optional[tracking.Run]:
    run_id = _read_json(Path(folder) / PARENT_FILE).get("run_id")
    return tracking.Run(run_id) if run_id else None


def pipeline_run_of(train_dirs) -> Optional[tracking.Run]:
    """The MLflow pipeline run (tag ``stage: pipeline``) above the newest of these finetune outputs'
    parent runs, where their report goes; None if they have none (trained outside a pipeline)."""
    newest = None
    for folder in train_dirs:
        parent = parent_of(folder)
        try:
            up = parent and tracking.client().get_run(parent.run_id).data.tags.get(tracking.MLFLOW_PARENT_RUN_ID)
            pipe = up and tracking.client().get_run(up)
        except tracking.UNREACHABLE:
            continue
        if (pipe and pipe.data.tags.get("stage") == tracking.PIPELINE_STAGE and pipe.info.lifecycle_stage == "active"
                and (newest is None or pipe.info.start_time > newest.info.start_time)):
            newest = pipe
    return tracking.Run(newest.info.run_id, newest.info.experiment_id) if newest else None


def _previous_run(out: Path) -> dict:
    return _read_json(out / RUN_FILE)


def _remember_run(out: Path, run: tracking.Run, experiment: str) -> None:
    """Where the evaluation logs its metrics: written into the run folder once the run is done
    (before, the library's run-folder check would take it for a stranger's file)."""
    atomic_write_json(out / RUN_FILE, {"run_id": run.run_id, "experiment": experiment})


@dataclass
class Training:
    """A training run's MLflow run while it trains (:func:`training_run`)."""

    run: tracking.Run
    job: Union[PretrainJob, TrainJob]
    #: ``(phase, epoch, metrics)``: the library's hook, logging each epoch (:func:`_epoch_logger`).
    on_epoch_end: Callable[[str, int, dict], None]
    previous: dict
    trained: list
    #: The earlier MLflow run id this invocation kept, having trained nothing (:meth:`keep`).
    kept: Optional[str] = None

    def keep(self) -> bool:
        """True when this invocation trained nothing (its folder was complete and resumed as it was):
        its new run is dropped and the earlier one (:attr:`kept`) stands, instead of logging the same
        run again."""
        self.kept = _kept_run(Path(self.job.out_dir), self.run, self.previous, self.trained)
        return self.kept is not None

    def remember(self) -> None:
        _remember_run(Path(self.job.out_dir), self.run, self.job.experiment)

    def ids(self) -> dict:
        """``mlflow_run_id`` (and ``mlflow_run_kept``) for the task's result, once the run has ended."""
        if self.kept:
            return {"mlflow_run_id": self.kept, "mlflow_run_kept": True}
        return {"mlflow_run_id": self.run.run_id}


@contextmanager
def training_run(job: Union[PretrainJob, TrainJob], params: dict, tags: dict, total: Optional[int],
                 pretrain_epochs: int = 0) -> Iterator[Training]:
    """The MLflow run of one training run (:func:`tasks.tracking.tracked_run`: FINISHED, FAILED when
    the block raises), created at its first trained epoch, under ``job.parent_run_id`` (a run folder
    that is already complete trains nothing and keeps its earlier MLflow run: :meth:`Training.keep`).
    Its hook logs each epoch (``total``: the epochs it trains, for the log lines); a run that starts
    after ``pretrain_epochs`` epochs of pretraining logs those first (``job.pretrain_history``)."""
    parent = tracking.Run(job.parent_run_id) if job.parent_run_id else None
    with tracking.tracked_run(job.experiment, job.run_name, params=params, tags={**tags, **tracking.prefect_ids()},
                              parent=parent, lazy=True) as run:
        history = getattr(job, "pretrain_history", None)
        if history and pretrain_epochs:
            log_pretraining(run, history, pretrain_epochs)
        trained: list = []
        yield Training(run, job, _epoch_logger(run, trained, pretrain_epochs, prefect_logger(), total),
                       _previous_run(Path(job.out_dir)), trained)


def _options(job: Union[PretrainJob, TrainJob], progress: bool = False) -> RunOptions:
    return RunOptions(seed=job.seed, out_dir=Path(job.out_dir), num_threads=job.num_threads, progress=progress)


@task(name="pretrain-run", cache_policy=NO_CACHE, task_run_name="pretrain-{job.dataset}-seed{job.seed}")
def pretrain_run_task(job: PretrainJob) -> dict:
    """One seed's pretraining run with its MLflow run; resumes from ``job.out_dir`` when it may."""
    ctx = context(job.params_path, job.data_dir, job.graph_path)
    with training_run(job, *pretrain_logged(ctx.params, job), total=max(job.epochs)) as t:
        snaps = pretrain_run(ctx, job.labels_dir, list(job.epochs), _options(job), on_epoch_end=t.on_epoch_end)
        if not t.keep():
            t.run.log_artifact(RunDir(job.out_dir).history, "history")
            t.remember()
    return {"seed": job.seed, "snapshots": snaps, "mlflow_run_id": t.ids()["mlflow_run_id"]}


@task(name="pretrain-runs", cache_policy=NO_CACHE, task_run_name="{group.run_name}")
def pretrain_group_task(group: PretrainGroup) -> list[dict]:
    """Pretrain seeds stacked into one batched step (``train.stacked_seeds``), each with its own MLflow
    run and run folder, as :func:`pretrain_run_task` does one (all FAILED if the training raises)."""
    first = group.jobs[0]
    ctx = context(first.params_path, first.data_dir, first.graph_path)
    with ExitStack() as runs:
        trainings = [runs.enter_context(training_run(job, *pretrain_logged(ctx.params, job), total=max(job.epochs)))
                     for job in group.jobs]
        snaps = pretrain_runs(ctx, first.labels_dir, list(first.epochs), [_options(job) for job in group.jobs],
                              on_epoch_end=[t.on_epoch_end for t in trainings])
        for t, job in zip(trainings, group.jobs):
            if not t.keep():
                t.run.log_artifact(RunDir(job.out_dir).history, "history")
                t.remember()
    return [{"seed": job.seed, "snapshots": s, "mlflow_run_id": t.ids()["mlflow_run_id"]}
            for job, s, t in zip(group.jobs, snaps, trainings)]


def pretrain_logged(params: Params, job: PretrainJob) -> tuple[dict, dict]:
    """``(params, tags)`` of a pretraining run's MLflow run. ``pretrain.epochs``: the epochs this run
    trains (the ablation's: up to its last arm), not the config's."""
    device, precision = resolved_runtime(params, None)
    logged = {**run_params(params, SHARED_SECTIONS + ("model", "labeling", "pretrain"), device, precision),
              "seed": job.seed, "pretrain.epochs": max(job.epochs)}
    tags = {"dataset": job.dataset, "seed": job.seed, "stage": "pretrain", "profile": params.profile,
            **tracking.data_hashes(job.data_dir)}
    return logged, tags


@task(name="train-run", cache_policy=NO_CACHE, task_run_name="{job.run_name}")
def train_run_task(job: TrainJob) -> dict:
    """Train one (variant, seed) with its own MLflow run; resumes from ``job.out_dir`` when it may."""
    return train_runs((job,))[0]


@task(name="train-runs", cache_policy=NO_CACHE, task_run_name="{group.run_name}")
def train_group_task(group: TrainGroup) -> list[dict]:
    """Train a variant's seeds stacked into one batched step (``train.stacked_seeds``), each with its
    own MLflow run and run folder, as :func:`train_run_task` does one."""
    return train_runs(group.jobs)


def train_runs(jobs: tuple[TrainJob, ...]) -> list[dict]:
    """:func:`raptor.pipeline.experiment.run_variants` of ``jobs`` (one variant), each seed with its
    MLflow run (all FAILED if the training raises)."""
    first = jobs[0]
    ctx = context(first.params_path, first.data_dir, first.graph_path)
    with ExitStack() as runs:
        trainings = []
        for job in jobs:
            logged, tags, epochs = train_logged(ctx.params, job)
            trainings.append(runs.enter_context(training_run(job, logged, tags, epochs, job.pretrain_epochs)))
        summaries = run_variants(ctx, first.variant, [_options(job, progress=True) for job in jobs],
                                 init_models=[job.init_model for job in jobs], pretrain_epochs=first.pretrain_epochs,
                                 hooks=[t.on_epoch_end for t in trainings])
        for t, summary in zip(trainings, summaries):
            if not t.keep():
                log_trained(t, summary, ctx.params)
    return [{**summary, **t.ids()} for summary, t in zip(summaries, trainings)]


def train_logged(params: Params, job: TrainJob) -> tuple[dict, dict, int]:
    """``(params, tags, epochs)`` of a training run's MLflow run: the epochs this run really trains,
    not the config's (Pure-RL under equal_total_epochs, an ablation arm); only the sections that shape
    this run (not another agent's), the precision and device it trains with; ``job.logged_params``
    over them (an ablation arm's own value of the grid key)."""
    tags = {"dataset": job.dataset, "variant": job.variant, "seed": job.seed, "stage": "finetune",
            "profile": params.profile, **tracking.data_hashes(job.data_dir), **job.extra_tags}
    n_rl = effective_epochs(params, job.variant, job.pretrain_epochs)
    device, precision = resolved_runtime(params, job.variant)
    logged = {**run_params(params, variant_sections(job.variant), device, precision), "variant": job.variant,
              "seed": job.seed, "pretrain.epochs": job.pretrain_epochs, "epochs": n_rl,
              **({"rl.epochs": n_rl} if "rl" in variants.get(job.variant).params else {}), **job.logged_params}
    return logged, tags, n_rl


def log_trained(t: Training, summary: dict, params: Params) -> None:
    """What a training run that trained logs at its end: its summary metrics, the precision and device
    it trained with, its best checkpoint (raptor.runs.checkpoints' weights-only format: `raptor evaluate
    --model best.pt`) with the summary that says which epoch it is, its history, its best model as an
    MLflow logged model; then the run folder names the run."""
    run, job, out = t.run, t.job, RunDir(t.job.out_dir)
    best_epoch = summary.get("best_epoch")
    run.log_metrics(_numeric({"best_val_mrr": summary["best_val_mrr"], "final_reward": summary["final_reward"],
                              "train_seconds": summary.get("train_seconds", summary["seconds"]), "epochs_trained": summary["epochs_trained"],
                              # 1-based, as the steps (summary.json keeps the library's 0-based index)
                              "best_epoch": None if best_epoch is None else best_epoch + 1}),
                    step=0)
    run.set_tags({"precision": summary["precision"], "device": summary.get("device")})
    run.log_artifact(out.best, CHECKPOINT_ARTIFACT)
    run.log_artifact(out.summary, CHECKPOINT_ARTIFACT)
    run.log_artifact(out.history_csv, "history")
    log_best_model(run, out.best, job.params_path, job.data_dir, job.graph_path, params.eval.beam_size)
    t.remember()


#: The name of a training run's logged model (``runs:/<run_id>/model``).
MODEL_NAME = "model"
#: What the logged model needs installed besides its code (``raptor/``, carried in the model).
MODEL_REQUIREMENTS = ("mlflow", "torch", "numpy", "numba", "pyarrow", "pandas", "scipy", "PyYAML")


def log_best_model(run: tracking.Run, best: str | Path, params_path: str, data_dir: str, graph_path: str,
                   top_k: int) -> None:
    """The best checkpoint as the run's MLflow logged model :data:`MODEL_NAME`, "from code": the pyfunc
    :class:`tasks.mlflow_model.RaptorModel` (that file and ``raptor/`` as code; no pickle) with the
    checkpoint, the ingested dataset, its graph and the resolved params as artifacts, a signature
    (:func:`tasks.mlflow_model.signature`) and an input example (two training queries).

    Load it with ``mlflow.pyfunc.load_model("runs:/<run_id>/model")``."""
    from importlib.metadata import version

    import pandas as pd

    import raptor
    from tasks import mlflow_model

    if not Path(best).exists():
        return
    first = context(params_path, data_dir, graph_path).dataset.splits["train"][:2]
    example = pd.DataFrame({"subject": first[:, 0], "relation": first[:, 1], "time": first[:, 3]}).astype("int64")
    # The files stay where they are until the call is sent (it waits, like the others, while MLflow is
    # unreachable). The ingested folder holds the dataset only (quadruples, names, meta.json: a few MB
    # for ICEWS); the labels are elsewhere.
    run.log_model(
        name=MODEL_NAME,
        python_model=mlflow_model.__file__,
        artifacts={"checkpoint": str(best), "data": str(data_dir), "graph": str(graph_path), "params": str(params_path)},
        code_paths=[str(Path(raptor.__file__).parent)],
        signature=mlflow_model.signature(top_k),
        input_example=example,
        # pinned as installed; MLflow would otherwise load the model in a subprocess to infer them
        pip_requirements=[f"{n}=={version(n)}" for n in MODEL_REQUIREMENTS],
    )


def log_pretraining(run: tracking.Run, history_path: str | Path, epochs: int) -> None:
    """The first ``epochs`` epochs of a pretraining run's history as ``pretrain/<name>`` at step =
    epoch (1-based), deferred: sent with the run's first trained epoch (a run that trains nothing is not
    created for them)."""
    path = Path(history_path)
    if not path.exists():
        logging.getLogger("raptor.tracking").warning("no pretraining history at %s: not logged to %s", path, run.name)
        return
    for row in json.loads(path.read_text()):
        if int(row["epoch"]) < epochs:
            values = {f"pretrain/{k}": v for k, v in _numeric(row).items() if k != "epoch"}
            run.log_metrics(values, step=int(row["epoch"]) + 1, defer=True)


@task(name="evaluate-run", cache_policy=NO_CACHE, task_run_name="evaluate-{job.variant}-seed{job.seed}")
def evaluate_run_task(job: EvaluateJob) -> dict:
    """Beam-search evaluation of one trained seed; logs test metrics and predictions to its MLflow run."""
    ctx = context(job.params_path, job.data_dir, job.graph_path)
    metrics = evaluate_model(ctx, RunDir(job.train_dir).finished_best(), Path(job.out_dir), split=job.split,
                             num_threads=job.num_threads)
    log_evaluation(job, metrics)
    return metrics


def log_evaluation(job: EvaluateJob, metrics: dict) -> None:
    """The test metrics and predictions, to the MLflow run of the training run they test (named in its
    run folder; none when MLflow was unreachable for the whole training run)."""
    info = _read_json(Path(job.train_dir) / RUN_FILE)
    if info.get("run_id"):
        run = tracking.Run(info["run_id"])
        run.log_metrics({f"{job.split}/{k}": v for k, v in _numeric(metrics).items()}, step=0)
        run.log_artifact(RunDir(job.out_dir).predictions, "predictions")
        run.log_artifact(RunDir(job.out_dir).metrics, "predictions")
        run.sync()


@task(name="sweep-run", cache_policy=NO_CACHE, task_run_name="{job.run_name}")
def sweep_run_task(job: SweepRunJob) -> dict:
    """One run of a sweep from start to record: train (``train_run_task``), test (``evaluate_run_task``),
    then save its record to ``job.results`` (:func:`raptor.pipeline.sweep.save_job_record`), so a run is complete
    on its own and an interrupted sweep keeps it."""
    summary = train_run_task(job.train)
    evaluate_run_task(job.evaluate)
    save_job_record(job.plan, job.planned, job.results)
    return summary


@task(name="sweep-rescore", cache_policy=NO_CACHE, task_run_name="{job.run_name}")
def sweep_rescore_task(job: SweepRescoreJob) -> dict:
    """One run of a sweep's evaluation-only arm: the default arm's run re-scored on both splits, its record
    saved (:func:`raptor.pipeline.rescore.rescore_job`); :func:`log_record_task` logs it from the record."""
    return rescore_job(job.plan, job.planned, job.data, job.graph, job.results, job.num_threads)


@task(name="log-record", cache_policy=NO_CACHE, task_run_name="{job.run_name}")
def log_record_task(job: RecordJob) -> Optional[str]:
    """A run known only by its record (:mod:`raptor.reporting.records`; its run folder is gone, as after a sweep is
    resumed in a fresh clone) as an MLflow run beside the trained ones: its params, its per-epoch curves and
    its test metrics, tagged ``from_record``. Nothing is logged where the experiment already has a run
    of this name with test metrics. Returns the MLflow run id (``None``: MLflow was unreachable)."""
    try:
        if tracking.find_run(job.experiment, job.run_name, metric="test/mrr"):
            return None
    except tracking.UNREACHABLE:
        return None
    params = load_resolved(job.params_path)
    summary = _read_json(RunDir(job.record_train).summary)
    logged = {**run_params(params, variant_sections(job.variant)), "variant": job.variant, "seed": job.seed,
              "pretrain.epochs": job.pretrain_epochs, "epochs": summary.get("rl_epochs"),
              **({"rl.epochs": summary.get("rl_epochs")} if "rl" in variants.get(job.variant).params else {})}
    if summary.get("precision"):
        for key in _RESOLVED_KEYS:
            logged.pop(key, None)
        logged.update(precision=summary.get("precision"), device=summary.get("device"))
    tags = {"dataset": job.dataset, "variant": job.variant, "seed": job.seed, "stage": "finetune",
            "profile": params.profile, "from_record": str(job.record_train), **job.extra_tags,
            **tracking.prefect_ids()}
    parent = tracking.Run(job.parent_run_id) if job.parent_run_id else None
    with tracking.tracked_run(job.experiment, job.run_name, params=logged, tags=tags, parent=parent,
                              lazy=True) as run:
        run.log_series([x for row in json.loads(RunDir(job.record_train).history.read_text())
                        for x in epoch_series("rl", int(row["epoch"]), row, job.pretrain_epochs)])
        run.log_metrics(_numeric({"best_val_mrr": summary.get("best_val_mrr"),
                                  "final_reward": summary.get("final_reward"),
                                  "train_seconds": summary.get("train_seconds", summary.get("seconds"))}), step=0)
        metrics = _read_json(RunDir(job.record_eval).metrics)
        run.log_metrics({f"{metrics.get('split', 'test')}/{k}": v for k, v in _numeric(metrics).items()}, step=0)
        run.set_tags({"precision": summary.get("precision")})
    return run.run_id


@task(name="log-result-run", cache_policy=NO_CACHE, task_run_name="{job.run_name}")
def log_result_run_task(job: ResultRunJob) -> dict[str, Any]:
    """A tested run of a result set (``raptor results``' records: a long run's or a pipeline's, its folder of
    checkpoints gone) as an MLflow run: the params it trained with (its ``run_config.json``), its per-epoch RL
    curves, its test metrics and those of each evaluation-only reading (``rescored/<reading>/<metric>``).

    A run of this name that has its test metrics is kept; only the readings it lacks are added to it. One
    without them (its logging was cut short) is deleted and logged again. One from another run's records
    (its ``record`` tag) is an error. Returns ``{"run_id", "logged": "run" | "readings" | None}``; MLflow's
    errors (:data:`tracking.UNREACHABLE`) go on to the caller."""
    from raptor.reporting.runs_reader import read_metrics

    r = job.run
    if r.metrics is None:
        raise ValueError(f"{job.run_name}: not tested (no test metrics in its records): nothing to compare")
    record = os.path.relpath(r.eval_dir) if r.eval_dir is not None else ""  # its test records: one run, one place
    readings = {f"rescored/{reading}/{k}": v for reading, folder in sorted(r.readings.items())
                for k, v in _numeric(read_metrics(folder, lenient=True) or {}).items()}
    for found in tracking.find_runs(job.experiment, job.run_name):
        other = found.data.tags.get("record")
        if other != record:
            raise ValueError(f"MLflow experiment {job.experiment} has a run {job.run_name} logged from {other}, "
                             f"and this one is from {record}: give one of the result sets another name")
        if "test/mrr" not in found.data.metrics:
            tracking.client().delete_run(found.info.run_id)
            continue
        missing = {k: v for k, v in readings.items() if tracking.metric_name(k) not in found.data.metrics}
        if missing:
            tracking.Run(found.info.run_id).log_metrics(missing, step=0)
        return {"run_id": found.info.run_id, "logged": "readings" if missing else None}
    logged = {**r.params, "variant": job.variant, "seed": r.seed, "pretrain.epochs": r.pretrain_epochs,
              "epochs": r.budget, "precision": r.precision}
    tags = {"dataset": job.dataset, "variant": job.variant, "seed": r.seed, "stage": "results", "record": record,
            "precision": r.precision, **job.tags, **tracking.prefect_ids()}
    vals = [(row["val_mrr"], int(row["epoch"])) for row in r.history if row.get("val_mrr") is not None]
    parent = tracking.Run(job.parent_run_id) if job.parent_run_id else None
    with tracking.tracked_run(job.experiment, job.run_name, params={k: v for k, v in logged.items() if v is not None},
                              tags=tags, parent=parent, lazy=True) as run:
        run.log_series([x for row in r.history for x in epoch_series("rl", int(row["epoch"]), row, r.pretrain_epochs)])
        run.log_metrics(_numeric({  # as a pipeline run logs them: best_epoch 1-based, the first of equal bests
            "best_val_mrr": r.best_val_mrr, "best_epoch": max(vals, key=lambda v: (v[0], -v[1]))[1] + 1 if vals else None,
            "final_reward": r.history[-1].get("reward") if r.history else None, "epochs_trained": r.epochs_trained}),
            step=0)
        run.log_metrics({f"test/{k}": v for k, v in _numeric(r.metrics).items()}, step=0)
        run.log_metrics(readings, step=0)
    return {"run_id": run.run_id, "logged": "run"}
