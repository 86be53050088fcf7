"""The whole pipeline as one Prefect flow (what a scheduled deployment runs), and the ablation.

It reads like the pipeline diagram; each step is the same stage flow that ``dvc.yaml`` runs, so a
scheduled run and ``dvc repro`` produce the same artifacts, in the layout of :mod:`raptor.layout`.
"""

from __future__ import annotations


from prefect import flow, unmapped

from raptor import layout
from raptor.config import load_params
from tasks import tracking
from tasks.train import ablation_report_task, pretrain_snapshots_task, threads_per_run, train_run_task

from .stages import (
    evaluate_flow,
    experiment_name,
    finetune_flow,
    graph_flow,
    ingest_flow,
    label_flow,
    report_flow,
    significance_flow,
    with_runner,
)


@flow(name="raptor-pipeline")
def pipeline_flow(params_path: str = "params.yaml", root: str = ".") -> dict:
    """ingest -> graph -> label -> finetune (variants x seeds) -> evaluate -> significance -> report."""
    p = load_params(params_path)
    ds = p.data.dataset
    summary = {"ingest": ingest_flow(out_dir=str(layout.ingested(root, ds)), params_path=params_path)}
    summary["graph"] = graph_flow(data_dir=str(layout.ingested(root, ds)), out_path=str(layout.graph(root, ds)))
    if "raptor" in p.train.variants:
        summary["label"] = label_flow(params_path, root)
    for variant in p.train.variants:
        with_runner(finetune_flow, params_path)(variant, params_path, root)
        summary[f"evaluate-{variant}"] = with_runner(evaluate_flow, params_path)(variant, params_path, root)
    if {"raptor", "pure_rl"} <= set(p.train.variants):
        significance_flow(params_path, root)
    summary["report"] = report_flow(params_path, root)
    return summary


@flow(name="ablation-pretrain-epochs")
def ablation_flow(params_path: str = "params.yaml", root: str = ".") -> dict:
    """The paper's ablation: RL-RAPTOR with ``ablation.pretrain_epochs`` pretraining epochs and a fixed
    RL budget (``rl.epochs``), one MLflow experiment whose runs compare side by side.

    Pretraining runs once per seed (snapshots at every arm's epoch count); the RL arms fan out as
    mapped tasks.
    """
    p = load_params(params_path)
    ds = p.data.dataset
    base = layout.ablation_dir(root, ds)
    threads = threads_per_run(p.train.num_threads, p.train.parallel_runs)
    epochs = sorted(set(p.ablation.pretrain_epochs))
    snaps = pretrain_snapshots_task.map(unmapped(root), unmapped(params_path), p.ablation.seeds,
                                        [str(base / "pretrain" / f"seed{s}") for s in p.ablation.seeds],
                                        unmapped(epochs), unmapped(threads))
    snapshots = {s: f.result() for s, f in zip(p.ablation.seeds, snaps)}
    exp = experiment_name(ds, "ablation-pretrain-epochs")
    parent = tracking.start_run(exp, f"ablation-{ds}", params={"pretrain_epochs": epochs, "seeds": p.ablation.seeds,
                                                                "rl.epochs": p.rl.epochs, "profile": p.profile},
                                tags={"dataset": ds, "stage": "ablation"})
    jobs = [(n, s) for n in epochs for s in p.ablation.seeds]
    try:
        futures = train_run_task.map(
            unmapped(root), unmapped(params_path), unmapped("raptor"), [s for _, s in jobs],
            [str(base / f"p{n}" / f"seed{s}") for n, s in jobs], unmapped(exp), unmapped(parent.run_id),
            unmapped(threads), [n for n, _ in jobs], [snapshots[s].get(n) for n, s in jobs],
            [f"{ds}-pretrain{n}-seed{s}" for n, s in jobs], [{"pretrain_epochs": n} for n, _ in jobs],
        )
        [f.result() for f in futures]
    except BaseException:
        parent.finish("FAILED")
        raise
    parent.finish()
    return ablation_report_task(ds, {n: str(base / f"p{n}") for n in epochs},
                                str(layout.report(root, ds).parent / "ablation"))
