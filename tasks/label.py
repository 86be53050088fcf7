"""Tasks of the label stage: reachability labels, in one piece or in parts merged afterwards."""

from __future__ import annotations

from typing import Optional

from raptor.config import load_resolved
from raptor.labeling.stage import label_dataset, label_part, merge_parts

from .jobs import LabelJob
from .lazy import NO_CACHE, task


@task(name="label", cache_policy=NO_CACHE)
def label_task(job: LabelJob) -> dict:
    params = load_resolved(job.params_path)
    return label_dataset(job.data_dir, job.out_dir, max_path_length=params.env.max_path_length,
                         config=params.labeling, graph_path=job.graph_path)


@task(name="label-part", cache_policy=NO_CACHE)
def label_part_task(job: LabelJob) -> dict:
    params = load_resolved(job.params_path)
    summary = label_part(job.data_dir, job.out_dir, job.part, max_path_length=params.env.max_path_length,
                         config=params.labeling, graph_path=job.graph_path)
    return {**summary, "worker": _dask_worker()}


def _dask_worker() -> Optional[str]:
    """The Dask worker running this task (None on the thread runner)."""
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return None


@task(name="label-merge", cache_policy=NO_CACHE)
def label_merge_task(params_path: str, data_dir: str, out_dir: str) -> dict:
    return merge_parts(data_dir, out_dir, load_resolved(params_path).labeling)
