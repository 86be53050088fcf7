"""One Prefect flow per pipeline stage; ``dvc.yaml`` runs each through ``python -m flows STAGE``."""

from __future__ import annotations

from typing import Optional

from prefect import flow, unmapped

from raptor import layout
from raptor.config import load_params
from raptor.io import atomic_write_json
from raptor.report import summarize
from tasks import tracking
from tasks.data import graph_task, ingest_task, ingest_url_task
from tasks.train import (
    evaluate_run_task,
    label_task,
    report_task,
    significance_task,
    threads_per_run,
    train_run_task,
)


@flow(name="ingest")
def ingest_flow(out_dir: str, params_path: str = "params.yaml", raw_dir: Optional[str] = None) -> dict:
    """Raw splits -> Parquet. ``raw_dir`` overrides ``data.raw_dir``; ``data.url`` fetches instead."""
    params = load_params(params_path)
    d = params.data
    if d.url and not raw_dir:
        result = ingest_url_task(d.url, d.sha256, out_dir, params.ingest.time_step, d.dataset)
    else:
        result = ingest_task(raw_dir or d.raw_dir, out_dir, params.ingest.time_step, d.dataset)
    return {"counts": result.counts, "time_step": result.time_step, "seconds": result.seconds}


@flow(name="graph")
def graph_flow(data_dir: str, out_path: str) -> dict:
    """Parquet dataset -> inverse-augmented CSR graph."""
    return graph_task(data_dir, out_path)


def experiment_name(dataset: str, purpose: str = "") -> str:
    return f"raptor/{dataset}" + (f"/{purpose}" if purpose else "")


@flow(name="label")
def label_flow(params_path: str = "params.yaml", root: str = ".") -> dict:
    """Reachability label tables of the training queries."""
    p = load_params(params_path)
    ds = p.data.dataset
    return label_task(str(layout.ingested(root, ds)), str(layout.graph(root, ds)), str(layout.labels(root, ds)),
                      params_path)


def _runner(parallel_runs: int):
    """Threads by default; Dask when ``RAPTOR_DASK_ADDRESS`` names a scheduler (flows/runners.py)."""
    from .runners import task_runner

    return task_runner(max_workers=parallel_runs)


@flow(name="finetune")
def finetune_flow(variant: str, params_path: str = "params.yaml", root: str = ".") -> list[dict]:
    """Train one variant for every seed (mapped tasks), each with an MLflow child run under a parent
    run for this invocation."""
    p = load_params(params_path)
    ds = p.data.dataset
    exp = experiment_name(ds)
    parent = tracking.start_run(exp, f"finetune-{ds}-{variant}", params={"variant": variant, "seeds": p.train.seeds,
                                                                           "profile": p.profile},
                                tags={"dataset": ds, "variant": variant, "stage": "finetune"})
    threads = threads_per_run(p.train.num_threads, p.train.parallel_runs)
    train_dir = layout.train_dir(root, ds, variant)
    try:
        futures = train_run_task.map(
            unmapped(root), unmapped(params_path), unmapped(variant), p.train.seeds,
            [str(layout.seed_dir(train_dir, s)) for s in p.train.seeds], unmapped(exp), unmapped(parent.run_id),
            unmapped(threads),
        )
        results = [f.result() for f in futures]
    except BaseException:
        parent.finish("FAILED")
        raise
    parent.finish()
    return results


@flow(name="evaluate")
def evaluate_flow(variant: str, params_path: str = "params.yaml", root: str = ".", split: str = "test") -> dict:
    """Beam-search evaluation of every seed of a variant; writes the variant's mean/std metrics."""
    p = load_params(params_path)
    ds = p.data.dataset
    threads = threads_per_run(p.train.num_threads, p.train.parallel_runs)
    futures = evaluate_run_task.map(unmapped(root), unmapped(params_path), unmapped(variant), p.train.seeds,
                                    unmapped(split), unmapped(threads))
    per_seed = {s: f.result() for s, f in zip(p.train.seeds, futures)}
    summary = summarize(per_seed)
    summary["split"] = split
    flat = {"variant": variant, "seeds": summary["seeds"]}
    for m in ("mrr", "hits@1", "hits@3", "hits@10"):
        flat[m] = summary[m]["mean"]
        flat[f"{m}_std"] = summary[m]["std"]
    atomic_write_json(layout.variant_dir(root, ds, variant) / "metrics.json", flat)
    return flat


@flow(name="significance")
def significance_flow(params_path: str = "params.yaml", root: str = ".") -> dict:
    p = load_params(params_path)
    ds = p.data.dataset
    evals = {v: str(layout.eval_dir(root, ds, v)) for v in p.train.variants}
    return significance_task(evals, str(layout.significance(root, ds)))


@flow(name="report")
def report_flow(params_path: str = "params.yaml", root: str = ".") -> dict:
    p = load_params(params_path)
    ds = p.data.dataset
    sig = layout.significance(root, ds)
    result = report_task(
        ds,
        {v: str(layout.train_dir(root, ds, v)) for v in p.train.variants},
        {v: str(layout.eval_dir(root, ds, v)) for v in p.train.variants},
        str(layout.report(root, ds)),
        str(sig) if sig.exists() else None,
    )
    return {"report": str(layout.report(root, ds)), "variants": sorted(result["summaries"])}


def with_runner(flow_fn, params_path: str = "params.yaml"):
    """``flow_fn`` with the task runner the params ask for (threads, ``train.parallel_runs`` at once)."""
    p = load_params(params_path)
    return flow_fn.with_options(task_runner=_runner(p.train.parallel_runs))
