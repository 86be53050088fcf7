"""Run a sweep's plan (:func:`raptor.pipeline.sweep.plan_sweep`) here, in worker processes, with no orchestrator.

The same jobs as the Prefect flow (``python -m flows sweep``), in the same order: label tables, then
pretraining (per distinct setting x seed), then runs (arm x variant x seed: training, test evaluation,
the run's record into the results folder), then the runs of evaluation-only arms (the default arm's
runs re-scored under each such arm's evaluation params, on the test and validation splits:
:func:`raptor.pipeline.rescore.rescore_job`). No MLflow, no Prefect: what a machine without them needs (a
GPU box, a batch node). A run whose record in the results folder matches what it would train is
skipped, as in the flow; the flow later logs such records to MLflow (``tasks.train.log_record_task``).

Workers are spawned processes (CUDA cannot be forked), each with its own torch threads, so ``jobs``
runs share the machine: on a GPU they share the device too.

:func:`collect_arm_runs` records a sweep's runs trained elsewhere, as long runs (``scripts/longrun.sh``,
which outlives a session and a machine where these workers do not), into the same results folder.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from raptor.common.io import atomic_write_text
from raptor.config import load_resolved
from raptor.pipeline.sweep import (LONG_RUN_ARM, Plan, PretrainJob, TrainJob, job_dirs, load_sweep, plan_sweep,
                                   record_mismatch, recorded_runs, rescored_jobs, save_job_record)
from raptor.pipeline.rescore import rescore_job
from raptor.reporting.sweep_page import write_results
from raptor.runs.rundir import RunDir, RunOptions

Log = Callable[[str], None]


class JobsFailed(RuntimeError):
    """Some jobs of a step failed (each named, with its error); the others ran to the end."""


def _context(params_path: str, data_dir: str, graph_path: str):
    from raptor.runs.context import load_context

    return load_context(data_dir, graph_path, load_resolved(params_path))


def pretrain_job(job: PretrainJob, data_dir: str, graph_path: str, num_threads: int) -> dict[int, str]:
    """One pretraining job of a plan: ``{epochs: snapshot path}``."""
    from raptor.agents.actor_critic.pretrain import pretrain_run

    ctx = _context(job.params_path, data_dir, graph_path)
    return pretrain_run(ctx, job.labels_dir, list(job.epochs),
                        RunOptions(seed=job.seed, out_dir=job.out_dir, num_threads=num_threads, progress=False))


def train_job(plan: Plan, job: TrainJob, data_dir: str, graph_path: str, results: str, num_threads: int) -> dict:
    """One run of a plan from start to record: train, evaluate on the test split, save the record."""
    from raptor.pipeline.experiment import evaluate_model, run_variant

    ctx = _context(job.params_path, data_dir, graph_path)
    summary = run_variant(ctx, job.variant, RunOptions(seed=job.seed, out_dir=job.out_dir, num_threads=num_threads,
                                                       progress=False),
                          init_model=job.init_model, pretrain_epochs=job.pretrain_epochs)
    metrics = evaluate_model(ctx, RunDir(job.out_dir).finished_best(), job.eval_dir, split="test", num_threads=num_threads)
    save_job_record(plan, job, results)
    return {**summary, "test_mrr": metrics.get("mrr")}


def _map(fn: Callable, calls: Sequence[tuple], names: Sequence[str], jobs: int, what: str, log: Log,
         progress: bool = True) -> list:
    """``fn(*call)`` for every call, ``jobs`` at a time in spawned processes (inline with ``jobs`` 1);
    every call runs even when one fails, then the failures are raised together, by name."""
    from tqdm.auto import tqdm

    out: list[Any] = [None] * len(calls)
    failed: list[str] = []
    started = time.perf_counter()
    bar = tqdm(total=len(calls), desc=what, unit="job", leave=False) if calls and progress else None

    def done(i: int, value: Any = None, error: Optional[BaseException] = None) -> None:
        if error is not None:
            failed.append(f"{names[i]}: {type(error).__name__}: {error}")
            log(f"{what} {names[i]} failed: {error}")
        else:
            out[i] = value
            log(f"{what} {names[i]} done ({time.perf_counter() - started:.0f} s since the {what} step began)")
        if bar is not None:
            bar.update(1)

    if jobs <= 1:
        for i, call in enumerate(calls):
            try:
                done(i, fn(*call))
            except Exception as exc:  # noqa: BLE001 - reported with the others below
                done(i, error=exc)
    elif calls:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures: dict[Future, int] = {pool.submit(fn, *call): i for i, call in enumerate(calls)}
            for f in as_completed(futures):
                exc = f.exception()
                done(futures[f], None if exc else f.result(), exc)
    if bar is not None:
        bar.close()
    if failed:
        raise JobsFailed(f"{len(failed)} of {len(calls)} {what} jobs failed:\n  " + "\n  ".join(failed))
    return out


def select(plan: Plan, arms: Optional[Iterable[str]],
           rescored: Optional[dict[str, tuple[TrainJob, dict]]] = None) -> tuple[list[TrainJob], list[PretrainJob], list]:
    """The jobs of ``arms`` (all with ``None``) and the pretraining and label jobs they need; an
    evaluation-only arm's job (``rescored``: :func:`raptor.pipeline.sweep.rescored_jobs`) needs the default
    arm's job it re-scores, which comes first."""
    known = [a.name for a in plan.sweep.arms]
    wanted = known if arms is None else list(arms)
    unknown = [a for a in wanted if a not in known]
    if unknown:
        raise ValueError(f"unknown arm(s) {', '.join(unknown)} (sweep arms: {', '.join(known)})")
    rescored = rescored or {}
    chosen = [j for j in plan.train if j.arm in wanted]
    needs = {rescored[j.run_name][0].run_name for j in chosen if j.run_name in rescored}
    train = [j for j in plan.train if j in chosen or j.run_name in needs]
    needed = {Path(j.init_model).parent for j in train if j.init_model}  # snapshots lie in their run's folder
    pre = [p for p in plan.pretrain if Path(p.out_dir) in needed]
    labels = [l for l in plan.labels if l.out_dir in {p.labels_dir for p in pre}]
    return train, pre, labels


@dataclass(frozen=True)
class LocalOptions:
    """How :func:`run_plan` runs a plan here (none of it changes a run's results): ``jobs``: runs at
    a time; ``num_threads``: torch threads of each; ``progress``: progress bars; ``log``: where the
    step messages go."""

    jobs: int = 1
    num_threads: int = 1
    progress: bool = True
    log: Log = print


def run_plan(plan: Plan, data_dir: str, graph_path: str, results: str, *, arms: Optional[Iterable[str]] = None,
             options: LocalOptions = LocalOptions()) -> dict[str, Any]:
    """Run ``plan`` (or the jobs of ``arms`` only) and write the results table from the records in
    ``results`` (:func:`raptor.reporting.sweep_page.write_results`); returns it (``options``: :class:`LocalOptions`)."""
    from raptor.labeling.stage import label_dataset

    jobs, num_threads, progress, log = options.jobs, options.num_threads, options.progress, options.log

    params = {arm: load_resolved(path) for arm, path in plan.params_files.items()}
    rescored = rescored_jobs(plan, params)
    train, pre, labels = select(plan, arms, rescored)
    for job in labels:  # labeling uses every core itself
        p = load_resolved(job.params_path)
        label_dataset(data_dir, job.out_dir, max_path_length=p.env.max_path_length, config=p.labeling,
                      graph_path=graph_path, show_progress=progress)
    _map(pretrain_job, [(j, data_dir, graph_path, num_threads) for j in pre],
         [f"{j.key[:12]}-seed{j.seed}" for j in pre], jobs, "pretraining", log, progress)
    hashes = _context(plan.params_files[train[0].arm], data_dir, graph_path).input_hashes() if train else {}
    recorded = recorded_runs(plan, params, hashes, results) if train else {}
    todo = [j for j in train if j.run_name not in recorded and j.run_name not in rescored]
    again = [j for j in train if j.run_name not in recorded and j.run_name in rescored]
    if recorded:
        log(f"{len(recorded)} run(s) already recorded in {results}: not trained again")
    failed = []
    for fn, what, calls, names in (  # the re-scores after every training run, even where one failed
            (train_job, "run", [(plan, j, data_dir, graph_path, results, num_threads) for j in todo], todo),
            (rescore_job, "re-score", [(plan, j, data_dir, graph_path, results, num_threads) for j in again], again)):
        try:
            _map(fn, calls, [j.run_name for j in names], jobs, what, log, progress)
        except JobsFailed as exc:
            failed.append(str(exc))
    if failed:
        raise JobsFailed("\n".join(failed))
    return write_results(plan, results)


def collect_arm_runs(runs_dir: str | Path, params_file: str | Path, name: str, dataset: str,
                     results: str | Path) -> dict[str, Any]:
    """The records of sweep ``name``'s runs trained as long runs, into its results folder ``results``
    (the layout :func:`raptor.pipeline.sweep.plan_sweep` and :func:`write_results` use: ``sweep.json``,
    ``params/ARM.json``, ``train/...`` and ``eval/...``), then its tables (``results.json|csv|md|png``).

    ``runs_dir``: a long-runs folder's ``runs/`` (the runs of an arm under ``<dataset>/`` +
    :data:`raptor.pipeline.sweep.LONG_RUN_ARM`, and ``COMMIT`` naming the pinned commit, copied beside the
    records); ``params_file``: the params the runs' arm files were written from
    (:func:`raptor.pipeline.sweep.write_arm_params`), whose sweep declaration lists the runs. A run is recorded
    once tested. Checked before anything is written, each refusal a :class:`ValueError` naming what differs:
    a run whose fingerprint is not its arm's (another variant, seed, pretraining budget or param value) or that
    trained another number of RL epochs than its arm's; a ``results`` folder whose ``COMMIT`` names another
    commit, or whose declaration (``params/ARM.json``) differs from this one's. An evaluation-only arm's run
    (:func:`raptor.pipeline.sweep.evaluation_only_arms`) is the default arm's run of its variant and seed,
    re-scored under the arm's reading on both splits (:func:`raptor.pipeline.rescore.rescore_sweep`): recorded
    once both readings are there for its present best model (:func:`raptor.reporting.records.save_rescored_record`),
    ``unfinished`` until then. Returns ``saved``,
    ``unfinished`` and ``undeclared`` (runs the sweep does not list: not recorded) and ``results``."""
    import tempfile

    from raptor.config import flatten, params_to_dict
    from raptor.pipeline.experiment import effective_epochs
    from raptor.pipeline.rescore import finished_reading, reading_name
    from raptor.pipeline.sweep import DEFAULT_ARM, evaluation_only_arms
    from raptor.reporting.records import save_record, save_rescored_record
    from raptor.reporting.runs_reader import RunFolders, read_fingerprint, read_summary

    sweep, params = load_sweep(params_file, name)
    runs_dir, results = Path(runs_dir), Path(results)
    src = runs_dir / dataset / LONG_RUN_ARM.format(name=name, arm="", variant="").rstrip("/")
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no long runs of sweep {name} on {dataset} here")
    plan = plan_sweep(sweep, params, dataset, results, write=False)
    rescored_arms = evaluation_only_arms(params)
    todo, rescored, unfinished, refused, listed = [], [], [], [], set()
    for job in plan.train:
        trained_as = DEFAULT_ARM if job.arm in rescored_arms else job.arm
        run = runs_dir / dataset / LONG_RUN_ARM.format(name=name, arm=trained_as, variant=job.variant) / f"seed{job.seed}"
        listed.add(runs_dir / dataset / LONG_RUN_ARM.format(name=name, arm=job.arm, variant=job.variant) / f"seed{job.seed}")
        if not (run / "eval" / RunDir.METRICS).is_file():
            if run.is_dir():
                unfinished.append(job.run_name)
            continue
        p = params[trained_as]
        wrong = record_mismatch(read_fingerprint(run / "rl") or {}, job, flatten(params_to_dict(p)))
        epochs = (read_summary(run / "rl", lenient=True) or {}).get("rl_epochs")
        if epochs != effective_epochs(p, job.variant, job.pretrain_epochs):
            wrong.append(f"rl_epochs: {epochs!r}, arm {effective_epochs(p, job.variant, job.pretrain_epochs)!r}")
        if wrong:
            refused.append(f"{run}: " + "; ".join(wrong))
        elif job.arm in rescored_arms:
            overrides = rescored_arms[job.arm]
            test, valid = (finished_reading(RunFolders.long_run(run), overrides, split) for split in ("test", "valid"))
            if test is None or valid is None:
                unfinished.append(job.run_name)  # not re-scored yet (or for an older best model)
            else:
                rescored.append((run, job, test, valid, {"arm": DEFAULT_ARM, "reading": reading_name(overrides),
                                                          "overrides": overrides}))
        else:
            todo.append((run, job))
    undeclared = sorted(str(r.relative_to(src)) for r in src.glob("*/*/seed*") if r.is_dir() and r not in listed)
    commit = (runs_dir / "COMMIT").read_text() if (runs_dir / "COMMIT").is_file() else None
    if commit and (results / "COMMIT").is_file() and (results / "COMMIT").read_text().strip() != commit.strip():
        refused.append(f"{results / 'COMMIT'}: its records were trained at {(results / 'COMMIT').read_text().strip()[:12]}, "
                       f"these runs at {commit.strip()[:12]} (collect them into another folder)")
    with tempfile.TemporaryDirectory() as tmp:  # the declaration as plan_sweep writes it, against the folder's
        plan_sweep(sweep, params, dataset, tmp)
        for f in sorted((Path(tmp) / "params").glob("*.json")):
            there = results / "params" / f.name
            if there.is_file() and there.read_bytes() != f.read_bytes():
                refused.append(f"{there}: declares other params than {params_file} gives arm {f.stem}")
    if refused:
        raise ValueError(f"nothing recorded in {results}: " + "\n  ".join(["", *refused]))
    plan = plan_sweep(sweep, params, dataset, results)  # the declaration, written into the results folder
    for run, job in todo:
        save_record(run / "rl", run / "eval", *job_dirs(plan, job))
    for run, job, test, valid, about in rescored:
        save_rescored_record(run / "rl", test, valid, *job_dirs(plan, job), about)
    if commit:
        atomic_write_text(results / "COMMIT", commit)
    write_results(plan)
    return {"saved": [job.run_name for _, job in todo] + [r[1].run_name for r in rescored],
            "unfinished": unfinished, "undeclared": undeclared,
            "results": str(results)}
