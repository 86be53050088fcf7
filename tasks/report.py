"""Tasks of the reporting stages: significance tests, the report, the ablation's report."""

from __future__ import annotations

from typing import Optional

from raptor.common.io import atomic_write_json
from raptor.reporting.report import compare_variants, write_ablation_report, write_report

from .lazy import NO_CACHE, task


@task(name="significance", cache_policy=NO_CACHE)
def significance_task(eval_dirs: dict[str, str], out_path: str, seeds: Optional[list[int]] = None) -> dict:
    result = compare_variants(eval_dirs, seeds=seeds)
    atomic_write_json(out_path, result)
    return result


@task(name="report", cache_policy=NO_CACHE)
def report_task(dataset: str, train_dirs: dict[str, str], eval_dirs: dict[str, str], out_dir: str,
                significance_path: Optional[str]) -> dict:
    return write_report(dataset, train_dirs, eval_dirs, out_dir, significance_path)


@task(name="ablation-report", cache_policy=NO_CACHE)
def ablation_report_task(dataset: str, arms: dict[int, str], out_dir: str, evals: Optional[dict[int, str]] = None) -> dict:
    return write_ablation_report(dataset, arms, out_dir, evals)
