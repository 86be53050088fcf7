"""MLflow tracking for the pipeline (orchestration layer: ``raptor/`` never imports mlflow).

Everything goes through an explicit :class:`mlflow.MlflowClient` and run ids, never MLflow's
fluent "active run" state, so seeds trained in parallel threads log to their own runs safely.

Layout: one experiment per (dataset, purpose), e.g. ``raptor/ICEWS14`` or
``raptor/ICEWS14/ablation-pretrain-epochs``; a parent run per stage invocation; one nested child
run per (variant, seed) with params, code version, data hashes, per-epoch metrics and artifacts.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from raptor.runenv import apply_defaults

apply_defaults()
PROJECT_ROOT = Path.cwd()  # tasks run in the project root (dvc.yaml's commands, the deployment)

import mlflow  # noqa: E402
from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME  # noqa: E402

# MLflow caps a param value at 6000 characters and a batch at 100 params.
_MAX_PARAM_LEN = 6000
_BATCH = 100


def metric_name(key: str) -> str:
    """MLflow accepts only ``[A-Za-z0-9_-. :/]`` in metric names: ``hits@10`` -> ``hits_at_10``."""
    return key.replace("@", "_at_")


def code_version(root: Path = PROJECT_ROOT) -> dict[str, str]:
    """Git commit of the code and whether the work tree had uncommitted changes."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""
    commit = git("rev-parse", "HEAD") or "unknown"
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return {"git_commit": commit, "git_dirty": str(dirty).lower()}


def data_hashes(ingested_dir: str | Path) -> dict[str, str]:
    """SHA-256 of every raw file of an ingested dataset (from its meta.json), as tags."""
    meta = json.loads((Path(ingested_dir) / "meta.json").read_text())
    return {f"data.sha256.{name}": digest for name, digest in sorted(meta.get("sha256", {}).items())}


#: MLflow's experiment-kind tag and the value for training runs (mlflow/server/js: ExperimentKind).
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"


def client() -> mlflow.MlflowClient:
    return mlflow.MlflowClient(tracking_uri=os.environ["MLFLOW_TRACKING_URI"])


def experiment_id(name: str, artifact_root: Optional[str] = None) -> str:
    """Get or create an experiment; a new one gets an explicit artifact location (local default: mlruns/)."""
    c = client()
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    if artifact_root is None and os.environ["MLFLOW_TRACKING_URI"].startswith("sqlite:"):
        artifact_root = (PROJECT_ROOT / "mlruns").as_uri()
    location = f"{artifact_root.rstrip('/')}/{name.replace('/', '_')}" if artifact_root else None
    # Tagged as model development, MLflow's UI opens the experiment on its runs table (an untagged one
    # may land on the GenAI overview).
    return c.create_experiment(name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})


@dataclass
class Run:
    """A handle on one MLflow run: log through it from any thread."""

    run_id: str
    experiment_id: str

    def log_params(self, params: Mapping[str, Any]) -> None:
        items = [Param(k, str(v)[:_MAX_PARAM_LEN]) for k, v in sorted(params.items())]
        for i in range(0, len(items), _BATCH):
            client().log_batch(self.run_id, params=items[i : i + _BATCH])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        items = [RunTag(k, str(v)) for k, v in sorted(tags.items())]
        for i in range(0, len(items), _BATCH):
            client().log_batch(self.run_id, tags=items[i : i + _BATCH])

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        import time

        ts = int(time.time() * 1000)
        items = [Metric(metric_name(k), float(v), ts, int(step)) for k, v in metrics.items() if v is not None]
        if items:
            client().log_batch(self.run_id, metrics=items)

    def log_artifact(self, path: str | Path, artifact_path: Optional[str] = None) -> None:
        path = Path(path)
        if path.is_dir():
            client().log_artifacts(self.run_id, str(path), artifact_path)
        elif path.exists():
            client().log_artifact(self.run_id, str(path), artifact_path)

    def finish(self, status: str = "FINISHED") -> None:
        client().set_terminated(self.run_id, status=status)


def start_run(
    experiment: str,
    run_name: str,
    params: Optional[Mapping[str, Any]] = None,
    tags: Optional[Mapping[str, Any]] = None,
    parent: Optional[Run] = None,
) -> Run:
    """Create a run (nested under ``parent`` if given) with params and tags, including the code version."""
    exp_id = experiment_id(experiment)
    all_tags = {MLFLOW_RUN_NAME: run_name, **code_version(), **(tags or {})}
    if parent is not None:
        all_tags[MLFLOW_PARENT_RUN_ID] = parent.run_id
    r = client().create_run(exp_id, run_name=run_name, tags={k: str(v) for k, v in all_tags.items()})
    run = Run(run_id=r.info.run_id, experiment_id=exp_id)
    if params:
        run.log_params(params)
    return run
