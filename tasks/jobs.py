"""The jobs that mapped tasks take: one frozen object per run, everything the run needs.

A flow builds a list of jobs (one per seed, per (arm, seed), per label part...) and maps its task over
it (``train_run_task.map(jobs)``); a task reads its job and calls one library function. Jobs hold
paths as strings and plain values only, so they pickle to a Dask worker. Importing this imports no
orchestration library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class LabelJob:
    """Reachability labels of ``data_dir``'s training queries into ``out_dir``: all of them, or one
    ``part`` of ``labeling.partitions`` (merged afterwards)."""

    params_path: str
    data_dir: str
    graph_path: str
    out_dir: str
    part: Optional[int] = None


@dataclass(frozen=True)
class PretrainJob:
    """One seed's reachability pretraining, kept after each of ``epochs``, with its MLflow run."""

    params_path: str
    dataset: str
    data_dir: str
    graph_path: str
    labels_dir: str
    seed: int
    out_dir: str
    epochs: tuple[int, ...]
    experiment: str
    num_threads: int = 1
    parent_run_id: Optional[str] = None

    @property
    def run_name(self) -> str:
        return f"{self.dataset}-pretrain-seed{self.seed}"


@dataclass(frozen=True)
class PretrainGroup:
    """Seeds pretrained stacked into one batched step (``train.stacked_seeds``), each with its own run
    folder and MLflow run; they share the params, data, labels and snapshots."""

    jobs: tuple[PretrainJob, ...]

    def __post_init__(self) -> None:
        shared = {(j.params_path, j.data_dir, j.graph_path, j.labels_dir, j.epochs) for j in self.jobs}
        if not self.jobs or len(shared) > 1:
            raise ValueError("PretrainGroup: its jobs must share params, data, graph, labels and epochs")

    @property
    def run_name(self) -> str:
        return "+".join(j.run_name for j in self.jobs)


@dataclass(frozen=True)
class TrainJob:
    """One (variant, seed) training run with its MLflow run ``run_name`` in ``experiment``.

    ``init_model``: the pretraining snapshot it starts from, after ``pretrain_epochs`` epochs of the
    pretraining run whose history is ``pretrain_history`` (those epochs are logged again to this run);
    ``extra_tags``: tags besides its dataset, variant, seed and stage; ``logged_params``: params as
    logged, over the resolved ones (an ablation arm's own value of the grid key).
    """

    params_path: str
    dataset: str
    data_dir: str
    graph_path: str
    variant: str
    seed: int
    out_dir: str
    experiment: str
    run_name: str
    parent_run_id: Optional[str] = None
    num_threads: int = 1
    init_model: Optional[str] = None
    pretrain_epochs: int = 0
    pretrain_history: Optional[str] = None
    extra_tags: Mapping[str, Any] = field(default_factory=dict)
    logged_params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainGroup:
    """Seeds of one variant trained stacked into one batched step (``train.stacked_seeds``), each with
    its own run folder and MLflow run; they share the variant, data and pretraining budget."""

    jobs: tuple[TrainJob, ...]

    def __post_init__(self) -> None:
        shared = {(j.params_path, j.data_dir, j.graph_path, j.variant, j.pretrain_epochs) for j in self.jobs}
        if not self.jobs or len(shared) > 1:
            raise ValueError("TrainGroup: its jobs must share params, data, graph, variant and pretraining epochs")

    @property
    def run_name(self) -> str:
        return "+".join(j.run_name for j in self.jobs)


@dataclass(frozen=True)
class EvaluateJob:
    """Test (``split``) evaluation of one trained seed's best model, logged to its MLflow run."""

    params_path: str
    data_dir: str
    graph_path: str
    variant: str
    seed: int
    train_dir: str
    out_dir: str
    split: str = "test"
    num_threads: int = 1


@dataclass(frozen=True)
class RecordJob:
    """A run known only by its record (:mod:`raptor.reporting.records`), to log as an MLflow run."""

    run_name: str
    record_train: str
    record_eval: str
    params_path: str
    dataset: str
    variant: str
    seed: int
    pretrain_epochs: int
    experiment: str
    parent_run_id: Optional[str] = None
    extra_tags: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ResultRunJob:
    """A run of a result set (:class:`raptor.reporting.results.SeedRun`: the records `raptor results` reads),
    to log as an MLflow run."""

    run_name: str
    experiment: str
    dataset: str
    variant: str
    run: Any
    tags: Mapping[str, Any] = field(default_factory=dict)
    parent_run_id: Optional[str] = None


@dataclass(frozen=True)
class SweepRunJob:
    """One run of a sweep from start to record: ``train``, ``evaluate``, then the record of ``planned``
    (a job of the sweep's ``plan``, :mod:`raptor.pipeline.sweep`) saved to ``results``."""

    plan: Any
    planned: Any
    results: str
    train: TrainJob
    evaluate: EvaluateJob

    @property
    def run_name(self) -> str:
        return self.train.run_name


@dataclass(frozen=True)
class SweepRescoreJob:
    """One run of a sweep's evaluation-only arm, ``planned`` (a job of ``plan``): the default arm's run
    re-scored under the arm's params, its record saved to ``results`` (:func:`raptor.pipeline.rescore.rescore_job`)."""

    plan: Any
    planned: Any
    data: str
    graph: str
    results: str
    num_threads: Optional[int] = None

    @property
    def run_name(self) -> str:
        return self.planned.run_name
