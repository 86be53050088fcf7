"""``python -m flows sweep NAME``: a sweep of params.yaml (:mod:`raptor.pipeline.sweep`) as one Prefect flow.

labels (one per distinct labeling setting) -> pretraining (per distinct setting x seed, mapped) ->
runs (arm x variant x seed, mapped: training, test evaluation, the run's record) -> runs of evaluation-only
arms (the default arm's runs re-scored under the arm's evaluation params, mapped) -> results table and
figure. Every (arm, variant, seed) is an MLflow run of the experiment ``raptor/<dataset>/sweep-<name>``,
tagged with its arm and logging its full params (the overrides among them), under one parent run
that holds the results table; so the comparison is one MLflow view.

A run is evaluated as soon as it is trained and its record (:mod:`raptor.reporting.records`) goes to the
results folder at once, so an interrupted sweep keeps every finished run, and a run whose record
matches what it would train (same params, inputs, code, epochs) is skipped, run folders or not.

``sweep_records_flow`` (``--from-records``) logs the recorded runs alone, training nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from raptor.config import load_resolved
from raptor.pipeline.stages import stage_output
from raptor.pipeline.sweep import (Plan, declared_records, job_dirs, load_sweep, plan_sweep, recorded_runs, rescored_jobs,
                                   results_dir, sweep_dir)
from raptor.reporting.sweep_page import write_results
from tasks import tracking
from tasks.jobs import EvaluateJob, LabelJob, PretrainJob, RecordJob, SweepRescoreJob, SweepRunJob, TrainJob
from tasks.label import label_task
from tasks.train import (context, log_record_task, pretrain_run_task, sweep_rescore_task, sweep_run_task,
                         threads_per_run)

from .runners import map_jobs, task_runner
from .stages import artifact_key, experiment_name, publish_runs


def sweep_inputs(dataset: str) -> dict[str, str]:
    """The ingested data and graph of ``dataset`` (the pipeline's stage outputs), checked to exist."""
    paths = {"data": stage_output("ingest", dataset), "graph": stage_output("graph", dataset)}
    if not (Path(paths["data"]) / "meta.json").exists() or not Path(paths["graph"]).exists():
        raise FileNotFoundError(f"{paths['data']} / {paths['graph']} not found: a sweep trains on the pipeline's "
                                f"ingested data and graph; make them with `dvc repro graph@{dataset}`")
    return paths


def prepare(name: str, dataset: str, source: str, local: Optional[str], out: Optional[str], write: bool = True) -> Plan:
    sweep, params = load_sweep(source, name, local)
    return plan_sweep(sweep, params, dataset, out or sweep_dir(name, dataset), write=write)


def _record_job(plan: Plan, j, results: str, params_path: str, exp: str, parent_id: Optional[str]) -> RecordJob:
    """The job of :func:`tasks.train.log_record_task` for job ``j`` of ``plan``, whose record is in ``results``."""
    rec_train, rec_eval = job_dirs(plan, j, results)
    return RecordJob(j.run_name, str(rec_train), str(rec_eval), params_path, plan.dataset, j.variant, j.seed,
                     j.pretrain_epochs, exp, parent_id, {"stage": "sweep", "sweep": plan.sweep.name, "arm": j.arm})


def _log_table(parent, table: dict, results: str) -> None:
    """The sweep's parent MLflow run: each arm's mean metrics, and the results files as artifacts."""
    parent.log_metrics({f"{a['arm']}/{a['variant']}/{k}": a[k] for a in table["arms"]
                        for k in ("best_val_mrr_mean", "test_mrr_mean", "test_mrr_std")}, step=0)
    for f in ("results.md", "results.csv", "results.json", "results.png", "sweep.json"):
        if (Path(results) / f).exists():
            parent.log_artifact(Path(results) / f, "sweep")


def _publish(plan: Plan, exp: str, results: str, summaries: dict[str, dict]) -> None:
    """Prefect artifacts of the flow run: a row per run with a summary, and the results table."""
    name, dataset = plan.sweep.name, plan.dataset
    publish_runs(f"sweep-{name}-{dataset}", exp,
                 [{"arm": j.arm, "variant": j.variant, **summaries[j.run_name]} for j in plan.train
                  if j.run_name in summaries],
                 ("arm", "variant", "seed", "best_val_mrr"), f"Sweep {name} on {dataset}: one row per training run")
    create_markdown_artifact(markdown=(Path(results) / "results.md").read_text(),
                             key=artifact_key(f"sweep-{name}-{dataset}-results"),
                             description=f"Sweep {name} on {dataset}: mean ± std over seeds (%)")


@flow(name="sweep-records", flow_run_name="sweep-records-{name}-{dataset}")
def sweep_records_flow(name: str, dataset: str, source: str = "params.yaml",
                       local: Optional[str] = "params.local.yaml", out: Optional[str] = None,
                       results: Optional[str] = None) -> dict:
    """A sweep's recorded runs as one MLflow comparison, training nothing: no data, graph, labels or
    pretraining are needed, so a fresh clone shows a sweep from its committed records in seconds. Each
    record is checked against the declaration kept beside it (:func:`raptor.pipeline.sweep.declared_records`);
    a record that is not used is named, and the table (made with the results folder's declaration
    kept) names the runs without one."""
    plan = prepare(name, dataset, source, local, out, write=False)
    results = results or results_dir(name, dataset)
    used, refused = declared_records(plan, results)
    if not used:
        raise FileNotFoundError(f"{results}: no complete record of sweep {name!r} on {dataset} to log"
                                + "".join(f"\n  {r}: {why}" for r, why in refused.items()))
    exp = experiment_name(dataset, f"sweep-{name}")
    with tracking.tracked_run(exp, f"sweep-{name}-{dataset}",
                              params={"sweep": name, "arms": [a.name for a in plan.sweep.arms]},
                              tags={"dataset": dataset, "stage": "sweep", "sweep": name, "from_records": "true"}) as parent:
        for j in plan.train:
            if j.run_name in used:
                log_record_task(_record_job(plan, j, results, str(Path(results) / "params" / f"{j.arm}.json"),
                                            exp, parent.run_id))
        table = write_results(plan, results, keep_declaration=True)
        _log_table(parent, table, results)
    _publish(plan, exp, results, used)
    for run, why in refused.items():
        print(f"sweep-records: {run} not logged: {why}", file=sys.stderr)
    return {"results": str(results), "logged": sorted(used), "refused": refused, "missing": table["missing"]}


@flow(name="sweep", flow_run_name="sweep-{name}-{dataset}")
def sweep_flow(name: str, dataset: str, source: str = "params.yaml", local: Optional[str] = "params.local.yaml",
               out: Optional[str] = None, results: Optional[str] = None) -> dict:
    plan = prepare(name, dataset, source, local, out)
    results = results or results_dir(name, dataset)
    inputs = sweep_inputs(dataset)
    arm_params = {arm: load_resolved(path) for arm, path in plan.params_files.items()}
    first = next(iter(arm_params.values()))  # the runner settings of the sweep
    threads = threads_per_run(first.train.num_threads, first.train.parallel_runs)
    exp = experiment_name(dataset, f"sweep-{name}")

    def runner():
        return task_runner(max_workers=first.train.parallel_runs)

    def pretrain_job(j) -> PretrainJob:
        return PretrainJob(j.params_path, dataset, inputs["data"], inputs["graph"], j.labels_dir, j.seed, j.out_dir,
                           tuple(j.epochs), exp, threads)

    def run_job(j, parent_id: Optional[str]) -> SweepRunJob:  # train, test, record
        train = TrainJob(j.params_path, dataset, inputs["data"], inputs["graph"], j.variant, j.seed, j.out_dir, exp,
                         j.run_name, parent_id, threads, init_model=j.init_model, pretrain_epochs=j.pretrain_epochs,
                         extra_tags={"stage": "sweep", "sweep": name, "arm": j.arm})
        evaluate = EvaluateJob(j.params_path, inputs["data"], inputs["graph"], j.variant, j.seed, j.out_dir, j.eval_dir,
                               "test", threads)
        return SweepRunJob(plan, j, results, train, evaluate)

    for job in plan.labels:  # labeling uses every core itself
        label_task(LabelJob(job.params_path, inputs["data"], inputs["graph"], job.out_dir))
    with tracking.tracked_run(exp, f"sweep-{name}-{dataset}",
                              params={"sweep": name, "arms": [a.name for a in plan.sweep.arms]},
                              tags={"dataset": dataset, "stage": "sweep", "sweep": name}) as parent:
        map_jobs(pretrain_run_task, [pretrain_job(j) for j in plan.pretrain], first.train.parallel_runs,
                 runner=runner(), name="sweep-pretrain")
        hashes = context(plan.params_files[plan.train[0].arm], inputs["data"], inputs["graph"]).input_hashes()
        recorded = recorded_runs(plan, arm_params, hashes, results)
        rescored = rescored_jobs(plan, arm_params)  # evaluation-only arms: the default arm's runs, re-scored
        todo = [j for j in plan.train if j.run_name not in recorded and j.run_name not in rescored]
        again = [j for j in plan.train if j.run_name not in recorded and j.run_name in rescored]
        trained = dict(zip([j.run_name for j in todo], map_jobs(
            sweep_run_task, [run_job(j, parent.run_id) for j in todo], first.train.parallel_runs,
            runner=runner(), name="sweep-runs")))
        map_jobs(sweep_rescore_task, [SweepRescoreJob(plan, j, inputs["data"], inputs["graph"], results, threads)
                                      for j in again],
                 first.train.parallel_runs, runner=runner(), name="sweep-rescores")
        for j in plan.train:
            if j.run_name in recorded or j in again:
                log_record_task(_record_job(plan, j, results, j.params_path, exp, parent.run_id))
        names = {j.run_name for j in again}
        rescored_now = {k: v for k, v in recorded_runs(plan, arm_params, hashes, results).items() if k in names}
        table = write_results(plan, results)
        _log_table(parent, table, results)
    _publish(plan, exp, results, {**recorded, **rescored_now, **trained})
    return {"out": plan.out_dir, "results": str(results), "arms": [a["arm"] + "/" + a["variant"] for a in table["arms"]],
            "recorded": sorted(recorded), "missing": table["missing"]}
