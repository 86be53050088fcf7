"""``python -m flows results SOURCE...``: the runs of result sets (the records ``raptor results`` reads: the
campaign's long runs under ``results/``, a pipeline's workspace) as MLflow comparisons, training nothing.

One experiment per set and dataset, ``raptor/<dataset>/results-<set>`` (``raptor/ICEWS14/results-paper-budget``),
with one parent run holding each system's mean test metrics over its seeds, and under it one run per
(system, seed) and per ablation arm's seed: the params it trained with, its RL curves per epoch (``rl/*``
and ``total/*``, as the pipeline's runs log them), its test metrics and its re-scored readings. A run
already logged with its test metrics gets only the readings it lacks, and runs not yet tested are left out,
so the command is run again as a campaign grows.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from raptor.evaluation.summary import summarize
from raptor.reporting.results import ResultSet, parse_sources
from tasks import tracking
from tasks.jobs import ResultRunJob
from tasks.lazy import flow
from tasks.train import log_result_run_task

from .stages import artifact_key, experiment_name, publish_runs

#: The metrics of a system's mean over seeds on the parent run (``<variant>/test_<metric>_mean``, ``_std``).
MEAN_METRICS = ("mrr", "hits@1", "hits@3", "hits@10")


def experiment_of(s: ResultSet) -> str:
    return experiment_name(s.dataset, f"results-{artifact_key(s.name).strip('-')}")


def set_jobs(s: ResultSet, parent_run_id: Optional[str]) -> tuple[list[ResultRunJob], list[str]]:
    """``(jobs, untested)``: one job per tested (system, seed) of ``s``, then per tested seed of each ablation arm
    that is not one of those runs (the set's Pure-RL and RL-RAPTOR runs stand for arm 0 and the arm of their
    pretraining: logged once, with the arm's tag); the names of the runs left out for want of test metrics."""
    exp, jobs, untested = experiment_of(s), [], []
    tags = {"set": s.name, "source": s.source}
    arm_of = {id(run): arm for arm, seeds in s.ablation.items() for run in seeds.values()}
    own = {id(run) for seeds in s.runs.values() for run in seeds.values()}
    named = [(f"{s.dataset}-{variant}-seed{seed}", variant, run) for variant, seeds in sorted(s.runs.items())
             for seed, run in sorted(seeds.items())]
    named += [(f"{s.dataset}-ablation-p{arm}-seed{seed}", "raptor", run) for arm, seeds in sorted(s.ablation.items())
              for seed, run in sorted(seeds.items()) if id(run) not in own]
    for name, variant, run in named:
        if run.metrics is None:
            untested.append(name)
            continue
        arm = {"arm": f"p{arm_of[id(run)]}"} if id(run) in arm_of else {}
        jobs.append(ResultRunJob(name, exp, s.dataset, variant, run, {**tags, **arm}, parent_run_id))
    return jobs, untested


def mean_metrics(s: ResultSet) -> dict[str, float]:
    """``<variant>/test_<metric>_mean`` and ``_std`` over the tested seeds of each system of ``s``."""
    out: dict[str, float] = {}
    for variant, seeds in s.runs.items():
        tested = {seed: r.metrics for seed, r in seeds.items() if r.metrics}
        metrics = [m for m in MEAN_METRICS if tested and all(m in t for t in tested.values())]
        stats = summarize(tested, metrics)
        for m in metrics:
            out[f"{variant}/test_{m}_mean"], out[f"{variant}/test_{m}_std"] = stats[m]["mean"], stats[m]["std"]
    return out


@flow(name="results-records", flow_run_name="results-records")
def results_records_flow(sources: Sequence[str]) -> dict[str, Any]:
    """Log the tested runs of the result sets of ``sources`` (``[NAME=]FOLDER[+FOLDER...]``, wildcards allowed,
    as ``raptor results`` reads them) to MLflow: per set and dataset, a parent run with the systems' means and
    one run per seed. Returns, per experiment, the runs logged now, those logged before (``before``; with
    readings added: ``readings``) and those left out untested."""
    sets = parse_sources(sources)
    summary: dict[str, Any] = {}
    for s in sets:
        exp, name = experiment_of(s), f"results-{artifact_key(s.name).strip('-')}-{s.dataset}"
        done = summary.setdefault(exp, {"logged": [], "readings": [], "before": [], "untested": []})
        try:
            parent_id = tracking.find_run(exp, name)
            created = parent_id is None
            parent = tracking.Run(parent_id) if parent_id else tracking.start_run(
                exp, name, params={"set": s.name}, tags={"dataset": s.dataset, "stage": "results", "set": s.name,
                                                         "source": s.source})
            jobs, untested = set_jobs(s, parent.run_id)
            try:
                outcome = {j.run_name: log_result_run_task(j) for j in jobs}
                parent.log_metrics(mean_metrics(s), step=0)
            except BaseException:
                if created:  # a parent of an earlier invocation keeps its state
                    parent.finish("FAILED")
                raise
            parent.finish()
        except tracking.UNREACHABLE as exc:
            raise ConnectionError(f"MLflow ({exc.__class__.__name__}: {exc}): {exp} not logged whole") from None
        for j in jobs:
            what = outcome[j.run_name]["logged"]
            done["logged" if what == "run" else "readings" if what == "readings" else "before"].append(j.run_name)
        done["untested"] += untested
        publish_runs(name, exp, [{"run": j.run_name, "variant": j.variant, "seed": j.run.seed,
                                  "test MRR": j.run.metrics.get("mrr"),
                                  "mlflow_run_id": outcome[j.run_name]["run_id"]} for j in jobs],
                     ("run", "variant", "seed", "test MRR"), f"Result set {s.name} on {s.dataset}: one row per run")
    return summary
