"""One Prefect flow per stage of :mod:`raptor.pipeline.stages`; ``dvc.yaml`` runs each through ``python -m flows``.

Every flow takes the dataset, the resolved params file and its stage's paths (``inputs`` and
``outputs``, named as in the declaration), builds the jobs of its runs (:mod:`tasks.jobs`) and maps
its tasks over them (:func:`flows.runners.map_jobs`); each MLflow run's life is one ``with`` block
(:func:`tasks.tracking.tracked_run`). No path is built here.

A stage process imports what its own flow needs, in the flow (a graph stage neither MLflow nor the
training code), and no Prefect unless it runs as a Prefect flow (:mod:`tasks.lazy`).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Optional

from raptor.agents import variants
from raptor.config import load_resolved
from raptor.constants import METRIC_KEYS, arm_folder, seed_dir
from raptor.common.io import atomic_write_json, clear_output_folder
from raptor.pipeline.projectlock import project_lock
from raptor.runs.rundir import RunDir
from tasks.jobs import EvaluateJob, LabelJob, PretrainGroup, PretrainJob, TrainGroup, TrainJob
from tasks.lazy import flow

from .runners import in_flow_run, map_jobs


def experiment_name(dataset: str, purpose: str = "") -> str:
    return f"raptor/{dataset}" + (f"/{purpose}" if purpose else "")


def _runner(params_path: str):
    """Threads by default; Dask when ``RAPTOR_DASK_ADDRESS`` names a scheduler (flows/runners.py)."""
    from .runners import task_runner

    return task_runner(max_workers=load_resolved(params_path).train.parallel_runs)


@flow(name="ingest", flow_run_name="ingest-{dataset}")
def ingest_flow(dataset: str, params: str, inputs: dict, outputs: dict) -> dict:
    """Raw splits -> Parquet (``datasets.<name>.url`` fetches an archive instead)."""
    from raptor.data.ingest import dataset_options
    from tasks.data import ingest_task, ingest_url_task

    _, d = load_resolved(params).dataset(dataset)
    options = dataset_options(dataset, d)
    if d.url:
        result = ingest_url_task(d.url, d.sha256, outputs["out"], options)
    else:
        result = ingest_task(inputs["raw"], outputs["out"], options)
    return {"counts": result.counts, "time_step": result.time_step, "seconds": result.seconds}


@flow(name="graph", flow_run_name="graph-{dataset}")
def graph_flow(dataset: str, params: str, inputs: dict, outputs: dict) -> dict:
    """Parquet dataset -> inverse-augmented CSR graph."""
    from tasks.data import graph_task

    return graph_task(inputs["data"], outputs["out"])


@flow(name="label", flow_run_name="label-{dataset}")
def label_flow(dataset: str, params: str, inputs: dict, outputs: dict) -> dict:
    """Reachability label tables of the training queries: in one piece, or in
    ``labeling.partitions`` independent parts mapped over the task runner (threads, or the Dask
    cluster of ``RAPTOR_DASK_ADDRESS``), then merged."""
    from tasks.label import label_merge_task, label_part_task, label_task

    job = LabelJob(params, inputs["data"], inputs["graph"], outputs["out"])
    p = load_resolved(params)
    if p.labeling.partitions == 1:
        return label_task(job)
    parts = [replace(job, part=i) for i in range(p.labeling.partitions)]
    done = map_jobs(label_part_task, parts, p.train.parallel_runs,
                    runner=_runner(params) if in_flow_run() else None, name="label-parts")
    return {**label_merge_task(params, inputs["data"], outputs["out"]), "part_workers": [d["worker"] for d in done]}


def _pretrain(dataset: str, params: str, inputs: dict, out: str, seeds: list[int], epochs: list[int],
              experiment: str, nest: bool = True) -> list[dict]:
    """``nest``: the runs go under the invocation's pipeline run in MLflow (the main experiment). The
    seeds are pretrained ``train.stacked_seeds`` at a time as one batched step (each its own task when 1)."""
    from tasks import tracking
    from tasks.train import pretrain_group_task, pretrain_run_task, threads_per_run

    p = load_resolved(params)
    with tracking.pipeline_parent(experiment, dataset, nest) as pipe:
        jobs = [PretrainJob(params, dataset, inputs["data"], inputs["graph"], inputs["labels"], s, seed_dir(out, s),
                            tuple(epochs), experiment, threads_per_run(p.train.num_threads, p.train.parallel_runs),
                            pipe.run_id if pipe else None) for s in seeds]
        stacked = p.train.stacked_seeds
        if stacked <= 1:
            return map_jobs(pretrain_run_task, jobs, p.train.parallel_runs)
        groups = [PretrainGroup(tuple(jobs[i:i + stacked])) for i in range(0, len(jobs), stacked)]
        return [r for rs in map_jobs(pretrain_group_task, groups, p.train.parallel_runs) for r in rs]


@flow(name="pretrain", flow_run_name="pretrain-{dataset}")
def pretrain_flow(dataset: str, params: str, inputs: dict, outputs: dict) -> list[dict]:
    """Reachability pretraining, one run per seed (mapped tasks, or one per ``train.stacked_seeds``
    seeds trained as one batched step), kept after ``pretrain.epochs``."""
    p = load_resolved(params)
    return _pretrain(dataset, params, inputs, outputs["out"], p.train.seeds, [p.pretrain.epochs],
                     experiment_name(dataset))


@flow(name="ablation-pretrain", flow_run_name="ablation-pretrain-{dataset}")
def ablation_pretrain_flow(dataset: str, params: str, inputs: dict, outputs: dict) -> list[dict]:
    """The same pretraining for the ablation's seeds, with a snapshot at every arm's epoch count."""
    p = load_resolved(params)
    # no pipeline run above them: the ablation's arms stay one level under its parent (one click to compare)
    return _pretrain(dataset, params, inputs, outputs["out"], p.ablation.seeds, sorted(set(p.ablation.pretrain_epochs)),
                     experiment_name(dataset, "ablation-pretrain-epochs"), nest=False)


@flow(name="finetune", flow_run_name="finetune-{dataset}-{variant}")
def finetune_flow(dataset: str, params: str, inputs: dict, outputs: dict, variant: str) -> list[dict]:
    """Train one variant for every seed (mapped tasks), each with an MLflow run under a parent run
    for this invocation."""
    from tasks import tracking
    from raptor.agents import agent_facts
    from tasks.train import parent_of, remember_parent, seed_aggregates, threads_per_run

    p = load_resolved(params)
    v = variants.get(variant)
    exp = experiment_name(dataset)
    # The parent holds the aggregates over seeds; created at once (its children name it), dropped
    # again when no seed trained anything (then the earlier parent stands).
    with tracking.pipeline_parent(exp, dataset) as pipe, tracking.tracked_run(
            exp, f"finetune-{dataset}-{variant}", params={"variant": variant, "seeds": p.train.seeds, "profile": p.profile},
            tags={"dataset": dataset, "variant": variant, "stage": "finetune", "aggregate": "seeds",
                  **tracking.prefect_ids()}, parent=pipe) as parent:
        jobs = [TrainJob(params, dataset, inputs["data"], inputs["graph"], variant, s, seed_dir(outputs["out"], s), exp,
                         f"{dataset}-{variant}-seed{s}", parent.run_id,
                         threads_per_run(p.train.num_threads, p.train.parallel_runs),
                         init_model=str(RunDir(seed_dir(inputs["pretrain"], s)).snapshot(p.pretrain.epochs))
                         if v.pretrained else None,
                         pretrain_epochs=p.pretrain.epochs if v.pretrained else 0,
                         pretrain_history=pretrain_history(inputs["pretrain"], s) if v.pretrained else None)
                for s in p.train.seeds]
        results = train_seeds(jobs, p.train.stacked_seeds if agent_facts(v.agent).stacks_seeds else 1,
                              p.train.parallel_runs)
        if all(r.get("mlflow_run_kept") for r in results) and parent_of(outputs["out"]):
            parent.delete()  # nothing trained: the parent of the runs kept stands
        else:
            parent.log_metrics(seed_aggregates(results, ("best_val_mrr", "final_reward", "rl_epochs")), step=0)
            remember_parent(outputs["out"], parent)
    publish_runs(f"finetune-{dataset}-{variant}", exp, [one_based(r) for r in results],
                 ("seed", "best_val_mrr", "best_epoch", "rl_epochs"),
                 f"{variants.get(variant).label} on {dataset}: one row per seed")
    return results


def train_seeds(jobs: list[TrainJob], stacked: int, parallel: int) -> list[dict]:
    """The seeds' training runs, ``parallel`` tasks at once: one per seed, or one per ``stacked``
    seeds trained as one batched step (``train.stacked_seeds``); results in the jobs' order."""
    from tasks.train import train_group_task, train_run_task

    if stacked <= 1:
        return map_jobs(train_run_task, jobs, parallel)
    groups = [TrainGroup(tuple(jobs[i:i + stacked])) for i in range(0, len(jobs), stacked)]
    return [r for rs in map_jobs(train_group_task, groups, parallel) for r in rs]


def one_based(summary: dict) -> dict:
    """A run summary for people: ``best_epoch`` as the epoch's number (1-based; summary.json keeps the
    library's 0-based index)."""
    best = summary.get("best_epoch")
    return {**summary, "best_epoch": best + 1} if isinstance(best, int) else summary


def pretrain_history(pretrain_dir: str, seed: int) -> str:
    """The history of a seed's pretraining run (its epochs are logged again to the runs that start
    from its snapshots: their pretraining curve on the total-epoch axis)."""
    return str(RunDir(seed_dir(pretrain_dir, seed)).history)


def publish_runs(key: str, experiment: str, rows: list[dict], columns: tuple[str, ...], description: str) -> None:
    """A Prefect Markdown artifact (shown on the flow run's Artifacts tab) listing ``rows`` with
    links to their MLflow runs (none outside a Prefect flow run: no run to show it on)."""
    if not in_flow_run():
        return
    from prefect.artifacts import create_markdown_artifact

    from tasks import tracking

    create_markdown_artifact(markdown=tracking.runs_markdown(experiment, rows, columns), key=artifact_key(key),
                             description=description)


def artifact_key(name: str) -> str:
    """A Prefect artifact key (lowercase letters, digits, dashes) from ``name``: ``finetune-icews14-pure-rl``."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower())


@flow(name="evaluate", flow_run_name="evaluate-{dataset}-{variant}")
def evaluate_flow(dataset: str, params: str, inputs: dict, outputs: dict, variant: str,
                  split: str = "test") -> dict:
    """Beam-search evaluation of every seed of a variant; writes the variant's mean/std metrics."""
    from raptor.evaluation.summary import summarize
    from tasks.train import evaluate_run_task, parent_of, threads_per_run

    p = load_resolved(params)
    seeds = p.train.seeds
    # The stage's output is cleared first, as `dvc repro` clears it: no seed of earlier params stays beside
    # these, and an evaluation that fails part-way leaves a seed set the significance stage refuses.
    clear_output_folder(outputs["out"], _only_seed_folders, "an evaluation folder (seed<S>/ only)")
    jobs = [EvaluateJob(params, inputs["data"], inputs["graph"], variant, s, seed_dir(inputs["train"], s),
                        seed_dir(outputs["out"], s), split, threads_per_run(p.train.num_threads, p.train.parallel_runs))
            for s in seeds]
    per_seed = dict(zip(seeds, map_jobs(evaluate_run_task, jobs, p.train.parallel_runs)))
    summary = summarize(per_seed, METRIC_KEYS)
    flat = {"variant": variant, "split": split, "seeds": summary["seeds"]}
    for m in METRIC_KEYS:
        flat[m] = summary[m]["mean"]
        flat[f"{m}_std"] = summary[m]["std"]
    atomic_write_json(outputs["metrics"], flat)
    publish_test_metrics(dataset, variant, split, per_seed, summary)
    parent = parent_of(inputs["train"])
    if parent is not None:
        parent.log_metrics({f"{split}/{k}": v for k, v in flat.items() if isinstance(v, float)}, step=0)
        parent.sync()
    return flat


def _only_seed_folders(folder: Path) -> bool:
    """Whether ``folder`` holds nothing but ``seed<S>`` folders: an evaluate stage's output."""
    from raptor.reporting.runs_reader import seed_dirs

    return set(seed_dirs(folder).values()) == set(folder.iterdir())


def publish_test_metrics(dataset: str, variant: str, split: str, per_seed: dict, summary: dict) -> None:
    """A Prefect table artifact on the evaluate flow run: one row per seed and the mean and std over
    seeds of every test metric (what the stage wrote to its metrics.json); none outside Prefect."""
    if not in_flow_run():
        return
    from prefect.artifacts import create_table_artifact

    def row(name, values: dict) -> dict:
        return {"seed": name, **{m: _fmt(values.get(m)) for m in METRIC_KEYS}}

    table = [row(s, m) for s, m in per_seed.items()]
    table.append(row("mean", {m: summary[m]["mean"] for m in METRIC_KEYS}))
    table.append(row("std", {m: summary[m]["std"] for m in METRIC_KEYS}))
    create_table_artifact(table=table, key=artifact_key(f"{split}-metrics-{dataset}-{variant}"),
                          description=f"{variants.get(variant).label} on {dataset}: {split} metrics per seed "
                                      "(filtered, time-aware)")


def _fmt(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else ("" if value is None else str(value))


def _p(value) -> str:
    """A p-value for people (:func:`raptor.evaluation.stats.format_probability`: never ``0.000``)."""
    from raptor.evaluation.stats import format_probability

    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    return format_probability(float(value))


def significance_markdown(dataset: str, result: dict, report: Optional[str] = None) -> str:
    """The comparisons of a significance result as a Markdown table (and where the report is)."""
    base = result.get("baseline")
    lines = [f"Every system against **{variants.get(base).label if base in variants.VARIANTS else base}** "
             f"on {dataset} (one-sided: the system is better)\n",
             "| system | MRR diff (per query) | t-test p (seeds) | Cohen's d_z (seeds) | Wilcoxon p | bootstrap p |",
             "|---|---:|---:|---:|---:|---:|"]
    for v, c in result.get("comparisons", {}).items():
        q = c.get("per_query") or {}
        seed = (c.get("seed_level") or {}).get("mrr") or {}
        dz = seed.get("cohens_dz")
        label = variants.get(v).label if v in variants.VARIANTS else v
        diff = q.get("mrr_diff")
        lines.append(f"| {label} | {diff:+.4f} | " if isinstance(diff, float) else f"| {label} | - | ")
        lines[-1] += (f"{_p(seed.get('p_one_sided'))} | {f'{dz:.2f}' if isinstance(dz, float) else '-'} | "
                      f"{_p((q.get('wilcoxon') or {}).get('p_one_sided'))} | "
                      f"{_p((q.get('bootstrap') or {}).get('p_one_sided'))} |")
    if report:
        lines.append(f"\nReport: `{report}`")
    return "\n".join(lines) + "\n"


def _per_variant(inputs: dict, prefix: str) -> dict[str, str]:
    return {k[len(prefix):]: v for k, v in inputs.items() if k.startswith(prefix)}


def significance_metrics(result: dict) -> dict[str, float]:
    """The headline numbers of each comparison for MLflow: ``significance/<variant>/mrr_diff`` (per
    query), ``.../t_test_p`` (seeds, one-sided), ``.../wilcoxon_p`` and ``.../bootstrap_p`` (per query)."""
    out = {}
    for v, c in result.get("comparisons", {}).items():
        q = c.get("per_query") or {}
        for name, value in (("mrr_diff", q.get("mrr_diff")),
                            ("t_test_p", ((c.get("seed_level") or {}).get("mrr") or {}).get("p_one_sided")),
                            ("wilcoxon_p", (q.get("wilcoxon") or {}).get("p_one_sided")),
                            ("bootstrap_p", (q.get("bootstrap") or {}).get("p_one_sided"))):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[f"significance/{v}/{name}"] = float(value)
    return out


@flow(name="significance", flow_run_name="significance-{dataset}")
def significance_flow(dataset: str, params: str, inputs: dict, outputs: dict) -> dict:
    """Every variant against the baseline: paired tests over seeds and per query (also a Markdown
    artifact on the flow run)."""
    from tasks.report import significance_task

    seeds = load_resolved(params).train.seeds
    result = significance_task(_per_variant(inputs, "eval_"), outputs["out"], seeds)
    if not in_flow_run():
        return result
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(markdown=significance_markdown(dataset, result, str(Path(outputs["out"]).resolve())),
                             key=artifact_key(f"significance-{dataset}"),
                             description=f"significance of every system against the baseline on {dataset}")
    return result


@flow(name="report", flow_run_name="report-{dataset}")
def report_flow(dataset: str, params: str, inputs: dict, outputs: dict) -> dict:
    """Tables and figures. They and the significance results are logged to the MLflow pipeline run
    that holds the models they report on (the newest of the variants' finetune parent runs is under
    it), not to a new run: a report made again over the same models adds no run."""
    from tasks.report import report_task
    from tasks.train import pipeline_run_of

    train = _per_variant(inputs, "train_")
    result = report_task(dataset, train, _per_variant(inputs, "eval_"), outputs["out"], inputs.get("significance"))
    pipe = pipeline_run_of(train.values())
    publish_report(dataset, outputs["out"], inputs.get("significance"))
    if pipe is not None:
        pipe.log_artifact(outputs["out"], "report")
        if inputs.get("significance"):
            pipe.log_metrics(significance_metrics(json.loads(Path(inputs["significance"]).read_text())), step=0)
            pipe.log_artifact(inputs["significance"], "significance")
        pipe.sync()
    return {"report": outputs["out"], "variants": sorted(result["summaries"])}


def publish_report(dataset: str, out: str, significance: Optional[str]) -> None:
    """A Markdown artifact on the report flow run: where the report is, and the comparisons (none
    outside Prefect)."""
    if not in_flow_run():
        return
    from prefect.artifacts import create_markdown_artifact

    folder = Path(out).resolve()
    files = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    text = f"Report of {dataset}: `{folder}`\n\n" + "".join(f"- [{n}]({(folder / n).as_uri()})\n" for n in files)
    if significance and Path(significance).is_file():
        text += "\n" + significance_markdown(dataset, json.loads(Path(significance).read_text()))
    create_markdown_artifact(markdown=text, key=artifact_key(f"report-{dataset}"),
                             description=f"the report of {dataset}: its folder and files")


def resolved_profile(params_path: str | Path) -> dict:
    """``{"profile": name, "changed": {key: value}}``: the resolved params' profile and every value
    (profile and local overrides together) that differs from the paper's (``datasets`` left out)."""
    from raptor.config import Params, flatten, params_to_dict

    p = load_resolved(params_path)
    have, paper = flatten(params_to_dict(p)), flatten(params_to_dict(Params()))
    changed = {k: v for k, v in sorted(have.items())
               if k != "profile" and not k.startswith("datasets.") and paper.get(k) != v}
    return {"profile": p.profile, "changed": changed}


def publish_resolved_params(params_path: str | Path) -> None:
    """A Markdown artifact on the current flow run: the profile the run used and what it changed."""
    from prefect.artifacts import create_markdown_artifact

    r = resolved_profile(params_path)
    rows = "".join(f"| `{k}` | `{v}` |\n" for k, v in r["changed"].items())
    create_markdown_artifact(
        key="resolved-params", description=f"profile {r['profile']}: the values that differ from the paper's",
        markdown=(f"Profile **{r['profile']}** ({params_path}); values that differ from the paper's:\n\n"
                  "| key | value |\n|---|---|\n" + (rows or "| (none) | |\n")))


@flow(name="ablation-pretrain-epochs", flow_run_name="ablation-{dataset}")
def ablation_flow(dataset: str, params: str, inputs: dict, outputs: dict) -> dict:
    """The paper's ablation: RL-RAPTOR from each arm's pretraining snapshot (``ablation.pretrain_epochs``;
    0 = a random initialisation) with a fixed RL budget (``rl.epochs``), one MLflow experiment whose
    runs compare side by side; each run's best model tested (metrics logged to its MLflow run); then
    its report."""
    from tasks import tracking
    from tasks.report import ablation_report_task
    from tasks.train import evaluate_run_task, threads_per_run, train_run_task

    p = load_resolved(params)
    epochs = sorted(set(p.ablation.pretrain_epochs))
    exp = experiment_name(dataset, "ablation-pretrain-epochs")
    arms = {n: str(Path(outputs["out"]) / arm_folder(n)) for n in epochs}
    evals = {n: str(Path(outputs["eval"]) / arm_folder(n)) for n in epochs}
    threads = threads_per_run(p.train.num_threads, p.train.parallel_runs)
    # The invocation's parent here, holding the report (its runs carry the tag pipeline_run_id).
    with tracking.tracked_run(exp, f"ablation-{dataset}", params={"arms": epochs, "seeds": p.ablation.seeds,
                                                                   "rl.epochs": p.rl.epochs, "profile": p.profile},
                              tags={"dataset": dataset, "stage": "ablation", **tracking.prefect_ids()}) as parent:
        jobs = [TrainJob(params, dataset, inputs["data"], inputs["graph"], variants.PRETRAINED_VARIANT, s,
                         seed_dir(arms[n], s), exp, f"{dataset}-pretrain{n}-seed{s}", parent.run_id, threads,
                         init_model=str(RunDir(seed_dir(inputs["pretrain"], s)).snapshot(n)) if n else None,
                         pretrain_epochs=n, pretrain_history=pretrain_history(inputs["pretrain"], s) if n else None,
                         extra_tags={"stage": "ablation", "pretrain_epochs": n},
                         # the arm's own value of the ablation's grid key, a number: MLflow's compare page
                         # plots its first param (in name order, this one) against its first metric
                         logged_params={"ablation.pretrain_epochs": n})
                for n in epochs for s in p.ablation.seeds]
        trained = map_jobs(train_run_task, jobs, p.train.parallel_runs)
        map_jobs(evaluate_run_task, [EvaluateJob(params, inputs["data"], inputs["graph"], j.variant, j.seed, j.out_dir,
                                                 seed_dir(evals[j.pretrain_epochs], j.seed), "test", threads)
                                     for j in jobs], p.train.parallel_runs)
        publish_runs(f"ablation-{dataset}", exp,
                     [{**one_based(r), "arm": f"{j.pretrain_epochs} pretraining epochs"} for r, j in zip(trained, jobs)],
                     ("arm", "seed", "best_val_mrr", "best_epoch"), f"Pretraining-epochs ablation on {dataset}")
        report = ablation_report_task(dataset, arms, outputs["report"], evals)
        for f in sorted(Path(outputs["report"]).glob("ablation*")):  # the figures, CSV and JSON
            parent.log_artifact(f, "report")
    return report


#: ``Stage.flow`` -> the flow that runs it.
FLOWS = {"ingest": ingest_flow, "graph": graph_flow, "label": label_flow, "pretrain": pretrain_flow,
         "ablation-pretrain": ablation_pretrain_flow,
         "finetune": finetune_flow, "evaluate": evaluate_flow, "significance": significance_flow,
         "report": report_flow, "ablation": ablation_flow}


def run_stage(kind: str, dataset: str, params: str, inputs: dict, outputs: dict, variant: Optional[str] = None):
    """Run the flow of one stage (with the task runner the params ask for), as a subflow of its
    pipeline invocation's run (:mod:`flows.invocation`); under a plain ``dvc repro`` (no Prefect API
    configured) its function without Prefect (:func:`flows.invocation.run_stage_plain`).

    Under the project lock (working directory = the project root, where DVC runs stage commands),
    taken before anything is written (``build/pipeline-run.json`` included): ``dvc repro`` releases
    DVC's lock while a stage runs, and this is what refuses a pipeline run started meanwhile
    (:mod:`raptor.pipeline.projectlock`). Inside the pipeline flow, which holds it already, it nests.
    """
    with project_lock("."):
        return _run_stage(kind, dataset, params, inputs, outputs, variant)


def _run_stage(kind: str, dataset: str, params: str, inputs: dict, outputs: dict, variant: Optional[str]):
    from .invocation import run_stage_flow, run_stage_plain, use_prefect

    fn = FLOWS[kind]
    kwargs = {"dataset": dataset, "params": params, "inputs": inputs, "outputs": outputs,
              **({"variant": variant} if variant else {})}
    if not use_prefect():
        return run_stage_plain(fn.fn, kwargs, fn.flow_run_name.format(**kwargs))
    prefect_flow = fn.prefect_flow
    if kind in ("pretrain", "ablation-pretrain", "finetune", "evaluate", "ablation"):
        prefect_flow = prefect_flow.with_options(task_runner=_runner(params))
    return run_stage_flow(prefect_flow, kwargs, list(load_resolved(params).datasets))
